"""module_utils/wait.py (the one bounded wait) and module_utils/files.py (no-follow reads, atomic replace)."""
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import files, wait

from waiting import FakeClock


def test_wait_until_returns_seconds_waited_on_the_injected_clock():
    clock = FakeClock()
    answers = iter([(False, "a"), (False, "b"), (True, "")])
    assert wait.wait_until(lambda: next(answers), "x", 60, poll=5, sleep=clock.sleep, clock=clock) == 10.0
    assert clock.sleeps == [5, 5]


def test_wait_until_probes_at_the_deadline_then_raises_with_the_last_text():
    clock = FakeClock()
    calls = []

    def probe():
        calls.append(clock.now)
        return False, "node cpu-%d" % len(calls)
    with pytest.raises(wait.WaitTimeout) as e:
        wait.wait_until(probe, "nodes idle", 7, poll=3, sleep=clock.sleep, clock=clock)
    assert calls == [100.0, 103.0, 106.0, 107.0]
    assert e.value.last == "node cpu-4" and "nodes idle" in str(e.value) and "after 7s" in str(e.value)


def test_wait_until_raises_the_callers_error():
    clock = FakeClock()
    with pytest.raises(KeyError) as e:
        wait.wait_until(lambda: (False, "left"), "x", 1, sleep=clock.sleep, clock=clock, timeout_error=KeyError)
    assert e.value.args == ("left",)


def test_deadline():
    clock = FakeClock()
    d = wait.Deadline(10, clock)
    clock.now += 4
    assert d.remaining() == 6 and not d.expired()
    clock.now += 6
    assert d.expired() and d.remaining() == 0


def test_read_regular(tmp_path):
    p = tmp_path / "f"
    assert files.read_regular(str(p)) is None
    p.write_bytes(b"abc")
    assert files.read_regular(str(p)) == b"abc" and files.read_text(str(p)) == "abc"
    with pytest.raises(files.UnsafeFile, match="larger"):
        files.read_regular(str(p), limit=2)
    with pytest.raises(files.UnsafeFile, match="owned by"):
        files.read_regular(str(p), owner=os.geteuid() + 1)
    os.symlink(str(p), str(tmp_path / "link"))
    with pytest.raises(files.UnsafeFile, match="symlink"):
        files.read_regular(str(tmp_path / "link"))
    os.mkfifo(str(tmp_path / "fifo"))
    with pytest.raises(files.UnsafeFile, match="not a regular file"):
        files.read_regular(str(tmp_path / "fifo"))


def test_atomic_write_replaces_a_symlink_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(str(victim), str(tmp_path / "conf"))
    files.atomic_write(str(tmp_path / "conf"), "new", 0o600)
    assert victim.read_text() == "keep"
    assert not os.path.islink(str(tmp_path / "conf")) and (tmp_path / "conf").read_text() == "new"
    assert oct(os.stat(str(tmp_path / "conf")).st_mode & 0o777) == oct(0o600)
    assert sorted(os.listdir(str(tmp_path))) == ["conf", "victim"]
