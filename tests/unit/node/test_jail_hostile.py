"""Hostile root filesystems against jail.populate, as root (owners and setuid bits are applied).

Every archive of the corpus below is built here with tarfile (or GNU tar, for sparse files) and run four ways: check
mode and the real run through populate(), and the same two through the populate Job's program
(`python3 jail.py populate ...` as a subprocess). Around every run a victim tree outside the jail - regular, setuid,
foreign-owned and hard-linked files, a directory, a symlink, a fifo - and the jail's parent directory are
snapshotted (bytes, mode, owner, mtime, ctime, link count, the listing): nothing may change. An archive either
populates the jail or is refused with a JailError naming the member, and then nothing at all is written; check mode
predicts which, and writes nothing either way."""
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as j
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail_source
from ansible_collections.soperator.slurm.plugins.module_utils.node import safe_tree
import tar_helpers
from repo_root import ROOT

JAIL_PY = os.path.join(ROOT, "plugins", "module_utils", "node", "jail.py")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the corpus must run as root: chown and setuid paths")

# the victim tree lives at a fixed place below the test's directory; archives name it by its absolute path
VICTIM = None


# --- archives --------------------------------------------------------------------------------------------------

def _info(name, kind, mode=0o644, uid=0, gid=0, **kw):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, 1600000000
    for key, value in kw.items():
        setattr(info, key, value)
    return info


def D(name, mode=0o755, uid=0, gid=0):
    return _info(name, tarfile.DIRTYPE, mode, uid, gid), None


def F(name, data=b"jail file\n", mode=0o644, uid=0, gid=0, kind=tarfile.REGTYPE, **kw):
    return _info(name, kind, mode, uid, gid, **kw), data


def S(name, target, uid=0):
    return _info(name, tarfile.SYMTYPE, 0o777, uid, uid, linkname=target), None


def H(name, target):
    return _info(name, tarfile.LNKTYPE, 0o644, linkname=target), None


def P(name, mode=0o644, uid=0):
    return _info(name, tarfile.FIFOTYPE, mode, uid, uid), None


def C(name, major=1, minor=3):
    return _info(name, tarfile.CHRTYPE, 0o666, devmajor=major, devminor=minor), None


def B(name, major=8, minor=0):
    return _info(name, tarfile.BLKTYPE, 0o660, devmajor=major, devminor=minor), None


def make_tar(path, members, fmt=tarfile.GNU_FORMAT):
    return tar_helpers.make_tar(path, members, fmt)


def v(*parts):
    """An absolute path in the victim tree."""
    return os.path.join(VICTIM, *parts)


CHAIN = [S("l%d" % i, "l%d" % (i + 1)) for i in range(40)]


