"""The exporter of a running local cluster (real slurmctld + slurmd), scraped by a real Prometheus (Debian's).

slurm_drain drains one node with our prefix, a passive health check fails on another, an admin drains a third
by hand: PromQL returns each with its state and drain labels; resuming them clears it. The last result of every
passive and active check per node, and what a remediation pass did, show in PromQL too. Every dashboard expression
and every alert rule is evaluated by that Prometheus without error. With slurmctld stopped (SIGSTOP) or gone, the
exporter still answers within the scrape timeout the spec gives both it and Prometheus, with soperator_slurm_up 0,
and SlurmControllerUnreachable fires (not SlurmExporterDown). Teardown stops the exporter with the cluster.
Waits are bounded and poll; nothing asserts on how fast it was."""
import json
import os
import signal
import socket

import pytest
import yaml

import ansible_run
from test_health_checks import ACTIVE_PROBE, faults, run_active, wait_for  # noqa: F401 pylint: disable=unused-import
from ansible_collections.soperator.slurm.plugins.module_utils.observe import alerts, dashboards
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import exporter_name
from prometheus_server import PROMETHEUS, Prometheus, free_ports
from specs import cluster_and_rest

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (make deps installs it)")

INTERVAL = 5
WAIT = 60
PREFIX = "soperator:"

OBSERVABILITY = "  observability:\n    exporter: {enabled: true, port: %d, scrapeTimeout: 2s}\n"


def spec(port, faults_dir, interval=INTERVAL, active=False):
    """Three workers of health-faults.yml, the exporter on `port`; `active`: with test_health_checks' active probe."""
    cluster, nodesets = cluster_and_rest("health-faults", cluster="obs", workers=3, interval=interval,
                                         faults=faults_dir)
    probe = ACTIVE_PROBE % {"faults": faults_dir} if active else ""
    return cluster + probe + OBSERVABILITY % port + nodesets


class ExporterPrometheus(Prometheus):
    """A real Prometheus on loopback scraping the exporter of `cluster` as often as its scrape timeout allows (the
    spec's, which the exporter answers within), evaluating every second the alert rule file the local cluster wrote
    for the admin's Prometheus, as it is, for the scrape job it names (with `short_for`, a copy whose `for` is
    replaced where it says: {alert: duration})."""

    def __init__(self, port, target, workdir, cluster, short_for=None):
        model = cluster.model
        monitoring = cluster.monitoring_paths()
        job, rules = monitoring["job"], monitoring["rules"]
        assert job == exporter_name(model)
        if short_for:
            with open(rules) as f:
                groups = yaml.safe_load(f)
            for rule in groups["groups"][0]["rules"]:
                rule["for"] = short_for.get(rule["alert"], rule.get("for", "0s"))
            rules = os.path.join(workdir, "slurm-alerts.yml")
            with open(rules, "w") as f:
                yaml.safe_dump(groups, f, sort_keys=False)
        timeout = "%ds" % model.observability.scrape_timeout_seconds
        super(ExporterPrometheus, self).__init__(port, workdir, {
            "global": {"scrape_interval": timeout, "scrape_timeout": timeout, "evaluation_interval": "1s"},
            "rule_files": [rules],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}]})


def _started(local_cluster, faults, tmp_path, active=False, short_for=None):
    exporter_port, prometheus_port = free_ports(2)
    text = spec(exporter_port, faults, active=active)
    cluster = local_cluster(text)
    cluster.spec_text = text             # what slurm_remediate is given
    prom = ExporterPrometheus(prometheus_port, "127.0.0.1:%d" % exporter_port, str(tmp_path), cluster, short_for)
    try:
        wait_for(prom.ready, timeout=WAIT, what="prometheus ready")
        yield cluster, prom, exporter_port
    finally:
        prom.stop()


@pytest.fixture
def setup(local_cluster, faults, tmp_path):
    yield from _started(local_cluster, faults, tmp_path)


@pytest.fixture
def setup_short_for(local_cluster, faults, tmp_path):
    """The exporter's two alerts fire after 3 s rather than minutes."""
    yield from _started(local_cluster, faults, tmp_path,
                        short_for={"SlurmControllerUnreachable": "3s", "SlurmExporterDown": "3s"})


