# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Spec documents from a file, YAML text or Ansible's definition: parsed strictly (duplicate keys and
out-of-range numbers refused, with the document and line).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError, SpecIssue, child_path


def _printable_word(text):
    """A kind or name fit for an error message's label (one that holds a newline would split the message)."""
    return isinstance(text, str) and text != "" and all(" " < ch <= "~" for ch in text)


def documents_from(src=None, definition=None):
    """A module's spec documents: from `src` (a YAML file; IOError/OSError when unreadable) or `definition` (YAML
    text, one document, or a list of them)."""
    if src:
        with open(src) as f:
            return load_documents(f.read())
    if definition is None:
        return []
    if isinstance(definition, str):
        return load_documents(definition)
    if isinstance(definition, dict):
        return [definition]
    return list(definition)


# An integer literal longer than this is refused while loading: Python's int() refuses over 4300 digits, and no
# field takes a number anywhere near it.
MAX_YAML_INT_DIGITS = 100


def _yaml_scalar(node, key):
    """The scalar value under `key` of a YAML mapping node, or None."""
    import yaml
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value_node
    return None


def _yaml_label(node, index):
    import yaml
    kind, meta = _yaml_scalar(node, "kind"), _yaml_scalar(node, "metadata")
    name = _yaml_scalar(meta, "name") if meta is not None else None
    if isinstance(kind, yaml.ScalarNode) and isinstance(name, yaml.ScalarNode) and _printable_word(kind.value) \
            and _printable_word(name.value):
        return "%s/%s" % (kind.value, name.value)
    return "document[%d]" % index


def _yaml_issues(node, label, path, issues, seen):
    """What PyYAML would load silently or crash on: a key given twice (the last one silently wins), an alias that
    contains itself (validation would recurse forever), an integer of thousands of digits (int() raises)."""
    import yaml
    where = ("%s %s" % (label, path)) if path else label
    line = "line %d" % (node.start_mark.line + 1)
    if id(node) in seen:
        if seen[id(node)] is None:
            issues.append(SpecIssue(where, "a YAML alias refers to a node that contains it (%s)" % line))
        return
    seen[id(node)] = None               # in progress: meeting it again below is a cycle
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:int" and len(node.value) > MAX_YAML_INT_DIGITS:
            issues.append(SpecIssue(where, "a number of %d digits is too large (%s)" % (len(node.value), line)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _yaml_issues(item, label, child_path(path, i), issues, seen)
    elif isinstance(node, yaml.MappingNode):
        first = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key_node.tag != "tag:yaml.org,2002:merge":
                if (key_node.tag, key) in first:
                    lines = (key_node.start_mark.line + 1, first[(key_node.tag, key)])
                    issues.append(SpecIssue("%s %s" % (label, child_path(path, key)),
                                            "duplicate key %r (line %d; first given at line %d): YAML would keep "
                                            "only the last one" % ((key,) + lines)))
                else:
                    first[(key_node.tag, key)] = key_node.start_mark.line + 1
            _yaml_issues(value_node, label, child_path(path, key) if isinstance(key, str) else path, issues, seen)
    seen[id(node)] = True


def load_documents(text):
    """Parse a multi-document YAML spec (SlurmCluster + NodeSets); empty documents are skipped.

    The text is composed first and checked (duplicate keys, self-containing aliases, huge integers) with the field
    path of each problem, then constructed with PyYAML's safe constructor."""
    import yaml
    try:
        nodes = [node for node in yaml.compose_all(text, Loader=yaml.SafeLoader) if node is not None]
        issues = []
        for index, node in enumerate(nodes):
            _yaml_issues(node, _yaml_label(node, index), "", issues, {})
        if issues:
            raise SpecError(issues)
        return [doc for doc in (yaml.SafeLoader("").construct_document(node) for node in nodes) if doc is not None]
    except yaml.YAMLError as e:
        raise SpecError([SpecIssue("", "the spec is not valid YAML: %s" % e)])