def corpus():
    """(id, members, None for a safe populate or a regex of the JailError that must name the member, format)."""
    pax = tarfile.PAX_FORMAT
    return [
        # the same name twice, with different types
        ("dir-6777-then-symlink-to-host-file", lambda: [D("d", 0o6777, 1234, 1234), S("d", v("secret"))], None),
        ("dir-then-symlink-to-host-dir", lambda: [D("d", 0o777, 1234), S("d", v("dir"))], None),
        ("dir-then-relative-symlink-out", lambda: [D("d", 0o6777), S("d", "../victim/secret")], None),
        ("dir-with-content-then-symlink-then-member", lambda: [D("d"), F("d/x"), S("d", v()), F("d/y")],
         r"unsafe member 'd/y': d is a symlink, not a directory"),
        ("dir-then-symlink-then-dir-again", lambda: [D("d", 0o6777), S("d", v()), D("d", 0o755)], None),
        ("nested-dirs-then-parent-symlink", lambda: [D("a", 0o700), D("a/b", 0o4777), S("a", v("dir"))], None),
        ("symlink-then-dir", lambda: [S("d", v("dir")), D("d", 0o6777, 1234)], None),
        ("symlink-then-file", lambda: [S("f", v("secret")), F("f", b"pwn\n", 0o4777)], None),
        ("symlink-then-fifo", lambda: [S("p", v("pipe")), P("p", 0o666)], None),
        ("symlink-to-host-file-then-fifo", lambda: [S("p", v("secret")), P("p", 0o4777)], None),
        ("file-then-dir", lambda: [F("x", mode=0o4755), D("x", 0o700)], None),
        ("dir-then-file", lambda: [D("x", 0o6777), F("x/a"), F("x", b"file now\n")], None),
        ("file-then-symlink", lambda: [F("x", mode=0o4755), S("x", v("secret"))], None),
        ("fifo-then-dir-then-symlink", lambda: [P("x"), D("x", 0o777), S("x", v("owned"))], None),
        ("hardlink-to-a-name-later-a-symlink", lambda: [F("f", b"x", 0o4755), H("h", "f"), S("f", v("secret"))],
         None),
        ("hardlink-to-itself", lambda: [F("f"), H("f", "f"), H("./f", "/f")], None),
        ("hardlink-replaced-by-dir", lambda: [F("f"), H("h", "f"), D("h", 0o6777), S("h", v("dir"))], None),
        # through links: every member type below a symlink, relative and absolute targets
        ("file-through-absolute-symlink", lambda: [S("esc", v()), F("esc/pwned")],
         r"unsafe member 'esc/pwned': esc is a symlink"),
        ("file-through-relative-symlink", lambda: [S("esc", "../victim"), F("esc/secret", b"pwn")],
         r"unsafe member 'esc/secret': esc is a symlink"),
        ("dir-through-symlink", lambda: [S("esc", v()), D("esc/dir", 0o6777)],
         r"unsafe member 'esc/dir': esc is a symlink"),
        ("symlink-through-symlink", lambda: [S("esc", v()), S("esc/link", "/")],
         r"unsafe member 'esc/link': esc is a symlink"),
        ("fifo-through-symlink", lambda: [S("esc", v()), P("esc/pipe")],
         r"unsafe member 'esc/pipe': esc is a symlink"),
        ("hardlink-name-through-symlink", lambda: [S("esc", v()), F("f"), H("esc/h", "f")],
         r"unsafe member 'esc/h': esc is a symlink"),
        ("hardlink-source-through-symlink", lambda: [S("esc", v()), H("h", "esc/secret")],
         r"unsafe member 'h': esc is a symlink"),
        ("deep-parent-symlink", lambda: [D("a"), S("a/b", v("dir")), D("a/b/c", 0o777)],
         r"unsafe member 'a/b/c': a/b is a symlink"),
        ("through-a-file", lambda: [F("f"), F("f/x")], r"unsafe member 'f/x': f is a file, not a directory"),
        ("through-a-fifo", lambda: [P("p"), D("p/x")], r"unsafe member 'p/x': p is a fifo, not a directory"),
        ("long-symlink-chain-then-through-it", lambda: CHAIN + [S("l40", v()), F("l0/secret", b"pwn")],
         r"unsafe member 'l0/secret': l0 is a symlink"),
        ("long-symlink-chain-then-dir-over-it", lambda: CHAIN + [S("l40", v("secret")), D("l0", 0o6777)], None),
        ("symlink-loop", lambda: [S("a", "b"), S("b", "a"), F("a/x")], r"unsafe member 'a/x': a is a symlink"),
        # hard links out of the jail, to what is not a file, to what is not there yet
        ("hardlink-absolute-host-path", lambda: [H("h", v("secret"))],
         r"member 'h' refers to tmp|member 'h' links to"),
        ("hardlink-dotdot", lambda: [H("h", "../victim/secret")],
         r"unsafe member 'h': '..' in its link target"),
        ("hardlink-to-symlink", lambda: [S("s", v("secret")), H("h", "s")],
         r"unsafe member 'h': a hard link to 's', which is a symlink, not a regular file"),
        ("hardlink-to-dir", lambda: [D("d"), H("h", "d")], r"unsafe member 'h': a hard link to 'd', which is a dir"),
        ("hardlink-to-fifo", lambda: [P("p"), H("h", "p")], r"unsafe member 'h': a hard link to 'p', which is a fifo"),
        ("hardlink-to-a-file-now-a-symlink", lambda: [F("f"), S("f", v("secret")), H("h", "f")],
         r"unsafe member 'h': a hard link to 'f', which is a symlink"),
        ("hardlink-before-its-target", lambda: [H("h", "f"), F("f")], r"member 'h' links to 'f', which the archive"),
        ("hardlink-replacing-its-own-directory", lambda: [D("d"), F("d/f"), H("d", "d/f")],
         r"unsafe member 'd': a hard link that would replace the directory"),
        ("hardlink-to-the-root", lambda: [H("h", "./")], r"unsafe member 'h': a hard link to the jail's root"),
        ("hardlink-to-sentinel", lambda: [H("h", j.SENTINEL)], r"member 'h' links to '.soperator-jail.json'"),
        # names: '..', the leading '/', the root itself
        ("dotdot", lambda: [F("../pwned")], r"unsafe member '../pwned': '..' in its path"),
        ("dotdot-inside", lambda: [D("a"), F("a/../../victim/secret", b"pwn")], r"'\.\.' in its path"),
        ("absolute-name-of-a-host-file", lambda: [F(v("secret"), b"pwn\n", 0o4777)], None),
        ("absolute-dir-name-of-host-dir", lambda: [D(v("dir"), 0o6777, 1234)], None),
        ("root-dir-member-is-ignored", lambda: [D("./", 0o6777, 1234, 1234), D("/", 0o777)], None),
        ("root-as-symlink", lambda: [S(".", v())], r"unsafe member '\.': a symlink as the jail's root"),
        ("root-as-symlink-slash", lambda: [S("/", v())], r"unsafe member '/': a symlink as the jail's root"),
        ("root-as-file", lambda: [F(".")], r"unsafe member '\.': a file as the jail's root"),
        ("root-as-fifo", lambda: [P("./")], r"unsafe member '\./': a fifo as the jail's root"),
        ("deep-chain-ok", lambda: [F("/".join(["d"] * 200) + "/f")], None),
        ("deep-chain-too-deep", lambda: [F("/".join(["d"] * 300))], r"deeper than 256 directories"),
        ("name-too-long", lambda: [F("x" * 300)], r"a name longer than 255 bytes"),
        ("long-gnu-names", lambda: [D("a" * 120), F("a" * 120 + "/" + "b" * 200), S("c" * 150, "d" * 3000)], None),
        ("nul-in-pax-name", lambda: [F("x", pax_headers={"path": "a\x00b"})], r"a NUL byte", pax),
        ("empty-symlink-target", lambda: [S("e", "")], r"unsafe member 'e': a symlink to ''"),
        ("symlink-target-too-long", lambda: [S("e", "t" * 5000)], r"unsafe member 'e': a symlink to", pax),
        # every member type
        ("every-member-type", lambda: [
            D("dir", 0o1777), F("reg"), F("areg", kind=tarfile.AREGTYPE), F("cont", kind=tarfile.CONTTYPE),
            H("hard", "reg"), S("sym", v("secret")), P("fifo"), C("chr"), B("blk"),
            F("vol", b"label", kind=b"V"), F("dump", b"", kind=b"D"), F("unknown", b"zz", kind=b"Z")], None),
        ("devices-below-symlinks", lambda: [S("dev", v()), C("dev/null"), B("dev/secret")], None),
        ("owners-and-setuid", lambda: [
            D("home/alice", 0o700, 1234, 2345), F("home/alice/.profile", b"A=1\n", 0o600, 1234, 2345),
            F("usr/bin/su", b"#!/bin/sh\n", 0o4755), F("usr/bin/wall", b"#!/bin/sh\n", 0o2755, 0, 5),
            D("tmp", 0o1777), D("usr/bin", 0o755)], None),
        # values no system call takes
        ("uid-out-of-range", lambda: [F("f", uid=2 ** 40)], r"unsafe member 'f': uid 1099511627776 is out of range"),
        ("gid-minus-one", lambda: [F("f", gid=2 ** 32 - 1)], r"unsafe member 'f': gid 4294967295 is out of range"),
        ("mtime-nan", lambda: [F("f", pax_headers={"mtime": "nan"})], r"unsafe member 'f': mtime nan", pax),
        ("mtime-huge", lambda: [(_info("d", tarfile.DIRTYPE, pax_headers={"mtime": "1e30"}), None)],
         r"unsafe member 'd': mtime", pax),
        # our own names inside the archive are never moved into the jail
        ("sentinel-names-as-symlinks", lambda: [
            S(j.SENTINEL, v("secret")), S(j.SENTINEL_TMP, v("secret")), S("lost+found", v("dir")),
            S(j.STAGING_PREFIX + "x", v("dir")), D(j.TRASH_PREFIX + "y"), S(j.TRASH_PREFIX + "y/z", v())], None),
        ("sentinel-tmp-as-hardlink-and-fifo", lambda: [F("f"), H(j.SENTINEL_TMP, "f"), P(j.SENTINEL)], None),
    ]