@pytest.fixture
def setup_with_active_check(local_cluster, faults, tmp_path):
    # the active check is run by hand here (the checks CronJob on Kubernetes)
    yield from _started(local_cluster, faults, tmp_path, active=True)


def _drains(prom):
    return dict((r["metric"]["node"], (r["metric"]["owner"], r["metric"]["kind"], r["metric"].get("check", "")))  # an empty label is absent
                for r in prom.query("soperator_slurm_node_drain == 1"))


def _states(prom):
    return dict((r["metric"]["node"], r["metric"]["state"]) for r in prom.query("soperator_slurm_node_state == 1"))


def test_prometheus_sees_our_drains_a_failed_check_and_a_foreign_drain(setup, faults):
    cluster, prom, port = setup
    wait_for(lambda: prom.query("soperator_slurm_up == 1"), timeout=WAIT, what="soperator_slurm_up 1 in Prometheus")
    assert _states(prom) == {"cpu-0": "idle", "cpu-1": "idle", "cpu-2": "idle"}
    assert _drains(prom) == {}

    env = ansible_run.ansible_env(SLURM_CONF=cluster.layout.slurm_conf)
    ansible_run.module("slurm_drain", {"nodes": "cpu-0", "state": "drained", "reason": "replacing a disk",
                                       "reason_prefix": PREFIX}, env=env, expect_failed=False)
    open(os.path.join(faults, "fault-cpu-1"), "w").close()
    cluster.run(["scontrol", "update", "NodeName=cpu-2", "State=DRAIN", "Reason=admin at work"], timeout=30)

    want = {"cpu-0": ("soperator", "manual", ""), "cpu-1": ("soperator", "health_check", "fault-file"),
            "cpu-2": ("other", "other", "")}
    wait_for(lambda: _drains(prom) == want, timeout=WAIT, what="the three drains in Prometheus")
    assert _states(prom) == {"cpu-0": "drained", "cpu-1": "drained", "cpu-2": "drained"}
    assert [r["metric"]["state"] for r in prom.query('soperator_slurm_partition_nodes{state="drained"} == 3')] == ["drained"]
    # the alert rules see them: the check's drain is pending (its `for` is 1m), the others are not ours to alert on
    wait_for(lambda: [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] ==
                      "SlurmNodeDrainedByHealthCheck" and a["labels"]["node"] == "cpu-1"],
             timeout=WAIT, what="the check's alert pending")
    assert all(a["labels"].get("node") != "cpu-0" for a in prom.api("alerts")["alerts"]
               if a["labels"]["alertname"] == "SlurmNodeDrainedByHealthCheck")

    ansible_run.module("slurm_drain", {"nodes": "cpu-0", "state": "resumed", "reason_prefix": PREFIX}, env=env,
                       expect_failed=False)
    os.unlink(os.path.join(faults, "fault-cpu-1"))
    cluster.run(["scontrol", "update", "NodeName=cpu-2", "State=RESUME"], timeout=30)
    wait_for(lambda: _drains(prom) == {}, timeout=WAIT, what="no drain left in Prometheus")
    assert _states(prom) == {"cpu-0": "idle", "cpu-1": "idle", "cpu-2": "idle"}


def _results(prom, kind, check):
    return dict(((r["metric"]["node"], r["metric"]["check"]), r["value"][1]) for r in prom.query(
        'soperator_slurm_health_check_last_result{kind="%s",check="%s"}' % (kind, check)))


def _value(prom, expr):
    found = prom.query(expr)
    return [r["value"][1] for r in found]


