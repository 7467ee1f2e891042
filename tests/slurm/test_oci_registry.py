"""Registry images into bundles: a real registry (Debian's docker-registry, on loopback, tests/registry_server.py)
holds images built here and pushed with skopeo; oci_bundle pulls them back with skopeo by the manifest digest the
registry resolves, and names the bundle by it. No Slurm daemon: light, no heavy lock."""
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle, safe_tree
from ansible_collections.soperator.slurm.plugins.modules import container_bundle
from ci_skips import environmental
import oci_helpers
import registry_server
from repo_root import ROOT

PROGRAM = os.path.join(ROOT, "plugins", "module_utils", "node", "oci_bundle.py")
PASSWORD = "pull-secret-4711"


def _dir(name):
    return (oci_helpers.member(name, tarfile.DIRTYPE), None)


def _file(name, data):
    return (oci_helpers.member(name, mode=0o644), data)


@pytest.fixture
def registry(tmp_path):
    if registry_server.REGISTRY is None or registry_server.SKOPEO is None:
        pytest.skip(environmental("docker-registry or skopeo is not installed (make deps installs both)"))
    (tmp_path / "registry").mkdir()
    server = registry_server.Registry(str(tmp_path / "registry"))
    yield server
    server.stop()


def _image(tmp_path, name, text, ref="v1"):
    layout = str(tmp_path / name)
    desc = oci_helpers.make_layout(layout, [[_dir("etc"), _file("etc/os-release", b"ID=base\n"),
                                             _file("etc/gone", b"x")],
                                            [_file("etc/os-release", text), _file("etc/.wh.gone", b"")]], ref=ref)
    return layout, desc


def _rootfs(bundle):
    top = os.path.join(bundle, "rootfs", "etc")
    return {name: open(os.path.join(top, name), "rb").read() for name in sorted(os.listdir(top))}