CASES = corpus()


def _case_id(case):
    return case[0]


# --- the victim, and what "nothing changed" means ------------------------------------------------------------------

def make_world(tmp_path):
    """host/ holds the victim tree and the jails; archives live beside it."""
    host = tmp_path / "host"
    victim = host / "victim"
    (victim / "dir" / "sub").mkdir(parents=True)
    for name, data, mode, owner in (("secret", b"host secret\n", 0o640, (0, 0)),
                                    ("tool", b"#!/bin/sh\n", 0o755, (0, 0)),
                                    ("owned", b"someone's\n", 0o600, (4321, 4321)),
                                    ("dir/inner", b"inner\n", 0o644, (0, 0)),
                                    ("dir/sub/deep", b"deep\n", 0o444, (99, 99))):
        (victim / name).write_bytes(data)
        os.chown(str(victim / name), *owner)
        os.chmod(str(victim / name), mode)
    os.link(str(victim / "secret"), str(victim / "secret-link"))
    os.symlink("secret", str(victim / "link"))
    os.mkfifo(str(victim / "pipe"), 0o600)
    for jail in ("jail-api", "jail-job"):
        (host / jail).mkdir(mode=0o755)
    os.utime(str(host), (1500000000, 1500000000))
    return host


def snapshot(host):
    """Everything below host except the jails' contents (of the jails themselves: owner and mode)."""
    state = {}
    for current, dirnames, filenames in os.walk(str(host)):
        rel = os.path.relpath(current, str(host))
        if rel.split(os.sep)[0].startswith("jail-"):
            st = os.lstat(current)
            state[rel] = ("jail", st.st_mode, st.st_uid, st.st_gid)
            dirnames[:] = []
            continue
        st = os.lstat(current)
        state[rel] = ("dir", st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ctime_ns,
                      sorted(dirnames + filenames))
        for name in filenames:
            path = os.path.join(current, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    content = f.read()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            else:
                content = None
            rel = os.path.relpath(path, str(host))
            state[rel] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns,
                          content)
    return state


