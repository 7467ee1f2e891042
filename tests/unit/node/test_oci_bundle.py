"""oci_bundle: OCI images (layouts and archives built here) into runtime bundles, layers and whiteouts applied by
the jail's writer; the hostile corpus of the jail's tarballs, as image layers, plus escaping whiteouts."""
import json
import os
import stat
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle, safe_tree
import oci_helpers
import test_jail_hostile as hostile
from repo_root import ROOT

PROGRAM = os.path.join(ROOT, "plugins", "module_utils", "node", "oci_bundle.py")
D, F, S, H, C = hostile.D, hostile.F, hostile.S, hostile.H, hostile.C

BASE = [D("etc"), F("etc/os-release", b"ID=tiny\n"), D("opt"), F("opt/a", b"a"), D("opt/keep"),
        F("opt/keep/b", b"b"), D("var"), F("var/x", b"x"), S("lib", "usr/lib")]


def _tree(top):
    found = {}
    for current, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = os.path.join(current, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, top)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    found[rel] = f.read()
            elif stat.S_ISLNK(st.st_mode):
                found[rel] = "-> " + os.readlink(path)
            else:
                found[rel] = "dir" if stat.S_ISDIR(st.st_mode) else oct(st.st_mode)
    return found


def test_layers_and_whiteouts_make_the_rootfs_and_the_bundle_is_kept_by_digest(tmp_path):
    layout = str(tmp_path / "layout")
    top = [F("opt/.wh.a", b""), D("opt/keep"), F("opt/keep/.wh..wh..opq", b""), F("opt/keep/new", b"n"),
           F("etc/os-release", b"ID=top\n"), F(".wh.var", b"")]
    config = {"Entrypoint": ["/bin/tool"], "Cmd": ["-v"], "Env": ["PATH=/bin", "A=1"], "WorkingDir": "/opt"}
    desc = oci_helpers.make_layout(layout, [BASE, top], config=config)
    cache = str(tmp_path / "cache")
    made = oci_bundle.make_bundle(layout, cache)
    bundle = os.path.join(cache, "sha256-" + desc["digest"].split(":")[1])
    assert made == {"bundle": bundle, "digest": desc["digest"], "changed": True}
    assert sorted(os.listdir(cache)) == [os.path.basename(bundle)]
    assert sorted(os.listdir(bundle)) == [".soperator-bundle.json", "config.json", "rootfs"]
    assert _tree(os.path.join(bundle, "rootfs")) == {
        "etc": "dir", "etc/os-release": b"ID=top\n", "opt": "dir", "opt/keep": "dir", "opt/keep/new": b"n",
        "lib": "-> usr/lib", "proc": "dir", "dev": "dir", "sys": "dir", "home": "dir"}
    with open(os.path.join(bundle, "config.json")) as f:
        config = json.load(f)
    assert config["root"] == {"path": "rootfs", "readonly": False}
    assert config["process"]["args"] == ["/bin/tool", "-v"] and config["process"]["env"] == ["PATH=/bin", "A=1"]
    assert config["process"]["cwd"] == "/opt" and config["process"]["noNewPrivileges"] is True
    assert {"type": "network"} not in config["linux"]["namespaces"]
    # again: the same bundle, untouched; from the archive of the same layout too
    assert oci_bundle.make_bundle(layout, cache) == dict(made, changed=False)
    archive = oci_helpers.make_archive(tmp_path / "image.tar", layout)
    proc = subprocess.run([sys.executable, PROGRAM, "--source", archive, "--cache", cache, "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout) == dict(made, changed=False, commands=[]), proc.stderr
    # the plain output is the path to give srun --container=
    proc = subprocess.run([sys.executable, PROGRAM, archive, "--cache", cache], capture_output=True, text=True,
                          timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (0, bundle + "\n") and "found " + bundle in proc.stderr
    assert sorted(os.listdir(cache)) == [os.path.basename(bundle)]


def test_an_archive_makes_the_same_bundle_as_its_layout(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE], compress=False)
    archive = oci_helpers.make_archive(tmp_path / "image.tar", layout)
    one = oci_bundle.make_bundle(archive, str(tmp_path / "one"))
    two = oci_bundle.make_bundle(layout, str(tmp_path / "two"))
    assert one["changed"] and one["digest"] == two["digest"]
    assert _tree(one["bundle"]) == _tree(two["bundle"])
    assert os.listdir(str(tmp_path / "one")) == [os.path.basename(one["bundle"])]     # no staging left


def _blob_path(layout, digest):
    return os.path.join(layout, "blobs", *digest.split(":"))


@pytest.mark.parametrize("damage", ["flip-a-byte", "append", "truncate", "remove"])
def test_a_blob_that_does_not_match_its_digest_makes_no_bundle(tmp_path, damage):
    layout = str(tmp_path / "layout")
    desc = oci_helpers.make_layout(layout, [BASE])
    with open(_blob_path(layout, desc["digest"])) as f:
        layer = json.load(f)["layers"][0]["digest"]
    path = _blob_path(layout, layer)
    data = open(path, "rb").read()
    if damage == "remove":
        os.unlink(path)
    else:
        changed = {"flip-a-byte": data[:-1] + bytes([data[-1] ^ 1]), "append": data + b"x",
                   "truncate": data[:-1]}[damage]
        with open(path, "wb") as f:
            f.write(changed)
    cache = str(tmp_path / "cache")
    expect = {"flip-a-byte": "does not match its digest", "append": "holds more than",
              "truncate": "bytes, its descriptor says", "remove": "is missing"}[damage]
    with pytest.raises(oci_bundle.BundleError, match=expect):
        oci_bundle.make_bundle(layout, cache)
    assert os.listdir(cache) == []


def test_setuid_bits_are_dropped_unless_kept(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [[D("bin"), F("bin/su", b"#!/bin/sh\n", 0o4755), D("t", 0o3777)]])
    plain = oci_bundle.make_bundle(layout, str(tmp_path / "plain"))["bundle"]
    kept = oci_bundle.make_bundle(layout, str(tmp_path / "kept"), keep_setuid=True)["bundle"]

    def mode(bundle, path):
        return stat.S_IMODE(os.lstat(os.path.join(bundle, "rootfs", path)).st_mode)

    assert (mode(plain, "bin/su"), mode(plain, "t")) == (0o755, 0o1777)
    assert (mode(kept, "bin/su"), mode(kept, "t")) == (0o4755, 0o3777)


def test_several_images_need_a_ref(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE], ref="one")
    second = oci_helpers.make_layout(layout, [[F("two", b"2")]], ref="two")
    with pytest.raises(oci_bundle.BundleError, match="lists 2 images for linux/amd64; name one with --ref"):
        oci_bundle.make_bundle(layout, str(tmp_path / "c"), arch="amd64")
    with pytest.raises(oci_bundle.BundleError, match=r"no image named 'three' \(it has: one, two\)"):
        oci_bundle.make_bundle(layout, str(tmp_path / "c"), ref="three")
    made = oci_bundle.make_bundle(layout, str(tmp_path / "c"), ref="two", mounts=[])
    assert made["digest"] == second["digest"] and _tree(os.path.join(made["bundle"], "rootfs")) == {
        "two": b"2", "proc": "dir", "dev": "dir", "sys": "dir"}


def test_a_cache_that_is_a_symlink_is_refused(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE])
    (tmp_path / "real").mkdir()
    os.symlink(str(tmp_path / "real"), str(tmp_path / "cache"))
    with pytest.raises(oci_bundle.BundleError, match="is a symbolic link"):
        oci_bundle.make_bundle(layout, str(tmp_path / "cache"))
    assert os.listdir(str(tmp_path / "real")) == []