def test_a_registry_image_becomes_a_bundle_named_by_its_digest_and_a_moved_tag_makes_a_new_one(registry, tmp_path):
    layout, desc = _image(tmp_path, "one", b"ID=one\n")
    registry.push(layout, "v1", "tiny:v1")
    cache = str(tmp_path / "cache")
    source = "docker://%s/tiny:v1" % registry.host
    pulls = oci_bundle.Registry(tls_verify=False)
    assert oci_bundle.plan(source, cache, registry=pulls) == {
        "bundle": os.path.join(cache, "sha256-" + desc["digest"].split(":")[1]), "digest": desc["digest"],
        "exists": False, "ours": False, "runtime": None}
    made = oci_bundle.make_bundle(source, cache, registry=pulls)
    assert made == {"bundle": os.path.join(cache, "sha256-" + desc["digest"].split(":")[1]),
                    "digest": desc["digest"], "changed": True}
    assert _rootfs(made["bundle"]) == {"os-release": b"ID=one\n"}
    # pulled by the digest the registry resolved, not by the tag
    assert [c.split()[:2] for c in pulls.commands] == [["skopeo", "inspect"]] * 2 + [["skopeo", "copy"]]
    assert "docker://%s/tiny@%s" % (registry.host, desc["digest"]) in pulls.commands[-1]
    assert os.listdir(cache) == [os.path.basename(made["bundle"])], "nothing but the bundle is left in the cache"

    again = oci_bundle.Registry(tls_verify=False)
    assert oci_bundle.make_bundle(source, cache, registry=again) == dict(made, changed=False)
    assert [c.split()[:2] for c in again.commands] == [["skopeo", "inspect"]], "a bundle there: nothing pulled"
    pinned = "%s/tiny@%s" % (registry.host, desc["digest"])      # NAME@DIGEST, no docker:// needed
    assert oci_bundle.make_bundle(pinned, cache, registry=again) == dict(made, changed=False)

    layout2, desc2 = _image(tmp_path, "two", b"ID=two\n")
    registry.push(layout2, "v1", "tiny:v1")      # the tag moves
    moved = oci_bundle.make_bundle(source, cache, registry=oci_bundle.Registry(tls_verify=False))
    assert moved["changed"] and moved["digest"] == desc2["digest"] != desc["digest"]
    assert _rootfs(moved["bundle"]) == {"os-release": b"ID=two\n"} and _rootfs(made["bundle"]) == {
        "os-release": b"ID=one\n"}
    assert sorted(os.listdir(cache)) == sorted(os.path.basename(b) for b in (made["bundle"], moved["bundle"]))

    # the user's command: the bundle's path on stdout, for srun --container=
    proc = subprocess.run([sys.executable, PROGRAM, source, "--cache", cache, "--no-tls-verify"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert (proc.returncode, proc.stdout) == (0, moved["bundle"] + "\n"), proc.stderr
    # removed: only what this program made, and then gone
    gone = oci_bundle.remove_bundle(source, cache, registry=oci_bundle.Registry(tls_verify=False))
    assert gone == dict(moved, changed=True) and os.listdir(cache) == [os.path.basename(made["bundle"])]


def _cli(*argv):
    proc = subprocess.run([sys.executable, PROGRAM] + list(argv), capture_output=True, text=True, timeout=300,
                          check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_missing_image_or_an_unreachable_registry_gives_a_message_not_a_traceback(registry, tmp_path):
    layout, unused = _image(tmp_path, "one", b"ID=one\n")
    registry.push(layout, "v1", "tiny:v1")
    cache = str(tmp_path / "cache")
    code, out, err = _cli("docker://%s/tiny:v2" % registry.host, "--cache", cache, "--no-tls-verify")
    assert (code, out) == (1, "")
    assert err.startswith("soperator-bundle: image %s/tiny:v2 was not found in its registry" % registry.host), err
    code, out, err = _cli("docker://%s/nothing:v1" % registry.host, "--cache", cache, "--no-tls-verify")
    assert code == 1 and "image %s/nothing:v1 was not found" % registry.host in err, err
    code, out, err = _cli("docker://%s/tiny:v1" % registry.host, "--cache", cache)     # TLS verified: plain HTTP
    assert code == 1 and "speaks plain HTTP: only for a registry you trust, pass --no-tls-verify" in err, err
    registry.stop()
    code, out, err = _cli("docker://%s/tiny:v1" % registry.host, "--cache", cache, "--no-tls-verify")
    assert code == 1 and "cannot reach the registry of %s/tiny:v1" % registry.host in err, err
    assert "Traceback" not in err and not os.path.exists(cache)


def test_credentials_come_from_the_auth_file_and_are_never_shown(tmp_path, capsys):
    started = time.time() - 1
    if registry_server.REGISTRY is None or registry_server.SKOPEO is None:
        pytest.skip(environmental("docker-registry or skopeo is not installed (make deps installs both)"))
    (tmp_path / "registry").mkdir()
    server = registry_server.Registry(str(tmp_path / "registry"), users={"alice": PASSWORD})
    try:
        auth = str(tmp_path / "auth.json")
        with open(auth, "w") as f:
            json.dump({"auths": {server.host: {"auth": __import__("base64").b64encode(
                ("alice:" + PASSWORD).encode()).decode()}}}, f)
        layout, desc = _image(tmp_path, "one", b"ID=one\n")
        server.push(layout, "v1", "private:v1", auth_file=auth)
        source, cache = "docker://%s/private:v1" % server.host, str(tmp_path / "cache")
        code, out, err = _cli(source, "--cache", cache, "--no-tls-verify")
        assert code == 1 and err.startswith(
            "soperator-bundle: the registry refused access to %s/private:v1: give credentials" % server.host), err
        code, out, err = _cli(source, "--cache", cache, "--no-tls-verify", "--auth-file", auth, "--json")
        assert code == 0, err
        made = json.loads(out)
        assert made["digest"] == desc["digest"] and made["changed"] and _rootfs(made["bundle"]) == {
            "os-release": b"ID=one\n"}
        assert all("--authfile %s" % auth in c for c in made["commands"])
        assert PASSWORD not in out + err and "alice" not in out + err

        # the module: check mode resolves the digest through the registry (no pull), then the real run pulls
        layout2, desc2 = _image(tmp_path, "two", b"ID=two\n")
        server.push(layout2, "v1", "private:v2", auth_file=auth)
        params = dict(source="docker://%s/private:v2" % server.host, cache=cache, tls_verify=False,
                      registry_username="alice", registry_password=PASSWORD, _ansible_diff=True)
        code, checked = _module(capsys, _ansible_check_mode=True, **params)
        assert code == 0 and checked["changed"] and checked["digest"] == desc2["digest"], checked
        assert [c.split()[:2] for c in checked["commands"]] == [["skopeo", "inspect"]]
        assert not os.path.exists(checked["bundle"]) and checked["diff"]["after"]["state"] == "present"
        code, made = _module(capsys, **params)
        assert code == 0 and made["changed"] and _rootfs(made["bundle"]) == {"os-release": b"ID=two\n"}
        assert [c.split()[:2] for c in made["commands"]] == [["skopeo", "inspect"], ["skopeo", "copy"]]
        code, again = _module(capsys, **params)
        assert code == 0 and not again["changed"]
        assert PASSWORD not in json.dumps([checked, made, again])
        params["registry_password"] = "wrong"
        code, refused = _module(capsys, **params)
        assert code == 1 and "the registry refused access to" in refused["msg"], refused
        assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("soperator-auth-")
                    and os.stat(os.path.join(tempfile.gettempdir(), n)).st_mtime >= started]
    finally:
        server.stop()


def _module(capsys, **params):
    with patch_module_args(params):
        with pytest.raises(SystemExit) as exit_:
            container_bundle.main()
    return exit_.value.code, json.loads(capsys.readouterr().out)


def test_a_zstd_layer_is_refused_with_a_clear_message_and_leaves_nothing(registry, tmp_path):
    layout = str(tmp_path / "zstd")
    plain = oci_helpers.layer_bytes([_dir("etc"), _file("etc/os-release", b"ID=z\n")], compress=False)
    packed = subprocess.run(["zstd", "-q", "-c"], input=plain, capture_output=True, timeout=60, check=True).stdout
    oci_helpers.make_layout(layout, [])
    with open(os.path.join(layout, "index.json")) as f:
        manifest_desc = json.load(f)["manifests"][0]
    with open(os.path.join(layout, "blobs", "sha256", manifest_desc["digest"].split(":")[1])) as f:
        manifest = json.load(f)
    manifest["layers"] = [oci_helpers.descriptor(layout, packed, "application/vnd.oci.image.layer.v1.tar+zstd")]
    desc = oci_helpers.descriptor(layout, json.dumps(manifest).encode(), oci_helpers.MANIFEST,
                                  annotations=manifest_desc["annotations"])
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [desc]}, f)
    registry.push(layout, "latest", "zstd:v1")
    cache = str(tmp_path / "cache")
    code, out, err = _cli("docker://%s/zstd:v1" % registry.host, "--cache", cache, "--no-tls-verify")
    assert code == 1 and "layer 0 of docker://%s/zstd:v1 is zstd-compressed" % registry.host in err, err
    assert "which this Python cannot read" in err and os.listdir(cache) == []


