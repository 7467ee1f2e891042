"""local/processes.py Daemons on its own (no LocalCluster, no Slurm): what a ResumeProgram/SuspendProgram will use to
start and stop one node's process. A process is known by its record (pid + start time): started, kept while its
digest is the same, restarted when it changes, stopped and verified gone; a record whose start time is not the
process's (a reused pid) is never signalled."""
import json
import os
import shutil
import subprocess

import pytest
from waiting import wait_for

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import (
    Daemons, _pid_alive, _proc_start_time)

SLEEP = shutil.which("sleep")


@pytest.fixture
def daemons(tmp_path):
    lay = Layout(str(tmp_path))
    for path in (lay.run, lay.log):
        os.mkdir(path)
    found = Daemons(lay, timeout=10, env={"SLURM_CONF": lay.slurm_conf})
    yield found
    for name in list(found.records()):
        found.stop(name)


def test_a_process_is_started_kept_restarted_and_stopped_by_its_record(daemons):
    changes = []
    assert daemons.ensure("sleeper", [SLEEP, "300"], changes, digest="a", ready=None, ports=())
    first = daemons.pid("sleeper")
    assert first is not None and _pid_alive(first)
    record = daemons.records()["sleeper"]
    assert record["start_time"] == _proc_start_time(first) and record["digest"] == "a"
    assert not daemons.ensure("sleeper", [SLEEP, "300"], changes, digest="a", ready=None, ports=())
    assert daemons.pid("sleeper") == first
    assert daemons.ensure("sleeper", [SLEEP, "300"], changes, digest="b", ready=None, ports=())
    second = daemons.pid("sleeper")
    assert second != first and not _pid_alive(first)
    assert changes == ["started sleeper", "restarted sleeper (configuration changed)"]
    assert daemons.stop("sleeper") and not _pid_alive(second)
    assert "sleeper" not in daemons.records() and not daemons.stop("sleeper")
    assert daemons.leftover_processes() == []


def test_a_record_with_another_start_time_is_never_signalled(daemons):
    other = subprocess.Popen([SLEEP, "300"])
    try:
        start = None
        while start is None:
            start = _proc_start_time(other.pid)
        record = {"pid": other.pid, "start_time": start + 1, "argv": [SLEEP, "300"], "digest": "a"}
        with open(daemons.layout.record("stranger"), "w") as f:
            json.dump(record, f)
        assert daemons.pid("stranger") is None and daemons.leftover_processes() == []
        assert not daemons.send_signal("stranger", 15)
        assert not daemons.stop("stranger")            # its record goes, the process is not ours
        assert "stranger" not in daemons.records()
        assert other.poll() is None and _pid_alive(other.pid, start)
    finally:
        other.kill()
        other.wait(10)


def test_one_daemon_is_looked_up_by_its_own_record_only(daemons, monkeypatch):
    # issue 32: ensure/pid/running of one daemon read that daemon's record file, not all of them (a backend run
    # over N slurmd read N records per node: N * N file reads)
    from ansible_collections.soperator.slurm.plugins.module_utils.local import processes
    for i in range(50):
        with open(daemons.layout.record("slurmd-n-%d" % i), "w") as f:
            json.dump({"pid": 1, "start_time": 0, "argv": [SLEEP, "300"], "digest": "a"}, f)
    changes = []
    assert daemons.ensure("sleeper", [SLEEP, "300"], changes, digest="a", ready=None, ports=())
    read = []
    real = processes._read_own_file
    monkeypatch.setattr(processes, "_read_own_file", lambda path, *a, **k: read.append(path) or real(path, *a, **k))
    assert not daemons.ensure("sleeper", [SLEEP, "300"], changes, digest="a", ready=None, ports=())
    assert daemons.running("sleeper") and daemons.pid("slurmd-n-7") is None and not daemons.running("absent")
    assert set(read) <= {daemons.layout.record("sleeper"), daemons.layout.record("slurmd-n-7"),
                         daemons.layout.record("absent")}
    assert len(daemons.records()) == 51        # the listing still reads every record


def test_a_start_without_settle_does_not_wait_and_leaves_the_check_to_the_caller(daemons, monkeypatch):
    # issue 32: the backend started N slurmd with a 0.05 s wait each (12.8 s of 256); they are started without it
    # and the backend waits for all of them at once (a slurmd that exited is reported there, with its log)
    from ansible_collections.soperator.slurm.plugins.module_utils.local import processes
    from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
    false = shutil.which("false")
    with pytest.raises(LocalClusterError, match="exited at once"):
        daemons.ensure("quitter", [false], [], digest="a", ready=None, ports=())
    slept = []
    monkeypatch.setattr(processes.time, "sleep", slept.append)
    for i in range(5):
        assert daemons.ensure("sleeper-%d" % i, [SLEEP, "300"], [], digest="a", ready=None, ports=(), settle=False)
    assert daemons.ensure("quitter", [false], [], digest="b", ready=None, ports=(), settle=False)
    assert slept == []
    assert all(daemons.running("sleeper-%d" % i) for i in range(5))
    monkeypatch.undo()
    wait_for(lambda: not daemons.running("quitter"), "the quitter to be gone", 10, poll=0.05)