# --- hostile layers -------------------------------------------------------------------------------------------------

def whiteout_cases():
    v = hostile.v
    return [
        ("whiteout-dotdot", lambda: [F(".wh...", b"")], r"a whiteout of '\.\.'"),
        ("whiteout-of-dot", lambda: [F("opt/.wh..", b"")], r"a whiteout of '\.'"),
        ("whiteout-empty-name", lambda: [F("opt/.wh.", b"")], r"a whiteout of ''"),
        ("whiteout-below-dotdot", lambda: [F("../victim/.wh.secret", b"")], r"'\.\.' in"),
        ("whiteout-absolute-host-path", lambda: [F(v(".wh.secret"), b"")], None),
        ("opaque-absolute-host-dir", lambda: [F(v("dir", ".wh..wh..opq"), b"")], None),
        ("whiteout-through-lower-symlink", lambda: [F("lib/.wh.x", b"")], r"lib is a symlink, not a directory"),
        ("opaque-through-lower-symlink", lambda: [F("lib/.wh..wh..opq", b"")], r"lib is a symlink"),
        # a whiteout removes what lower layers wrote, before its own layer's entries: a link the same layer makes
        # is not there yet, and nothing is removed
        ("symlink-then-whiteout-below-it", lambda: [S("esc", v()), F("esc/.wh.secret", b"")], None),
        ("dir-replaced-by-symlink-then-opaque", lambda: [S("opt", v("dir")), F("opt/.wh..wh..opq", b"")], None),
        ("opaque-of-a-symlink-to-host", lambda: [S("hostdir", v("dir")), F("hostdir/.wh..wh..opq", b"")], None),
        ("opaque-through-lower-link-to-host", lambda: [F("opt/tohost/.wh..wh..opq", b"")],
         r"opt/tohost is a symlink"),
        ("whiteout-through-lower-link-to-host", lambda: [F("opt/tohost/.wh.x", b"")], r"opt/tohost is a symlink"),
        ("whiteout-of-lower-link-to-host", lambda: [F("opt/.wh.tohost", b"")], None),
        ("whiteout-of-a-symlink-removes-the-link-only", lambda: [F(".wh.lib", b"")], None),
        ("opaque-root", lambda: [F(".wh..wh..opq", b""), F("new", b"n")], None),
        ("whiteout-as-symlink-and-dir", lambda: [S("opt/.wh.a", v("secret")), D("opt/.wh.keep")], None),
        ("whiteout-of-whiteout", lambda: [F("opt/.wh..wh.x", b"")], r"a whiteout of '\.wh\.x'"),
        ("whiteout-of-dotdot-below", lambda: [F("opt/keep/.wh...", b"")], r"a whiteout of '\.\.'"),
        # lower links to a host directory, absolute (opt/tohostdir) and relative past the root (opt/up)
        ("whiteout-through-lower-link-to-host-dir", lambda: [F("opt/tohostdir/.wh.inner", b"")],
         r"opt/tohostdir is a symlink"),
        ("opaque-through-lower-link-to-host-dir", lambda: [F("opt/tohostdir/.wh..wh..opq", b"")],
         r"opt/tohostdir is a symlink"),
        ("whiteout-through-relative-escaping-link", lambda: [F("opt/up/.wh.secret", b"")], r"opt/up is a symlink"),
        ("opaque-through-relative-escaping-link", lambda: [F("opt/up/.wh..wh..opq", b"")], r"opt/up is a symlink"),
        # removing a directory that holds links to the host removes the links, never what they point to
        ("whiteout-of-a-dir-holding-links-to-host", lambda: [F(".wh.opt", b"")], None),
        ("opaque-of-a-dir-holding-links-to-host", lambda: [F("opt/.wh..wh..opq", b"")], None),
        # a whiteout naming a link's target (the path it holds, inside the rootfs and as the host path)
        ("whiteout-naming-a-links-target", lambda: [D("usr"), F("usr/.wh.lib", b"")], None),
        ("whiteout-naming-a-links-host-target", lambda: [F(v(".wh.dir"), b""), F(v("dir", ".wh.inner"), b"")],
         None),
    ]