def test_prometheus_sees_check_results_and_what_remediation_did(setup_with_active_check, faults):
    cluster, prom, _port = setup_with_active_check
    everyone = {("cpu-0", "fault-file"): "1", ("cpu-1", "fault-file"): "1", ("cpu-2", "fault-file"): "1"}
    wait_for(lambda: _results(prom, "passive", "fault-file") == everyone, timeout=WAIT,
             what="every node's passive check passed")
    # the built-in checks too (this cluster has no GPU)
    assert set(r["metric"]["check"] for r in prom.query('soperator_slurm_health_check_last_result{node="cpu-0"}')) \
        == {"disk", "memory", "munge", "fault-file"}
    assert _results(prom, "active", "probe") == {}                  # the active check has not run yet

    # the active check fails on cpu-2 (and drains it), passes elsewhere
    open(os.path.join(faults, "active-cpu-2"), "w").close()
    rc, report = run_active(cluster)
    assert rc == 1 and report["drained"] == ["cpu-2"] and "statusError" not in report, report
    os.unlink(os.path.join(faults, "active-cpu-2"))
    active = {("cpu-0", "probe"): "1", ("cpu-1", "probe"): "1", ("cpu-2", "probe"): "0"}
    wait_for(lambda: _results(prom, "active", "probe") == active, timeout=WAIT,
             what="the active check's results in Prometheus")
    # a passive check fails on cpu-1: slurmd's next run records it (and drains the node)
    open(os.path.join(faults, "fault-cpu-1"), "w").close()
    wait_for(lambda: _results(prom, "passive", "fault-file").get(("cpu-1", "fault-file")) == "0", timeout=WAIT,
             what="cpu-1's failed passive check in Prometheus")
    wait_for(lambda: _drains(prom) == {"cpu-1": ("soperator", "health_check", "fault-file"),
                                       "cpu-2": ("soperator", "active_check", "probe")},
             timeout=WAIT, what="both drains in Prometheus")
    ran = prom.query("soperator_slurm_health_check_last_run_timestamp_seconds"
                     '{node="cpu-1",check="fault-file",kind="passive"} > 0')
    assert len(ran) == 1
    assert prom.query("soperator_slurm_remediation_runs_total") == []      # remediation never ran

    # one remediation pass: both nodes replaced (slurmd restarted) and re-checked; cpu-1 still fails its passive
    # check and stays drained, cpu-2 passes (its fault was the active check's) and is resumed
    result = ansible_run.module("slurm_remediate", {
        "target": "local", "definition": [d for d in yaml.safe_load_all(cluster.spec_text) if d],
        "state_dir": cluster.state_dir, "register_timeout": 120, "wait_sleep": 0.5}, expect_failed=False)
    assert dict((n["name"], n["action"]) for n in result["nodes"]) == {"cpu-1": "left-drained", "cpu-2": "resumed"}
    assert result["actions"] == {"replace": {"success": 2, "failure": 0}, "recheck": {"success": 1, "failure": 1},
                                 "resume": {"success": 1, "failure": 0}}
    wait_for(lambda: prom.query("soperator_slurm_remediation_last_run_success == 1"), timeout=WAIT,
             what="the remediation pass in Prometheus")
    actions = dict(((r["metric"]["action"], r["metric"]["result"]), r["value"][1])
                   for r in prom.query("soperator_slurm_remediation_actions_total"))
    assert actions == {("replace", "success"): "2", ("replace", "failure"): "0", ("recheck", "success"): "1",
                       ("recheck", "failure"): "1", ("resume", "success"): "1", ("resume", "failure"): "0"}
    assert dict((r["metric"]["outcome"], r["value"][1]) for r in prom.query(
        "soperator_slurm_remediation_last_run_nodes")) == {"left-drained": "1", "resumed": "1"}
    assert _value(prom, 'soperator_slurm_remediation_runs_total{result="success"}') == ["1"]
    assert _value(prom, "soperator_slurm_remediation_last_success_timestamp_seconds "
                        "== soperator_slurm_remediation_last_run_timestamp_seconds")
    assert not [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "SlurmRemediationFailing"]

    # fixed: slurmd's next passive run records the pass (and resumes cpu-1)
    os.unlink(os.path.join(faults, "fault-cpu-1"))
    wait_for(lambda: _results(prom, "passive", "fault-file") == everyone and _drains(prom) == {}, timeout=WAIT,
             what="every passive check passing again, no drain left")


