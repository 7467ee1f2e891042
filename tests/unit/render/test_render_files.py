"""render.py's on-disk conventions: which manifest files hold Secrets, and what render may touch in DEST."""
import hashlib
import json
import os
import shutil
import stat

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.render import cluster as render
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from repo_root import ROOT


def test_secret_files_are_told_by_kind_prefix_not_by_substring():
    assert render._is_secret_file("05-secret-demo-munge.yaml")
    assert not render._is_secret_file("10-statefulset-my-secret-x.yaml")
    assert not render._is_secret_file("05-secret-demo-munge.yaml.orig")


def test_read_secret_material_reads_only_our_secrets(tmp_path):
    folder = tmp_path / render.MANIFESTS_DIR
    folder.mkdir()
    ours = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-munge", "labels": {
        "app.kubernetes.io/managed-by": "soperator.slurm"}}, "data": {"munge.key": "a2V5"}}
    foreign = dict(ours, metadata={"name": "other", "labels": {}})
    (folder / "05-secret-demo-munge.yaml").write_text(yaml.safe_dump(ours))
    (folder / "05-secret-other.yaml").write_text(yaml.safe_dump(foreign))
    (folder / "10-statefulset-my-secret-x.yaml").write_text("kind: [not, read]\n")
    assert render.read_secret_material(str(tmp_path)) == {"demo-munge": {"munge.key": b"key"}}


# --- write_rendered: what render may touch in DEST ------------------------------------------------------------------

SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")


def rendered_small(dest=None, **changes):
    """small-cpu.yml rendered, with the Secrets of an earlier render in dest (as the module does)."""
    with open(SMALL) as f:
        docs = load_documents(f.read())
    docs[0]["spec"].update(changes)
    return render.render_cluster(spec.build_model(docs), render.read_secret_material(str(dest)) if dest else None)


def snapshot(root):
    """Every entry under root: (kind, bytes or link target, mode)."""
    out = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[os.path.relpath(path, root)] = ("link", os.readlink(path), None)
            elif stat.S_ISDIR(st.st_mode):
                out[os.path.relpath(path, root)] = ("dir", None, st.st_mode)
            else:
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = ("file", f.read(), st.st_mode)
    return out


def actions(files):
    return dict((f["path"], f["action"]) for f in files)


def test_render_leaves_files_it_did_not_write_and_folders_alone(tmp_path):
    dest = tmp_path / "out"
    (dest / "slurm" / "extra.d").mkdir(parents=True)
    (dest / "slurm" / "extra.d" / "site.conf").write_text("user's\n")
    (dest / "slurm" / "slurm.conf.local").write_text("# user's own include\n")
    (dest / "manifests").mkdir()
    (dest / "manifests" / "99-configmap-mine.yaml").write_text("kind: ConfigMap\n")
    (dest / "notes.txt").write_text("mine\n")
    files, dummy = render.write_rendered(str(dest), rendered_small())
    assert set(actions(files).values()) == {"created"}
    # a second render with a changed spec has stale files of its own to remove, and still none of the user's
    files, dummy = render.write_rendered(str(dest), rendered_small(accounting={"enabled": True}))
    files, dummy = render.write_rendered(str(dest), rendered_small())
    removed = [p for p, a in actions(files).items() if a == "removed"]
    assert "slurm/slurmdbd.conf" in removed
    assert not any(p in removed for p in ("slurm/slurm.conf.local", "manifests/99-configmap-mine.yaml"))
    assert (dest / "slurm" / "slurm.conf.local").read_text() == "# user's own include\n"
    assert (dest / "slurm" / "extra.d" / "site.conf").read_text() == "user's\n"
    assert (dest / "manifests" / "99-configmap-mine.yaml").exists() and (dest / "notes.txt").exists()
    assert not (dest / "slurm" / "slurmdbd.conf").exists()


def test_a_stale_file_edited_since_it_was_rendered_is_kept_and_reported(tmp_path):
    dest = tmp_path / "out"
    render.write_rendered(str(dest), rendered_small(accounting={"enabled": True}))
    (dest / "slurm" / "slurmdbd.conf").write_text("edited by hand\n")
    files, diffs = render.write_rendered(str(dest), rendered_small(), check_mode=True)
    assert actions(files)["slurm/slurmdbd.conf"] == "kept"
    assert not any(d["before_header"] == "slurm/slurmdbd.conf" for d in diffs)
    files, dummy = render.write_rendered(str(dest), rendered_small())
    assert actions(files)["slurm/slurmdbd.conf"] == "kept"
    assert (dest / "slurm" / "slurmdbd.conf").read_text() == "edited by hand\n"
    # it is the user's now: a third render does not list it at all
    files, dummy = render.write_rendered(str(dest), rendered_small(dest))
    assert "slurm/slurmdbd.conf" not in actions(files)
    assert set(actions(files).values()) == {"unchanged"}


