"""The status records the exporter reads besides Slurm: the health checks' last results (written by
node/health_check.py and node/active_check.py, never through a link an untrusted user could place), the remediation
record (observe/remediation_record.py), and the metric families the exporter makes of them."""
import json
import os

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.soperator.slurm.plugins.module_utils.node import active_check as ac
from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check as hc
from ansible_collections.soperator.slurm.plugins.module_utils.node import health_status as hs
from ansible_collections.soperator.slurm.plugins.module_utils.observe import exporter, metrics, status
from ansible_collections.soperator.slurm.plugins.module_utils.observe import remediation_record as rr
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord
from repo_root import ROOT

NOBODY = 65534


@pytest.fixture
def status_dir(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    return str(tmp_path / "status")


def _node(name):
    return NodeRecord(name=name, base_state="IDLE", flags=(), reason="", partitions=("main",))


def _samples(families, name):
    fams = dict((f.name, f) for f in families)
    return sorted((tuple(sorted(s.labels.items())), s.value) for s in fams[name].samples)


# --- writing -------------------------------------------------------------------------------------------------------

def test_passive_record_is_written_atomically_and_read_back(status_dir):
    record = hs.passive_record("cpu-0", [{"check": "munge", "detail": "unmunge failed"}], ["disk"], now=1700000000.5)
    hs.write_status(status_dir, hs.PASSIVE, "cpu-0", record)
    path = os.path.join(status_dir, "passive", "cpu-0.json")
    with open(path) as f:
        assert json.load(f) == {"version": 1, "kind": "passive", "node": "cpu-0", "time": 1700000000.5, "checks": {
            "disk": {"result": "pass"}, "munge": {"result": "fail", "detail": "unmunge failed"}}}
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert os.listdir(os.path.dirname(path)) == ["cpu-0.json"]          # no temporary file left
    assert hs.read_status(status_dir, hs.PASSIVE, "cpu-0") == record


def test_a_link_at_the_record_is_replaced_never_written_through(status_dir, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.makedirs(os.path.join(status_dir, "passive"))
    os.symlink(str(victim), os.path.join(status_dir, "passive", "cpu-0.json"))
    assert hs.read_status(status_dir, hs.PASSIVE, "cpu-0") is None            # not read through either
    hs.write_status(status_dir, hs.PASSIVE, "cpu-0", hs.passive_record("cpu-0", [], ["disk"]))
    assert victim.read_text() == "keep me"
    assert not os.path.islink(os.path.join(status_dir, "passive", "cpu-0.json"))


def test_a_directory_others_can_write_or_swap_is_refused(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(str(open_dir), 0o777)                           # anyone could swap `status` for a link
    with pytest.raises(hs.StatusError, match="others can write"):
        hs.write_status(str(open_dir / "status"), hs.PASSIVE, "cpu-0", {})
    # a link placed in a directory anyone can write is not followed, even to a good directory
    (tmp_path / "good").mkdir()
    os.symlink(str(tmp_path / "good"), str(open_dir / "link"))
    with pytest.raises(hs.StatusError):
        hs.write_status(str(open_dir / "link"), hs.PASSIVE, "cpu-0", {})
    assert os.listdir(str(tmp_path / "good")) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory or a link to another user")
def test_what_another_user_owns_is_refused(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(str(theirs), NOBODY, NOBODY)
    with pytest.raises(hs.StatusError, match="another user"):
        hs.write_status(str(theirs / "status"), hs.PASSIVE, "cpu-0", {})
    (tmp_path / "good").mkdir()
    os.symlink(str(tmp_path / "good"), str(tmp_path / "their-link"))
    os.lchown(str(tmp_path / "their-link"), NOBODY, NOBODY)
    with pytest.raises(hs.StatusError, match="symlink"):
        hs.write_status(str(tmp_path / "their-link"), hs.PASSIVE, "cpu-0", {})


def test_a_link_we_placed_in_our_own_directory_is_followed(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    (tmp_path / "real").mkdir()
    os.symlink("real", str(tmp_path / "alias"))               # relative, like /lib -> usr/lib
    hs.write_status(str(tmp_path / "alias" / "status"), hs.PASSIVE, "cpu-0", {"version": 1})
    assert os.path.isfile(str(tmp_path / "real" / "status" / "passive" / "cpu-0.json"))
    hs.write_status(str(tmp_path / "real" / ".." / "alias" / "status"), hs.PASSIVE, "cpu-1", {"version": 1})
    assert os.path.isfile(str(tmp_path / "real" / "status" / "passive" / "cpu-1.json"))


def test_names_that_are_no_file_names_are_refused(status_dir):
    for bad in ("../etc", "a/b", ".hidden", "", "x" * 100):
        with pytest.raises(hs.StatusError):
            hs.write_status(status_dir, hs.PASSIVE, bad, {})


def test_the_program_records_each_run_but_never_in_check_only_mode(status_dir, tmp_path, capsys):
    config = tmp_path / "health.json"
    config.write_text(json.dumps({"drainReasonPrefix": "soperator:", "statusDir": status_dir, "passive": {
        "custom": [{"name": "ok", "command": "true"}, {"name": "broken", "command": "echo no; exit 3"}]}}))
    assert hc.main(["--config", str(config), "--node", "cpu-0", "--check-only"]) == hc.EXIT_UNHEALTHY
    assert not os.path.exists(status_dir)
    capsys.readouterr()
    # the default mode records the checks' verdicts before it reads the node (no Slurm here: it then exits 2)
    env = dict(os.environ)
    os.environ["PATH"] = "/nonexistent"
    try:
        assert hc.main(["--config", str(config), "--node", "cpu-0"]) == hc.EXIT_ERROR
    finally:
        os.environ.clear()
        os.environ.update(env)
    record = hs.read_status(status_dir, hs.PASSIVE, "cpu-0")
    assert record["checks"] == {"ok": {"result": "pass"}, "broken": {"result": "fail", "detail": "exit 3: no"}}


def test_a_record_that_cannot_be_written_leaves_the_verdict_alone(tmp_path):
    os.chmod(str(tmp_path), 0o777)
    problem = hc.record_status({"statusDir": str(tmp_path / "status")}, hs.PASSIVE, "cpu-0", {})
    assert problem and "cannot record" in problem
    assert hc.record_status({}, hs.PASSIVE, "cpu-0", {}) is None            # no statusDir: nothing to record


def test_active_record_keeps_a_skipped_nodes_last_result_and_forgets_removed_nodes():
    previous = {"nodes": {"gpu-0": {"result": "fail", "time": 1.0, "detail": "exit 1", "job": "7"},
                          "gpu-1": {"result": "pass", "time": 1.0}, "gpu-9": {"result": "pass", "time": 1.0}}}
    results = [{"node": "gpu-0", "result": "skipped", "detail": "drained"},
               {"node": "gpu-1", "result": "fail", "detail": "exit 2", "job": "8"},
               {"node": "gpu-2", "result": "pass", "detail": "job 9", "job": "9"}]
    record = ac.active_record("nccl", previous, ["gpu-0", "gpu-1", "gpu-2"], results, now=5.0)
    assert record == {"version": 1, "kind": "active", "check": "nccl", "nodes": {
        "gpu-0": {"result": "fail", "time": 1.0, "detail": "exit 1", "job": "7"},
        "gpu-1": {"result": "fail", "time": 5.0, "detail": "exit 2", "job": "8"},
        "gpu-2": {"result": "pass", "time": 5.0, "detail": "job 9", "job": "9"}}}


def test_active_results_are_merged_and_records_of_removed_checks_go(status_dir):
    config = {"statusDir": status_dir, "active": {"checks": [{"name": "nccl"}]}}
    hs.write_status(status_dir, hs.ACTIVE, "old-check", {"version": 1})
    assert ac.record_results(config, "nccl", ["gpu-0"], [{"node": "gpu-0", "result": "pass", "job": "1"}]) is None
    assert ac.record_results(config, "nccl", ["gpu-0"], [{"node": "gpu-0", "result": "skipped"}]) is None
    assert sorted(os.listdir(os.path.join(status_dir, "active"))) == ["nccl.json"]
    assert hs.read_status(status_dir, hs.ACTIVE, "nccl")["nodes"]["gpu-0"]["result"] == "pass"


# --- reading and the metric families -------------------------------------------------------------------------------

def test_health_results_become_bounded_series_of_the_nodes_slurm_lists(status_dir):
    hs.write_status(status_dir, hs.PASSIVE, "cpu-0", hs.passive_record(
        "cpu-0", [{"check": "fault-file", "detail": "exit 1"}], ["disk"], now=100.0))
    hs.write_status(status_dir, hs.PASSIVE, "cpu-7", hs.passive_record("cpu-7", [], ["disk"], now=100.0))   # gone
    hs.write_status(status_dir, hs.ACTIVE, "probe", {"version": 1, "kind": "active", "check": "probe", "nodes": {
        "cpu-0": {"result": "pass", "time": 90.0}, "cpu-1": {"result": "fail", "time": 95.0},
        "bad name!": {"result": "fail", "time": 95.0}, "cpu-2": {"result": "maybe", "time": 95.0}}})
    # what is not a record of ours: counted, never exported
    hs.write_status(status_dir, hs.PASSIVE, "cpu-1", {"version": 1, "kind": "passive", "node": "cpu-9", "time": 1,
                                                      "checks": {}})
    with open(os.path.join(status_dir, "passive", "cpu-2.json"), "w") as f:
        f.write("{not json")
    os.mkfifo(os.path.join(status_dir, "passive", "cpu-3.json"))              # never blocks a scrape
    results, skipped = status.read_health(status_dir)
    assert skipped == 3
    fams = metrics.health_families(results, [_node("cpu-0"), _node("cpu-1"), _node("cpu-2")])
    assert _samples(fams, "soperator_slurm_health_check_last_result") == [
        ((("check", "disk"), ("kind", "passive"), ("node", "cpu-0")), 1),
        ((("check", "fault-file"), ("kind", "passive"), ("node", "cpu-0")), 0),
        ((("check", "probe"), ("kind", "active"), ("node", "cpu-0")), 1),
        ((("check", "probe"), ("kind", "active"), ("node", "cpu-1")), 0)]
    assert _samples(fams, "soperator_slurm_health_check_last_run_timestamp_seconds")[3] == (
        (("check", "probe"), ("kind", "active"), ("node", "cpu-1")), 95.0)
    assert status.read_health(os.path.join(status_dir, "missing")) == ([], 0)


def test_remediation_record_adds_up_passes():
    first = {"actions": {"replace": {"success": 1, "failure": 0}, "recheck": {"success": 0, "failure": 1},
                         "resume": {"success": 0, "failure": 0}},
             "nodes": [{"name": "cpu-0", "action": "left-drained"}, {"name": "cpu-1", "action": "skipped-foreign"}],
             "errors": []}
    record = rr.updated(None, first, 100.0)
    second = {"actions": {"replace": {"success": 0, "failure": 1}}, "nodes": [{"name": "cpu-0", "action": "left-drained"}],
              "errors": ["cpu-0: the new slurmd of cpu-0 did not register within 300s"]}
    record = rr.parse(rr.dumps(rr.updated(record, second, 200.0)))
    assert record == {"version": 1, "runs": {"success": 1, "failure": 1},
                      "actions": {"replace": {"success": 1, "failure": 1}, "recheck": {"success": 0, "failure": 1},
                                  "resume": {"success": 0, "failure": 0}},
                      "lastRun": {"time": 200.0, "success": False, "errors": 1, "nodes": {"left-drained": 1}},
                      "lastSuccessTime": 100.0}
    # a pass that could not run at all counts as a failure with no steps
    assert rr.updated(record, {}, 300.0, success=False)["runs"] == {"success": 1, "failure": 2}
    for bad in ("", "[]", '{"version": 2}', "{"):
        assert rr.parse(bad) is None
    unsure = rr.parse('{"version": 1, "runs": {"success": -3, "failure": "x"}}')
    assert unsure["runs"] == {"success": 0, "failure": 0}


def test_remediation_record_file_is_ours_and_never_written_through_a_link(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    status_path = tmp_path / "status"
    status_path.mkdir()
    os.symlink(str(victim), str(status_path / rr.RECORD_KEY))
    store = rr.FileStore(str(status_path / rr.RECORD_KEY))
    assert store.load() is None
    store.save(rr.updated(None, {"errors": []}, 10.0))
    assert victim.read_text() == "keep me" and not os.path.islink(str(status_path / rr.RECORD_KEY))
    assert store.load()["runs"] == {"success": 1, "failure": 0}
    # the exporter reads a mounted ConfigMap's key through its links
    os.symlink(str(status_path / rr.RECORD_KEY), str(tmp_path / "mounted.json"))
    assert status.read_remediation(str(tmp_path / "mounted.json"))["lastSuccessTime"] == 10.0


def test_remediation_families():
    record = rr.updated(None, {"actions": {"resume": {"success": 2, "failure": 0}},
                               "nodes": [{"action": "resumed"}, {"action": "resumed"}], "errors": []}, 50.0)
    record = rr.updated(record, {"errors": ["cpu-0: resume failed"]}, 60.0)
    fams = metrics.remediation_families(record)
    assert _samples(fams, "soperator_slurm_remediation_actions")[-2:] == [
        ((("action", "resume"), ("result", "failure")), 0), ((("action", "resume"), ("result", "success")), 2)]
    assert _samples(fams, "soperator_slurm_remediation_runs") == [
        ((("result", "failure"),), 1), ((("result", "success"),), 1)]
    assert _samples(fams, "soperator_slurm_remediation_last_run_success") == [((), 0)]
    assert _samples(fams, "soperator_slurm_remediation_last_run_timestamp_seconds") == [((), 60.0)]
    assert _samples(fams, "soperator_slurm_remediation_last_success_timestamp_seconds") == [((), 50.0)]
    assert _samples(fams, "soperator_slurm_remediation_last_run_nodes") == []     # the failed pass saw no node


class _Runner(object):
    """sinfo answers one node through read_sinfo's parser; squeue and sdiag answer nothing."""

    def run(self, argv, parse=None, check=True):
        class _Result(object):
            stdout = ""
        return None, parse(_Result())


def test_one_scrape_exports_the_status_records(status_dir, monkeypatch):
    hs.write_status(status_dir, hs.PASSIVE, "cpu-0", hs.passive_record(
        "cpu-0", [{"check": "fault-file", "detail": "exit 1"}], [], now=100.0))
    record = os.path.join(status_dir, rr.RECORD_KEY)
    rr.FileStore(record).save(rr.updated(None, {"actions": {"replace": {"success": 1, "failure": 0}}, "errors": []},
                                         100.0))
    monkeypatch.setattr(exporter, "read_node_table", lambda runner: {"cpu-0": _node("cpu-0")})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter.SlurmCollector(lambda deadline: _Runner(), status_dir=status_dir,
                                              remediation_record=record))
    text = generate_latest(registry).decode()
    samples = dict(((s.name, tuple(sorted(s.labels.items()))), s.value)
                   for f in text_string_to_metric_families(text) for s in f.samples)
    assert samples[("soperator_slurm_health_check_last_result",
                    (("check", "fault-file"), ("kind", "passive"), ("node", "cpu-0")))] == 0
    assert samples[("soperator_slurm_remediation_actions_total", (("action", "replace"), ("result", "success")))] == 1
    assert samples[("soperator_slurm_remediation_last_run_success", ())] == 1
    assert samples[("soperator_slurm_exporter_status_files_skipped", ())] == 0
    assert samples[("soperator_slurm_remediation_runs_total", (("result", "success"),))] == 1


class _Client(object):
    """The two calls ConfigMapStore makes, answered like the API server: list by label selector, server-side apply."""

    def __init__(self):
        self.objects, self.calls = {}, []

    def list(self, kind, namespace=None, label_selector=None):
        self.calls.append(("list", kind, namespace, label_selector))
        wanted = dict(kv.split("=", 1) for kv in label_selector.split(","))
        return [o for o in self.objects.values()
                if set(wanted.items()) <= set((o["metadata"].get("labels") or {}).items())]

    def apply(self, obj, force=True, field_manager=None):
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"], field_manager))
        self.objects[obj["metadata"]["name"]] = obj
        return obj, False


def test_on_kubernetes_the_record_is_a_configmap_key_the_remediation_owns():
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm import remediation_setup as setup
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        model = build_model(load_documents(f.read()))
    client = _Client()
    store = setup.ConfigMapStore(client, model)
    assert store.load() is None
    for errors in ([], ["cpu-0: resume failed"]):
        assert setup.record(store, {"actions": {"resume": {"success": 1, "failure": len(errors)}}, "errors": errors},
                            clock=lambda: 100.0) is None
    saved = client.objects["%s-remediation-status" % model.name]
    assert saved["metadata"]["labels"]["app.kubernetes.io/component"] == "remediation"
    record = rr.parse(saved["data"][rr.RECORD_KEY])
    assert record["runs"] == {"success": 1, "failure": 1} and record["actions"]["resume"] == {"success": 2,
                                                                                              "failure": 1}
    assert [c[3] for c in client.calls if c[0] == "apply"] == [setup.RECORD_FIELD_MANAGER] * 2
    assert all("app.kubernetes.io/instance=%s" % model.name in c[3] for c in client.calls if c[0] == "list")
