"""Passive (HealthCheckProgram) and active (checks partition job) health checks against real slurmctld + slurmd.

A custom check fails while a fault file for its node exists; slurmd runs the program every HealthCheckInterval.
Waits are bounded (interval + margin) and poll; nothing asserts on how fast it was (bench/ measures that)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import active_check, health_check

import waiting
from specs import cluster_and_rest

INTERVAL = 5
# slurmd runs the program at the next interval tick after the fault appears: two intervals and a margin.
WAIT = 2 * INTERVAL + 20
ACTIVE_CHECK = active_check.__file__

# An active check that fails on a node while its fault file exists: lines that end health-faults.yml's cluster, whose
# last block is its healthChecks (test_exporter_prometheus adds it to its spec too).
ACTIVE_PROBE = """    active:
      - name: probe
        type: sbatch
        schedule: "*/30 * * * *"
        timeoutSeconds: 60
        script: |
          #!/bin/bash
          test ! -e %(faults)s/active-$SLURMD_NODENAME
"""
PREFIX = "soperator:"


@pytest.fixture
def faults():
    path = tempfile.mkdtemp(prefix="sop-faults-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster(local_cluster, faults):
    cluster_spec, nodesets = cluster_and_rest("health-faults", cluster="hc", workers=2, interval=INTERVAL,
                                              faults=faults)
    return local_cluster(cluster_spec + ACTIVE_PROBE % {"faults": faults} + nodesets)


def node(cluster, name):
    out = cluster.run(["scontrol", "--oneliner", "show", "node", name], timeout=15).stdout
    return health_check.parse_node_line(out, name)


def wait_for(predicate, timeout=WAIT, what="condition"):
    """tests/waiting.py's, with this file's bound (the exporter's tests share it)."""
    return waiting.wait_for(predicate, what, timeout)


def drained_with(cluster, name, reason_start):
    state = node(cluster, name)
    return "DRAIN" in state["flags"] and state["reason"].startswith(reason_start)


def program(cluster, *args, env=None):
    """The installed HealthCheckProgram, run the way slurmd runs it (only SLURMD_NODENAME set) unless env given."""
    proc = subprocess.run([os.path.join(cluster.state_dir, "bin", "health-check")] + list(args),
                          env=env if env is not None else {}, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout


def test_fault_drains_exactly_that_node_and_fixing_it_resumes(cluster, faults):
    assert not drained_with(cluster, "cpu-0", "") and not drained_with(cluster, "cpu-1", "")
    open(os.path.join(faults, "fault-cpu-1"), "w").close()
    wait_for(lambda: drained_with(cluster, "cpu-1", "%s health:fault-file" % PREFIX), what="cpu-1 drained")
    assert not drained_with(cluster, "cpu-0", "")
    # The reason names the check and what it said.
    assert node(cluster, "cpu-1")["reason"].startswith("%s health:fault-file exit 1" % PREFIX)

    os.unlink(os.path.join(faults, "fault-cpu-1"))
    wait_for(lambda: "DRAIN" not in node(cluster, "cpu-1")["flags"], what="cpu-1 resumed")
    assert not drained_with(cluster, "cpu-0", "")


def test_admin_drain_is_never_resumed(cluster, faults):
    cluster.run(["scontrol", "update", "nodename=cpu-0", "state=drain", "reason=admin: bad fan"])
    # A failing check does not overwrite the admin's reason...
    open(os.path.join(faults, "fault-cpu-0"), "w").close()
    rc, out = program(cluster, "--node", "cpu-0")
    assert rc == 1 and json.loads(out)["action"] == "none"
    assert node(cluster, "cpu-0")["reason"] == "admin: bad fan"
    # ...and passing checks (run by slurmd for two intervals, and once by hand) leave the drain alone.
    os.unlink(os.path.join(faults, "fault-cpu-0"))
    rc, out = program(cluster, "--node", "cpu-0")
    assert rc == 0 and json.loads(out)["action"] == "none"
    time.sleep(2 * INTERVAL + 1)
    assert drained_with(cluster, "cpu-0", "admin: bad fan")


def test_check_only_prints_json_and_changes_nothing(cluster, faults):
    rc, out = program(cluster, "--check-only", "--node", "cpu-0")
    result = json.loads(out)
    assert rc == 0 and result["healthy"] is True and result["failed"] == []
    assert set(result["passed"]) == {"disk", "memory", "munge", "fault-file"}     # no GPU on a cpu NodeSet

    open(os.path.join(faults, "fault-cpu-0"), "w").close()
    rc, out = program(cluster, "--check-only", "--node", "cpu-0")
    result = json.loads(out)
    assert rc == 1 and result["healthy"] is False
    assert [f["check"] for f in result["failed"]] == ["fault-file"]
    assert "DRAIN" not in node(cluster, "cpu-0")["flags"]          # --check-only never drains


def test_unreadable_state_exits_2_and_changes_nothing(cluster, tmp_path):
    # A slurm.conf that points at no controller (scontrol cannot read the node), beside a health.json whose custom
    # check always fails: the program would drain, if it could read the node.
    bad = tmp_path / "etc"
    bad.mkdir()
    with open(os.path.join(cluster.state_dir, "etc", "slurm.conf")) as f:
        conf = f.read()
    port = [ln for ln in conf.splitlines() if ln.startswith("SlurmctldPort=")][0]
    (bad / "slurm.conf").write_text(conf.replace(port, "SlurmctldPort=1"))
    with open(os.path.join(cluster.state_dir, "etc", "health.json")) as f:
        config = json.load(f)
    config["passive"]["custom"][0]["command"] = "false"
    (bad / "health.json").write_text(json.dumps(config))
    env = {"SLURMD_NODENAME": "cpu-0", "SLURM_CONF": str(bad / "slurm.conf"), "PATH": os.environ["PATH"]}
    rc, out = program(cluster, env=env)
    assert rc == 2 and "error" in json.loads(out)
    assert "DRAIN" not in node(cluster, "cpu-0")["flags"]


def run_active(cluster, *args):
    env = dict(os.environ, **cluster.env())
    proc = subprocess.run([sys.executable, ACTIVE_CHECK, "--check", "probe", "--pending-timeout", "60"] + list(args),
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, json.loads(proc.stdout)


def test_active_check_drains_only_the_failing_node(cluster, faults):
    open(os.path.join(faults, "active-cpu-1"), "w").close()
    rc, report = run_active(cluster)
    by_node = dict((r["node"], r) for r in report["results"])
    assert rc == 1 and report["drained"] == ["cpu-1"]
    assert by_node["cpu-0"]["result"] == "pass" and by_node["cpu-1"]["result"] == "fail"
    assert node(cluster, "cpu-1")["reason"].startswith("%s check:probe exit 1" % PREFIX)
    assert "DRAIN" not in node(cluster, "cpu-0")["flags"]
    # Active-check drains are not the passive program's: a passing health check leaves cpu-1 drained.
    rc, out = program(cluster, "--node", "cpu-1")
    assert rc == 0 and drained_with(cluster, "cpu-1", "%s check:probe" % PREFIX)


def test_active_check_skips_drained_and_busy_nodes(cluster, faults):
    cluster.run(["scontrol", "update", "nodename=cpu-0", "state=drain", "reason=admin: maintenance"])
    job = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--nodelist=cpu-1", "--wrap", "sleep 120"])
    job = job.stdout.strip()
    try:
        wait_for(lambda: node(cluster, "cpu-1")["state"] in ("ALLOCATED", "MIXED"), what="cpu-1 busy")
        open(os.path.join(faults, "active-cpu-0"), "w").close()
        rc, report = run_active(cluster)
    finally:
        cluster.run(["scancel", job], check=False)
    by_node = dict((r["node"], r) for r in report["results"])
    assert rc == 0 and report["drained"] == []
    assert by_node["cpu-0"]["result"] == "skipped" and "admin: maintenance" in by_node["cpu-0"]["detail"]
    assert by_node["cpu-1"]["result"] == "skipped" and "busy" in by_node["cpu-1"]["detail"]
    assert node(cluster, "cpu-0")["reason"] == "admin: maintenance"


def test_user_jobs_never_land_in_the_checks_partition(cluster):
    shown = cluster.run(["scontrol", "--oneliner", "show", "partition", "soperator-checks"]).stdout
    assert " Hidden=YES " in shown and " Default=NO " in shown and " AllowGroups=root " in shown
    job = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"]).stdout.strip()
    assert " Partition=main " in cluster.run(["scontrol", "--oneliner", "show", "job", job]).stdout
    # A user (not in group root) does not see it and cannot submit to it.
    user = ["runuser", "-u", "nobody", "--"]
    assert "soperator-checks" not in cluster.run(user + ["sinfo", "-h", "-o", "%P"]).stdout
    denied = cluster.run(user + ["sbatch", "--partition=soperator-checks", "--wrap", "true"], check=False)
    assert denied.returncode != 0 and "not permitted to use this partition" in denied.stderr
