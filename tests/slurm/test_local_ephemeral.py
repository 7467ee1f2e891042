"""Ephemeral NodeSets on the local backend, against the host's real slurmctld and slurmd (Slurm's own power saving):
a job given powered-down nodes starts their slurmds through our ResumeProgram and runs; idle nodes are powered down
again by our SuspendProgram; a re-run of ensure_started() changes nothing about them; a resume that cannot succeed
ends with the node DOWN with our reason and the job requeued, not lost.

Slurm's power saving runs on its own clock (it looks for idle nodes every 10 s): the waits below are bounded by the
spec's times plus that interval, never asserted as timings. The cluster's exporter reports each resumed node's
resume latency (the request time our ResumeProgram leaves in the node's Comment, to its slurmd's start)."""
import json
import os
import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from local_helpers import ROOT, job_state, wait_job
from waiting import wait_for

from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port


SUSPEND_TIME, RESUME_TIMEOUT, SUSPEND_TIMEOUT = 10, 30, 10
# Slurm's power_save_interval (10 s) and a margin for this shared 2-core machine.
SLACK = 60


def spec_text(exporter_port=None):
    with open(os.path.join(ROOT, "examples", "ephemeral-cpu.yml")) as f:
        text = f.read()
    times = "suspendTime: %d\n    suspendTimeout: %d" % (SUSPEND_TIME, SUSPEND_TIMEOUT)
    if exporter_port:
        text = text.replace("  login:\n", "  observability:\n    exporter: {enabled: true, port: %d}\n  login:\n"
                            % exporter_port, 1)
    return text.replace("suspendTime: 300", times).replace("resumeTimeout: 300", "resumeTimeout: %d" % RESUME_TIMEOUT)


def resume_seconds(port):
    """soperator_slurm_node_resume_seconds of the cluster's exporter: {node: (nodeset, seconds)}."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as reply:
        text = reply.read().decode()
    return dict((s.labels["node"], (s.labels["nodeset"], s.value)) for family in text_string_to_metric_families(text)
                for s in family.samples if s.name == "soperator_slurm_node_resume_seconds")


def comments(cluster):
    return dict((n["name"], n.get("comment") or "")
                for n in json.loads(cluster.run(["sinfo", "--json"], timeout=30).stdout)["nodes"])


def nodes(cluster):
    """sinfo --json's nodes by name: (state, sorted flags)."""
    out = json.loads(cluster.run(["sinfo", "--json"], timeout=30).stdout)["nodes"]
    return dict((n["name"], (n["state"].lower(), sorted(n.get("state_flags") or []))) for n in out)


def powered_down(cluster, names):
    now = nodes(cluster)
    return all("POWERED_DOWN" in now[n][1] for n in names), now


def slurmd_records(cluster):
    return sorted(n for n in cluster.status()["processes"] if n.startswith("slurmd-"))


def sbatch(cluster, *args):
    return cluster.run(["sbatch", "--parsable"] + list(args), timeout=30).stdout.strip().split(";")[0]