def _listing(path):
    return sorted(os.listdir(path))


def _program(source, jail, check=False, overwrite="never"):
    argv = [sys.executable, JAIL_PY, "populate", "--source", source, "--jail", jail, "--overwrite", overwrite]
    proc = subprocess.run(argv + (["--check"] if check else []), capture_output=True, text=True, timeout=120,
                          check=False)
    return proc


def _victim_inodes(host):
    found = set()
    for current, dirnames, filenames in os.walk(os.path.join(str(host), "victim")):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(current, name))
            found.add((st.st_dev, st.st_ino))
    return found


def _assert_contained(host, jail):
    """No entry of the jail is a victim's inode (a hard link out, or a victim directory moved in)."""
    victims = _victim_inodes(host)
    for current, dirnames, filenames in os.walk(jail):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(current, name))
            assert (st.st_dev, st.st_ino) not in victims, os.path.join(current, name)


def run_four_ways(host, tar, expect):
    """check mode and the real run, through populate() and through the Job's program; victim unchanged after each."""
    before = snapshot(host)
    api, job = str(host / "jail-api"), str(host / "jail-job")
    # 1. check mode, in process
    if expect is None:
        planned = j.populate(api, tar, "never", check_mode=True)
        assert planned["action"] == "populated" and planned["sentinel"]["populated_at"] is None
    else:
        with pytest.raises(j.JailError, match=expect):
            j.populate(api, tar, "never", check_mode=True)
    assert _listing(api) == [] and snapshot(host) == before
    # 2. check mode, the Job's program
    proc = _program(tar, job, check=True)
    if expect is None:
        assert proc.returncode == 0 and json.loads(proc.stdout)["action"] == "populated", proc.stderr
    else:
        assert proc.returncode == 1 and "jail populate failed:" in proc.stderr, (proc.stdout, proc.stderr)
        assert re.search(expect, proc.stderr), proc.stderr
    assert _listing(job) == [] and snapshot(host) == before
    # 3. the real run, in process
    if expect is None:
        done = j.populate(api, tar, "never")
        assert done["action"] == "populated" and j.read_sentinel(api) == done["sentinel"]
    else:
        with pytest.raises(j.JailError, match=expect):
            j.populate(api, tar, "never")
        assert _listing(api) == [], "a refused archive wrote into the jail"
    assert snapshot(host) == before
    # 4. the real run, the Job's program
    proc = _program(tar, job)
    if expect is None:
        assert proc.returncode == 0, proc.stderr
        line = json.loads(proc.stdout)
        assert line["action"] == "populated" and line["sentinel"] == j.read_sentinel(job)
    else:
        assert proc.returncode == 1 and re.search(expect, proc.stderr), proc.stderr
        assert _listing(job) == []
    assert snapshot(host) == before
    for jail in (api, job):
        _assert_contained(host, jail)
        assert not [n for n in os.listdir(jail) if n != j.SENTINEL and j._ours(n)], "leftovers of ours in the jail"
    return api, job


