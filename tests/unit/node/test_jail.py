"""jail.populate on real directories (root: owners are preserved): a tiny root filesystem built here with tarfile,
as a directory, a tarball and an OCI image layout (umoci), and tarballs that try to write outside the jail."""
import json
import os
import shutil
import stat
import subprocess
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as j
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail_source
from tar_helpers import make_tar
from repo_root import ROOT

JAIL_PY = os.path.join(ROOT, "plugins", "module_utils", "node", "jail.py")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="owners can be preserved only by root")


def _info(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, **kw):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, 1700000000
    for key, value in kw.items():
        setattr(info, key, value)
    return info


def rootfs_members(marker=b"jail one\n"):
    """A small root filesystem: the host's /bin/true as a program, a setuid file, a user's home, links."""
    with open("/bin/true", "rb") as f:
        true = f.read()
    d = tarfile.DIRTYPE
    return [
        (_info("./", d, 0o755), None),
        (_info("./etc", d, 0o755), None),
        (_info("./etc/os-release"), marker),
        (_info("./etc/localtime", tarfile.SYMTYPE, 0o777, linkname="/usr/share/zoneinfo/UTC"), None),
        (_info("./usr", d, 0o755), None),
        (_info("./usr/bin", d, 0o755), None),
        (_info("./usr/bin/true", mode=0o755), true),
        (_info("./usr/bin/su", mode=0o4755), b"#!/bin/sh\n"),
        (_info("./usr/bin/true-again", tarfile.LNKTYPE, linkname="./usr/bin/true"), None),
        (_info("./bin", tarfile.SYMTYPE, 0o777, linkname="usr/bin"), None),
        (_info("./home", d, 0o755), None),
        (_info("./home/alice", d, 0o700, uid=1234, gid=2345), None),
        (_info("./home/alice/.profile", mode=0o600, uid=1234, gid=2345), b"export A=1\n"),
        (_info("./tmp", d, 0o1777), None),
        (_info("./run", d, 0o755), None),
        (_info("./run/initctl", tarfile.FIFOTYPE, 0o600), None),
        (_info("./dev", d, 0o755), None),
        (_info("./dev/null", tarfile.CHRTYPE, 0o666, devmajor=1, devminor=3), None),
    ]


@pytest.fixture
def rootfs_tar(tmp_path):
    return make_tar(tmp_path / "rootfs.tar.gz", rootfs_members(), compression="gz")


@pytest.fixture
def jail_dir(tmp_path):
    return str(tmp_path / "jail")


def _read(path):
    with open(path) as f:
        return f.read()


def test_populate_writes_the_rootfs_then_the_sentinel_and_a_rerun_changes_nothing(rootfs_tar, jail_dir):
    result = j.populate(jail_dir, rootfs_tar, "never")
    assert result["action"] == "populated" and result["changed"]
    assert _read(os.path.join(jail_dir, "etc/os-release")) == "jail one\n"
    record = j.read_sentinel(jail_dir)
    assert record == result["sentinel"]
    assert record["source"] == rootfs_tar and record["source_type"] == "tar" and record["overwrite"] == "never"
    assert record["digest"] == "sha256:" + __import__("hashlib").sha256(open(rootfs_tar, "rb").read()).hexdigest()
    assert record["populated_at"].endswith("Z")
    assert result["skipped_entries"] == ["dev/null (device node)"]
    # nothing of ours is left beside the contents
    assert sorted(os.listdir(jail_dir)) == sorted(["etc", "usr", "bin", "home", "tmp", "run", "dev", j.SENTINEL])

    mtime = os.stat(os.path.join(jail_dir, j.SENTINEL)).st_mtime_ns
    again = j.populate(jail_dir, rootfs_tar, "never")
    assert again["action"] == "unchanged" and not again["changed"]
    assert again["sentinel"] == record
    assert os.stat(os.path.join(jail_dir, j.SENTINEL)).st_mtime_ns == mtime


