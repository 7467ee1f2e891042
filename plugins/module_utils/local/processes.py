# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The daemons of a local cluster: started with a record (pid + start time + configuration digest), recognised only
by that record, stopped by pid and verified gone; their readiness probes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils import files, wait
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    LOGIN_DAEMON, LOOPBACK, Layout, LocalClusterError)
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import (
    SLURMD, _digest, natural_key as _natural)
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import _port_free
from ansible_collections.soperator.slurm.plugins.module_utils.node.power_local import proc_start_time, record_alive
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import (
    _is_real_dir,
    _read_own_file)


# Debian package of each binary we run, for the error when one is missing.
PACKAGES = {
    "munged": "munge", "munge": "munge",
    "slurmctld": "slurmctld", "slurmd": "slurmd", "slurmdbd": "slurmdbd",
    "scontrol": "slurm-client", "sinfo": "slurm-client", "squeue": "slurm-client", "scancel": "slurm-client",
    "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-client",
    "sshd": "openssh-server", "unshare": "util-linux", "mount": "mount",
}
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def _descendants(pid):
    """Pids of every live descendant of `pid` (children first)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                data = f.read()
        except (IOError, OSError):
            continue
        children.setdefault(int(data[data.rindex(")") + 2:].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def find_binary(name):
    """Absolute path of a binary (PATH, then the sbin directories); a clear error naming the Debian package."""
    path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN_DIRS))
    if not path:
        raise LocalClusterError("%s not found: install the Debian package '%s' (apt-get install %s)"
                                % (name, PACKAGES.get(name, name), PACKAGES.get(name, name)))
    return path


# One reading of a process's start time for the backend and the power programs it installs (node/power_local.py).
_proc_start_time = proc_start_time


def _proc_comm(pid):
    """The command name of a live process ("" when gone); /proc/PID/comm is the kernel's, read as a regular file."""
    try:
        return files.read_text("/proc/%d/comm" % pid) or ""
    except files.UnsafeFile:
        return ""


def _pid_alive(pid, start_time=None):
    """Whether a live process has this pid (and, given one, this start time)."""
    now = _proc_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


# One rule for a record's process, here and in the power programs: the pid with the recorded start time.
_record_alive = record_alive


def _tail(path, lines=25):
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return "(no log at %s)" % path
    return "\n".join(text.splitlines()[-lines:])


def _socket_peer(path):
    """(pid, uid) of the process listening on the unix socket `path` (SO_PEERCRED), or None."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        pid, uid, _gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
        return pid, uid
    except OSError:
        return None
    finally:
        s.close()


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise


def slurmd_name(node: str) -> str:
    """The record name of `node`'s slurmd."""
    return SLURMD + node