# the jail's corpus cases whose image makes a mount point of the runtime (/dev, /proc, /sys, /home) a link
MOUNT_POINT_LINKS = {"devices-below-symlinks"}


def _hostile_id(case):
    return case[0]


@pytest.fixture
def world(tmp_path):
    host = hostile.make_world(tmp_path)
    hostile.VICTIM = str(host / "victim")
    (host / "jail-cache").mkdir()
    return host


@pytest.mark.skipif(os.geteuid() != 0, reason="the corpus runs as root: owners and setuid bits are applied")
@pytest.mark.parametrize("case", hostile.CASES + whiteout_cases(), ids=_hostile_id)
def test_a_hostile_layer_never_touches_anything_outside_the_cache(world, tmp_path, case):
    members, expect = case[1](), case[2]
    if case[0] in MOUNT_POINT_LINKS:
        expect = "where the container mounts"       # the jail takes it; a bundle refuses a link where runc mounts
    fmt = case[3] if len(case) > 3 else tarfile.GNU_FORMAT
    layout = str(tmp_path / "layout")
    links = [S("opt/tohost", hostile.v("secret")), S("opt/tohostdir", hostile.v("dir")),
             S("opt/up", "../" * 12 + hostile.v("dir").lstrip("/"))]
    oci_helpers.make_layout(layout, [BASE + links, members], fmt=fmt)
    cache = str(world / "jail-cache")
    before = hostile.snapshot(world)
    if expect is None:
        made = oci_bundle.make_bundle(layout, cache)
        assert os.listdir(cache) == [os.path.basename(made["bundle"])]
        hostile._assert_contained(world, cache)     # pylint: disable=protected-access
    else:
        with pytest.raises(safe_tree.JailError, match=expect):
            oci_bundle.make_bundle(layout, cache)
        assert os.listdir(cache) == [], "a failed bundle leaves nothing in the cache"
    assert hostile.snapshot(world) == before, "something outside the cache changed"