@pytest.mark.parametrize("upper, expect", [
    ([_file("esc/pwned", b"x")], "esc is a symlink"),
    ([_file("esc/.wh.secret", b"")], "esc is a symlink"),
    ([_file("../victim/pwned", b"x")], r"'\.\.' in"),
], ids=["write-through-link", "whiteout-through-link", "dotdot"])
def test_a_hostile_pulled_layer_is_refused_and_writes_nothing_outside_the_cache(registry, tmp_path, upper, expect):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_text("host secret\n")
    layout = str(tmp_path / "hostile")
    lower = [(oci_helpers.member("esc", tarfile.SYMTYPE, 0o777, str(victim)), None)]
    oci_helpers.make_layout(layout, [lower, upper], ref="v1")
    registry.push(layout, "v1", "hostile:v1")
    cache = str(tmp_path / "cache")
    with pytest.raises(safe_tree.JailError, match=expect):
        oci_bundle.make_bundle("docker://%s/hostile:v1" % registry.host, cache,
                               registry=oci_bundle.Registry(tls_verify=False))
    assert os.listdir(cache) == [] and os.listdir(str(victim)) == ["secret"]
    assert (victim / "secret").read_text() == "host secret\n"


def test_a_multi_arch_index_is_followed_to_the_image_of_the_architecture(registry, tmp_path):
    layout = str(tmp_path / "multi")
    amd = oci_helpers.make_layout(layout, [[_dir("etc"), _file("etc/os-release", b"ID=amd\n")]], ref="a")
    arm = oci_helpers.make_layout(layout, [[_dir("etc"), _file("etc/os-release", b"ID=arm\n")]], ref="b")
    entries = [dict(d, platform={"os": "linux", "architecture": arch}) for d, arch in ((amd, "amd64"), (arm, "arm64"))]
    index = oci_helpers.descriptor(layout, json.dumps({"schemaVersion": 2, "mediaType": oci_bundle.INDEX_TYPES[0],
                                                       "manifests": entries}).encode(),
                                   oci_bundle.INDEX_TYPES[0], annotations={oci_bundle.REF_ANNOTATION: "multi"})
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [index]}, f)
    subprocess.run([registry_server.SKOPEO, "copy", "--quiet", "--all", "--dest-tls-verify=false",
                    "oci:%s:multi" % layout, "docker://%s/multi:v1" % registry.host],
                   check=True, timeout=120, capture_output=True)
    cache, source = str(tmp_path / "cache"), "docker://%s/multi:v1" % registry.host
    for arch, desc, text in (("amd64", amd, b"ID=amd\n"), ("arm64", arm, b"ID=arm\n")):
        made = oci_bundle.make_bundle(source, cache, arch=arch, registry=oci_bundle.Registry(tls_verify=False))
        assert made["digest"] == desc["digest"] and _rootfs(made["bundle"]) == {"os-release": text}
    with pytest.raises(oci_bundle.BundleError, match="lists 0 images for linux/s390x"):
        oci_bundle.make_bundle(source, cache, arch="s390x", registry=oci_bundle.Registry(tls_verify=False))
