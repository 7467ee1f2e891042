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

import hashlib
import json
import pkgutil
import os
import socket
import sys
from typing import Any, List, Mapping, Optional, Sequence

from ansible_collections.soperator.slurm.plugins.module_utils import files
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LOGIN_DAEMON, LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import SLURMD
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.node import authorized_keys
from ansible_collections.soperator.slurm.plugins.module_utils.node.sssd_config import (
    DIRECTORY_FILE, SssdConfigError, directory_description, with_bind_password)
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import (
    SSS_STATE_DIR, ca_bundle_problem, render_nsswitch, render_sssd_conf)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.identity import uri_host_port

# sssd's directories below /var/lib/sss, with the modes its package gives them.
SSS_DIRS = (("db", 0o700), ("pipes", 0o755), ("pipes/private", 0o700), ("mc", 0o775), ("pubconf", 0o755),
            ("gpo_cache", 0o755), ("secrets", 0o700), ("deskprofile", 0o751))
SSSD_LOG_DIR = "/var/log/sssd"
REACH_TIMEOUT = 5

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


# Daemons that resolve users: they run in the identity namespace (slurmstepd, started by slurmd, inherits it).
def resolves_users(name: str) -> bool:
    return name in ("slurmctld", "slurmdbd", LOGIN_DAEMON) or name.startswith(SLURMD)


def already_wrapped(argv: Sequence[str]) -> bool:
    return _NAMESPACE_PROGRAM in argv


SSSD_DAEMON = "sssd"
# node/authorized_keys.py --watch-bind: checks SSSD's bind for the login's key command (root, beside sssd)
BIND_CHECK_DAEMON = "sssd-bind-check"
KEYS_COMMAND = "authorized-keys.py"


def keys_command(sss_dir: str) -> List[str]:
    """The login sshd's AuthorizedKeysCommand (before its arguments): the cluster's copy of node/authorized_keys.py
    (`<sss_dir>/authorized-keys.py`, written by write_key_command), run as nobody by the system's Python: sshd
    refuses a command below a directory that is not root's alone (a pyenv in /root, a virtualenv)."""
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)), sys.executable)
    return [python, os.path.join(sss_dir, KEYS_COMMAND)]


def write_key_command(sss_dir: str, sssd_conf: str) -> None:
    """The login's key command in `sss_dir` and the servers it probes (node/authorized_keys.py) from `sssd_conf`, the
    text sssd reads: at DIRECTORY_FILE in the identity namespace, where /var/lib/sss is `sss_dir`/lib."""
    # its source through the loader: in a module run by Ansible the package is a zip
    source = pkgutil.get_data(authorized_keys.__name__.rsplit(".", 1)[0], "authorized_keys.py")
    files.atomic_write(os.path.join(sss_dir, KEYS_COMMAND), source, 0o755)
    files.atomic_write(os.path.join(sss_dir, "lib", os.path.relpath(DIRECTORY_FILE, SSS_STATE_DIR)),
                       json.dumps(directory_description(sssd_conf), sort_keys=True), 0o644)