def test_every_dashboard_expression_and_alert_rule_evaluates(setup):
    cluster, prom, _port = setup
    job = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 30"], timeout=30).stdout.strip()
    wait_for(lambda: prom.query('soperator_slurm_partition_jobs{state="running"}'), timeout=WAIT,
             what="a running job in Prometheus")
    # the dashboards the local cluster wrote for the admin's Grafana are ours, whole
    written = {}
    for path in cluster.monitoring_paths()["dashboards"]:
        with open(path) as f:
            written[os.path.basename(path)] = json.load(f)
    assert written == dashboards.dashboards()
    for board, panel, expr in dashboards.expressions():
        try:
            prom.query(expr)
        except Exception as e:  # the assertion names the panel; urllib's HTTPError says why Prometheus refused
            detail = e.read() if hasattr(e, "read") else e
            raise AssertionError("%s / %s: %s: %s" % (board, panel, expr, detail))
    assert prom.query("soperator_slurm_node_cpus_allocated > 0"), "the job's CPUs are allocated"
    groups = wait_for(lambda: [g for g in prom.api("rules")["groups"] if g["name"] == alerts.GROUP
                               and all(r.get("lastEvaluation", "").startswith("2") and
                                       not r["lastEvaluation"].startswith("0001") for r in g["rules"])],
                      timeout=WAIT, what="every rule evaluated")
    assert [(r["name"], r["health"], r.get("lastError", "")) for r in groups[0]["rules"]] == [
        (r["alert"], "ok", "") for r in alerts.rules({"job": exporter_name(cluster.model)})]
    cluster.run(["scancel", job], timeout=30)


def _by_command(prom, expr):
    return dict((r["metric"]["command"], r["value"][1]) for r in prom.query(expr))


def _alerts(prom, name):
    return [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == name]


def _controller_down_is_reported_and_alerted(prom):
    """With slurmctld not answering: the exporter still answers within the scrape timeout (up 1), with
    soperator_slurm_up 0, the first command the last one run, and SlurmControllerUnreachable fires, alone."""
    # soperator_slurm_up is only there when Prometheus' scrape succeeded: that scrape's up is 1
    answered = wait_for(lambda: prom.query("soperator_slurm_up == 0 and on (instance, job) up == 1"),
                        timeout=WAIT, what="a scrape that answered (up 1) with soperator_slurm_up 0")
    assert [r["metric"]["job"] for r in answered] == ["obs-exporter"]
    # scontrol did not answer; squeue and sdiag were not run (0 s) rather than waiting for it too
    wait_for(lambda: _by_command(prom, "soperator_slurm_exporter_command_failed") == {
        "scontrol": "1", "squeue": "1", "sdiag": "1"} and _by_command(
        prom, 'soperator_slurm_exporter_command_seconds{command=~"squeue|sdiag"}') == {"squeue": "0", "sdiag": "0"},
        timeout=WAIT, what="scontrol failed, squeue and sdiag not run")
    firing = wait_for(lambda: [a for a in _alerts(prom, "SlurmControllerUnreachable") if a["state"] == "firing"],
                      timeout=WAIT, what="SlurmControllerUnreachable firing")
    assert [a["labels"]["job"] for a in firing] == ["obs-exporter"]
    assert _alerts(prom, "SlurmExporterDown") == []          # the exporter answers: no second alert


def test_a_frozen_controller_is_reported_and_alerted(setup_short_for):
    """slurmctld stopped (SIGSTOP): every Slurm command of a scrape would wait for it, past Prometheus' scrape
    timeout. Reported and alerted as above; resumed (SIGCONT, whatever happens), all is well again."""
    cluster, prom, _port = setup_short_for
    wait_for(lambda: prom.query("soperator_slurm_up == 1"), timeout=WAIT, what="soperator_slurm_up 1 in Prometheus")
    pid = cluster.pid("slurmctld")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        _controller_down_is_reported_and_alerted(prom)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: prom.query("soperator_slurm_up == 1") and not _alerts(prom, "SlurmControllerUnreachable"),
             timeout=WAIT, what="soperator_slurm_up 1 again and the alert resolved")
    assert _alerts(prom, "SlurmExporterDown") == []


def test_a_dead_controller_is_reported_and_alerted(setup_short_for):
    """slurmctld gone (SIGTERM to our slurmctld; the cluster's teardown stops the rest): the same."""
    cluster, prom, _port = setup_short_for
    wait_for(lambda: prom.query("soperator_slurm_up == 1"), timeout=WAIT, what="soperator_slurm_up 1 in Prometheus")
    pid = cluster.pid("slurmctld")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: cluster.pid("slurmctld") is None, timeout=WAIT, what="slurmctld gone")
    _controller_down_is_reported_and_alerted(prom)


def test_teardown_stops_the_exporter(local_cluster):
    port = free_ports(1)[0]
    cluster = local_cluster(spec(port, "/nonexistent", interval=0))
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    pid = cluster.pid("exporter")
    assert pid is not None
    cluster.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert cluster.pid("exporter") is None