def test_jobs_power_ephemeral_workers_up_and_idle_ones_down(local_cluster, tmp_path):
    port = find_free_base_port(1, start=33000 + (os.getpid() % 100) * 20)
    cluster = local_cluster(spec_text(port), start=False)
    # check mode says the power programs would be installed; the run installs them
    planned = cluster.plan_present(cluster.model, cluster.status())
    assert "would install %s" % os.path.join(cluster.state_dir, "bin", "power-resume") in planned, planned
    cluster.ensure_started()
    burst = ["burst-0", "burst-1", "burst-2", "burst-3"]
    # at the start only the fixed NodeSet runs; Slurm shows the ephemeral nodes powered down
    assert slurmd_records(cluster) == ["slurmd-cpu-0"]
    start = nodes(cluster)
    assert all("POWERED_DOWN" in start[n][1] and "CLOUD" in start[n][1] for n in burst), start
    assert start["cpu-0"] == ("idle", []), start

    out = tmp_path / "out-%j.txt"
    job = sbatch(cluster, "-p", "burst", "-N2", "-o", str(out), "--wrap", "srun hostname")
    assert wait_job(cluster, job, timeout=RESUME_TIMEOUT + SLACK) == "COMPLETED"
    # exactly the two nodes Slurm gave the job were started, by our ResumeProgram
    started = slurmd_records(cluster)
    assert len(started) == 3 and "slurmd-cpu-0" in started, started
    ran = [n[len("slurmd-"):] for n in started if n != "slurmd-cpu-0"]
    # the exporter reports how long each took to come up (while they are up: idle for suspendTime at least)
    latency = resume_seconds(port)
    assert sorted(latency) == sorted(ran), latency
    assert all(nodeset == "burst" and 0 <= seconds <= RESUME_TIMEOUT for nodeset, seconds in latency.values()), latency
    assert (tmp_path / ("out-%s.txt" % job)).read_text().split() == [socket.gethostname()] * 2
    log = open(os.path.join(cluster.state_dir, "log", "power.log")).read()
    assert all("resume %s: started slurmd" % n in log for n in ran), log

    # idle for SuspendTime: powered down by our SuspendProgram, their slurmds gone
    wait_for(lambda: powered_down(cluster, ran), "%s powered down" % ran, SUSPEND_TIME + SUSPEND_TIMEOUT + SLACK,
             poll=1, done=lambda result: result[0])
    wait_for(lambda: slurmd_records(cluster) == ["slurmd-cpu-0"], "the ephemeral slurmds stopped", SLACK, poll=1)
    assert all("suspend %s: stopped slurmd" % n in open(os.path.join(cluster.state_dir, "log", "power.log")).read()
               for n in ran)
    # powered down: our request times are cleared, no latency is reported for them any more
    assert all(comments(cluster)[n] == "" for n in ran), comments(cluster)
    assert resume_seconds(port) == {}

    # a re-run (site.yml) changes nothing about powered-down nodes: no slurmd started, none removed from Slurm
    assert cluster.plan_present(cluster.model, cluster.status()) == []
    again = cluster.ensure_started()
    assert again["changed"] is False, again
    assert slurmd_records(cluster) == ["slurmd-cpu-0"]
    assert all("POWERED_DOWN" in nodes(cluster)[n][1] for n in burst)

    # a second job brings workers back (once SuspendTimeout has passed, Slurm may resume them); an admin's comment
    # on a node is left as it is (that node has no resume latency then)
    note = "rack 7, ask Kim before moving"
    cluster.run(["scontrol", "update", "NodeName=%s" % ran[0], "Comment=%s" % note], timeout=30)
    job = sbatch(cluster, "-p", "burst", "-N2", "-o", str(out), "--wrap", "srun hostname")
    assert wait_job(cluster, job, timeout=SUSPEND_TIMEOUT + RESUME_TIMEOUT + SLACK) == "COMPLETED"
    again = [n[len("slurmd-"):] for n in slurmd_records(cluster) if n != "slurmd-cpu-0"]
    assert len(again) == 2, again
    assert comments(cluster)[ran[0]] == note
    assert sorted(resume_seconds(port)) == sorted(n for n in again if n != ran[0]), (again, resume_seconds(port))

    # stop() stops what the power programs started too
    cluster.stop()
    assert slurmd_records(cluster) == []
    assert cluster.leftover_processes() == []


def reason_of(cluster, node):
    return cluster.run(["sinfo", "-h", "-n", node, "-o", "%E"], timeout=30).stdout.strip()


def _resume_failed(reason):
    return "resume-failed" in reason


