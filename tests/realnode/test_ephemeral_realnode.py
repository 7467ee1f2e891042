"""Ephemeral workers on a real node (site.yml with the images of `make images`): a NodeSet with no worker running;
`sbatch -N2` makes slurmctld run our ResumeProgram in the controller pod, which creates exactly the two pods Slurm
asked for; the job runs in them and completes; after suspendTime our SuspendProgram deletes them and sinfo shows the
nodes powered down; site.yml run again changes nothing about them (audit log). A NodeSet whose image does not exist:
its node ends DOWN with our reason after resumeTimeout and the job is requeued, not lost.

Slurm's power saving runs on its own clock (idle nodes are looked for every 10 s; a batch job on resumed nodes starts
at slurmctld's next 30 s check): the waits are bounded, never asserted as timings.
"""
import json

import pytest

import ansible_run
from realnode_audit import Audit
from realnode_wait import wait

NS = "slurm-eph"
CLUSTER = "eph"
CONTROLLER = CLUSTER + "-controller-0"
LOGIN = CLUSTER + "-login-0"
# RESUME_TIMEOUT: a burst pod started on a busy CI machine (both test lanes at once) must register within it, or
# Slurm sets its node DOWN and requeues the job; the broken NodeSet's test, which waits it out, runs last.
SUSPEND_TIME, RESUME_TIMEOUT = 10, 240
TEMPLATE_HASH = "slurm.soperator.dev/pod-template-hash"
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: eph, namespace: slurm-eph}
spec:
  jail: {volume: {size: 1Gi}}
  login: {replicas: 1}
  slurmConfig: {SlurmdTimeout: 120}
  remediation: {enabled: false}
  healthChecks: {passive: {interval: 0}}
  partitions:
    - {name: burst, default: true, nodeSets: [burst]}
    - {name: broken, nodeSets: [broken]}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: burst, namespace: slurm-eph}
spec:
  clusterName: eph
  maxReplicas: 2
  ephemeral: {enabled: true, suspendTime: %(suspend)d, resumeTimeout: %(resume)d, suspendTimeout: 10}
  resources: {cpu: 250m, memory: 512Mi}
  slurmNode: {cpus: 1}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: broken, namespace: slurm-eph}
spec:
  clusterName: eph
  maxReplicas: 1
  image: localhost/soperator-test/no-such-image:0
  ephemeral: {enabled: true, suspendTime: %(suspend)d, resumeTimeout: %(resume)d, suspendTimeout: 10}
  resources: {cpu: 250m, memory: 512Mi}
  slurmNode: {cpus: 1}
