"""The alert rule pack through Prometheus' own promtool: `check rules`, and `test rules` with a firing and a quiet
case for every alert (its labels and its rendered summary and description)."""
import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.observe import alerts

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus; "
                                                         "make deps installs it)")

NODE_DRAIN = 'soperator_slurm_node_drain{node="%s",owner="%s",kind="%s",check="%s"}'
# the exporter's scrape target, as a ServiceMonitor makes it (render/observe_objects.py exporter_target)
TARGET = {"job": "demo-exporter", "namespace": "hpc"}
OURS = dict(TARGET, instance="10.0.0.7:9341")
UP = 'up{job="demo-exporter",namespace="hpc",instance="10.0.0.7:9341"}'
SLURM_UP = 'soperator_slurm_up{job="demo-exporter",namespace="hpc",instance="10.0.0.7:9341"}'

# alert -> (input series {series: values}, [(eval time, [expected labels + "$value"])] - firing, then quiet)
CASES = {
    "SlurmControllerUnreachable": (
        {'soperator_slurm_up{instance="exp:9341"}': "0x10", 'soperator_slurm_up{instance="ok:9341"}': "1x10"},
        [("1m", []), ("3m", [{"instance": "exp:9341"}])]),
    "SlurmExporterDown": (
        # our exporter's scrapes fail from minute 2 (its series go stale); another cluster's exporter is down all along
        {UP: "1 1 0x10", SLURM_UP: "1 1 stale", 'up{job="other-exporter",namespace="hpc",instance="x:9341"}': "0x12"},
        [("5m", []), ("8m", [OURS])]),
    "SlurmNodeNotResponding": (
        {'soperator_slurm_node_responding{node="cpu-0"}': "0x10", 'soperator_slurm_node_responding{node="cpu-1"}': "1x10"},
        [("4m", []), ("6m", [{"node": "cpu-0"}])]),
    "SlurmNodeDown": (
        # gpu-3 is down because its resume failed: SlurmNodeResumeFailed says so, not this alert
        {'soperator_slurm_node_state{node="cpu-0",state="down"}': "1x10", 'soperator_slurm_node_state{node="cpu-1",state="idle"}': "1x10",
         'soperator_slurm_node_state{node="cpu-2",state="drained"}': "1x10",
         'soperator_slurm_node_state{node="gpu-3",state="down"}': "1x10",
         'soperator_slurm_node_power{node="gpu-3",power="resume_failed"}': "1x10"},
        [("6m", [{"node": "cpu-0", "state": "down"}])]),
    "SlurmNodeResumeFailed": (
        {'soperator_slurm_node_power{node="gpu-3",power="resume_failed"}': "1x5",
         'soperator_slurm_node_power{node="gpu-4",power="powered_down"}': "1x5"},
        [("1m", [{"node": "gpu-3", "power": "resume_failed"}])]),
    "SlurmNodeDrainedByHealthCheck": (
        {NODE_DRAIN % ("cpu-0", "soperator", "health_check", "munge"): "1x5",
         NODE_DRAIN % ("cpu-1", "other", "other", ""): "1x5",
         NODE_DRAIN % ("cpu-2", "soperator", "manual", ""): "1x5"},
        [("0m", []), ("2m", [{"node": "cpu-0", "owner": "soperator", "kind": "health_check", "check": "munge"}])]),
    "SlurmManyNodesDrained": (
        dict([('soperator_slurm_node_state{node="cpu-%d",state="idle"}' % i, "1x10") for i in range(10)]
             + [(NODE_DRAIN % ("cpu-%d" % i, "other", "other", ""), "1x10") for i in range(3)]),
        [("4m", []), ("6m", [{"$value": "3"}])]),
    "SlurmJobsPendingWhileNodesIdle": (
        {'soperator_slurm_partition_jobs_pending{partition="main",reason="Resources"}': "2x20",
         'soperator_slurm_partition_nodes{partition="main",state="idle"}': "1x20",
         'soperator_slurm_partition_jobs_pending{partition="gpu",reason="Resources"}': "5x20",
         'soperator_slurm_partition_nodes{partition="gpu",state="allocated"}': "4x20",
         'soperator_slurm_partition_jobs_pending{partition="debug",reason="QOSMaxJobsPerUserLimit"}': "1x20",
         'soperator_slurm_partition_nodes{partition="debug",state="idle"}': "2x20"},
        [("10m", []), ("16m", [{"partition": "main"}])]),
    "SlurmNodeDrainNotRemediated": (
        {NODE_DRAIN % ("cpu-0", "soperator", "active_check", "nccl"): "1x70",
         NODE_DRAIN % ("cpu-1", "soperator", "scale-down", ""): "1x70"},
        [("30m", []), ("65m", [{"node": "cpu-0", "owner": "soperator", "kind": "active_check", "check": "nccl"}])]),
    "SlurmRemediationFailing": (
        # a pass that succeeded, one that failed (another exporter: fires), then one that succeeded again (quiet)
        {'soperator_slurm_remediation_last_run_success{instance="a"}': "1x10",
         'soperator_slurm_remediation_last_run_success{instance="b"}': "1x2 0x3 1x5"},
        [("1m", []), ("4m", [{"instance": "b"}]), ("7m", [])]),
    "SlurmJailFilesystemNearlyFull": (
        {"soperator_slurm_jail_filesystem_avail_bytes": "50x5 5x15", "soperator_slurm_jail_filesystem_size_bytes": "100x20"},
        [("5m", []), ("12m", []), ("17m", [{}])]),
    "SlurmAccountingUnreachable": (
        {'soperator_slurm_scheduler_dbd_agent_queue_size{instance="a"}': "3x20",
         'soperator_slurm_scheduler_dbd_agent_queue_size{instance="b"}': "3 3 0 3 3 3 3 3 3 3 3 3 0 3 3 3 3 3 3 3"},
        [("5m", []), ("12m", [{"instance": "a"}])]),
}