@needs_root
def test_links_modes_and_owners_are_preserved(rootfs_tar, jail_dir):
    j.populate(jail_dir, rootfs_tar, "never")
    assert os.readlink(os.path.join(jail_dir, "etc/localtime")) == "/usr/share/zoneinfo/UTC"
    assert os.readlink(os.path.join(jail_dir, "bin")) == "usr/bin"
    su = os.stat(os.path.join(jail_dir, "usr/bin/su"))
    assert stat.S_IMODE(su.st_mode) == 0o4755 and su.st_uid == 0
    true, again = os.stat(os.path.join(jail_dir, "usr/bin/true")), os.stat(os.path.join(jail_dir, "usr/bin/true-again"))
    assert true.st_ino == again.st_ino and stat.S_IMODE(true.st_mode) == 0o755
    home = os.stat(os.path.join(jail_dir, "home/alice"))
    assert (home.st_uid, home.st_gid, stat.S_IMODE(home.st_mode)) == (1234, 2345, 0o700)
    assert home.st_mtime == 1700000000
    assert stat.S_IMODE(os.stat(os.path.join(jail_dir, "tmp")).st_mode) == 0o1777
    assert stat.S_ISFIFO(os.lstat(os.path.join(jail_dir, "run/initctl")).st_mode)
    assert not os.path.lexists(os.path.join(jail_dir, "dev/null"))
    # the program in the jail runs (its libraries come from the host here: this only shows the bytes are intact)
    assert subprocess.run([os.path.join(jail_dir, "usr/bin/true")], check=False).returncode == 0


def test_never_keeps_a_modified_jail_and_always_replaces_it(rootfs_tar, jail_dir, tmp_path):
    j.populate(jail_dir, rootfs_tar, "never")
    with open(os.path.join(jail_dir, "etc/os-release"), "w") as f:
        f.write("edited by a user\n")
    os.mkdir(os.path.join(jail_dir, "lost+found"))
    assert j.populate(jail_dir, rootfs_tar, "never")["action"] == "unchanged"
    assert j.populate(jail_dir, rootfs_tar, "if_empty")["action"] == "unchanged"
    assert _read(os.path.join(jail_dir, "etc/os-release")) == "edited by a user\n"

    second = make_tar(tmp_path / "second.tar", rootfs_members(b"jail two\n")[:3])
    before = j.read_sentinel(jail_dir)
    result = j.populate(jail_dir, second, "always")
    assert result["action"] == "replaced" and result["changed"] and result["previous"] == before
    assert _read(os.path.join(jail_dir, "etc/os-release")) == "jail two\n"
    # the old contents are gone, lost+found stays
    assert sorted(os.listdir(jail_dir)) == sorted(["etc", "lost+found", j.SENTINEL])
    assert j.read_sentinel(jail_dir)["source"] == second
    assert j.populate(jail_dir, second, "always")["action"] == "replaced"    # always means every run


def test_never_refuses_a_jail_it_did_not_populate_and_if_empty_leaves_it(rootfs_tar, jail_dir):
    os.makedirs(os.path.join(jail_dir, "data"))
    result = j.populate(jail_dir, rootfs_tar, "never")
    assert result["action"] == "refused" and not result["changed"]
    assert "not empty (data)" in result["message"] and "overwrite=always" in result["message"]
    assert j.populate(jail_dir, rootfs_tar, "if_empty")["action"] == "unchanged"
    assert os.listdir(jail_dir) == ["data"]


def test_if_empty_fills_a_jail_holding_only_lost_found_and_leftovers(rootfs_tar, jail_dir):
    os.makedirs(os.path.join(jail_dir, "lost+found"))
    os.makedirs(os.path.join(jail_dir, j.STAGING_PREFIX + "cut-short", "etc"))
    result = j.populate(jail_dir, rootfs_tar, "if_empty")
    assert result["action"] == "populated"
    assert not [n for n in os.listdir(jail_dir) if n.startswith(j.STAGING_PREFIX)]
    assert os.path.isdir(os.path.join(jail_dir, "lost+found"))
    assert j.read_sentinel(jail_dir)["overwrite"] == "if_empty"