@pytest.fixture
def world(tmp_path):
    global VICTIM
    host = make_world(tmp_path)
    VICTIM = str(host / "victim")
    return host


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_hostile_archive_never_touches_the_host(world, tmp_path, case):
    name, members, expect = case[0], case[1](), case[2]
    fmt = case[3] if len(case) > 3 else tarfile.GNU_FORMAT
    tar = make_tar(str(tmp_path / (name + ".tar")), members, fmt)
    for jail in run_four_ways(world, tar, expect):
        if expect is not None:
            continue
        # the jail's root keeps its own owner and mode, whatever the archive says about "./"
        st = os.lstat(jail)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o755, 0, 0)


# --- what the safe ones wrote --------------------------------------------------------------------------------------

def _populated(world, tmp_path, members, fmt=tarfile.GNU_FORMAT):
    tar = make_tar(str(tmp_path / "t.tar"), members, fmt)
    return run_four_ways(world, tar, None)


def test_a_directory_member_replaced_by_a_symlink_keeps_the_symlink_and_the_host_file(world, tmp_path):
    for jail in _populated(world, tmp_path, [D("d", 0o6777, 1234, 1234), S("d", v("secret"))]):
        assert os.readlink(os.path.join(jail, "d")) == v("secret")
        st = os.lstat(os.path.join(jail, "d"))
        assert st.st_uid == 0 and stat.S_ISLNK(st.st_mode)


def test_the_last_member_of_a_name_wins_with_its_own_mode_and_owner(world, tmp_path):
    members = [S("d", v("dir")), D("d", 0o6777, 1234, 2345), F("x", mode=0o4755), D("x", 0o710, 7, 8),
               D("y", 0o777), F("y/a"), F("y", b"file now\n", 0o4750, 11, 12), P("p", 0o666, 5)]
    for jail in _populated(world, tmp_path, members):
        for name, kind, mode, uid, gid in (("d", stat.S_ISDIR, 0o6777, 1234, 2345), ("x", stat.S_ISDIR, 0o710, 7, 8),
                                           ("y", stat.S_ISREG, 0o4750, 11, 12), ("p", stat.S_ISFIFO, 0o666, 5, 5)):
            st = os.lstat(os.path.join(jail, name))
            assert kind(st.st_mode) and (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, uid, gid), name
            assert st.st_mtime == 1600000000
        with open(os.path.join(jail, "y"), "rb") as f:
            assert f.read() == b"file now\n"


def test_hard_links_stay_inside_and_survive_their_name_becoming_a_symlink(world, tmp_path):
    members = [F("f", b"x", 0o4755), H("h", "f"), S("f", v("secret")), F("g"), H("g2", "/g")]
    for jail in _populated(world, tmp_path, members):
        assert os.path.islink(os.path.join(jail, "f"))
        h = os.lstat(os.path.join(jail, "h"))
        assert stat.S_ISREG(h.st_mode) and stat.S_IMODE(h.st_mode) == 0o4755 and h.st_nlink == 1
        assert os.lstat(os.path.join(jail, "g")).st_ino == os.lstat(os.path.join(jail, "g2")).st_ino
    assert os.lstat(v("secret")).st_nlink == 2