""" % {"suspend": SUSPEND_TIME, "resume": RESUME_TIMEOUT}


@pytest.fixture(scope="module")
def cluster(real_node, tmp_path_factory):
    path = tmp_path_factory.mktemp("slurm-eph") / "eph.yml"
    path.write_text(SPEC)
    try:
        site(real_node, path)
        wait("the controller answering", lambda: (bool(_sinfo(real_node)), _sinfo(real_node)), 240, poll=2)
        wait("the login pod", lambda: (_login_ready(real_node), None), 240, poll=2)
        # the job whose worker cannot start goes first: its resumeTimeout runs while the other tests do their part
        broken_job = _sbatch(real_node, "-p", "broken", "-N1", "-o", "/dev/null", "--wrap", "hostname")
        yield real_node, path, broken_job
    finally:
        real_node.kubectl("delete", "namespace", NS, "--wait=true", timeout=300, check=False)


def site(node, path):
    ansible_run.playbook("site.yml", "-e", "spec_file=%s" % path, "-e", "kubeconfig=" + node.kubeconfig, timeout=900)


def _in_controller(node, *argv):
    return node.kubectl("-n", NS, "exec", CONTROLLER, "-c", "slurmctld", "--", *argv, timeout=60, check=False)


def _sinfo(node):
    """{node: (state, reason)} as sinfo in the controller pod shows them ('~' powered down, '#' powering up)."""
    out = _in_controller(node, "sinfo", "-h", "-N", "-o", "%N|%t|%E").stdout
    return dict((line.split("|")[0], tuple(line.split("|")[1:])) for line in out.splitlines() if "|" in line)


def _power_log(node):
    """The power programs' log and slurmctld's power lines in the controller pod: what a failed wait shows."""
    log = _in_controller(node, "sh", "-c", "tail -n 20 /var/log/slurm/power.log; "
                         "grep -iE 'power|resume|suspend' /var/log/slurm/slurmctld.log | tail -n 20")
    return log.stdout + log.stderr


def _login_ready(node):
    out = node.kubectl("-n", NS, "get", "pod", LOGIN, "-o", "json", timeout=60, check=False).stdout
    return bool(out) and any(c["type"] == "Ready" and c["status"] == "True"
                             for c in json.loads(out).get("status", {}).get("conditions", []))


def _worker_pods(node, prefixes=("burst-", "broken-")):
    out = node.kubectl("-n", NS, "get", "pods", "-o", "json", timeout=60).stdout
    return sorted(p["metadata"]["name"] for p in json.loads(out)["items"] if p["metadata"]["name"].startswith(prefixes))


def _burst_pods(node):
    return _worker_pods(node, ("burst-",))


def _sbatch(node, *args):
    """sbatch in the login pod, as users do (the controller image has no chroot SPANK plugin for the clients)."""
    done = node.kubectl("-n", NS, "exec", LOGIN, "--", "sbatch", "--parsable", *args, timeout=60, check=False)
    job = done.stdout.strip().split(";")[0]
    assert job.isdigit(), (done.stdout, done.stderr)
    return job


def _job_state(node, job):
    out = _in_controller(node, "scontrol", "show", "job", "-o", job).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def test_a_job_starts_two_worker_pods_and_idle_ones_go_away(cluster):
    node, path, _broken_job = cluster
    assert _burst_pods(node) == []
    # the burst nodes powered down; not the broken NodeSet's: the fixture's job is powering it up already
    assert all(_sinfo(node)[n][0].endswith("~") for n in ("burst-0", "burst-1")), _sinfo(node)
    job = _sbatch(node, "-p", "burst", "-N2", "-o", "/dev/null", "--wrap", "srun hostname")
    # exactly the two nodes Slurm gave the job
    wait("the two burst pods", lambda: (_burst_pods(node) == ["burst-0", "burst-1"], _burst_pods(node)), 120, poll=2,
         context=lambda: _power_log(node))
    state = wait("job %s completed" % job, lambda: (_job_state(node, job).get("JobState") in (
        "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"), _job_state(node, job)), RESUME_TIMEOUT + 120, poll=2,
        context=lambda: (_sinfo(node), _worker_pods(node), _power_log(node)))[1]
    assert state["JobState"] == "COMPLETED", (state, _power_log(node))
    wait("the burst pods gone and powered down", lambda: (
        _burst_pods(node) == [] and all(_sinfo(node)[n][0].endswith("~") for n in ("burst-0", "burst-1")),
        (_burst_pods(node), _sinfo(node))), SUSPEND_TIME + 120, poll=2, context=lambda: _power_log(node))

    # site.yml again: no pod of the NodeSet is created or deleted, the nodes stay powered down
    audit = Audit(node.info["audit_log"], NS)
    mark = audit.mark()
    site(node, path)
    touched = [r for r in audit.writes(mark)
               if r.resource == "pods" and (r.name or "").startswith(("burst-", "broken-"))]
    assert touched == [], touched
    assert _burst_pods(node) == []

    # a remediation pass (reconcile, then replace/re-check/resume what we drained) neither: no pod of theirs is
    # written, they stay powered down and undrained
    mark = audit.mark()
    ansible_run.playbook("remediate.yml", "-e", "cluster=" + CLUSTER, "-e", "slurm_namespace=" + NS,
                         "-e", "kubeconfig=" + node.kubeconfig, timeout=600)
    touched = [r for r in audit.writes(mark) if r.resource == "pods" and (r.name or "").startswith("burst-")]
    assert touched == [], touched
    assert _burst_pods(node) == []
    after = _sinfo(node)
    assert all(after[n][0] == "idle~" and after[n][1] in ("", "none") for n in ("burst-0", "burst-1")), after


def test_a_powered_up_worker_on_an_older_template_is_powered_down_once_idle_and_comes_back_new(cluster):
    """site.yml with a changed burst template (its CPU request; slurm.conf stays the same): the powered-up burst pod
    runs the old template, so its node is drained with our upgrade reason and handed to power saving; the running
    job is not killed; once it ends, the SuspendProgram deletes the pod and the next job's pod carries the new
    template's digest."""
    node, path, _broken_job = cluster
    job = _sbatch(node, "-p", "burst", "-N1", "-o", "/dev/null", "--wrap", "sleep 900")
    wait("job %s running" % job, lambda: (_job_state(node, job).get("JobState") == "RUNNING", _job_state(node, job)),
         RESUME_TIMEOUT + 120, poll=2)
    worker = _job_state(node, job)["NodeList"]
    old = json.loads(node.kubectl("-n", NS, "get", "pod", worker, "-o", "json").stdout)
    newer = path.parent / "eph-newer.yml"
    newer.write_text(path.read_text().replace("resources: {cpu: 250m, memory: 512Mi}\n  slurmNode: {cpus: 1}\n---",
                                              "resources: {cpu: 200m, memory: 512Mi}\n  slurmNode: {cpus: 1}\n---", 1))
    assert newer.read_text() != path.read_text()
    site(node, newer)
    # drained with our reason, powering down once idle; the job runs on
    assert _sinfo(node)[worker][1] == "soperator: upgrade", _sinfo(node)
    assert _job_state(node, job)["JobState"] == "RUNNING"
    pod = json.loads(node.kubectl("-n", NS, "get", "pod", worker, "-o", "json").stdout)
    assert pod["metadata"]["uid"] == old["metadata"]["uid"] and not pod["metadata"].get("deletionTimestamp")
    _in_controller(node, "scancel", job)       # the user's job ends (here: early, to keep the test short)
    wait("%s powered down and its pod gone" % worker, lambda: (
        worker not in _burst_pods(node) and _sinfo(node)[worker][0].endswith("~"), (_burst_pods(node), _sinfo(node))),
        SUSPEND_TIME + 120, poll=2)
    # the next job powers it up from the new template
    config = json.loads(json.loads(node.kubectl("-n", NS, "get", "configmap", CLUSTER + "-power", "-o", "json").stdout)
                        ["data"]["power.json"])
    digest = config["nodeSets"]["burst"]["pod"]["metadata"]["annotations"][TEMPLATE_HASH]
    assert digest != old["metadata"]["annotations"][TEMPLATE_HASH]
    job = _sbatch(node, "-p", "burst", "-w", worker, "-o", "/dev/null", "--wrap", "sleep 20")

    def new_pod():
        out = node.kubectl("-n", NS, "get", "pod", worker, "-o", "json", check=False).stdout
        pod = json.loads(out) if out else {}
        return (pod.get("metadata", {}).get("annotations", {}).get(TEMPLATE_HASH) == digest, pod.get("metadata"))
    pod = wait("%s made from the new template" % worker, new_pod, RESUME_TIMEOUT, poll=1)
    assert pod[1]["uid"] != old["metadata"]["uid"]
    state = wait("job %s completed" % job, lambda: (_job_state(node, job).get("JobState") in (
        "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"), _job_state(node, job)), RESUME_TIMEOUT + 120, poll=2)[1]
    assert state["JobState"] == "COMPLETED", state


def test_a_worker_that_cannot_start_ends_down_with_our_reason_and_the_job_is_requeued(cluster):
    node, _path, job = cluster
    reason = wait("broken-0 down with our reason", lambda: (
        "resume-failed" in _sinfo(node).get("broken-0", ("", ""))[1], _sinfo(node)), RESUME_TIMEOUT + 120, poll=2)[1]
    assert reason["broken-0"][1].startswith("soperator: resume-failed"), reason
    state = _job_state(node, job)
    assert state["JobState"] in ("PENDING", "REQUEUED", "CONFIGURING") and state.get("Restarts") != "0", state
    # the ResumeFailProgram removed what it had started
    wait("the broken-0 pod removed", lambda: ("broken-0" not in _worker_pods(node), _worker_pods(node)), 120, poll=2)