class LocalIdentity(object):
    """A local cluster's spec.identity: its sssd (rendered sssd.conf + the bind password from `secrets`, the stand-in
    of the Kubernetes Secrets: {name: {key: bytes}}), and the namespace the daemons that resolve users run in.

    The files live in `<state_dir>/sss/`: sssd.conf (0600, with the password), nsswitch.conf (files sss), lib/ (what
    /var/lib/sss is in the namespace: pipes, cache), log/ (sssd's logs) and run/ (its pid file)."""

    def __init__(self, state_dir: str, daemons: Any, secrets: Optional[Mapping[str, Mapping[str, bytes]]] = None,
                 timeout: float = 60.0) -> None:
        self.dir = os.path.join(state_dir, "sss")
        self.daemons = daemons
        self.secrets = dict(secrets or {})
        self.timeout = timeout

    @property
    def nsswitch(self) -> str:
        return os.path.join(self.dir, "nsswitch.conf")

    @property
    def config(self) -> str:
        return os.path.join(self.dir, "sssd.conf")

    def _value(self, ref: Any, path: str) -> bytes:
        values = self.secrets.get(ref.name)
        if values is not None and not isinstance(values, Mapping):
            raise LocalClusterError("%s: identity_secrets[%r] must map keys to values" % (path, ref.name))
        if values is None or ref.key not in values:
            raise LocalClusterError("%s: Secret %r with key %r was not given to the local cluster (identity_secrets)"
                                    % (path, ref.name, ref.key))
        value = values[ref.key]
        if not isinstance(value, (str, bytes, bytearray)):
            raise LocalClusterError("%s: identity_secrets[%r][%r] must be a string" % (path, ref.name, ref.key))
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)

    def render(self, model: Any) -> str:
        """The sssd.conf this cluster's sssd reads (with the bind password): its text is never returned to a caller
        that reports it. Raises LocalClusterError naming the field of a Secret that was not given."""
        identity = model.identity
        base = "SlurmCluster/%s spec.identity" % model.name
        if identity.ldap is None:
            text = self._value(identity.sssd_config_secret, base + ".sssdConfigSecret").decode("utf-8", "replace")
            return text
        ldap = identity.ldap
        ca = None
        if ldap.ca_config_map is not None:
            self._value(ldap.ca_config_map, base + ".ldap.caConfigMap")
            ca = os.path.join(self.dir, "ca.crt")
        template = render_sssd_conf(ldap, ca)
        if ldap.bind_password_secret is None:
            return template
        ref = ldap.bind_password_secret
        password = self._value(ref, base + ".ldap.bindPasswordSecret")
        try:
            return with_bind_password(template, password, "the bind password (Secret %r key %r)" % (ref.name, ref.key))
        except SssdConfigError as e:
            raise LocalClusterError("%s.ldap.bindPasswordSecret: %s" % (base, e))

    def check(self, model: Any) -> None:
        """Before anything is written: every Secret spec.identity names was given, and sssd is installed."""
        if model is None or model.identity is None:
            return
        self.render(model)
        _require(["/usr/sbin/sssd", SSS_STATE_DIR, SSSD_LOG_DIR])
        ldap = model.identity.ldap
        if ldap is None:
            return
        base = "SlurmCluster/%s spec.identity.ldap" % model.name
        if ldap.ca_config_map is not None:
            problem = ca_bundle_problem(self._value(ldap.ca_config_map, base + ".caConfigMap"))
            if problem:
                raise LocalClusterError("%s.caConfigMap: ConfigMap %r key %r %s" % (
                    base, ldap.ca_config_map.name, ldap.ca_config_map.key, problem))
        # this host's sssd is what connects: a server it cannot reach now leaves every directory user out
        _scheme, host, port = uri_host_port(ldap.uri)
        try:
            socket.create_connection((host.strip("[]"), port or (636 if ldap.uri.startswith("ldaps:") else 389)),
                                     timeout=REACH_TIMEOUT).close()
        except OSError as e:
            why = e.strerror or str(e)
            raise LocalClusterError("%s.uri: cannot reach %s from this host: %s" % (base, ldap.uri, why))

    def wrap(self, name: str, argv: List[str]) -> List[str]:
        """`argv` of daemon `name`, in the identity namespace when it resolves users."""
        if not resolves_users(name) or already_wrapped(argv):
            return argv
        return in_identity_namespace(argv, self.dir, self.nsswitch)

    def _daemons(self, model: Any, text: str) -> List[Any]:
        """[(name, argv, digest, ready)] of the daemons spec.identity runs, sssd.conf being `text`."""
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        nss_pipe = os.path.join(self.dir, "lib", "pipes", "nss")
        status = os.path.join(self.dir, "lib", os.path.relpath(authorized_keys.BIND_STATUS_FILE, SSS_STATE_DIR))
        watch = in_identity_namespace(keys_command(self.dir) + ["--watch-bind", self.config], self.dir)
        return [(SSSD_DAEMON, sssd_argv(self.dir, self.config), digest, lambda: os.path.exists(nss_pipe)),
                (BIND_CHECK_DAEMON, watch, digest, lambda: os.path.exists(status))]

    def plan(self, model: Any) -> List[str]:
        """What ensure(model) would do to the identity daemons, as 'would ...' actions (check mode); reads only."""
        running = self.daemons.running_records()
        if model.identity is None:
            return ["would stop %s (spec.identity off)" % n for n in (BIND_CHECK_DAEMON, SSSD_DAEMON) if n in running]
        digest = hashlib.sha256(self.render(model).encode("utf-8")).hexdigest()
        actions = []
        for name in (SSSD_DAEMON, BIND_CHECK_DAEMON):
            if name not in running:
                actions.append("would start %s" % name)
            elif running[name].get("digest") != digest:
                actions.append("would restart %s (configuration changed)" % name)
        return actions

    def ensure(self, model: Any, changes: List[str]) -> None:
        """sssd and the bind watcher running with this model's config (started, or restarted when the config
        changed), or stopped."""
        if model.identity is None:
            for name in (BIND_CHECK_DAEMON, SSSD_DAEMON):
                if self.daemons.stop(name):
                    changes.append("stopped %s (spec.identity off)" % name)
            return
        prepare_sss_dir(self.dir)
        text = self.render(model)
        if model.identity.ldap is not None and model.identity.ldap.ca_config_map is not None:
            ref = model.identity.ldap.ca_config_map
            files.atomic_write(os.path.join(self.dir, "ca.crt"), self.secrets[ref.name][ref.key], 0o644)
        files.atomic_write(self.config, text, 0o600)
        files.atomic_write(self.nsswitch, render_nsswitch(["files", "sss"]), 0o644)
        write_key_command(self.dir, text)
        for name, argv, digest, ready in self._daemons(model, text):
            self.daemons.ensure(name, argv, changes, digest=digest, ready=ready, ports=())