def test_every_member_type_lands_as_itself_or_is_listed_as_skipped(world, tmp_path):
    kinds = CASES[[c[0] for c in CASES].index("every-member-type")][1]()
    tar = make_tar(str(tmp_path / "t.tar"), kinds)
    assert sorted(j.populate(str(world / "jail-api"), tar, "never", check_mode=True)["skipped_entries"]) == sorted([
        "chr (device node)", "blk (device node)", "vol (unsupported member type b'V')",
        "dump (unsupported member type b'D')", "unknown (unsupported member type b'Z')"])
    for jail in run_four_ways(world, tar, None):
        assert sorted(os.listdir(jail)) == sorted(["dir", "reg", "areg", "cont", "hard", "sym", "fifo", j.SENTINEL])
        assert os.lstat(os.path.join(jail, "hard")).st_ino == os.lstat(os.path.join(jail, "reg")).st_ino
        assert stat.S_IMODE(os.lstat(os.path.join(jail, "dir")).st_mode) == 0o1777


def test_our_own_names_in_an_archive_are_not_moved_in(world, tmp_path):
    members = CASES[[c[0] for c in CASES].index("sentinel-names-as-symlinks")][1]()
    for jail in _populated(world, tmp_path, members):
        assert sorted(os.listdir(jail)) == [j.SENTINEL]
        assert stat.S_ISREG(os.lstat(os.path.join(jail, j.SENTINEL)).st_mode)
        assert j.read_sentinel(jail)["program"] == j.PROGRAM


# --- a directory source ------------------------------------------------------------------------------------------

