# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local login node: sshd chrooted into the jail, in its own mount namespace with the cluster's configs,
munge socket and spool bound into the jail.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
import stat
import subprocess
import sys
from typing import Any, Dict, Iterable, List, Optional

from ansible_collections.soperator.slurm.plugins.module_utils import files
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    LOGIN_DAEMON,
    LOGIN_OFFSET,
    LOGIN_USER,
    LOOPBACK,
    Layout,
    LocalClusterError)
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import _digest
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import Daemons, _record_alive, find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import (
    _own_dir, _read_own_file, _saved_base, current_text)
from ansible_collections.soperator.slurm.plugins.module_utils.local.identity import keys_command
from ansible_collections.soperator.slurm.plugins.module_utils.node import safe_tree
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import SSS_PIPES_DIR
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import ssh_host_keys_secret_name


def unsafe_path_components(path):
    """Components of `path`, from / down, that sshd refuses for ChrootDirectory (and, with StrictModes, above an
    authorized_keys file): not a directory owned by root, or writable by group or others. [] when it is safe; the
    check ends at the first component that does not exist (yet)."""
    bad = []
    current = "/"
    for part in [""] + [p for p in os.path.normpath(path).split("/") if p]:
        current = os.path.join(current, part)
        try:
            st = os.stat(current)
        except OSError:
            break
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            bad.append("%s (owner uid %d, mode %04o)" % (current, st.st_uid, stat.S_IMODE(st.st_mode)))
    return bad


def login_binds(lay, identity=False):
    """Host directories a login session needs at the same path inside the jail, like the plugin's binds for job
    steps (see _adapt_plugstack_conf): /tmp, and the cluster's configs (SLURM_CONF), munge socket and spool; with
    `identity`, SSSD's pipes (the cluster's sssd in sshd's identity namespace). A directory inside an earlier one
    comes along with it and is left out."""
    binds = []
    for path in ("/tmp", lay.etc, lay.run, lay.spool) + ((SSS_PIPES_DIR,) if identity else ()):
        if not any(path == b or path.startswith(b.rstrip("/") + "/") for b in binds):
            binds.append(path)
    return binds


def render_login_sshd_config(jail_dir, lay, base_port, identity=False):
    """The login nodes' sshd_config (render/sshd.py, as on Kubernetes) with this cluster's local paths: it listens on
    127.0.0.1:<base_port + LOGIN_OFFSET>, host keys and authorized keys live under state_dir, sessions get
    SLURM_CONF (the cluster's slurm.conf, bound into the jail at the same path)."""
    notes = ["local backend: the login node of the local cluster in %s (LocalCluster)." % lay.state_dir]
    strict = not unsafe_path_components(lay.authorized_keys)
    if not strict:
        notes.append("local backend: StrictModes off: the state directory lies below a directory that others can "
                     "write to (e.g. /tmp); the key files are ours and written 0644/0600.")
    return render_sshd_config(jail_dir, lay.ssh_host_keys, lay.authorized_keys, port=base_port + LOGIN_OFFSET,
                              listen_address=LOOPBACK, pid_file=os.path.join(lay.run, "sshd.pid"),
                              set_env={"SLURM_CONF": lay.slurm_conf}, strict_modes=strict, notes=notes,
                              identity_keys=identity,
                              identity_command=keys_command(os.path.join(lay.state_dir, "sss")) if identity else None)