def test_check_mode_predicts_and_writes_nothing(rootfs_tar, jail_dir):
    planned = j.populate(jail_dir, rootfs_tar, "never", check_mode=True)
    assert planned["action"] == "populated" and planned["changed"]
    assert planned["sentinel"]["digest"].startswith("sha256:") and planned["sentinel"]["populated_at"] is None
    assert not os.path.exists(jail_dir)
    j.populate(jail_dir, rootfs_tar, "never")
    listing = sorted(os.listdir(jail_dir))
    record = j.read_sentinel(jail_dir)
    assert j.populate(jail_dir, rootfs_tar, "never", check_mode=True)["action"] == "unchanged"
    assert j.populate(jail_dir, rootfs_tar, "always", check_mode=True)["action"] == "replaced"
    assert sorted(os.listdir(jail_dir)) == listing and j.read_sentinel(jail_dir) == record


def test_a_directory_source_is_copied_with_its_links(tmp_path, rootfs_tar, jail_dir):
    source = tmp_path / "rootfs"
    j.populate(str(source), rootfs_tar, "never")
    os.unlink(str(source / j.SENTINEL))
    result = j.populate(jail_dir, str(source), "never", label="registry.example/jail:1")
    assert result["action"] == "populated"
    assert result["sentinel"]["source"] == "registry.example/jail:1" and result["sentinel"]["source_type"] == "dir"
    assert os.readlink(os.path.join(jail_dir, "bin")) == "usr/bin"
    assert os.stat(os.path.join(jail_dir, "usr/bin/true")).st_ino == \
        os.stat(os.path.join(jail_dir, "usr/bin/true-again")).st_ino
    assert _read(os.path.join(jail_dir, "etc/os-release")) == "jail one\n"


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci (Debian package umoci) is not installed")
def test_an_oci_image_layout_is_unpacked_with_umoci(tmp_path, rootfs_tar, jail_dir):
    files = tmp_path / "files"
    j.populate(str(files), rootfs_tar, "never")
    layout = str(tmp_path / "layout")
    for argv in (["init", "--layout", layout], ["new", "--image", layout + ":v1"],
                 ["insert", "--image", layout + ":v1", str(files / "etc"), "/etc"],
                 ["insert", "--image", layout + ":v1", str(files / "home"), "/home"]):
        subprocess.run(["umoci"] + argv, check=True, capture_output=True)
    result = j.populate(jail_dir, layout, "never")
    assert result["action"] == "populated"
    with open(os.path.join(layout, "index.json")) as f:
        digest = json.load(f)["manifests"][0]["digest"]
    assert result["sentinel"]["digest"] == digest and result["sentinel"]["tag"] == "v1"
    assert _read(os.path.join(jail_dir, "etc/os-release")) == "jail one\n"
    assert os.readlink(os.path.join(jail_dir, "etc/localtime")) == "/usr/share/zoneinfo/UTC"
    assert os.stat(os.path.join(jail_dir, "home/alice")).st_uid == (1234 if os.geteuid() == 0 else os.geteuid())
    assert j.populate(jail_dir, layout, "never")["action"] == "unchanged"
    with pytest.raises(j.JailError, match="no image tagged 'v2'"):
        j.populate(str(tmp_path / "other"), layout, "never", oci_tag="v2")


def test_a_missing_umoci_names_the_package(tmp_path, jail_dir, monkeypatch):
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"digest": "sha256:" + "0" * 64, "annotations": {jail_source.OCI_REF_ANNOTATION: "latest"}}]}))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(j.JailError, match="Debian package umoci"):
        j.populate(jail_dir, str(layout), "never")
    assert not os.path.exists(os.path.join(jail_dir, j.SENTINEL))


# --- tarballs that try to get out ----------------------------------------------------------------------------

@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret").write_text("host file\n")
    return path


def _assert_failed_cleanly(jail_dir, outside):
    assert sorted(os.listdir(str(outside))) == ["secret"]
    assert (outside / "secret").read_text() == "host file\n"
    assert not os.path.exists(os.path.join(jail_dir, j.SENTINEL))
    assert not [n for n in os.listdir(jail_dir) if n != "etc"]


