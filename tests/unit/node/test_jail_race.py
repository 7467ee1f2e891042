"""Populates of one jail at a time (issue 35, defect 2): two real populates at once, and a jail that changes under a
populate's fill.

The race: two processes run the populate Job's program (node/jail.py main(), as the Job runs it) on one empty jail,
overwrite=never, each from its own tarball. To make them meet every time, each process's fill waits (at most 60 s)
until the other one has also come as far as its fill, or is waiting for the jail's lock, or has ended - a hook on
the program's own functions, nothing else changed. Before the lock, both decided "empty", both reported populated,
and the slower one's swap deleted what the first one had populated. Now one populates and the other, deciding again
under the lock, finds the sentinel: it reports unchanged, with that sentinel, and the jail holds the first one's
root filesystem."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as j
import tar_helpers
from repo_root import ROOT

NODE = os.path.join(ROOT, "plugins", "module_utils", "node")

RACER = r'''
import fcntl, os, sys, time
sys.path.insert(0, sys.argv[1])
import jail

me, other = sys.argv[2], sys.argv[3]


def mark(what):
    open("%s.%s" % (me, what), "w").close()


def meet():
    end = time.monotonic() + 60
    while time.monotonic() < end and not any(os.path.exists("%s.%s" % (other, what))
                                             for what in ("filling", "waiting", "done")):
        time.sleep(0.02)


real_fill, real_flock = jail.fill, fcntl.flock


def fill(*args, **kwargs):
    mark("filling")
    meet()
    return real_fill(*args, **kwargs)


def flock(fd, op):
    try:
        return real_flock(fd, op)
    except BlockingIOError:
        mark("waiting")
        raise


jail.fill, fcntl.flock = fill, flock
try:
    rc = jail.main(sys.argv[4:])
finally:
    mark("done")
sys.exit(rc)
'''


def _rootfs(path, marker):
    info = tarfile.TarInfo("etc/marker")
    info.mode = 0o644
    return tar_helpers.make_tar(path, [(info, marker.encode())])


def _listing(jail):
    return sorted(os.listdir(jail))


def test_two_populates_at_once_one_populates_the_other_finds_it(tmp_path):
    racer = tmp_path / "racer.py"
    racer.write_text(RACER)
    jail = str(tmp_path / "jail")
    sources = {"a": _rootfs(tmp_path / "a.tar", "a\n"), "b": _rootfs(tmp_path / "b.tar", "b\n")}
    procs = {}
    for me, other in (("a", "b"), ("b", "a")):
        procs[me] = subprocess.Popen(
            [sys.executable, str(racer), NODE, str(tmp_path / me), str(tmp_path / other), "populate", "--source",
             sources[me], "--jail", jail, "--overwrite", "never", "--label", me],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    results = {}
    for me, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results[me] = json.loads(out.splitlines()[-1])
    actions = sorted(r["action"] for r in results.values())
    assert actions == [j.POPULATED, j.UNCHANGED], results
    winner = [me for me, r in results.items() if r["action"] == j.POPULATED][0]
    loser = [me for me in results if me != winner][0]
    sentinel = j.read_sentinel(jail)
    # the one that says it populated the jail did, and its content is there; the other reports what it found
    assert sentinel == results[winner]["sentinel"] and sentinel["source"] == winner
    assert results[loser]["changed"] is False and results[loser]["sentinel"] == sentinel
    with open(os.path.join(jail, "etc", "marker")) as f:
        assert f.read() == winner + "\n"
    assert _listing(jail) == sorted(["etc", j.SENTINEL])        # no staging, old contents or lock left


def _populate_while(monkeypatch, during):
    """Run `during(jail)` inside the fill, after the populate decided, before its swap."""
    real_fill = j.fill

    def fill(jail, *args, **kwargs):
        during(jail)
        return real_fill(jail, *args, **kwargs)
    monkeypatch.setattr(j, "fill", fill)


@pytest.mark.parametrize("overwrite, action", [("never", j.REFUSED), ("if_empty", j.UNCHANGED)])
def test_a_jail_filled_by_someone_else_during_the_fill_is_not_overwritten(tmp_path, monkeypatch, overwrite, action):
    jail = str(tmp_path / "jail")
    os.mkdir(jail)
    source = _rootfs(tmp_path / "a.tar", "a\n")

    def someone_writes(path):
        with open(os.path.join(path, "theirs"), "w") as f:
            f.write("keep me\n")
    _populate_while(monkeypatch, someone_writes)
    result = j.populate(jail, source, overwrite)
    assert result["action"] == action and result["changed"] is False, result
    assert _listing(jail) == ["theirs"] and j.read_sentinel(jail) is None


def test_the_in_use_check_is_made_again_right_before_the_swap(tmp_path, monkeypatch):
    """overwrite=always: a guard (the in-use check: jail_use's running clusters) that says yes when the populate
    starts and no once it is ready to swap leaves the populated jail as it was."""
    jail = str(tmp_path / "jail")
    assert j.populate(jail, _rootfs(tmp_path / "a.tar", "a\n"))["action"] == j.POPULATED
    before = j.read_sentinel(jail)
    answers = []

    def guard(action):
        answers.append(action)
        return "in use now" if len(answers) > 2 else None
    result = j.populate(jail, _rootfs(tmp_path / "b.tar", "b\n"), "always", guard=guard)
    assert result["action"] == j.REFUSED and result["message"] == "in use now", result
    assert answers == [j.REPLACED] * 3     # first look, under the lock, right before the swap
    assert j.read_sentinel(jail) == before and _listing(jail) == sorted(["etc", j.SENTINEL])
    with open(os.path.join(jail, "etc", "marker")) as f:
        assert f.read() == "a\n"


@pytest.mark.parametrize("plant, expect", [
    (lambda path, victim: os.symlink(victim, path), r"lock .* cannot be opened \(it is a symlink\)"),
    (lambda path, victim: os.mkfifo(path), r"lock .* is not a regular file"),
], ids=["symlink", "fifo"])
def test_a_planted_lock_is_refused_not_followed(tmp_path, plant, expect):
    victim = tmp_path / "victim"
    victim.write_text("host\n")
    jail = tmp_path / "jail"
    jail.mkdir()
    plant(str(jail / j.LOCK), str(victim))
    with pytest.raises(j.JailError, match=expect):
        j.populate(str(jail), _rootfs(tmp_path / "a.tar", "a\n"))
    assert victim.read_text() == "host\n" and _listing(str(jail)) == [j.LOCK]