def _open_below(root, path, create=False):
    """A descriptor of the directory `root + path`, walked one component at a time without following a link (and
    made, when `create`, inside the directory just opened; safe_tree.open_dirs): the jail's content, which its users
    can change, can never redirect a mkdir or a mount onto a host path, not even between a check and the use."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LocalClusterError("mount point %s%s climbs out of the jail" % (root, path))
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return safe_tree.open_dirs(root_fd, parts, create)
    except OSError as e:
        raise LocalClusterError("mount point %s%s crosses a symbolic link or a file in the jail: %s"
                                % (root, path, e.strerror))
    finally:
        os.close(root_fd)


def require_jail_plugin(jail, plugin):
    """Refuse a jail without the chroot SPANK plugin at `plugin`, the path plugstack.conf names: srun and sbatch
    inside the jail (login sessions, batch scripts) load plugstack.conf too and fail on a missing required plugin.
    The directories are walked without following a link (the jail is its users'); the file itself may be a link."""
    try:
        fd = _open_below(jail, os.path.dirname(os.path.normpath(plugin)))
        try:
            st = os.stat(os.path.basename(plugin), dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            return
    except (LocalClusterError, OSError):
        pass
    raise LocalClusterError("the jail %s has no %s: srun and sbatch in the jail load the chroot SPANK plugin that "
                            "plugstack.conf names. Use a jail that holds it (`make jail` builds one), or copy the "
                            "plugin there" % (jail, plugin))


def _jail_mount_point(jail, path):
    """Make `jail + path` a directory to mount on; refuse a path that crosses a symbolic link in the jail."""
    os.close(_open_below(jail, path, create=True))


# sshd's mount namespace: every mount goes onto the directory opened without following links (mount(8)
# --no-canonicalize onto /proc/self/fd/N reaches exactly that directory), then sshd replaces this program.
# Standard library only; run by the host's Python inside `unshare --mount`.
_LOGIN_NAMESPACE_PROGRAM = """
import os, subprocess, sys
jail, mount, sshd, config = sys.argv[1:5]
def below(path):
    fd = os.open(jail, os.O_PATH | os.O_DIRECTORY)
    for part in [p for p in path.split("/") if p]:
        child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd
def mount_on(path, args, check=True):
    fd = below(path)
    try:
        return subprocess.run([mount, "--no-canonicalize"] + args + ["/proc/self/fd/%d" % fd], pass_fds=(fd,),
                              stderr=subprocess.DEVNULL if not check else None, check=check).returncode
    finally:
        os.close(fd)
mount_on("/dev", ["--rbind", "/dev"])
# a fresh procfs, or the host's where the kernel refuses one (masked /proc in a container)
if mount_on("/proc", ["-t", "proc", "proc"], check=False) != 0:
    mount_on("/proc", ["--rbind", "/proc"])
for path in sys.argv[5:]:
    mount_on(path, ["--bind", path])
os.execv(sshd, [sshd, "-D", "-e", "-f", config])
"""


class LoginNode(object):
    """A local cluster's login sshd (started through `daemons`, local/processes.py Daemons), chrooted into
    `jail_dir`: wanted with a jail when `enabled`; root may log in with the spec's keys plus `authorized_keys`."""

    def __init__(self, layout: Layout, jail_dir: Optional[str], enabled: bool, authorized_keys: Iterable[str],
                 daemons: Daemons) -> None:
        self.layout = layout
        self.jail_dir = jail_dir
        self.enabled = bool(enabled)
        self.authorized_keys = tuple(authorized_keys or ())
        self.daemons = daemons

    def wanted(self) -> bool:
        """Whether this cluster runs a login sshd: a jail and login on."""
        return self.jail_dir is not None and self.enabled

    def address(self) -> Optional[Dict[str, Any]]:
        """{'host', 'port', 'user'} of the login sshd (when this cluster has one and its ports are chosen), else None."""
        if not self.wanted():
            return None
        base = _saved_base(self.layout)
        return {"host": LOOPBACK, "port": base + LOGIN_OFFSET, "user": LOGIN_USER} if base else None

    def ensure(self, model: Any, base_port: int, changes: List[str]) -> None:
        """The login sshd as `model` wants it on `base_port`'s block (keys, sshd_config, mount points), or stopped."""
        if not self.wanted():
            if self.stop():
                changes.append("stopped %s (no jail or login off)" % LOGIN_DAEMON)
            return
        lay = self.layout
        jail = self.jail()
        _own_dir(lay.login)
        _own_dir(lay.authorized_keys)
        self._ensure_host_keys(model, changes)
        if self._write_if_changed(os.path.join(lay.authorized_keys, LOGIN_USER), self._root_keys(model), 0o644):
            changes.append("wrote the login's authorized keys of %s" % LOGIN_USER)
        identity = model.identity is not None
        config = render_login_sshd_config(jail, lay, base_port, identity)
        if self._write_if_changed(lay.sshd_config, config, 0o644):
            changes.append("wrote the login's sshd_config")
        sshd = find_binary("sshd")
        # sshd's privilege separation directory (compiled in; Debian's service creates it at boot).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        proc = subprocess.run([sshd, "-t", "-f", lay.sshd_config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=30, check=False)
        if proc.returncode != 0:
            raise LocalClusterError("sshd -t rejects %s: %s" % (lay.sshd_config, proc.stdout.strip()))
        binds = login_binds(lay, identity)
        for point in ["/dev", "/proc"] + binds:
            _jail_mount_point(jail, point)
        argv = self._login_argv(sshd, lay.sshd_config, jail, binds)
        self.daemons.ensure(LOGIN_DAEMON, argv, changes, digest=_digest(config, *argv),
                            ready=lambda: self.ready(base_port + LOGIN_OFFSET),
                            ports=[base_port + LOGIN_OFFSET])

    def plan(self, model: Any) -> List[str]:
        """What ensure_started() would do about the login sshd, as 'would ...' actions. Reads only."""
        lay = self.layout
        running = self.daemons.running(LOGIN_DAEMON)
        if not self.wanted():
            return ["would stop %s (no jail or login off)" % LOGIN_DAEMON] if running else []
        actions = []
        jail = os.path.normpath(self.jail_dir)
        if os.path.isdir(jail):
            self.jail()
        else:
            # In a check run an earlier task (jail_populate) may be what makes it: judge the directories it has.
            bad = unsafe_path_components(jail)
            if bad:
                raise LocalClusterError("the login sshd cannot chroot into %s: not so: %s (owned by root, not "
                                        "writable by group or others)" % (jail, ", ".join(bad)))
            actions.append("the jail %s does not exist yet; it must when the cluster starts" % jail)
        if not all(os.path.exists(os.path.join(lay.ssh_host_keys, k)) for k in s.SSH_HOST_KEY_FILES):
            actions.append("would generate the login's SSH host keys")
        if current_text(os.path.join(lay.authorized_keys, LOGIN_USER)) != self._root_keys(model):
            actions.append("would write the login's authorized keys of %s" % LOGIN_USER)
        address = self.address()
        if address is None:
            return actions + ["would write the login's sshd_config", "would start %s" % LOGIN_DAEMON]
        config = render_login_sshd_config(jail, lay, address["port"] - LOGIN_OFFSET, model.identity is not None)
        if current_text(lay.sshd_config) != config:
            actions.append("would write the login's sshd_config")
        if not running:
            return actions + ["would start %s" % LOGIN_DAEMON]
        argv = self._login_argv(find_binary("sshd"), lay.sshd_config, jail, login_binds(lay, model.identity is not None))
        if self.daemons.records()[LOGIN_DAEMON].get("digest") != _digest(config, *argv):
            actions.append("would restart %s (configuration changed)" % LOGIN_DAEMON)
        return actions

    def jail(self) -> str:
        """The jail the login sshd chroots into; refused (LocalClusterError) where sshd would refuse it."""
        jail = os.path.normpath(self.jail_dir)
        if not os.path.isdir(jail):
            raise LocalClusterError("the login sshd cannot chroot into %s: no such directory" % jail)
        bad = unsafe_path_components(jail)
        if bad:
            raise LocalClusterError("the login sshd cannot chroot into %s: every directory of its path must be owned "
                                    "by root and not writable by group or others (sshd's ChrootDirectory rule); "
                                    "not so: %s" % (jail, ", ".join(bad)))
        return jail

    def _root_keys(self, model):
        return "".join(k.strip() + "\n" for k in tuple(model.login.ssh_root_public_keys) + self.authorized_keys)

    @staticmethod
    def _login_argv(sshd, config, jail, binds):
        """sshd in a mount namespace of its own: the jail's /dev, /proc and the binds exist only there."""
        return [find_binary("unshare"), "--mount", "--propagation", "private", sys.executable, "-c",
                _LOGIN_NAMESPACE_PROGRAM, jail, find_binary("mount"), sshd, config] + list(binds)

    def restart(self) -> Optional[Dict[str, Any]]:
        """Restart the running login sshd with the command it was started with (the caller holds the state
        directory's lock): the mount points are made in the jail as it is now; its sessions end.
        -> {'old_pid', 'new_pid'}, or None when no login sshd of this cluster runs."""
        rec = self.daemons.records().get(LOGIN_DAEMON)
        if rec is None or not _record_alive(rec):
            return None
        argv = rec["argv"]
        program = argv.index(_LOGIN_NAMESPACE_PROGRAM) if _LOGIN_NAMESPACE_PROGRAM in argv else None
        if program is None or len(argv) < program + 5:
            raise LocalClusterError("the login sshd of %s was not started by this version (%s): restart the "
                                    "cluster" % (self.layout.state_dir, " ".join(argv[:4])))
        jail, binds = argv[program + 1], argv[program + 5:]
        for point in ["/dev", "/proc"] + binds:
            _jail_mount_point(jail, point)
        ports = rec.get("ports") or ()
        self.daemons.stop(LOGIN_DAEMON)
        self.daemons.start(LOGIN_DAEMON, argv, rec.get("digest"), ports=ports, jail=rec.get("jail") or jail,
                           ready=(lambda: self.ready(ports[0])) if ports else None)
        return {"old_pid": rec["pid"], "new_pid": self.daemons.pid(LOGIN_DAEMON)}

    def _ensure_host_keys(self, model, changes):
        """The login's SSH host keys: generated once (secrets.py, as the Kubernetes Secret), then kept."""
        lay = self.layout
        name = ssh_host_keys_secret_name(model)
        existing = {}
        for key in s.SSH_HOST_KEY_FILES:
            path = os.path.join(lay.ssh_host_keys, key)
            data = _read_own_file(path)         # a link or a foreign file there: generated and replaced
            if data is not None:
                existing[key] = data
        if len(existing) == len(s.SSH_HOST_KEY_FILES):
            return
        material, generated = s.ensure_secret_material(model, {name: existing})
        for key, value in material[name].items():
            if key not in existing:
                mode = 0o644 if key.endswith(".pub") else 0o600
                files.atomic_write(os.path.join(lay.ssh_host_keys, key), value, mode)
        if name in generated:
            changes.append("generated the login's SSH host keys")

    @staticmethod
    def _write_if_changed(path, text, mode):
        if current_text(path) == text and stat.S_IMODE(os.stat(path).st_mode) == mode:
            return False
        files.atomic_write(path, text, mode)
        return True

    @staticmethod
    def ready(port: int) -> bool:
        """sshd answers with its banner on 127.0.0.1:`port`."""
        try:
            with socket.create_connection((LOOPBACK, port), timeout=2) as conn:
                return conn.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def stop(self) -> bool:
        """Stop the login sshd and its sessions (sshd leaves running sessions alone; Daemons.stop stops the
        children it had). True if it ran."""
        return self.daemons.stop(LOGIN_DAEMON)
