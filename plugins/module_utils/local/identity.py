# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""spec.identity for a local cluster: its own sssd, and the daemons that resolve directory users through it, each in a
private mount namespace, so the host's NSS, /etc/sssd and /var/lib/sss are never touched and two clusters never see
each other's directory.

SSSD's clients find it at compiled-in paths (libnss_sss, pam_sss, sss_ssh_authorizedkeys: /var/lib/sss/pipes and
/var/lib/sss/mc), and the daemons read /etc/nsswitch.conf. `in_identity_namespace(argv, ...)` runs a program in a
namespace of its own where /var/lib/sss is the cluster's `sss` directory and /etc/nsswitch.conf the cluster's (files
first, then sss); `sssd_argv` runs sssd so, with /var/log/sssd and /run (its pid file) the cluster's too. Mounts are
made with mount(8) --no-canonicalize onto descriptors opened without following links, as local/login.py does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys
from typing import List, Optional, Sequence

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import SSS_STATE_DIR

# sssd's directories below /var/lib/sss, with the modes its package gives them.
SSS_DIRS = (("db", 0o700), ("pipes", 0o755), ("pipes/private", 0o700), ("mc", 0o775), ("pubconf", 0o755),
            ("gpo_cache", 0o755), ("secrets", 0o700), ("deskprofile", 0o751))
SSSD_LOG_DIR = "/var/log/sssd"

# Binds `source:target` pairs (each target an existing host path, opened without following a link in its last
# component), then replaces itself with the program. Standard library only; run by the host's Python in `unshare`.
_NAMESPACE_PROGRAM = """
import os, subprocess, sys
mount = sys.argv[1]
count = int(sys.argv[2])
pairs = sys.argv[3:3 + 2 * count]
argv = sys.argv[3 + 2 * count:]
for source, target in zip(pairs[0::2], pairs[1::2]):
    flags = os.O_PATH | os.O_NOFOLLOW | (os.O_DIRECTORY if os.path.isdir(source) else 0)
    fd = os.open(target, flags)
    try:
        subprocess.run([mount, "--no-canonicalize", "--bind", source, "/proc/self/fd/%d" % fd], pass_fds=(fd,),
                       check=True)
    finally:
        os.close(fd)
os.execv(argv[0], argv)
"""


def prepare_sss_dir(sss_dir: str) -> None:
    """The cluster's stand-in for /var/lib/sss (and sssd's log and run directories beside it)."""
    for name, mode in SSS_DIRS:
        path = os.path.join(sss_dir, "lib", name)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
    for name in ("log", "run"):
        os.makedirs(os.path.join(sss_dir, name), mode=0o700, exist_ok=True)


def _require(paths: Sequence[str]) -> None:
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise LocalClusterError("spec.identity needs %s on this host (install sssd-ldap, libnss-sss, libpam-sss and "
                                "sssd-tools: make deps)" % ", ".join(missing))


def in_identity_namespace(argv: Sequence[str], sss_dir: str, nsswitch: Optional[str] = None,
                          extra: Sequence[Sequence[str]] = ()) -> List[str]:
    """`argv` run in a private mount namespace where /var/lib/sss is `sss_dir`/lib and, when given, /etc/nsswitch.conf
    is `nsswitch`; `extra`: more (source, target) binds."""
    pairs = [(os.path.join(sss_dir, "lib"), SSS_STATE_DIR)]
    if nsswitch is not None:
        pairs.append((nsswitch, "/etc/nsswitch.conf"))
    pairs += [tuple(p) for p in extra]
    _require([target for _source, target in pairs])
    flat = [part for pair in pairs for part in pair]
    return [find_binary("unshare"), "--mount", "--propagation", "private", sys.executable, "-c",
            _NAMESPACE_PROGRAM, find_binary("mount"), str(len(pairs))] + flat + list(argv)


def sssd_argv(sss_dir: str, config: str) -> List[str]:
    """sssd in the foreground with `config` (0600, root's), its state, log and pid file in `sss_dir`."""
    sssd = "/usr/sbin/sssd"
    _require([sssd])
    return in_identity_namespace([sssd, "-i", "-c", config, "--logger=files"], sss_dir,
                                 extra=[(os.path.join(sss_dir, "log"), SSSD_LOG_DIR),
                                        (os.path.join(sss_dir, "run"), "/run")])
