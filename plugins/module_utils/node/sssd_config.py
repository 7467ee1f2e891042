# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sssd.conf that sssd reads: the rendered template (render/sssd_conf.py, no password in it) with the bind
password appended to its domain section, written 0600 (sssd refuses a config others may read).

A program of the images (the SSSD container runs it before `sssd -i`) and a function of the local backend. Standard
library only (node/). The password is read from a file (the mounted bindPasswordSecret) and never printed: every
message names the file, never its content.

    python3 sssd_config.py write --template T [--password-file F] --out /etc/sssd/sssd.conf [--directory-out F]

--directory-out: also write (0644, no secret in it) which servers the config names, as JSON: what the login's key
command (node/authorized_keys.py) probes before it takes keys from SSSD.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import configparser
import json
import os
import re
import sys

AUTHTOK_KEY = "ldap_default_authtok"
# node/authorized_keys.py reads it (keep the two in step): beside SSSD's pipes, shared with the login container.
DIRECTORY_FILE = "/var/lib/sss/pipes/soperator-directory.json"


class SssdConfigError(Exception):
    pass


def with_bind_password(template, password, source="the bind password"):
    """`template` (text whose last section is the [domain/...] one) with `ldap_default_authtok = <password>` at its
    end. `password` (bytes or text) must read back as written from an INI line: UTF-8, no control character, no
    space at either end (libini_config trims them). A trailing newline (as `echo` writes a file) is dropped."""
    if isinstance(password, bytes):
        try:
            password = password.decode("utf-8")
        except UnicodeDecodeError:
            raise SssdConfigError("%s is not UTF-8 text" % source)
    if password.endswith("\n"):
        password = password[:-1]
    if not password:
        raise SssdConfigError("%s is empty" % source)
    if password != password.strip(" ") or any(ord(c) < 0x20 or ord(c) == 0x7f for c in password):
        raise SssdConfigError("%s holds a control character or a space at either end: sssd.conf cannot hold it as "
                              "written" % source)
    sections = [line.strip() for line in template.splitlines() if line.strip().startswith("[")]
    if not sections or not sections[-1].startswith("[domain/"):
        raise SssdConfigError("the sssd.conf template does not end with its domain section")
    if any(line.split("=", 1)[0].strip() == AUTHTOK_KEY for line in template.splitlines()):
        raise SssdConfigError("the sssd.conf template already holds %s" % AUTHTOK_KEY)
    return template.rstrip("\n") + "\n%s = %s\n" % (AUTHTOK_KEY, password)


def _uris(value):
    return [u.strip() for u in (value or "").split(",") if u.strip() and u.strip() != "_srv_"]


def directory_description(text):
    """{"uris", "start_tls", "ca_file", "tls_reqcert", "bind_dn"} of the domains sssd.conf `text` enables: the
    servers SSSD connects to (ldap_uri and ldap_backup_uri; for the ad and ipa providers, LDAP on their servers) and
    the DN it binds as with a password (the key command then wants a recent successful bind check), nothing secret.
    A config that cannot be read gives no server (the key command then offers no directory key)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return {"uris": [], "start_tls": False, "ca_file": None, "tls_reqcert": None, "bind_dn": None}
    names = []
    if parser.has_option("sssd", "domains"):
        names = [n.strip() for n in parser.get("sssd", "domains").split(",") if n.strip()]
    if not names:
        names = [s.split("/", 1)[1] for s in parser.sections() if s.startswith("domain/")]
    uris, start_tls, ca, reqcert, bind_dn = [], False, None, None, None
    for name in names:
        section = "domain/" + name
        if not parser.has_section(section):
            continue
        options = dict(parser.items(section))
        found = _uris(options.get("ldap_uri")) + _uris(options.get("ldap_backup_uri"))
        for provider in ("ad", "ipa"):
            hosts = _uris(options.get(provider + "_server")) + _uris(options.get(provider + "_backup_server"))
            found += ["ldap://%s" % h for h in hosts if re.match(r"[A-Za-z0-9.-]+\Z", h)]
        uris += [u for u in found if u not in uris]
        start_tls = start_tls or options.get("ldap_id_use_start_tls", "").strip().lower() == "true"
        ca = ca or options.get("ldap_tls_cacert")
        reqcert = reqcert or options.get("ldap_tls_reqcert")
        if options.get("ldap_default_bind_dn") and options.get("ldap_default_authtok") and \
                options.get("ldap_default_authtok_type", "password").strip() == "password":
            bind_dn = bind_dn or options["ldap_default_bind_dn"].strip()
    return {"uris": uris, "start_tls": start_tls, "ca_file": ca, "tls_reqcert": reqcert, "bind_dn": bind_dn}


def write_directory(path, text):
    """The JSON of directory_description(text) at `path`, 0644, through a new file renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, json.dumps(directory_description(text), sort_keys=True).encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_config(path, text):
    """Write `text` to `path` 0600 through a new file renamed over it (a link at `path` is replaced, never
    followed)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Write sssd.conf from its template and the bind password file.")
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write")
    write.add_argument("--template", required=True)
    write.add_argument("--password-file", help="the bind password (absent: an anonymous bind)")
    write.add_argument("--out", required=True)
    write.add_argument("--directory-out", help="also write the servers it names (JSON) here: " + DIRECTORY_FILE)
    args = parser.parse_args(argv)
    try:
        text = _read(args.template).decode("utf-8")
        if args.password_file:
            text = with_bind_password(text, _read(args.password_file), "the bind password in %s" % args.password_file)
        write_config(args.out, text)
        if args.directory_out:
            write_directory(args.directory_out, text)
    except (OSError, UnicodeDecodeError, SssdConfigError) as e:
        sys.stderr.write("sssd_config: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
