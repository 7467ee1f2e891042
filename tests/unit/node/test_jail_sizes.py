"""Archive headers that lie about sizes, offsets and counts (issue 35, defect 1), as root on a small filesystem of
their own (a 64 MiB tmpfs mounted for each test and unmounted after it).

Each archive runs four ways, as test_jail_hostile.py runs its corpus (run_four_ways): check mode and the real run
through populate(), and the same two through the populate Job's program (`python3 jail.py populate ...`). Around
every run the victim tree beside the jails must not change, and neither may the small filesystem's usage (free
blocks and inodes): a header whose numbers cannot be right is refused, naming the archive's member, before anything
is written - never a populate that reads forever, fills the filesystem, or ends in a raw ValueError or EOFError.
The in-process runs are bounded by an alarm (the code before the fix read some of these archives forever)."""
import contextlib
import fcntl
import gzip
import os
import shutil
import signal
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as j
from ansible_collections.soperator.slurm.plugins.module_utils.node import safe_tree
from ansible_collections.soperator.slurm.plugins.module_utils.node import tree_reader
import tar_helpers
import test_jail_hostile as hostile

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs and populates as root")

SMALL = 64 << 20
BIG = 80 << 20          # more than SMALL holds
BOUND = 120             # seconds any one in-process run may take here