class Daemons(object):
    """The daemons of one local cluster, known only by their records under layout.run (pid + start time + argv +
    configuration digest): start one, stop one by pid + start time (verified gone), readiness, what is left.
    One node's slurmd: ensure_slurmd(), stop_slurmd(), restart_slurmd().

    `timeout` bounds each start and stop; `env` is what every daemon gets over os.environ (SLURM_CONF); a slurmd or the
    login sshd started now is recorded with `jail_dir` (local/jail_use.py reads it)."""

    def __init__(self, layout: Layout, timeout: float, env: Mapping[str, str], jail_dir: Optional[str] = None) -> None:
        self.layout = layout
        self.timeout = timeout
        self.env = dict(env)
        self.jail_dir = jail_dir
        self._children: Dict[int, Any] = {}    # pid -> Popen of daemons this object started (reaped when they end)
        # (name, argv) -> the argv to run: spec.identity's namespace for the daemons that resolve users
        self.wrap: Optional[Callable[[str, List[str]], List[str]]] = None

    def records(self) -> Dict[str, Dict[str, Any]]:
        """{name: record} of every daemon recorded (alive or not)."""
        out = {}
        try:
            names = os.listdir(self.layout.run)
        except OSError:
            return out
        for fn in names:
            if fn.endswith(".proc.json"):
                rec = self.record(fn[:-len(".proc.json")])
                if rec is not None:
                    out[fn[:-len(".proc.json")]] = rec
        return out

    def record(self, name: str) -> Optional[Dict[str, Any]]:
        """`name`'s record, or None: its own file only (records() reads every daemon's; one per node is N x N)."""
        data = _read_own_file(self.layout.record(name))     # a pid to signal: only from our file
        try:
            return json.loads(data.decode("utf-8"))
        except (AttributeError, ValueError):
            return None

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def running_records(self) -> Dict[str, Dict[str, Any]]:
        return dict((n, r) for n, r in self.records().items() if _record_alive(r))

    def pid(self, name: str) -> Optional[int]:
        rec = self.record(name)
        if rec and _record_alive(rec):
            return rec["pid"]
        return None

    def ensure(self, name: str, argv: List[str], changes: List[str], digest: Optional[str],
               ready: Optional[Callable[[], bool]], ports: Sequence[int], stale: Optional[str] = None,
               settle: bool = True) -> bool:
        """Start `name` unless it runs with the same digest (configuration); restart it when the digest changed or
        `stale` (the reason) says it must. Returns True when it was (re)started. `settle`: see start().
        """
        rec = self.record(name)
        if rec and _record_alive(rec):
            if rec.get("digest") == digest and not stale:
                return False
            self.stop(name)
            changes.append("restarted %s (%s)" % (name, "configuration changed" if rec.get("digest") != digest
                                                  else stale))
        else:
            changes.append("started %s" % name)
        self.start(name, argv, digest, ready, ports, settle=settle)
        return True

    def _daemon_jail(self, name):
        """The jail a daemon started now uses: slurmds enter it for every job step, the login sshd chroots into it."""
        if self.jail_dir is not None and (name.startswith(SLURMD) or name == LOGIN_DAEMON):
            return os.path.realpath(self.jail_dir)
        return None

    def start(self, name: str, argv: List[str], digest: Optional[str], ready: Optional[Callable[[], bool]],
              ports: Sequence[int] = (), jail: Optional[str] = None, settle: bool = True) -> None:
        """Start `name` and record it (pid, start time, argv, digest, ports, and `jail`: the jail it uses, by default
        this cluster's for a slurmd or the login sshd; local/jail_use.py reads it). `ready`: a probe waited for
        (bounded by the timeout); None: the process must only survive its start: a short wait and a look, unless
        `settle` is False (the caller waits for it otherwise, as the backend waits for every slurmd it started to
        register; a wait per slurmd made starting N of them N waits long)."""
        lay = self.layout
        if self.wrap is not None:
            argv = self.wrap(name, argv)
        held = [p for p in ports if not _port_free(p)]
        if held:
            raise LocalClusterError("cannot start %s of %s: port %s on %s is in use by another process (not a daemon "
                                    "of this cluster)" % (name, lay.state_dir, ", ".join(map(str, held)), LOOPBACK))
        extra = {"ports": list(ports)}
        if name.startswith(SLURMD):
            extra["ctld"] = self.ctld_instance()       # the slurmctld it registers with (slurmds_behind)
        jail = jail or self._daemon_jail(name)
        if jail:
            extra["jail"] = jail
        env = dict(os.environ)
        env.update(self.env)
        out_path = lay.output(name)
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise LocalClusterError("%s is a symbolic link: not writing through it" % out_path)
            raise
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, cwd=lay.state_dir, close_fds=True, start_new_session=True)
        self._children[proc.pid] = proc
        seen = []

        def start_time_known():
            seen[:] = [_proc_start_time(proc.pid)]
            return seen[0] is not None or proc.poll() is not None, name
        try:
            wait.wait_until(start_time_known, "the start time of %s" % name, 1.0, poll=0.01)
        except wait.WaitTimeout:
            pass                # recorded without one: a record that proves nothing is never signalled
        record = {"pid": proc.pid, "start_time": seen[0], "argv": argv, "digest": digest}
        record.update(extra)
        files.atomic_write(lay.record(name), json.dumps(record) + "\n")
        if ready is None:
            if not settle:
                return
            time.sleep(0.05)
            if proc.poll() is not None:
                raise LocalClusterError("%s exited at once (rc %s):\n%s"
                                        % (name, proc.returncode, self._logs_of(name)))
            return

        def up():
            if ready():
                return True, ""
            if proc.poll() is not None:
                raise LocalClusterError("%s exited (rc %s) while starting:\n%s" % (name, proc.returncode,
                                                                                   self._logs_of(name)))
            return False, name
        wait.wait_until(up, name, self.timeout, poll=0.2, timeout_error=lambda _n: LocalClusterError(
            "%s not ready after %ss:\n%s" % (name, self.timeout, self._logs_of(name))))

    def _logs_of(self, name):
        lay = self.layout
        logs = sorted(set([lay.output(name), lay.log_file(name)]), key=lambda p: p != lay.output(name))
        return "\n".join("== %s\n%s" % (p, _tail(p)) for p in logs if os.path.exists(p))

    def log_files(self, names: Optional[Iterable[str]] = None) -> Dict[str, str]:
        """{daemon: its log file} of `names` (default: every daemon this cluster recorded)."""
        if names is None:
            names = self.records()
        return dict((name, self.layout.log_file(name)) for name in sorted(names))

    def stop(self, name: str, sig: int = signal.SIGTERM) -> bool:
        """Stop a recorded daemon (SIGTERM, then SIGKILL after the timeout); drop its record. True if it ran."""
        path = self.layout.record(name)
        rec = self.record(name)
        if rec is None:
            return False
        pid, start = rec["pid"], rec.get("start_time")
        if start is None:
            # no start time was recorded: nothing proves the pid is still ours, so it is never signalled
            was_alive = False
        else:
            was_alive = _pid_alive(pid, start)
        if was_alive:
            # Its children (slurmscriptd, login sessions, helpers) are ours too: taken with their start times while
            # it is verified alive; those that outlive it are stopped after it.
            family = [(child, _proc_start_time(child)) for child in _descendants(pid)]
            family = [(child, t) for child, t in family if t is not None and _pid_alive(pid, start)]
            _signal(pid, sig)
            if not self._wait_gone(pid, start, self.timeout):
                _signal(pid, signal.SIGKILL)
                if not self._wait_gone(pid, start, 10):
                    raise LocalClusterError("%s (pid %d) does not exit even on SIGKILL" % (name, pid))
            self.stop_pids(family)
        try:
            os.remove(path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
        return was_alive

    def send_signal(self, name: str, sig: int) -> bool:
        """Send `sig` to the recorded daemon `name` when it runs (its pid with the recorded start time). True if sent."""
        rec = self.record(name)
        if rec is None or not _record_alive(rec):
            return False
        _signal(rec["pid"], sig)
        return True

    def _wait_gone(self, pid, start, timeout):
        def gone():
            child = self._children.get(pid)
            if child is not None and child.poll() is not None:
                self._children.pop(pid, None)      # reaped, so its pid is not a zombie of ours
            return not _pid_alive(pid, start), str(pid)
        try:
            wait.wait_until(gone, "pid %d to exit" % pid, timeout, poll=0.05)
            return True
        except wait.WaitTimeout:
            return False

    def stop_pids(self, procs: Iterable[Tuple[int, Optional[int]]]) -> None:
        """SIGTERM, then SIGKILL after 10s, the (pid, start time) still alive with that start time."""
        procs = [(pid, t) for pid, t in procs if t is not None and _pid_alive(pid, t)]
        for pid, t in procs:
            if _pid_alive(pid, t):
                _signal(pid, signal.SIGTERM)
        for pid, t in procs:
            if not self._wait_gone(pid, t, 10) and _pid_alive(pid, t):
                _signal(pid, signal.SIGKILL)
                self._wait_gone(pid, t, 10)

    def step_daemons(self) -> List[Tuple[int, int, str]]:
        """(pid, start time, socket) of the slurmstepds of this cluster's jobs: the processes of our user listening
        on the step sockets (<node>_<job>.<step>) in this cluster's spool directories (SO_PEERCRED)."""
        found = []
        spool = self.layout.spool
        try:
            nodes = sorted(os.listdir(spool))
        except OSError:
            return found
        for node in nodes:
            directory = os.path.join(spool, node)
            if not _is_real_dir(directory):
                continue
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            for name in names:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not stat.S_ISSOCK(st.st_mode) or not name.startswith(node + "_"):
                    continue
                peer = _socket_peer(path)
                if peer is None or peer[1] != os.geteuid():
                    continue
                start = _proc_start_time(peer[0])
                comm = _proc_comm(peer[0])
                if start is not None and comm.startswith("slurmstepd"):
                    found.append((peer[0], start, path))
        return found

    def stop_step_daemons(self) -> List[Tuple[int, int, str]]:
        """Stop the slurmstepds step_daemons() finds (of jobs that could not be cancelled) and their job's processes
        (children of a slurmstepd of ours, taken while it is verified alive). -> the slurmstepds, as step_daemons()."""
        steps = self.step_daemons()
        family = [(child, _proc_start_time(child)) for pid, start, _path in steps for child in _descendants(pid)
                  if _pid_alive(pid, start)]
        self.stop_pids([(pid, start) for pid, start, _path in steps])
        self.stop_pids(family)
        return steps

    def leftover_processes(self) -> List[Tuple[int, str]]:
        """(pid, name) of this cluster's processes still alive (empty after stop()): the daemons it recorded and the
        slurmstepds listening on step sockets in its spool. Found by what we recorded and created, never by a
        command line or an open file."""
        found = [(r["pid"], n) for n, r in sorted(self.records().items()) if _record_alive(r)]
        found += [(pid, "slurmstepd") for pid, _start, _path in self.step_daemons()]
        return found

    def ctld_instance(self) -> Optional[List[Any]]:
        """[pid, start time] of the running slurmctld, or None."""
        rec = self.record("slurmctld")
        if rec and _record_alive(rec):
            return [rec["pid"], rec.get("start_time")]
        return None

    def slurmds_behind(self) -> List[str]:
        """Running slurmds started before the running slurmctld (or while none ran). A slurmd registers once, when it
        starts: a slurmctld started after it - e.g. after one that refused its configuration - keeps its node FUTURE
        until the slurmd starts again. ensure_started() restarts these; their jobs' slurmstepds keep running."""
        ctld = self.ctld_instance()
        return sorted((n for n, r in self.running_records().items()
                       if n.startswith(SLURMD) and (ctld is None or r.get("ctld") != ctld)), key=_natural)

    def mark_registered(self, name: str) -> None:
        """Record the running daemon `name` (a slurmd) as registered with the running slurmctld (slurmds_behind)."""
        ctld = self.ctld_instance()
        rec = self.record(name)
        if rec is not None and ctld is not None and self.running(name):
            rec["ctld"] = ctld
            files.atomic_write(self.layout.record(name), json.dumps(rec) + "\n")

    # --- one node's slurmd (what the scale-up/down, the roll and remediation start and stop) --------------------

    def ensure_slurmd(self, node: str, port: int, digest: Optional[str], changes: List[str],
                      stale: Optional[str] = None) -> bool:
        """`node`'s slurmd (`slurmd -D -N node`) running on `port` with configuration `digest`: started, or restarted
        when its digest differs or `stale` says why. True when it was (re)started. Started without a wait: the caller
        waits for the node to register (backend.py _wait_nodes_up reports a slurmd that exited, with its log)."""
        return self.ensure(slurmd_name(node), [find_binary("slurmd"), "-D", "-N", node], changes, digest=digest,
                           ready=None, ports=[port], stale=stale, settle=False)

    def stop_slurmd(self, node: str) -> bool:
        """Stop `node`'s slurmd (by its recorded pid + start time) and drop its record. True if it ran."""
        return self.stop(slurmd_name(node))

    def restart_slurmd(self, node: str, digest: Optional[str]) -> Dict[str, Any]:
        """Restart `node`'s slurmd with the command, ports and jail it was started with, recorded with `digest`.
        -> {'node', 'old_pid', 'new_pid'}."""
        name = slurmd_name(node)
        rec = self.record(name)
        if rec is None:
            raise LocalClusterError("no slurmd of node %s was started in %s" % (node, self.layout.state_dir))
        old_pid = self.pid(name)
        self.stop(name)
        self.start(name, rec["argv"], digest, ready=None, ports=rec.get("ports") or (), jail=rec.get("jail"))
        return {"node": node, "old_pid": old_pid, "new_pid": self.pid(name)}


# --- munged ---------------------------------------------------------------------------------------------------------

def munged_argv(layout):
    """munged of the cluster in `layout`: its key, socket, pid, log and seed files."""
    lay = layout
    argv = [find_binary("munged"), "--foreground", "--key-file=%s" % lay.munge_key,
            "--socket=%s" % lay.munge_socket, "--pid-file=%s" % os.path.join(lay.run, "munged.pid"),
            "--log-file=%s" % lay.log_file("munged"), "--seed-file=%s" % lay.munge_seed]
    if not _socket_path_open(lay.run):
        # munged refuses a socket whose directory path is not o+x all the way up (pytest's tmp dirs are 0700);
        # --force turns that into a warning. Nobody else can reach the socket then, which is fine here.
        argv.append("--force")
    return argv


def munged_digest(layout):
    """What munged runs with, recorded with it: its command line and the digest of the key file (None: no key
    of ours there yet). munged reads the key only when it starts, so a key deleted (a new one generated) or
    replaced under a running munged differs from this record and restarts it. Restarting munged alone is enough:
    slurmctld, slurmd and slurmdbd hold no key, they ask this munged for every credential; what it issued with
    the old key (in flight, within munge's 5-minute TTL) no longer decodes. The old key cannot be restored: it
    lives only in the running munged."""
    key = _read_own_file(layout.munge_key, limit=1 << 20)
    return _digest(*(munged_argv(layout) + ["key:%s" % (_digest(key) if key is not None else None)]))


def _socket_path_open(path):
    while True:
        try:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def munge_ready(layout):
    """munged of `layout` answers on its socket."""
    if not os.path.exists(layout.munge_socket):
        return False
    try:
        proc = subprocess.run([find_binary("munge"), "--socket=%s" % layout.munge_socket, "-n"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0
