"""jail_populate with target=local through `ansible localhost -m` (a real Ansible run): the result, check mode,
diff and a refusal as a user sees them. The populate logic itself is tested in tests/unit/test_jail.py."""
import io
import json
import os
import subprocess
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_module(check=False, diff=False, **args):
    argv = ["ansible", "localhost", "-m", "soperator.slurm.jail_populate", "-a", json.dumps(args)]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("no result:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))


def rootfs(path):
    with tarfile.open(str(path), "w:gz") as tar:
        for name, data in (("etc/os-release", b"ID=jail\n"), ("usr/bin/hello", b"#!/bin/sh\necho hi\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("bin")
        link.type, link.linkname = tarfile.SYMTYPE, "usr/bin"
        tar.addfile(link)
    return str(path)


def test_populate_then_unchanged_with_check_mode_and_diff(tmp_path):
    source, jail = rootfs(tmp_path / "rootfs.tar.gz"), str(tmp_path / "jail")
    planned = run_module(check=True, diff=True, target="local", source=source, jail_dir=jail)
    assert not planned.get("failed") and planned["changed"] and planned["outcome"] == "populated"
    assert planned["diff"]["before"]["sentinel"] is None and planned["diff"]["after"]["sentinel"]["source"] == source
    assert not os.path.exists(jail)

    done = run_module(diff=True, target="local", source=source, jail_dir=jail, source_label="jail:1")
    assert done["changed"] and done["outcome"] == "populated", done
    assert done["sentinel"]["source"] == "jail:1" and done["jail_dir"] == jail
    with open(os.path.join(jail, ".soperator-jail.json")) as f:
        assert json.load(f) == done["sentinel"]
    assert os.readlink(os.path.join(jail, "bin")) == "usr/bin"

    again = run_module(target="local", source=source, jail_dir=jail)
    assert not again["changed"] and again["outcome"] == "unchanged" and again["sentinel"] == done["sentinel"]


def test_a_jail_we_did_not_populate_is_refused(tmp_path):
    source, jail = rootfs(tmp_path / "rootfs.tar.gz"), tmp_path / "jail"
    (jail / "home" / "alice").mkdir(parents=True)
    refused = run_module(target="local", source=source, jail_dir=str(jail))
    assert refused["failed"] and refused["outcome"] == "refused" and "overwrite=always" in refused["msg"]
    assert os.listdir(str(jail)) == ["home"]
