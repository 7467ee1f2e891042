# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sshd's AuthorizedKeysCommand on a Kubernetes login node with spec.identity: a user's keys are the cluster's
(`<keys_dir>/<user>`, the authorized-keys ConfigMap: root's) and then the directory's (sss_ssh_authorizedkeys: the
sshPublicKey of the user's LDAP entry). sshd allows one command, and the ConfigMap's directory (mode 0777 from the
kubelet) cannot be an AuthorizedKeysFile under StrictModes: this program prints both.

    authorized_keys.py KEYS_DIR USER

Fails closed: a user name that is not a plain name prints nothing; an SSSD that does not answer prints no
directory key (sss_ssh_authorizedkeys fails) while the cluster's keys still print: root keeps its access. Standard
library only (node/); runs as AuthorizedKeysCommandUser (nobody).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess
import sys

SSS_AUTHORIZED_KEYS = "/usr/bin/sss_ssh_authorizedkeys"
# The names the cluster's keys are filed under, and what we hand to sss_ssh_authorizedkeys.
USER_NAME = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9_.]*\Z")
TIMEOUT = 20


def cluster_keys(keys_dir, user):
    """The content of keys_dir/user (b"" when there is none); the name is one plain component."""
    if not USER_NAME.match(user):
        return b""
    try:
        with open(os.path.join(keys_dir, user), "rb") as f:
            return f.read()
    except OSError:
        return b""


def directory_keys(user, program=SSS_AUTHORIZED_KEYS):
    """The user's keys from SSSD (b"" when SSSD does not know them, fails or does not answer)."""
    if not USER_NAME.match(user) or user == "root":
        return b""
    try:
        proc = subprocess.run([program, user], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return b""
    return proc.stdout if proc.returncode == 0 else b""


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: authorized_keys.py KEYS_DIR USER\n")
        return 2
    keys_dir, user = args
    out = cluster_keys(keys_dir, user)
    if out and not out.endswith(b"\n"):
        out += b"\n"
    out += directory_keys(user)
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
