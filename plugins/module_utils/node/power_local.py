# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm's power saving programs for a local cluster (ephemeral NodeSets): slurmctld runs them, as SlurmUser, with
an action and the hostlist of the nodes it wants up or down.

    power_local.py resume|suspend|resume-fail <hostlist>

The local backend installs this file under <state_dir>/lib and three wrappers under <state_dir>/bin (the
ResumeProgram, SuspendProgram and ResumeFailProgram of its slurm.conf). For every node it may power up, the backend
writes a launch file, run/slurmd-<node>.launch.json: the slurmd's argv, environment, output file and what the
backend records about a daemon. This program only acts on those nodes, and records what it starts in the backend's
own format (run/slurmd-<node>.proc.json: pid and start time), so the backend sees, stops and reports these slurmds
like the ones it started itself; a pid is signalled only while it still has its recorded start time.

Standard library only: it runs outside Ansible, from the state directory (the same file is module_utils code, for
the backend to copy and for the tests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node.power_program import PowerError, PowerProgram
except ImportError:  # run as a program from a local cluster's lib/: power_program.py lies beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    from power_program import PowerError, PowerProgram

ACTIONS = ("resume", "suspend", "resume-fail")
STOP_WAIT = 30          # seconds a slurmd gets to exit on SIGTERM before SIGKILL
LOCK = "power.lock"     # one power program at a time per cluster (slurmctld may run several at once)


def proc_start_time(pid):
    """Start time (clock ticks since boot) of a live, non-zombie process; None when there is none."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except (IOError, OSError):
        return None
    fields = data[data.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def record_alive(record):
    """Whether the process of a record still runs: the pid with the recorded start time. A record without a start
    time proves nothing (the pid may be another process by now): not alive, never signalled."""
    return record is not None and record.get("start_time") is not None \
        and proc_start_time(record["pid"]) == record["start_time"]


def _read_json(path):
    """A JSON file of ours: a regular file, not through a link, or None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise PowerError("cannot read %s: %s" % (path, e))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid not in (0, os.getuid()):
            raise PowerError("%s is not a file of this cluster" % path)
        return json.loads(f.read(1 << 20).decode("utf-8"))


def _write_json(path, value):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(value) + "\n")
    os.rename(tmp, path)


class LocalPower(PowerProgram):
    """The power programs' work on one state directory."""

    def __init__(self, state_dir, scontrol="scontrol", out=None):
        super(LocalPower, self).__init__(scontrol, out or sys.stderr)
        self.state_dir = state_dir
        self.run_dir = os.path.join(state_dir, "run")

    def prefix(self, node):
        return self._launch(node)["reason_prefix"]

    def _paths(self, node):
        base = os.path.join(self.run_dir, "slurmd-%s" % node)
        return base + ".launch.json", base + ".proc.json"

    def _launch(self, node):
        launch_path, _record = self._paths(node)
        launch = _read_json(launch_path)
        if launch is None:
            raise PowerError("%s is not an ephemeral node of this cluster (no %s)" % (node, launch_path))
        return launch

    def _ctld(self):
        """[pid, start time] of the running slurmctld (the backend records which one a slurmd registered with)."""
        record = _read_json(os.path.join(self.run_dir, "slurmctld.proc.json"))
        return [record["pid"], record["start_time"]] if record_alive(record) else None

    def resume(self, node):
        """Start the node's slurmd unless it runs; record it as the backend does."""
        launch = self._launch(node)
        _launch_path, record_path = self._paths(node)
        if record_alive(_read_json(record_path)):
            self.say("resume %s: its slurmd runs already" % node)
            return False
        fd = os.open(launch["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "ab") as output:
            proc = subprocess.Popen(launch["argv"], stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                    env=launch["env"], cwd=launch["cwd"], close_fds=True, start_new_session=True)
        start = None
        for _attempt in range(100):
            start = proc_start_time(proc.pid)
            if start is not None or proc.poll() is not None:
                break
            time.sleep(0.01)
        record = dict(launch["record"], pid=proc.pid, start_time=start, argv=launch["argv"], ctld=self._ctld())
        _write_json(record_path, record)
        self.say("resume %s: started slurmd (pid %d)" % (node, proc.pid))
        return True

    def suspend(self, node):
        """Stop the node's slurmd (by pid and start time: only the process we recorded); drop its record."""
        self._launch(node)              # only an ephemeral node's slurmd, never one the backend keeps running
        _launch_path, record_path = self._paths(node)
        record = _read_json(record_path)
        if record_alive(record):
            pid, start = record["pid"], record["start_time"]
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_WAIT
            while proc_start_time(pid) == start and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc_start_time(pid) == start:
                os.kill(pid, signal.SIGKILL)
            self.say("suspend %s: stopped slurmd (pid %d)" % (node, pid))
        else:
            self.say("suspend %s: no slurmd of ours runs" % node)
        if record is not None:
            os.remove(record_path)
        return record is not None

    def act(self, action, hostlist, requested=None):
        called = time.time() if requested is None else requested
        if action == "resume":
            # slurmctld accepts a resumed node only once its boot time is at or after the resume request, in whole
            # seconds; `slurmd -b` reports a boot one second before it registers: so start in the next second.
            time.sleep(max(0.0, int(called) + 1.05 - time.time()))
        fd = os.open(os.path.join(self.run_dir, LOCK), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return super(LocalPower, self).act(action, hostlist, requested=called)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[1] not in ACTIONS:
        sys.stderr.write("usage: power_local.py STATE_DIR resume|suspend|resume-fail HOSTLIST\n")
        return 2
    # slurmctld runs us with signals blocked; a slurmd must not inherit that
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    state_dir, action, hostlist = argv
    log = os.path.join(state_dir, "log", "power.log")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "a") as out:
        try:
            errors = LocalPower(state_dir, out=out).act(action, hostlist)
        except (PowerError, OSError, subprocess.SubprocessError) as e:
            out.write("%s %s %s: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), action, hostlist, e))
            return 1
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