def test_dot_dot_members_fail_and_write_nothing_outside(tmp_path, jail_dir, outside):
    os.makedirs(os.path.join(jail_dir, "etc"))
    bad = make_tar(tmp_path / "bad.tar", [(_info("etc/ok"), b"1"), (_info("../../outside/pwned"), b"x")])
    with pytest.raises(j.JailError, match="'..' in its path"):
        j.populate(jail_dir, bad, "always")
    _assert_failed_cleanly(jail_dir, outside)
    # check mode finds it too, without writing
    with pytest.raises(j.JailError, match="'..' in its path"):
        j.populate(jail_dir, bad, "always", check_mode=True)


def test_absolute_members_land_inside_the_jail(tmp_path, jail_dir):
    tar = make_tar(tmp_path / "abs.tar", [(_info("/etc/soperator-abs-marker"), b"inside\n")])
    j.populate(jail_dir, tar, "never")
    assert _read(os.path.join(jail_dir, "etc/soperator-abs-marker")) == "inside\n"
    assert not os.path.exists("/etc/soperator-abs-marker")


def test_writing_through_a_symlink_fails(tmp_path, jail_dir, outside):
    os.makedirs(os.path.join(jail_dir, "etc"))
    bad = make_tar(tmp_path / "bad.tar", [
        (_info("escape", tarfile.SYMTYPE, 0o777, linkname=str(outside)), None),
        (_info("escape/pwned"), b"x")])
    with pytest.raises(j.JailError, match="escape is a symlink"):
        j.populate(jail_dir, bad, "always")
    _assert_failed_cleanly(jail_dir, outside)


def test_a_file_replaces_a_symlink_instead_of_following_it(tmp_path, jail_dir, outside):
    tar = make_tar(tmp_path / "swap.tar", [
        (_info("secret", tarfile.SYMTYPE, 0o777, linkname=str(outside / "secret")), None),
        (_info("secret"), b"jail's own\n")])
    j.populate(jail_dir, tar, "never")
    assert (outside / "secret").read_text() == "host file\n"
    assert not os.path.islink(os.path.join(jail_dir, "secret"))
    assert _read(os.path.join(jail_dir, "secret")) == "jail's own\n"


def test_a_hard_link_to_a_symlink_fails(tmp_path, jail_dir, outside):
    os.makedirs(os.path.join(jail_dir, "etc"))
    bad = make_tar(tmp_path / "bad.tar", [
        (_info("host", tarfile.SYMTYPE, 0o777, linkname=str(outside / "secret")), None),
        (_info("grab", tarfile.LNKTYPE, linkname="host"), None)])
    with pytest.raises(j.JailError, match="not a regular file"):
        j.populate(jail_dir, bad, "always")
    _assert_failed_cleanly(jail_dir, outside)
    assert os.stat(str(outside / "secret")).st_nlink == 1


# --- the populate image's program ------------------------------------------------------------------------------

def test_the_program_prints_the_sentinel_as_one_json_line(rootfs_tar, jail_dir):
    argv = ["python3", JAIL_PY, "populate", "--source", rootfs_tar, "--jail", jail_dir, "--overwrite", "never",
            "--label", "example/populate-jail:1"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["action"] == "populated" and line["sentinel"] == j.read_sentinel(jail_dir)
    assert line["sentinel"]["source"] == "example/populate-jail:1"
    assert "skipped dev/null (device node)" in proc.stderr
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert json.loads(proc.stdout)["action"] == "unchanged"
    os.unlink(os.path.join(jail_dir, j.SENTINEL))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and json.loads(proc.stdout)["action"] == "refused"


def test_the_populate_image_puts_program_and_rootfs_where_the_job_looks():
    from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
    with open(os.path.join(ROOT, "images", "populate_jail", "Containerfile")) as f:
        text = f.read()
    # jail.py imports its companions from its own directory (tests/images/test_images.py: the COPY lists are whole)
    assert "COPY jail.py jail_source.py tree_reader.py safe_tree.py %s/\n" % os.path.dirname(c.POPULATE_JAIL_PROGRAM) \
        in text
    assert "COPY jail-rootfs.tar %s\n" % c.POPULATE_JAIL_SOURCE in text