def test_a_hostile_directory_source_is_copied_without_following_anything(world, tmp_path):
    src = tmp_path / "src"
    (src / "etc").mkdir(parents=True)
    (src / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    os.chmod(str(src / "etc" / "passwd"), 0o4755)
    os.symlink(v(), str(src / "abs"))
    os.symlink("../../host/victim/secret", str(src / "etc" / "rel"))
    os.symlink(v("dir"), str(src / "dirlink"))
    os.link(str(src / "etc" / "passwd"), str(src / "etc" / "passwd-"))
    os.mkfifo(str(src / "fifo"), 0o640)
    os.mknod(str(src / "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    sock.close()
    os.mkdir(str(src / "d"))
    os.chown(str(src / "d"), 1234, 1234)
    os.chmod(str(src / "d"), 0o6777)     # mkdir leaves setuid out
    for jail in run_four_ways(world, str(src), None):
        assert os.readlink(os.path.join(jail, "abs")) == v()
        assert os.readlink(os.path.join(jail, "etc/rel")) == "../../host/victim/secret"
        assert os.path.islink(os.path.join(jail, "dirlink"))
        assert os.lstat(os.path.join(jail, "etc/passwd")).st_ino == os.lstat(os.path.join(jail, "etc/passwd-")).st_ino
        assert stat.S_IMODE(os.lstat(os.path.join(jail, "etc/passwd")).st_mode) == 0o4755
        d = os.lstat(os.path.join(jail, "d"))
        assert (stat.S_IMODE(d.st_mode), d.st_uid) == (0o6777, 1234)
        assert stat.S_ISFIFO(os.lstat(os.path.join(jail, "fifo")).st_mode)
        assert not os.path.lexists(os.path.join(jail, "null")) and not os.path.lexists(os.path.join(jail, "sock"))
    assert sorted(j.populate(str(tmp_path / "other"), str(src), "never", check_mode=True)["skipped_entries"]) == \
        ["null (device node)", "sock (socket)"]


# --- a jail whose users planted links where populate writes ------------------------------------------------------

def _plant(jail):
    """What a root user inside a running jail could leave for the next populate (overwrite=always)."""
    with open(os.path.join(jail, j.SENTINEL), "w") as f:
        json.dump({"format": 1, "source": "old"}, f)
    os.symlink(v("secret"), os.path.join(jail, j.SENTINEL_TMP))
    os.symlink(v("dir"), os.path.join(jail, j.STAGING_PREFIX + "planted"))
    os.makedirs(os.path.join(jail, j.TRASH_PREFIX + "planted", "sub"))
    os.symlink(v("dir"), os.path.join(jail, j.TRASH_PREFIX + "planted", "sub", "into-host"))
    os.symlink(v(), os.path.join(jail, "etc"))
    os.makedirs(os.path.join(jail, "home"))
    os.symlink(v("dir"), os.path.join(jail, "home", "alice"))
    os.link(v("owned"), os.path.join(jail, "hardlinked-host-file"))


def test_replacing_a_jail_with_planted_links_removes_them_without_following(world, tmp_path):
    tar = make_tar(str(tmp_path / "t.tar"), [D("etc", 0o755), F("etc/os-release", b"ID=new\n")])
    before = snapshot(world)
    for jail, run in ((str(world / "jail-api"), lambda jail: j.populate(jail, tar, "always")),
                      (str(world / "jail-job"), lambda jail: _program(tar, jail, overwrite="always"))):
        _plant(jail)
        planted = snapshot(world)
        outcome = run(jail)
        assert getattr(outcome, "returncode", 0) == 0, getattr(outcome, "stderr", "")
        assert sorted(os.listdir(jail)) == sorted(["etc", j.SENTINEL])
        assert not os.path.islink(os.path.join(jail, "etc"))
        assert j.read_sentinel(jail)["source"] == tar
        after = snapshot(world)
        # the planted hard link held a link count (and ctime) of the victim: those are its own to change back
        for state in (planted, after):
            state.pop("victim/owned")
        assert after == planted
    assert after == {k: val for k, val in before.items() if k != "victim/owned"}
    owned = os.lstat(v("owned"))
    assert (owned.st_nlink, stat.S_IMODE(owned.st_mode), owned.st_uid) == (1, 0o600, 4321)


@pytest.mark.parametrize("plant, expect", [
    (lambda jail: os.symlink(v("secret"), os.path.join(jail, j.SENTINEL)), r"it is a symlink"),
    (lambda jail: os.mkfifo(os.path.join(jail, j.SENTINEL)), r"is not a regular file"),
    (lambda jail: os.mkdir(os.path.join(jail, j.SENTINEL)), r"is not a regular file"),
], ids=["symlink", "fifo", "directory"])
def test_a_planted_sentinel_is_refused_not_followed_or_waited_on(world, tmp_path, plant, expect):
    tar = make_tar(str(tmp_path / "t.tar"), [F("f")])
    jail = str(world / "jail-api")
    plant(jail)
    before = snapshot(world)
    for check in (True, False):
        with pytest.raises(j.JailError, match=expect):
            j.populate(jail, tar, "always", check_mode=check)
        proc = _program(tar, jail, check=check, overwrite="always")     # a fifo would hang it: timeout=120
        assert proc.returncode == 1 and "sentinel" in proc.stderr, proc.stderr
    assert snapshot(world) == before and os.listdir(jail) == [j.SENTINEL]


# --- sizes --------------------------------------------------------------------------------------------------------

def _sparse_tar(tmp_path, size):
    sparse = tmp_path / "sparse-src"
    sparse.mkdir()
    with open(str(sparse / "big"), "wb") as f:
        f.write(b"head")
        f.truncate(size)
    tar = str(tmp_path / "sparse.tar")
    subprocess.run(["tar", "--sparse", "--format=gnu", "-C", str(sparse), "-cf", tar, "big"], check=True)
    os.unlink(str(sparse / "big"))
    return tar


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse archives")
def test_a_sparse_member_larger_than_the_free_space_is_refused_before_any_write(world, tmp_path):
    vfs = os.statvfs(str(world))
    free = vfs.f_bavail * vfs.f_frsize
    tar = _sparse_tar(tmp_path, (free * 2) // 4096 * 4096)
    assert os.path.getsize(tar) < 1 << 20
    run_four_ways(world, tar, r"needs .* the largest is 'big', .* free; nothing was written")


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse archives")
def test_a_sparse_member_that_fits_is_written_in_full(world, tmp_path):
    tar = _sparse_tar(tmp_path, 32 << 20)
    for jail in run_four_ways(world, tar, None):
        with open(os.path.join(jail, "big"), "rb") as f:
            assert f.read(4) == b"head" and os.fstat(f.fileno()).st_size == 32 << 20


def test_a_pax_sparse_header_claiming_a_petabyte_is_refused(world, tmp_path):
    info, data = F("huge", b"x", pax_headers={"GNU.sparse.map": "0,1", "GNU.sparse.size": str(1 << 50)})
    tar = make_tar(str(tmp_path / "t.tar"), [(info, data)], tarfile.PAX_FORMAT)
    run_four_ways(world, tar, r"1024\.0 TiB of file data; the largest is 'huge'")


def test_free_space_is_checked_against_the_jails_filesystem(tmp_path, monkeypatch):
    tar = make_tar(str(tmp_path / "t.tar"), [F("a", b"x" * 5000), F("b", b"y" * 100)])
    summary = jail_source.scan_tar(tar)
    assert (summary.bytes, summary.entries, summary.largest) == (5100, 2, (5000, "a"))

    class Vfs(object):
        f_frsize, f_bsize, f_bavail, f_files, f_favail = 4096, 4096, (16 << 20) // 4096, 1000, 1000

    monkeypatch.setattr(j.os, "statvfs", lambda path: Vfs)
    for check in (True, False):
        with pytest.raises(j.JailError, match=r"needs 16\.0 MiB .* has 16\.0 MiB free; nothing was written"):
            j.populate(str(tmp_path / "jail"), tar, "never", check_mode=check)
        assert not os.path.exists(str(tmp_path / "jail"))
    Vfs.f_bavail += 100
    assert j.populate(str(tmp_path / "jail"), tar, "never", check_mode=True)["action"] == "populated"
    Vfs.f_favail = 10
    with pytest.raises(j.JailError, match="has 2 entries but .* only 10 free inodes"):
        j.populate(str(tmp_path / "jail"), tar, "never", check_mode=True)


def test_a_truncated_archive_is_refused_before_any_write(world, tmp_path):
    whole = make_tar(str(tmp_path / "whole.tar"), [F("a"), F("b", b"z" * 100000)])
    with open(whole, "rb") as f:
        data = f.read()
    cut = str(tmp_path / "cut.tar")
    with open(cut, "wb") as f:
        f.write(data[:2048])
    run_four_ways(world, cut, r"cannot be read")


def test_names_no_file_system_call_takes_are_refused_not_crashed():
    """A str that has no bytes form (tarfile never makes one today; a directory source cannot): a JailError."""
    scan = safe_tree.Writer()
    with pytest.raises(j.JailError, match="cannot be a file name"):
        scan.file("etc/\ud800", None, 0, (0o644, 0, 0, 0))
    with pytest.raises(j.JailError, match="a symlink to"):
        scan.symlink("s", "\ud800", (0o777, 0, 0, 0))
    with pytest.raises(j.JailError, match="cannot be a file name"):
        scan.hardlink("h", "\ud800")


def test_member_names_cannot_print_a_result_line_of_their_own(tmp_path):
    """The populate Job's log is read for its last JSON line: a skipped member's name with a line break and a JSON
    object in it stays on its 'skipped' line, escaped."""
    forged = 'dev\n{"action": "unchanged", "changed": false, "sentinel": {"source": "forged"}}'
    archive = str(tmp_path / "forge.tar")
    with tarfile.open(archive, "w") as tar:
        member = tarfile.TarInfo(forged)
        member.type = tarfile.CHRTYPE
        tar.addfile(member)
        member = tarfile.TarInfo("etc")
        member.type = tarfile.DIRTYPE
        member.mode = 0o755
        tar.addfile(member)
    jail = tmp_path / "jail"
    proc = subprocess.run([sys.executable, JAIL_PY, "populate", "--source", archive, "--jail", str(jail)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stderr + proc.stdout).splitlines()
    assert not any(line.startswith("{") and "forged" in line for line in lines)
    assert any(line.startswith("skipped dev\\n{") for line in lines), lines
    assert json.loads(proc.stdout.splitlines()[-1])["action"] == "populated"