def test_a_resume_that_fails_sets_the_node_down_with_our_reason_and_requeues(local_cluster, tmp_path):
    cluster = local_cluster(spec_text())
    # burst-0's slurmd cannot start: something else listens on its port (the local cluster's loopback ports)
    with open(os.path.join(cluster.state_dir, "run", "slurmd-burst-0.launch.json")) as f:
        port = json.load(f)["record"]["ports"][0]
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", port))
    blocker.listen(1)
    try:
        job = sbatch(cluster, "-p", "burst", "-w", "burst-0", "-o", str(tmp_path / "o-%j"), "--wrap", "hostname")
        # Slurm gives up after ResumeTimeout; our ResumeFailProgram says why on the node
        wait_for(lambda: nodes(cluster)["burst-0"][0] == "down", "burst-0 DOWN", RESUME_TIMEOUT + SLACK, poll=1)
        reason = wait_for(lambda: reason_of(cluster, "burst-0"), "our reason on burst-0", SLACK, poll=1,
                          done=_resume_failed)
        assert reason.startswith("soperator: resume-failed"), reason
        # the job is not lost: Slurm requeued it
        assert job_state(cluster, job) in ("PENDING", "CONFIGURING", "REQUEUED"), job_state(cluster, job)
        show = cluster.run(["scontrol", "show", "job", "-o", job], timeout=30).stdout
        assert "Restarts=0" not in show, show
        assert "slurmd-burst-0" not in slurmd_records(cluster)
    finally:
        blocker.close()
    # once the cause is gone, the admin's RESUME makes the node usable: the requeued job runs
    cluster.run(["scontrol", "update", "NodeName=burst-0", "State=RESUME"], timeout=30)
    assert wait_job(cluster, job, timeout=RESUME_TIMEOUT + 120 + SLACK) == "COMPLETED"


def sinfo_node(cluster, node):
    """(state, sorted flags, reason) of one node in sinfo --json."""
    found = [n for n in json.loads(cluster.run(["sinfo", "--json"], timeout=30).stdout)["nodes"] if n["name"] == node]
    return found[0]["state"].lower(), sorted(found[0].get("state_flags") or []), found[0].get("reason") or ""


def test_an_outdated_powered_up_worker_is_powered_down_once_its_job_ends(local_cluster, tmp_path):
    """What site.yml does with an ephemeral worker whose pod runs an older template (kube/power_roll.py finds it;
    slurm/power_down.py acts): the node is drained with our upgrade reason and powered down by Slurm once idle, its
    job finishing first; the drain goes with the power-down, and the next job powers it up again."""
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm import power_down
    cluster = local_cluster(spec_text())
    job = sbatch(cluster, "-p", "burst", "-N1", "-o", str(tmp_path / "o-%j"), "--wrap", "sleep 20")
    assert wait_job(cluster, job, states=("RUNNING",), timeout=RESUME_TIMEOUT + SLACK) == "RUNNING"
    node = cluster.run(["squeue", "-h", "-j", job, "-o", "%N"], timeout=30).stdout.strip()
    # check mode says what it would do, and does nothing
    assert power_down.power_down_outdated(cluster.slurm(), [node], "soperator:", check_mode=True) == [
        "would power down %s once idle: its pod runs an older template" % node]
    assert "DRAIN" not in sinfo_node(cluster, node)[1]
    assert power_down.power_down_outdated(cluster.slurm(), [node], "soperator:") == [
        "powering down %s once idle: its pod runs an older template" % node]
    state, flags, reason = sinfo_node(cluster, node)
    assert "DRAIN" in flags and "POWER_DOWN" in flags and reason == "soperator: upgrade", (state, flags, reason)
    # again: on its way down already, nothing to do
    assert power_down.power_down_outdated(cluster.slurm(), [node], "soperator:") == [
        "kept %s: powering down already" % node]
    # the job is not killed; then Slurm powers the node down (our SuspendProgram stops its slurmd), drain cleared
    assert wait_job(cluster, job, timeout=60 + SLACK) == "COMPLETED"
    wait_for(lambda: sinfo_node(cluster, node), "%s powered down" % node, SUSPEND_TIMEOUT + SLACK, poll=1,
             done=lambda now: "POWERED_DOWN" in now[1] and "DRAIN" not in now[1])
    wait_for(lambda: "slurmd-%s" % node not in slurmd_records(cluster), "its slurmd stopped", SLACK, poll=1)
    # the next job on it powers it up again (the new template, on Kubernetes)
    job = sbatch(cluster, "-p", "burst", "-w", node, "-o", str(tmp_path / "o-%j"), "--wrap", "hostname")
    assert wait_job(cluster, job, timeout=SUSPEND_TIMEOUT + RESUME_TIMEOUT + SLACK) == "COMPLETED"