# --- registry sources ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, ref", [
    ("docker://registry.example.com:5000/team/image:v1", "registry.example.com:5000/team/image:v1"),
    ("docker://debian", "debian"),
    ("host/name@sha256:" + "a" * 64, "host/name@sha256:" + "a" * 64),
    ("./image.tar", None), ("/srv/layout", None)])
def test_a_registry_source_is_docker_or_a_pinned_name(source, ref):
    assert oci_bundle.registry_reference(source) == ref


@pytest.mark.parametrize("source", ["docker://-v", "docker://a b", "docker://", "docker://x\nid"])
def test_a_reference_skopeo_could_take_for_an_option_or_two_words_is_refused(source):
    with pytest.raises(oci_bundle.BundleError, match="is not an image reference"):
        oci_bundle.registry_reference(source)


def test_a_pinned_name_that_is_a_path_here_is_the_path(tmp_path):
    path = tmp_path / ("image@sha256:" + "b" * 64)
    path.mkdir()
    assert oci_bundle.registry_reference(str(path)) is None


@pytest.mark.parametrize("ref, repo", [("host:5000/a/b:v1", "host:5000/a/b"), ("host:5000/a/b", "host:5000/a/b"),
                                       ("b@sha256:" + "c" * 64, "b"), ("h/b:t@sha256:" + "c" * 64, "h/b")])
def test_the_repository_of_a_reference_keeps_the_port_and_drops_tag_and_digest(ref, repo):
    assert oci_bundle.repository(ref) == repo


def test_skopeo_missing_is_named_with_its_package(tmp_path):
    pulls = oci_bundle.Registry(program=str(tmp_path / "no-skopeo"))
    with pytest.raises(oci_bundle.BundleError, match=r"no-skopeo is not installed \(Debian package skopeo\)"):
        oci_bundle.make_bundle("docker://example.invalid/x:1", str(tmp_path / "cache"), registry=pulls)
    assert not (tmp_path / "cache").exists()


def test_a_bundle_without_our_marker_is_never_removed(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE])
    cache = str(tmp_path / "cache")
    made = oci_bundle.make_bundle(layout, cache)
    assert oci_bundle.plan(layout, cache) == {"bundle": made["bundle"], "digest": made["digest"], "exists": True,
                                              "ours": True,
                                              "runtime": {"user": (os.getuid(), os.getgid()), "mounts": ["/home"]}}
    os.unlink(os.path.join(made["bundle"], oci_bundle.MARKER))
    with pytest.raises(oci_bundle.BundleError, match="was not made by soperator-bundle"):
        oci_bundle.remove_bundle(layout, cache)
    assert os.path.isdir(os.path.join(made["bundle"], "rootfs"))
    os.symlink("/etc/hostname", os.path.join(made["bundle"], oci_bundle.MARKER))     # a link is no marker
    with pytest.raises(oci_bundle.BundleError, match="was not made by soperator-bundle"):
        oci_bundle.remove_bundle(layout, cache)


def test_absent_removes_our_bundle_and_then_changes_nothing(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE])
    archive = oci_helpers.make_archive(tmp_path / "image.tar", layout)
    cache = str(tmp_path / "cache")
    made = oci_bundle.make_bundle(archive, cache)
    assert oci_bundle.plan(archive, cache)["exists"]        # an archive is read in place for the plan
    assert oci_bundle.remove_bundle(archive, cache) == dict(made, changed=True)
    assert os.listdir(cache) == []
    assert oci_bundle.remove_bundle(archive, cache) == dict(made, changed=False)


