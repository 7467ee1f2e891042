"""`slurm_cluster state=rendered` through real ansible-playbook: files, idempotence, check mode, diff, bad specs."""
import json
import os
import shutil

import pytest
import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
GPU = os.path.join(ROOT, "examples", "gpu-accounting.yml")

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed")


def playbook(*args, spec=SMALL, dest, expect_rc=0):
    done = ansible_run.playbook("render.yml", "-e", "spec_file=%s" % spec, "-e", "render_dest=%s" % dest, *args,
                                expect_rc=expect_rc, timeout=300)
    return done.result(), done.stats()


def tree(dest):
    files = {}
    for folder, _dirs, names in os.walk(dest):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, dest)] = f.read()
    return files


def test_render_writes_manifests_and_slurm_configs(tmp_path):
    dest = tmp_path / "out"
    task, stats = playbook(dest=str(dest), spec=GPU)
    assert task["changed"] and stats["changed"] == 1
    files = tree(dest)
    for name in ("slurm.conf", "cgroup.conf", "gres.conf", "plugstack.conf", "mpi.conf", "topology.conf",
                 "slurmdbd.conf"):
        assert "slurm/" + name in files
    manifests = [yaml.safe_load(v) for k, v in files.items() if k.startswith("manifests/")]
    kinds = {m["kind"] for m in manifests}
    assert {"StatefulSet", "Service", "ConfigMap", "Secret", "Job", "PodDisruptionBudget"} <= kinds
    assert {m["metadata"]["name"] for m in manifests if m["kind"] == "StatefulSet"} >= {"gpu", "cpu"}
    secret_files = [k for k in files if "-secret-" in k]
    assert secret_files and all(os.stat(dest / k).st_mode & 0o777 == 0o600 for k in secret_files)
    assert task["cluster"]["node_sets"][1]["nodes"] == "gpu-[0-63]"


def test_second_run_is_unchanged_and_byte_identical(tmp_path):
    dest = tmp_path / "out"
    playbook(dest=str(dest))
    first = tree(dest)
    task, stats = playbook(dest=str(dest))
    assert not task["changed"] and stats["changed"] == 0
    assert {f["action"] for f in task["files"]} == {"unchanged"}
    assert tree(dest) == first


def test_same_spec_renders_the_same_non_secret_files_anywhere(tmp_path):
    playbook(dest=str(tmp_path / "a"))
    playbook(dest=str(tmp_path / "b"))
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert a.keys() == b.keys()
    differing = sorted(k for k in a if a[k] != b[k])
    # Only generated secret material differs between two fresh folders (it is unique per cluster), and so the
    # digests of the Secret manifests in render's record of what it wrote.
    assert differing and all("-secret-" in k for k in differing if k != ".soperator-render.json")


def test_check_mode_writes_nothing_and_reports_the_plan(tmp_path):
    dest = tmp_path / "out"
    task, dummy = playbook("--check", dest=str(dest))
    assert task["changed"] and {f["action"] for f in task["files"]} == {"created"}
    assert not dest.exists()


def test_diff_hides_secret_data(tmp_path):
    dest = tmp_path / "out"
    task, dummy = playbook("--diff", dest=str(dest))
    diffs = task["diff"]
    secret_diffs = [d for d in diffs if "-secret-" in d["after_header"]]
    assert secret_diffs and all(d["after"] == "<secret data hidden>" for d in secret_diffs)
    conf = next(d for d in diffs if d["after_header"] == "slurm/slurm.conf")
    assert "NodeName=cpu-[0-3]" in conf["after"]
    munge = next(f for f in tree(dest) if "secret" in f and "munge" in f)
    data = yaml.safe_load(tree(dest)[munge])["data"]["munge.key"]
    assert data not in json.dumps(task)


def test_spec_change_touches_only_what_it_should_and_removes_stale_files(tmp_path):
    dest = tmp_path / "out"
    playbook(dest=str(dest), spec=GPU)
    before = tree(dest)
    docs = list(yaml.safe_load_all(open(GPU)))
    docs[0]["spec"]["partitions"] = [p for p in docs[0]["spec"]["partitions"] if p["name"] != "cpu"]
    for p in docs[0]["spec"]["partitions"]:
        p["nodeSets"] = [n for n in p["nodeSets"] if n != "cpu"]
    docs = [d for d in docs if d["metadata"]["name"] != "cpu"]
    spec = tmp_path / "no-cpu.yml"
    spec.write_text(yaml.safe_dump_all(docs))
    task, dummy = playbook("--diff", dest=str(dest), spec=str(spec))
    actions = {f["path"]: f["action"] for f in task["files"]}
    removed = [p for p, a in actions.items() if a == "removed"]
    assert removed and all("cpu" in p for p in removed)
    assert actions["slurm/slurm.conf"] == "updated"
    assert all(a == "unchanged" for p, a in actions.items() if "secret" in p)
    after = tree(dest)
    assert all(after[p] == before[p] for p, a in actions.items() if a == "unchanged")
    assert not any(p in after for p in removed)


def test_invalid_spec_fails_naming_the_field_and_writes_nothing(tmp_path):
    docs = list(yaml.safe_load_all(open(SMALL)))
    docs[1]["spec"]["replicas"] = -1
    docs[0]["spec"]["login"]["replicas"] = "two"
    spec = tmp_path / "bad.yml"
    spec.write_text(yaml.safe_dump_all(docs))
    dest = tmp_path / "out"
    task, dummy = playbook(dest=str(dest), spec=str(spec), expect_rc=2)
    assert task["failed"]
    paths = {e["path"] for e in task["errors"]}
    assert paths == {"NodeSet/cpu spec.replicas", "SlurmCluster/small spec.login.replicas"}
    assert "must be >= 0, got -1" in task["msg"]
    assert not dest.exists()


def test_render_keeps_the_users_files_and_refuses_a_symlink_without_traceback(tmp_path):
    dest = tmp_path / "out"
    (dest / "slurm" / "local.d").mkdir(parents=True)
    (dest / "slurm" / "slurm.conf.local").write_text("# mine\n")
    playbook(dest=str(dest))
    task, dummy = playbook(dest=str(dest))
    assert not task["changed"] and (dest / "slurm" / "slurm.conf.local").read_text() == "# mine\n"
    assert (dest / "slurm" / "local.d").is_dir()
    victim = tmp_path / "victim.conf"
    victim.write_text("victim\n")
    os.unlink(str(dest / "slurm" / "cgroup.conf"))
    os.symlink(str(victim), str(dest / "slurm" / "cgroup.conf"))
    task, dummy = playbook(dest=str(dest), expect_rc=2)
    assert task["failed"] and "cgroup.conf is a symlink" in task["msg"] and "Traceback" not in json.dumps(task)
    assert victim.read_text() == "victim\n" and os.path.islink(str(dest / "slurm" / "cgroup.conf"))
