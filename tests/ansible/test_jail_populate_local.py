"""jail_populate with target=local through `ansible localhost -m` (a real Ansible run): the result, check mode,
diff and a refusal as a user sees them. The populate logic itself is tested in tests/unit/node/test_jail.py."""
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
        null = tarfile.TarInfo("dev/null")
        null.type, null.devmajor, null.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(null)
    return str(path)


def test_populate_then_unchanged_with_check_mode_and_diff(tmp_path):
    source, jail = rootfs(tmp_path / "rootfs.tar.gz"), str(tmp_path / "jail")
    planned = run_module(check=True, diff=True, target="local", source=source, jail_dir=jail)
    assert not planned.get("failed") and planned["changed"] and planned["outcome"] == "populated"
    assert planned["diff"]["before"]["sentinel"] is None and planned["diff"]["after"]["sentinel"]["source"] == source
    assert not os.path.exists(jail)

    done = run_module(diff=True, target="local", source=source, jail_dir=jail, source_label="jail:1")
    assert done["changed"] and done["outcome"] == "populated", done
    # a device node is not written, and listing it does not make Ansible take the task for skipped
    assert done["skipped_entries"] == ["dev/null (device node)"] and not done.get("skipped")
    assert planned["skipped_entries"] == ["dev/null (device node)"] and not planned.get("skipped")
    assert done["sentinel"]["source"] == "jail:1" and done["jail_dir"] == jail
    with open(os.path.join(jail, ".soperator-jail.json")) as f:
        assert json.load(f) == done["sentinel"]
    assert os.readlink(os.path.join(jail, "bin")) == "usr/bin"
    assert not os.path.lexists(os.path.join(jail, "dev", "null"))

    again = run_module(target="local", source=source, jail_dir=jail)
    assert not again["changed"] and again["outcome"] == "unchanged" and again["sentinel"] == done["sentinel"]


def test_a_jail_we_did_not_populate_is_refused(tmp_path):
    source, jail = rootfs(tmp_path / "rootfs.tar.gz"), tmp_path / "jail"
    (jail / "home" / "alice").mkdir(parents=True)
    refused = run_module(target="local", source=source, jail_dir=str(jail))
    assert refused["failed"] and refused["outcome"] == "refused" and "overwrite=always" in refused["msg"]
    assert os.listdir(str(jail)) == ["home"]


def test_an_unsafe_archive_fails_in_check_mode_and_for_real_naming_the_member(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    source, jail = str(tmp_path / "bad.tar"), tmp_path / "jail"
    with tarfile.open(source, "w") as tar:
        link = tarfile.TarInfo("esc")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        tar.addfile(tarfile.TarInfo("esc/pwned"))
    for check in (True, False):
        failed = run_module(check=check, target="local", source=source, jail_dir=str(jail))
        assert failed["failed"] and "unsafe member 'esc/pwned': esc is a symlink" in failed["msg"], failed
        assert "Traceback" not in failed.get("module_stderr", "")
    assert os.listdir(str(outside)) == [] and not jail.exists()     # refused before the jail is even made


def test_a_linked_jail_dir_is_refused_naming_the_option(tmp_path):
    source, target, link = rootfs(tmp_path / "rootfs.tar.gz"), tmp_path / "volume", tmp_path / "jail"
    target.mkdir()
    os.chmod(str(target), 0o777)
    os.symlink(str(target), str(link))
    for check in (True, False):
        failed = run_module(check=check, target="local", source=source, jail_dir=str(link))
        assert failed["failed"] and failed["msg"] == (
            "jail_dir %s is a symbolic link: pass the directory it points to" % link), failed
    assert os.listdir(str(target)) == [] and os.stat(str(target)).st_mode & 0o777 == 0o777


def test_the_time_bound_is_an_option(tmp_path):
    source, jail = rootfs(tmp_path / "rootfs.tar.gz"), str(tmp_path / "jail")
    refused = run_module(target="local", source=source, jail_dir=jail, timeout=0)
    assert refused["failed"] and refused["msg"] == "timeout must be > 0, got 0" and not os.path.exists(jail)
    done = run_module(target="local", source=source, jail_dir=jail, timeout=300)
    assert done["changed"] and done["outcome"] == "populated", done