def test_a_symlink_where_render_writes_fails_before_any_write(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "slurm.conf").write_text("victim\n")
    (victim / "secret").write_text("top secret\n")
    os.chmod(str(victim / "secret"), 0o600)
    dest = tmp_path / "out"
    render.write_rendered(str(dest), rendered_small())
    os.unlink(str(dest / "slurm" / "cgroup.conf"))
    os.unlink(str(dest / "slurm" / "slurm.conf"))
    os.symlink(str(victim / "slurm.conf"), str(dest / "slurm" / "slurm.conf"))
    before_victim, before_dest = snapshot(str(victim)), snapshot(str(dest))
    for check_mode in (True, False):
        with pytest.raises(render.RenderDestError, match="slurm.conf is a symlink"):
            render.write_rendered(str(dest), rendered_small(), check_mode=check_mode)
    assert snapshot(str(victim)) == before_victim and snapshot(str(dest)) == before_dest
    # a linked folder, and a linked Secret manifest read back for its data
    os.unlink(str(dest / "slurm" / "slurm.conf"))
    shutil.rmtree(str(dest / "slurm"))
    os.symlink(str(victim), str(dest / "slurm"))
    with pytest.raises(render.RenderDestError, match="is a symlink, not a directory"):
        render.write_rendered(str(dest), rendered_small())
    os.unlink(str(dest / "slurm"))
    secret = next(n for n in os.listdir(str(dest / "manifests")) if render._is_secret_file(n))
    os.unlink(str(dest / "manifests" / secret))
    os.symlink(str(victim / "secret"), str(dest / "manifests" / secret))
    with pytest.raises(render.RenderDestError, match="is a symlink"):
        render.read_secret_material(str(dest))
    assert snapshot(str(victim)) == before_victim


def test_a_folder_where_a_rendered_file_goes_fails_before_any_write(tmp_path):
    dest = tmp_path / "out"
    (dest / "slurm" / "slurm.conf").mkdir(parents=True)
    with pytest.raises(render.RenderDestError, match="not a regular file"):
        render.write_rendered(str(dest), rendered_small())
    assert sorted(os.listdir(str(dest))) == ["slurm"] and os.listdir(str(dest / "slurm")) == ["slurm.conf"]


def test_a_record_that_is_not_ours_is_refused(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / render.RECORD).write_text('{"files": ["../../etc/passwd"]}')
    with pytest.raises(render.RenderDestError, match="not a render record of ours"):
        render.write_rendered(str(dest), rendered_small())
    assert os.listdir(str(dest)) == [render.RECORD]


def test_recorded_names_never_reach_outside_dest(tmp_path):
    """A record edited to name a path outside our folders (through .., absolute) is refused, nothing removed."""
    dest = tmp_path / "out"
    render.write_rendered(str(dest), rendered_small())
    outside = tmp_path / "outside.txt"
    outside.write_text("x\n")
    good = (dest / render.RECORD).read_text()
    digest = hashlib.sha256(b"x\n").hexdigest()
    for name in ("../outside.txt", "slurm/../../outside.txt", str(outside), "slurm/sub/x", "slurm/.x"):
        record = json.loads(good)
        record["files"][name] = digest
        (dest / render.RECORD).write_text(json.dumps(record))
        with pytest.raises(render.RenderDestError, match="render never writes"):
            render.write_rendered(str(dest), rendered_small())
    assert outside.read_text() == "x\n"


def test_monitoring_files_for_a_plain_prometheus_and_grafana(tmp_path):
    """With the exporter on, DEST gets the rule file and the dashboards; off again, render removes them (its own)."""
    from ansible_collections.soperator.slurm.plugins.module_utils.observe import alerts, dashboards
    dest = tmp_path / "out"
    off = render.write_rendered(str(dest), rendered_small(dest))[0]
    assert not [f for f in off if f["path"].startswith(("prometheus", "grafana"))]
    on = rendered_small(dest, observability={"exporter": {"enabled": True}})
    files = actions(render.write_rendered(str(dest), on)[0])
    boards = dashboards.dashboards()
    assert files["prometheus/soperator-slurm-rules.yml"] == "created"
    assert sorted(p for p in files if p.startswith("grafana/")) == sorted("grafana/" + n for n in boards)
    rules = (dest / "prometheus" / "soperator-slurm-rules.yml").read_text()
    assert rules.startswith("# Alert rules of soperator.slurm (cluster small)")
    assert yaml.safe_load(rules) == alerts.rule_groups({"job": "small-exporter", "namespace": "slurm"})
    for name, board in boards.items():
        assert json.loads((dest / "grafana" / name).read_text()) == board
    again = actions(render.write_rendered(str(dest), on)[0])
    assert set(again.values()) == {"unchanged"}
    gone = actions(render.write_rendered(str(dest), rendered_small(dest))[0])
    assert gone["prometheus/soperator-slurm-rules.yml"] == "removed"
    assert not (dest / "prometheus" / "soperator-slurm-rules.yml").exists()
