"""The local exporter runs from the sources local/exporter.py writes under <state_dir>/lib, not from the collection:
those files alone must import (a module the exporter needs but the list leaves out fails only when the daemon starts)."""
import os
import subprocess
import sys

from ansible_collections.soperator.slurm.plugins.module_utils.local.exporter import exporter_files
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout
from repo_root import ROOT


def test_the_written_sources_import_on_their_own(tmp_path):
    for path, text in exporter_files(Layout(str(tmp_path))).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    # Only the written lib (first: a regular package that shadows any other ansible_collections) and the directory
    # prometheus_client is installed in; the exporter's own interpreter has it (requirements.txt).
    import prometheus_client
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), os.path.dirname(os.path.dirname(
        prometheus_client.__file__))])}
    proc = subprocess.run([sys.executable, "-c", "import ansible_collections.soperator.slurm.plugins.module_utils."
                           "observe.exporter as e; print(e.__file__)"], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith(str(tmp_path / "lib")), proc.stdout


def test_rule_file_and_dashboards_for_the_admins_prometheus(tmp_path):
    """Planned (check mode) as written; re-run: nothing; exporter off: ours removed, a file of the admin's beside them
    and a link in their place left alone."""
    from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
    from ansible_collections.soperator.slurm.plugins.module_utils.observe import dashboards
    from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = load_documents(f.read())
    docs[0]["spec"]["observability"] = {"exporter": {"enabled": True}}
    on = spec.build_model(docs)
    docs[0]["spec"]["observability"] = {"exporter": {"enabled": False}}
    off = spec.build_model(docs)
    state = tmp_path / "state"
    state.mkdir()
    cluster = lb.LocalCluster(str(state), on)
    rules, boards = "prometheus/soperator-slurm-rules.yml", ["grafana/" + n for n in sorted(dashboards.dashboards())]
    names = boards + [rules]            # in path order
    assert cluster.plan_exporter(on)[:len(names)] == ["would write %s" % n for n in names]
    assert not (state / "prometheus").exists()            # the plan wrote nothing
    changes = []
    cluster.exporter.ensure_monitoring_files(on, changes)
    assert changes == ["wrote %s" % n for n in names]
    paths = cluster.monitoring_paths()
    assert paths["rules"] == str(state / rules) and paths["job"] == "small-exporter"
    assert paths["dashboards"] == [str(state / n) for n in boards]
    assert "job=\"small-exporter\"" in (state / rules).read_text()
    changes = []
    cluster.exporter.ensure_monitoring_files(on, changes)
    assert changes == [] and not [a for a in cluster.plan_exporter(on) if "write" in a]
    (state / "prometheus" / "mine.yml").write_text("groups: []\n")
    os.unlink(str(state / boards[0]))
    os.symlink("/etc/hostname", str(state / boards[0]))
    removed = boards[1:] + [rules]
    assert cluster.plan_exporter(off) == ["would remove %s (exporter disabled)" % n for n in removed]
    changes = []
    cluster.exporter.ensure_monitoring_files(off, changes)
    assert changes == ["removed %s (exporter disabled)" % n for n in removed]
    assert sorted(os.listdir(str(state / "prometheus"))) == ["mine.yml"]
    assert os.path.islink(str(state / boards[0]))
