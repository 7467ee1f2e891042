# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a value may be so that the file it is written to reads it back as exactly that value, and the one writer of
config lines that asserts it. spec/fields.py checks the same rules at validation time, with the field path.

Slurm's config files (slurm.conf, cgroup.conf, gres.conf, topology.conf, mpi.conf, slurmdbd.conf) are all read by
s_p_parse_file (src/common/parse_config.c): a line is cut at the first `#` not escaped by a backslash, a trailing
backslash joins the next line, then every backslash is dropped (`\\x` reads as `x`), and the line is read as
`Key=Value` words with the POSIX regex `([[:alnum:]_.]+)[[:space:]]*([-*+/]?)=[[:space:]]*("([^"]*)"|[^[:space:]]+)`
followed by a space or the end. So a value reads back exactly when it is printable ASCII without `#`, `"` or `\\`,
and it may hold spaces only inside double quotes. We write a value in quotes only when it holds a space: `Key="ab"`
matches both branches of that regex with the same length, and which one POSIX picks is not something to rely on.
Empty values are refused for the same reason (`Key=""`).

plugstack.conf (spank(8)) and sshd_config split words on white space and know no quoting we want to depend on, so
their words are single tokens without quotes, `#`, `'` or backslashes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

# A key of a Slurm config file as we write it: a plain word (Slurm's own regex also allows '.', which no key has).
CONFIG_KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
# The same rule as value_problem, for the CRD's openapi pattern: printable ASCII but `"`, `#` and `\`.
SLURM_VALUE_PATTERN = r"^[ !\x24-\[\]-~]+$"  # \x24: "$"

_CONFIG_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_SSHD_KEYWORD = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
# sshd_config tokens that sshd expands itself in the keywords that take them (sshd_config(5), TOKENS).
_SSHD_TOKEN = re.compile(r"%[%hu]")
_SSHD_EXPANDS = ("authorizedkeysfile", "authorizedkeyscommand", "chrootdirectory")


class ConfigSyntaxError(SoperatorError, ValueError):
    """A renderer was asked to write a line its file would not read back as written (a bug: the spec checks
    every value first)."""


def _describe(char):
    names = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab", "\0": "a NUL byte",
             "#": "'#' (it starts a comment)", '"': "'\"' (a quote)", "\\": "'\\' (the parser drops it)",
             "'": "\"'\" (a quote)", " ": "a space"}
    return names.get(char) or "%r (only printable ASCII is read back as written)" % char


def key_problem(key):
    """Why `key` cannot be a key of a Slurm config file, or None."""
    if not isinstance(key, str) or not _CONFIG_KEY.match(key):
        return "%r is not a configuration key (a letter, then letters, digits and '_')" % (key,)
    return None


def value_problem(value, spaces=True):
    """Why Slurm's parser would not read `value` back as exactly this value, or None. `spaces`: the value may hold
    spaces (the writer then quotes it); only free-form values of keys that take text do."""
    text = str(value)
    if not text:
        return "must not be empty (leave the key out to keep the default)"
    for char in text:
        if char == " " and spaces:
            continue
        if char in "#\"\\ " or not " " < char <= "~":
            return "holds %s, which Slurm's config parser would not read back as written" % _describe(char)
    return None


def _checked_value(file_name, key, value, spaces):
    problem = key_problem(key)
    if problem:
        raise ConfigSyntaxError("%s: %s" % (file_name, problem))
    problem = value_problem(value, spaces)
    if problem:
        raise ConfigSyntaxError("%s: the value of %s %s" % (file_name, key, problem))
    text = str(value)
    return '"%s"' % text if " " in text else text


def slurm_word(file_name, key, value, spaces=False):
    """`Key=Value` of a Slurm config file; raises ConfigSyntaxError when it would not read back."""
    return "%s=%s" % (key, _checked_value(file_name, key, value, spaces))


def slurm_line(file_name, pairs, spaces=False):
    """One line of `Key=Value` words from [(key, value)]. `spaces`: whether values may hold spaces (True for the
    free-form values of the spec), or the lower-case keys whose values may."""
    if not pairs:
        raise ConfigSyntaxError("%s: a line needs at least one key" % file_name)
    return " ".join(slurm_word(file_name, key, value, spaces if isinstance(spaces, bool) else key.lower() in spaces)
                    for key, value in pairs)


def comment(text):
    """A `# ...` line of any of our files (Slurm's and sshd's files both read `#` to the end of the line)."""
    text = str(text)
    for char in text:
        if char in "\n\r\0":
            raise ConfigSyntaxError("a comment holds %s" % _describe(char))
    return "# %s" % text if text else "#"


def _token(file_name, word, what):
    text = str(word)
    if not text:
        raise ConfigSyntaxError("%s: %s is empty" % (file_name, what))
    for char in text:
        if char in "#\"'\\ " or not " " < char <= "~":
            raise ConfigSyntaxError("%s: %s %r holds %s" % (file_name, what, text, _describe(char)))
    return text


def plugstack_line(kind, plugin, args=()):
    """`required|optional PLUGIN ARGS...` of plugstack.conf (spank(8)): white-space separated words."""
    if kind not in ("required", "optional"):
        raise ConfigSyntaxError("plugstack.conf: %r is neither required nor optional" % (kind,))
    return " ".join([kind, _token("plugstack.conf", plugin, "the plugin path")] +
                    [_token("plugstack.conf", a, "the plugin argument") for a in args])


def sshd_line(keyword, *args):
    """`Keyword arg...` of sshd_config. `%` is refused, except sshd's own %%, %h and %u in the keywords that expand
    them (AuthorizedKeysFile, AuthorizedKeysCommand, ChrootDirectory); callers pass literal paths through sshd_literal first."""
    if not _SSHD_KEYWORD.match(keyword or ""):
        raise ConfigSyntaxError("sshd_config: %r is not a keyword" % (keyword,))
    if not args:
        raise ConfigSyntaxError("sshd_config: %s needs an argument" % keyword)
    words = [keyword]
    for arg in args:
        text = _token("sshd_config", arg, "the argument of %s" % keyword)
        rest = _SSHD_TOKEN.sub("", text) if keyword.lower() in _SSHD_EXPANDS else text
        if "%" in rest:
            raise ConfigSyntaxError("sshd_config: the argument %r of %s holds a '%%' sshd would expand"
                                    % (text, keyword))
        words.append(text)
    return " ".join(words)


def sshd_literal(text, what="a path"):
    """`text` checked to be written verbatim inside an argument of sshd_config (no '%', no space, no quote)."""
    text = _token("sshd_config", text, what)
    if "%" in text:
        raise ConfigSyntaxError("sshd_config: %s %r holds a '%%' sshd would expand" % (what, text))
    return text