def test_skopeo_messages_become_sentences(tmp_path):
    said = ('time="2026-11-27T09:14:25Z" level=fatal msg="Error parsing image name \\"docker://h/x:v2\\": reading '
            'manifest v2 in h/x: manifest unknown: manifest unknown"\n')
    assert oci_bundle.explain_skopeo("h/x:v2", said) == (
        'image h/x:v2 was not found in its registry (check the name and the tag) (skopeo: Error parsing image '
        'name "docker://h/x:v2": reading manifest v2 in h/x: manifest unknown: manifest unknown)')
    assert oci_bundle.explain_skopeo("h/x", "something odd\n") == "skopeo failed for h/x: something odd"


def test_the_config_is_rootless_for_its_user_with_the_jails_home_bound(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE])
    cache = str(tmp_path / "cache")
    made = oci_bundle.make_bundle(layout, cache, user=(1500, 1600))
    with open(os.path.join(made["bundle"], "config.json")) as f:
        config = json.load(f)
    # a user namespace mapping its 0 to the user's uid and gid only (runc needs 0 mapped; an unprivileged runtime
    # maps nothing else), the process its root: on the node, the user
    assert {"type": "user"} in config["linux"]["namespaces"]
    assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1500, "size": 1}]
    assert config["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 1600, "size": 1}]
    assert config["process"]["user"] == {"uid": 0, "gid": 0}
    assert config["mounts"][-1] == {"destination": "/home", "type": "none", "source": "/home",
                                    "options": ["rbind", "nosuid", "nodev"]}
    # the mount points exist in the rootfs: a rootless runtime cannot make them in a rootfs it does not own
    for path in ("proc", "dev", "sys", "home"):
        assert os.path.isdir(os.path.join(made["bundle"], "rootfs", path)), path
    # the same image for another user, or other mounts, in the same cache: refused, the bundle untouched
    for other in ({"user": (1501, 1600)}, {"user": (1500, 1600), "mounts": ["/home", "/data"]}):
        with pytest.raises(oci_bundle.BundleError, match="made with another config.json"):
            oci_bundle.make_bundle(layout, cache, **other)
    assert oci_bundle.make_bundle(layout, cache, user=(1500, 1600)) == dict(made, changed=False)


def test_data_mounts_from_the_command_line_and_who_runs_it(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE])
    proc = subprocess.run([sys.executable, PROGRAM, "--source", layout, "--cache", str(tmp_path / "cache"),
                           "--mount", "/data/set", "--mount", "/home", "--json"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    bundle = json.loads(proc.stdout)["bundle"]
    with open(os.path.join(bundle, "config.json")) as f:
        config = json.load(f)
    assert [mt["destination"] for mt in config["mounts"][-2:]] == ["/data/set", "/home"]
    assert config["linux"]["uidMappings"][0]["hostID"] == os.getuid()
    assert os.path.isdir(os.path.join(bundle, "rootfs", "data", "set"))
    proc = subprocess.run([sys.executable, PROGRAM, "--source", layout, "--cache", str(tmp_path / "c2"),
                           "--user", "alice"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "is not UID:GID" in proc.stderr


@pytest.mark.parametrize("mount", ["home", "/home/../etc", "/", "/proc", "/dev/shm", "/sys", "/a/"])
def test_a_mount_that_is_not_a_plain_jail_path_is_refused(tmp_path, mount):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE])
    with pytest.raises(oci_bundle.BundleError, match="is not an absolute, normalized path"):
        oci_bundle.make_bundle(layout, str(tmp_path / "cache"), mounts=[mount])
    assert not os.path.exists(str(tmp_path / "cache"))     # refused before anything is written


def test_an_image_whose_mount_point_is_a_link_makes_no_bundle(tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [BASE + [S("home", "/etc")]])
    cache = str(tmp_path / "cache")
    with pytest.raises(oci_bundle.BundleError, match="the image's /home is not a directory"):
        oci_bundle.make_bundle(layout, cache)
    assert os.listdir(cache) == []