class _Hung(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds=BOUND):
    def alarm(signum, frame):
        raise _Hung("still running after %ds: it reads forever" % seconds)
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def small(tmp_path):
    """A 64 MiB tmpfs holding the victim tree and the jails -> the world's host directory."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0755" % SMALL, "tmpfs", str(mount)], check=True,
                   timeout=60)
    try:
        host = hostile.make_world(mount)
        hostile.VICTIM = str(host / "victim")
        yield host
    finally:
        subprocess.run(["umount", str(mount)], check=True, timeout=60)


def usage(path):
    vfs = os.statvfs(str(path))
    return vfs.f_bfree, vfs.f_ffree


def refused_four_ways(host, archive, expect):
    before = usage(host)
    with bounded():
        hostile.run_four_ways(host, archive, expect)
    assert usage(host) == before, "the small filesystem's usage changed"
    for jail in ("jail-api", "jail-job"):
        assert os.listdir(str(host / jail)) == []


# --- archives ---------------------------------------------------------------------------------------------------

F = hostile.F


def _tar(tmp_path, name, members, fmt=tarfile.PAX_FORMAT, compression=""):
    return tar_helpers.make_tar(tmp_path / name, members, fmt, compression)


def _gzip(path):
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as out:
        shutil.copyfileobj(f, out)
    return path + ".gz"


def _patched(tmp_path, name, members, member, field, value, fmt=tarfile.GNU_FORMAT):
    path = _tar(tmp_path, name, members, fmt)
    tar_helpers.set_number(path, tar_helpers.header_offsets(path)[member], field, value)
    return path


def _truncated(tmp_path, name, keep):
    whole = _tar(tmp_path, name, [F("a", b"a" * 100000), F("b", b"b" * 100)], compression="gz")
    with open(whole, "rb") as f:
        data = f.read()
    with open(whole, "wb") as f:
        f.write(data[:keep(len(data))])
    return whole


def _back_to_its_own_header(tmp_path, compress):
    # 'a' after 'z': its PAX header starts 1536 bytes before its data, so size=-1536 points the reader there again
    path = _tar(tmp_path, "loop.tar", [F("z"), F("a", b"x" * 10, pax_headers={"size": "-1536"})])
    return _gzip(path) if compress else path


CASES = [
    ("pax-size-back-to-its-own-header", lambda t: _back_to_its_own_header(t, False),
     r"cannot be read: member 'a': its size is -1536"),
    ("pax-size-back-to-its-own-header-gz", lambda t: _back_to_its_own_header(t, True),
     r"cannot be read: member 'a': its size is -1536"),
    ("negative-base256-size",
     lambda t: _patched(t, "b256.tar", [F("a", b"a" * 100), F("b", b"b" * 600)], "b", tar_helpers.SIZE_FIELD, -1024),
     r"member 'b': its header's size is negative \(-1024\)"),
    # a negative size that does not move the reader (a sparse member's, applied after the offset) once took its
    # bytes off the free-space total: 80 MiB of zeros then filled the 64 MiB filesystem
    ("negative-sparse-size-hides-a-big-member-gz", lambda t: _tar(t, "hide.tar.gz", [
        F("neg", b"", pax_headers={"GNU.sparse.size": str(-BIG), "GNU.sparse.map": "0,0"}),
        F("big", bytes(BIG))], compression="gz"),
     r"member 'neg': its size is -%d" % BIG),
    ("pax-size-past-the-archive",
     lambda t: _tar(t, "huge.tar", [F("a", b"x" * 10, pax_headers={"size": str(10 ** 30)})]),
     r"member 'a': its data \(\d+ bytes from byte 1536\) runs past the end of the archive \(10240 bytes\)"),
    ("pax-size-past-the-free-space-gz", lambda t: _tar(t, "huge.tar.gz", [
        F("a", b"x" * 10, pax_headers={"size": str(2 ** 63)})], compression="gz"),
     r"member 'a': the archive holds more than the jail's filesystem has free"),
    ("sparse-map-past-the-file", lambda t: _tar(t, "map.tar", [
        F("s", b"abc", pax_headers={"GNU.sparse.map": "0,3,100,3", "GNU.sparse.size": "10"})]),
     r"member 's': its sparse map reaches byte 103 of a 10-byte file"),
    ("sparse-map-negative", lambda t: _tar(t, "mapneg.tar", [
        F("s", b"abc", pax_headers={"GNU.sparse.map": "0,3,-5,3", "GNU.sparse.size": "10"})]),
     r"member 's': a negative number in its sparse map"),
    ("gnu-long-name-of-a-terabyte-gz",
     lambda t: _gzip(_patched(t, "long.tar", [F("n" * 200)], "n" * 200, tar_helpers.SIZE_FIELD, 1 << 40)),
     r"an extended header of 1099511627776 bytes"),
    ("truncated-gz-in-the-first-header", lambda t: _truncated(t, "head.tar.gz", lambda n: 30),
     r"the archive \S+ cannot be read: Compressed file ended"),
    ("truncated-gz-after-a-member", lambda t: _truncated(t, "cut.tar.gz", lambda n: n // 2),
     r"the archive \S+ cannot be read after member 'a': Compressed file ended"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_header_that_lies_is_refused_naming_the_member_and_nothing_changes(small, tmp_path, case):
    unused_name, build, expect = case
    refused_four_ways(small, build(tmp_path), expect)


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the old GNU sparse header")
def test_an_old_gnu_sparse_header_with_a_negative_real_size_is_refused(small, tmp_path):
    source = tmp_path / "sparse-src"
    source.mkdir()
    with open(str(source / "s"), "wb") as f:
        f.write(b"head")
        f.truncate(1 << 20)
    path = str(tmp_path / "sparse.tar")
    subprocess.run(["tar", "--sparse", "--format=gnu", "-C", str(source), "-cf", path, "s"], check=True,
                   timeout=60)
    tar_helpers.set_number(path, tar_helpers.header_offsets(path)["s"], tar_helpers.GNU_SPARSE_REALSIZE, -BIG)
    refused_four_ways(small, path, r"member 's': a negative number in its sparse map")


def test_the_same_archive_without_the_lying_member_is_refused_up_front_for_its_size(small, tmp_path):
    """What the negative size hid: 80 MiB does not fit in 64 MiB, said before anything is written."""
    archive = _tar(tmp_path, "big.tar.gz", [F("big", bytes(BIG))], compression="gz")
    refused_four_ways(small, archive, r"the archive holds more than the jail's filesystem has free|needs .* free")


# --- the time bound ---------------------------------------------------------------------------------------------

def test_a_populate_that_cannot_get_the_jails_lock_stops_at_its_timeout(small, tmp_path):
    """The time bound covers the wait for another populate: one holds the lock (here the test), the next gives up at
    its timeout, in process and in the Job's program, leaving the jail as it was."""
    archive = _tar(tmp_path, "ok.tar", [F("etc/os-release", b"ID=jail\n")])
    jail = small / "jail-api"
    fd = os.open(str(jail / j.LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with bounded():
            with pytest.raises(j.JailError, match=r"did not finish within its timeout of 1s, waiting for another "
                                                  r"populate of jail .*; its contents were left as they were"):
                j.populate(str(jail), archive, "never", timeout=1)
        proc = subprocess.run([sys.executable, hostile.JAIL_PY, "populate", "--source", archive, "--jail",
                               str(jail), "--timeout", "1"], capture_output=True, text=True, timeout=BOUND,
                              check=False)
        assert proc.returncode == 1 and "did not finish within its timeout of 1s" in proc.stderr, proc.stderr
        assert sorted(os.listdir(str(jail))) == [j.LOCK]
    finally:
        os.close(fd)


def test_the_deadline_stops_a_scan_and_a_write_between_two_steps(tmp_path):
    """Each read of the archive, each member and each block of a file is a step: a deadline passed stops the next
    one (a clock that moves one second per look)."""
    archive = _tar(tmp_path, "many.tar", [F("f%d" % i, b"x" * (3 << 20)) for i in range(10)])
    ticks = iter(range(10 ** 6))
    writer = safe_tree.Writer(deadline=safe_tree.Deadline(12, clock=lambda: next(ticks)))
    with pytest.raises(safe_tree.TimedOut, match="did not finish within its timeout of 12s"):
        tree_reader.read_into(writer, "tar", archive)
    assert 0 < writer.entries < 10
    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(str(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        ticks = iter(range(10 ** 6))
        writer = safe_tree.Writer(fd, deadline=safe_tree.Deadline(12, clock=lambda: next(ticks)))
        with pytest.raises(safe_tree.TimedOut):
            tree_reader.read_into(writer, "tar", archive)
    finally:
        os.close(fd)
    written = sum(os.path.getsize(str(root / name)) for name in os.listdir(str(root)))
    assert written < 10 * (3 << 20)


def test_the_program_refuses_a_negative_timeout(tmp_path):
    archive = _tar(tmp_path, "ok.tar", [F("f")])
    proc = subprocess.run([sys.executable, hostile.JAIL_PY, "populate", "--source", archive, "--jail",
                           str(tmp_path / "jail"), "--timeout", "-1"], capture_output=True, text=True, timeout=BOUND,
                          check=False)
    assert proc.returncode == 1 and "--timeout must be >= 0" in proc.stderr, proc.stderr
    assert not os.path.exists(str(tmp_path / "jail"))


def _sparse_map_of_a_billion_regions(tmp_path):
    """A GNU sparse 1.0 member whose map - read by tarfile number by number from the member's data - claims 10**8
    regions, followed by a megabyte of numbers while its header says 512 bytes: tarfile reads on for them."""
    pax = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "10"}
    path = _tar(tmp_path, "map10.tar", [F("s", b"100000000\n" + b"0\n" * 500000, pax_headers=pax)])
    with open(path, "rb") as f:
        data = f.read()
    header = [at for at in range(0, len(data), 512)
              if data[at:at + 2] == b"s\0" and data[at + 257:at + 262] == b"ustar"]
    tar_helpers.set_number(path, header[0], tar_helpers.SIZE_FIELD, 512)
    return path


def test_tarfiles_own_read_loops_stop_at_the_deadline_and_the_limit(tmp_path):
    """Every read tarfile makes goes through the deadline and the free-space limit, inside its own loops too."""
    archive = _sparse_map_of_a_billion_regions(tmp_path)
    ticks = iter(range(10 ** 6))
    writer = safe_tree.Writer(deadline=safe_tree.Deadline(100, clock=lambda: next(ticks)))
    with pytest.raises(safe_tree.TimedOut, match="did not finish within its timeout of 100s"):
        tree_reader.read_into(writer, "tar", archive)
    assert next(ticks) < 200            # stopped at the deadline, not at the end of the archive
    with pytest.raises(safe_tree.JailError, match=r"the archive \S+ cannot be read: the archive holds more than the "
                                                  r"jail's filesystem has free \(100000 bytes\)"):
        tree_reader.read_into(safe_tree.Writer(), "tar", archive, limit=100000)