# The exporter's two alerts in each state of the exporter and the controller: (name, input series, [(eval time,
# {alert: [expected labels]})]). Exactly one of them fires, once, whatever happened.
SCENARIOS = (
    ("the controller is down, the exporter answers: SlurmControllerUnreachable only",
     {UP: "1x12", SLURM_UP: "1 0x11"},
     [("10m", {"SlurmControllerUnreachable": [OURS], "SlurmExporterDown": []})]),
    ("the exporter does not answer: SlurmExporterDown once, with its instance; not the controller's alert",
     {UP: "1 0x11", SLURM_UP: "1 stale"},
     [("10m", {"SlurmControllerUnreachable": [], "SlurmExporterDown": [OURS]})]),
    ("no target for the exporter at all (its Service lost its endpoints): SlurmExporterDown by job",
     {'up{job="other-exporter",namespace="hpc",instance="x:9341"}': "1x12",
      'soperator_slurm_up{job="other-exporter",namespace="hpc",instance="x:9341"}': "1x12"},
     [("4m", {"SlurmExporterDown": []}), ("6m", {"SlurmExporterDown": [TARGET]})]),
    ("something else answers on the exporter's port: SlurmExporterDown by job",
     {UP: "1x12"},
     [("6m", {"SlurmExporterDown": [TARGET], "SlurmControllerUnreachable": []})]),
    ("all is well: neither",
     {UP: "1x12", SLURM_UP: "1x12"},
     [("10m", {"SlurmExporterDown": [], "SlurmControllerUnreachable": []})]),
)


def _render(template, labels, value):
    """The Go templates our annotations use: {{ $labels.NAME }} and {{ $value }}."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return text.replace("{{ $value }}", value)


def _check(rule, at, expected):
    """promtool's alert_rule_test entry: `rule` at `at` gives exactly the alerts `expected` (labels, "$value")."""
    exp = []
    for want in expected:
        labels = dict((k, v) for k, v in want.items() if not k.startswith("$"))
        annotations = dict((k, _render(v, labels, want.get("$value", ""))) for k, v in rule["annotations"].items())
        exp.append({"exp_labels": dict(labels, **rule["labels"]), "exp_annotations": annotations})
    return {"eval_time": at, "alertname": rule["alert"], "exp_alerts": exp}


def _test_file(rule_file):
    by_name = dict((r["alert"], r) for r in alerts.rules(TARGET))
    groups = [(name, series, [(at, {name: expected}) for at, expected in evals])
              for name, (series, evals) in CASES.items()] + list(SCENARIOS)
    tests = []
    for name, series, evals in groups:
        checks = [_check(by_name[alert], at, expected) for at, by_alert in evals
                  for alert, expected in sorted(by_alert.items())]
        tests.append({"interval": "1m", "name": name,
                      "input_series": [{"series": s, "values": v} for s, v in series.items()],
                      "alert_rule_test": checks})
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


def test_every_alert_has_a_case_and_says_what_to_do():
    names = [r["alert"] for r in alerts.rules(TARGET)]
    assert sorted(names) == sorted(CASES)
    for rule in alerts.rules(TARGET):
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert len(rule["annotations"]["description"]) > 80, rule["alert"]


def test_promtool_checks_and_tests_the_rules(tmp_path):
    rules = tmp_path / "slurm-alerts.yml"
    rules.write_text(yaml.safe_dump(alerts.rule_groups(TARGET), sort_keys=False))
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: %d rules found" % len(CASES) in check.stdout + check.stderr
    spec = tmp_path / "slurm-alerts-test.yml"
    spec.write_text(yaml.safe_dump(_test_file(rules.name), sort_keys=False))
    run = subprocess.run([PROMTOOL, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120,
                         cwd=str(tmp_path), check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr


def test_promtool_tells_a_wrong_expectation(tmp_path):
    """The harness can fail: expecting the controller alert one evaluation before its `for` is up fails."""
    rules = tmp_path / "slurm-alerts.yml"
    rules.write_text(yaml.safe_dump(alerts.rule_groups(TARGET), sort_keys=False))
    data = _test_file(rules.name)
    case = [t for t in data["tests"] if t["name"] == "SlurmControllerUnreachable"][0]
    case["alert_rule_test"][0]["exp_alerts"] = case["alert_rule_test"][1]["exp_alerts"]
    data["tests"] = [case]
    spec = tmp_path / "wrong.yml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    run = subprocess.run([PROMTOOL, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120,
                         cwd=str(tmp_path), check=False)
    assert run.returncode != 0 and "SlurmControllerUnreachable" in run.stdout + run.stderr


def test_the_rendered_rule_file_loads_in_promtool(tmp_path):
    """render's prometheus/soperator-slurm-rules.yml (header comment and all) is a rule file promtool accepts."""
    from ansible_collections.soperator.slurm.plugins.module_utils.render.observe_files import RULES_FILE, observe_files
    path = tmp_path / "rules.yml"
    path.write_text(observe_files("demo", TARGET)[RULES_FILE])
    check = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: %d rules found" % len(CASES) in check.stdout + check.stderr
