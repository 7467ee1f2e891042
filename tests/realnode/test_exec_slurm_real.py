"""Slurm through the kubernetes transport on a real node: one small cluster (site.yml with the images of
`make images`), deployed once for this module; its controller pod runs slurmctld, its worker pod slurmd.

- SlurmRunner, the slurm_drain module and the health-check program (KubeChecker) exec into those pods;
- slurm_cluster target=kubernetes runs `scontrol reconfigure` only once the controller pod sees the new configs.
- the cluster has a backup controller (spec.controller.replicas 2); the last test deletes the primary's pod.
  The kubelet refreshes a mounted ConfigMap for real (on its pod sync, tools/k8s/node.py's syncFrequency 10s);
  where a test needs a pod that does not see them yet, the refresh is made to fail on this host, which is the node:
  the volume's directory, bind-mounted read-only over itself, refuses the kubelet's writes (its log says so)
  while the pod keeps the files it has.

Which commands ran where comes from the API server's audit log (the exec requests' own argv).
"""
import concurrent.futures
import contextlib
import copy
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

import ansible_run
from ansible_collections.soperator.slurm.plugins.module_utils import args as module_args
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import read_nodes
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import KubeChecker
from realnode_audit import Audit
from realnode_wait import wait

NS = "slurm-exec"
CLUSTER = "ex"
CONTROLLER = CLUSTER + "-controller-0"
CONFIGS = CLUSTER + "-slurm-configs"
PROGRAM = "/opt/soperator/bin/health-check"   # constants.HEALTH_CHECK_PROGRAM, as the worker image installs it
FAULT = "/tmp/soperator-fault"
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: ex, namespace: slurm-exec}
spec:
  jail: {volume: {size: 1Gi}}
  login: {replicas: 0}
  # a backup controller (the module's last test deletes the primary); failover after 15 s, not 30
  controller: {replicas: 2, spool: {size: 1Gi, accessModes: [ReadWriteMany]}}
  slurmConfig: {SlurmdTimeout: 120, SlurmctldTimeout: 15}
  remediation: {enabled: false}
  healthChecks:
    passive:
      interval: 0           # slurmd never runs the checks on its own: only the test does (KubeChecker)
      custom:
        - name: fault-file
          command: test ! -e %s
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm-exec}
spec:
  clusterName: ex
  replicas: 1
  resources: {cpu: 500m, memory: 1Gi}   # the other lane's pods share the 2-CPU node (conftest.py)
  slurmNode: {cpus: 1}
""" % FAULT


class Cluster:
    def __init__(self, node, docs):
        self.node, self.docs = node, docs     # docs: the definition last applied
        self.audit = Audit(node.info["audit_log"], NS)


@pytest.fixture(scope="module")
def cluster(real_node, tmp_path_factory):
    path = tmp_path_factory.mktemp("slurm-exec") / "ex.yml"
    path.write_text(SPEC)
    try:
        ansible_run.playbook("site.yml", "-e", "spec_file=%s" % path, "-e", "kubeconfig=" + real_node.kubeconfig,
                             timeout=900)
        _until("cpu-0 registered and idle", lambda: (_sinfo(real_node).get("cpu-0") == ("idle", "none"),
                                                     _sinfo(real_node)), timeout=180)
        yield Cluster(real_node, list(yaml.safe_load_all(SPEC)))
    finally:
        # the next module's clusters need the worker's CPU
        real_node.kubectl("delete", "namespace", NS, "--wait=true", timeout=300, check=False)


def _params(node, **extra):
    return dict(transport="kubernetes", namespace=NS, cluster_name=CLUSTER, kubeconfig=node.kubeconfig, retries=1,
                retry_delay=0.5, command_timeout=30, **extra)


def _until(what, probe, timeout=120, context=None):
    return wait(what, probe, timeout, poll=1, context=context)


def _in_pod(node, pod, container, *argv):
    """kubectl exec - the test's own look, not the transport under test."""
    return node.kubectl("-n", NS, "exec", pod, "-c", container, "--", *argv, timeout=60, check=False)


def _sinfo(node):
    """{node: (state, reason)} as sinfo in the controller pod shows them."""
    out = _in_pod(node, CONTROLLER, "slurmctld", "sinfo", "-h", "-N", "-o", "%N|%t|%E").stdout
    return dict((line.split("|")[0], tuple(line.split("|")[1:])) for line in out.splitlines() if "|" in line)


def _slurm_views(node):
    """What each controller and the worker say, for a failed wait: both slurmctld's node view and log ends, slurmd's."""
    out = []
    for pod, container, argv in ((CONTROLLER, "slurmctld", ("scontrol", "show", "node")),
                                 (BACKUP, "slurmctld", ("scontrol", "show", "node")),
                                 (CONTROLLER, "slurmctld", ("scontrol", "ping")),
                                 # sinfo's own errors, and the nodes it hides (FUTURE: a node no slurmd registered)
                                 (CONTROLLER, "slurmctld", ("sinfo", "-N")),
                                 (CONTROLLER, "slurmctld", ("sinfo", "-N", "--future"))):
        done = _in_pod(node, pod, container, *argv)
        out.append("--- %s: %s (rc %s)\n%s%s" % (pod, " ".join(argv), done.returncode, done.stdout, done.stderr))
    for pod, container in ((CONTROLLER, "slurmctld"), (BACKUP, "slurmctld"), ("cpu-0", "slurmd")):
        logs = node.kubectl("-n", NS, "logs", pod, "-c", container, "--tail=40", check=False)
        out.append("--- %s log\n%s%s" % (pod, logs.stdout, logs.stderr))
    return "\n".join(out)


def _back_in_service(node):
    # slurmctld marks a resumed node not responding ("idle*") until its next ping of the slurmd answers
    _until("cpu-0 idle again", lambda: (_sinfo(node).get("cpu-0") == ("idle", "none"), _sinfo(node)), timeout=60)


# ---------------------------------------------------------------- Slurm commands and checks in the pods

def test_runner_reads_and_updates_slurm_through_the_controller_pod(cluster):
    node, audit = cluster.node, cluster.audit
    runner = module_args.runner_from_params(_params(node))
    assert runner.describe()["pod"] == CONTROLLER
    mark = audit.mark()
    assert sorted(read_nodes(runner)) == sorted(_sinfo(node)) == ["cpu-0"]
    reason = "exec test: a b 'c'"
    runner.run(["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=" + reason])
    ran = audit.execs(mark)
    assert _sinfo(node)["cpu-0"] == ("drain", reason)
    # a Slurm error comes back as the command's exit code and output, not as a transport failure
    mark = audit.mark()
    result, unused = runner.run(["scontrol", "show", "node", "no-such-node"], check=False)
    assert result.rc == 1 and "no-such-node" in result.stdout + result.stderr, (result.stdout, result.stderr)
    runner.run(["scontrol", "update", "NodeName=cpu-0", "State=RESUME"])
    ran += audit.execs(mark)
    _back_in_service(node)
    # every command ran in the controller pod's slurmctld container, one argument per argv item
    assert {(e.pod, e.container, e.code) for e in ran} == {(CONTROLLER, "slurmctld", 101)}, ran
    assert ["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=" + reason] in [e.argv for e in ran]
    assert [e.argv for e in ran][-2:] == [["scontrol", "show", "node", "no-such-node"],
                                          ["scontrol", "update", "NodeName=cpu-0", "State=RESUME"]]


def test_slurm_drain_module_over_the_kubernetes_transport(cluster):
    node, audit = cluster.node, cluster.audit
    params = _params(node, nodes="cpu-0")
    mark = audit.mark()
    # through the `ansible` CLI: the suite's module run the way a user makes it
    drained = ansible_run.module("slurm_drain", dict(params, state="drained", reason="maintenance"), cli=True)
    ran = audit.execs(mark)
    assert drained["changed"] and drained["transport"]["pod"] == CONTROLLER
    assert _sinfo(node)["cpu-0"] == ("drain", "soperator: maintenance")
    mark = audit.mark()
    assert not ansible_run.module("slurm_drain", dict(params, state="drained", reason="maintenance"))["changed"]
    assert ansible_run.module("slurm_drain", dict(params, state="resumed"))["changed"]
    ran += audit.execs(mark)
    _back_in_service(node)
    assert ran and {(e.pod, e.container, e.code) for e in ran} == {(CONTROLLER, "slurmctld", 101)}, ran


def test_health_check_program_runs_in_the_worker_pod(cluster):
    node, audit = cluster.node, cluster.audit
    checker = KubeChecker(NS, module_args._core_v1_factory(_params(node)), timeout=30)
    healthy, report = checker.check("cpu-0")
    assert healthy is True and report["node"] == "cpu-0" and "fault-file" in report["passed"], report
    assert _in_pod(node, "cpu-0", "slurmd", "touch", FAULT).returncode == 0
    try:
        mark = audit.mark()
        healthy, report = checker.check("cpu-0")
        ran = audit.execs(mark)
        assert healthy is False and [f["check"] for f in report["failed"]] == ["fault-file"], report
        assert [(e.pod, e.container, e.argv) for e in ran] == [
            ("cpu-0", "slurmd", [PROGRAM, "--check-only", "--node", "cpu-0"])]
        # --check-only changes nothing in Slurm
        assert _sinfo(node)["cpu-0"] == ("idle", "none")
    finally:
        _in_pod(node, "cpu-0", "slurmd", "rm", "-f", FAULT)
    # a worker pod that does not exist: the check could not run, never a verdict
    mark = audit.mark()
    healthy, detail = checker.check("cpu-9")
    assert healthy is None and '404 pods "cpu-9" not found' in detail["error"], detail
    assert [(e.pod, e.code) for e in audit.execs(mark)] == [("cpu-9", 404)]


# ---------------------------------------------------------------- scontrol reconfigure after the kubelet's refresh

def _apply(cluster, docs, wait_timeout=240, check=False, expect_failed=False):
    return ansible_run.module("slurm_cluster", dict(
        state="present", target="kubernetes", definition=docs, kubeconfig=cluster.node.kubeconfig, wait_sleep=1,
        wait_timeout=wait_timeout), check=check, expect_failed=expect_failed, timeout=600)


def _edited(docs, slurm_config=None, cgroup_config=None):
    edited = copy.deepcopy(docs)
    edited[0]["spec"].setdefault("slurmConfig", {}).update(slurm_config or {})
    edited[0]["spec"].setdefault("cgroupConfig", {}).update(cgroup_config or {})
    return edited


def _configmap(node):
    return json.loads(node.kubectl("-n", NS, "get", "configmap", CONFIGS, "-o", "json").stdout)["data"]


def _recorded_digest(node):
    found = json.loads(node.kubectl("-n", NS, "get", "slurmcluster", CLUSTER, "-o", "json").stdout)
    return (found.get("status") or {}).get("slurmConfigDigest")


def _loaded(node, key, value):
    """Whether slurmctld runs with `key = value` (scontrol show config, slurm.conf and cgroup.conf); it re-executes
    itself on a reconfigure, so a moment without an answer is no verdict."""
    out = _in_pod(node, CONTROLLER, "slurmctld", "scontrol", "show", "config").stdout
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    seen = dict((k.strip(), v.strip()) for k, v in seen.items())
    return seen.get(key) == value, seen.get(key)


def _reads_then_reconfigure(execs):
    """The exec argvs of a run that waited for the configs: sha256sum reads, then the one reconfigure, last."""
    argvs = [e.argv for e in execs]
    assert {(e.pod, e.container) for e in execs} == {(CONTROLLER, "slurmctld")}, execs
    assert argvs[-1:] == [["scontrol", "reconfigure"]], argvs
    assert argvs[:-1] and all(a[0] == "sha256sum" and "/etc/slurm/slurm.conf" in a for a in argvs[:-1]), argvs
    return len(argvs) - 1


@contextlib.contextmanager
def _kubelet_cannot_refresh(node):
    """The kubelet's writes to the controller pod's slurm-configs volume fail while this holds: a read-only bind
    mount of the volume's directory over itself, on the host. The container's own mount of it is private (it does
    not see this one) and keeps showing the directory, now as the kubelet last wrote it. Yields its path."""
    uid = node.kubectl("-n", NS, "get", "pod", CONTROLLER, "-o", "jsonpath={.metadata.uid}").stdout
    path = os.path.join(node.info["state"], "node", "kubelet", "pods", uid, "volumes", "kubernetes.io~configmap",
                        "slurm-configs")
    assert os.path.isfile(os.path.join(path, "slurm.conf")), path
    subprocess.run(["mount", "--bind", path, path], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", path], check=True)
        yield path
    finally:
        subprocess.run(["umount", path], check=True)


def test_reconfigure_runs_once_the_controller_pod_sees_the_new_slurm_conf(cluster):
    node, audit = cluster.node, cluster.audit
    edited = _edited(cluster.docs, slurm_config={"SlurmdTimeout": 300})
    before = _recorded_digest(node)
    assert before and _loaded(node, "SlurmdTimeout", "120 sec")[0]
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        with _kubelet_cannot_refresh(node) as volume:
            mark = audit.mark()
            run = pool.submit(_apply, cluster, edited)
            # the run applied the ConfigMap and reads the files in the pod, which are still the old ones
            _until("the run to read the configs in the pod twice", lambda: (
                run.done() or len(audit.execs(mark)) >= 2, audit.execs(mark)))
            assert not run.done(), run.result()
            assert "SlurmdTimeout=300" in _configmap(node)["slurm.conf"]
            with open(os.path.join(volume, "slurm.conf")) as f:
                assert "SlurmdTimeout=120" in f.read()
        # the kubelet's next attempt writes the new files
        done = run.result(timeout=600)
    finally:
        pool.shutdown()
    cluster.docs = edited
    reads = _reads_then_reconfigure(audit.execs(mark))
    assert reads >= 3
    # slurmctld re-read the new slurm.conf: the reconfigure came after the pod had it
    _until("slurmctld to run with SlurmdTimeout 300", lambda: _loaded(node, "SlurmdTimeout", "300 sec"), timeout=60)
    waited = [a for a in done["actions"] if a.startswith("waited")]
    assert len(waited) == 1 and re.match(r"^waited \d+ s for the changed Slurm configs to reach the controller pod "
                                         r"%s/%s$" % (NS, CONTROLLER), waited[0]), done["actions"]
    assert done["actions"].index(waited[0]) < done["actions"].index("ran scontrol reconfigure (slurm.conf changed)")
    assert done["status"]["slurmConfigDigest"] == _recorded_digest(node) != before


def test_no_reconfigure_while_the_pod_does_not_see_the_configs_and_a_rerun_runs_it(cluster):
    """Only cgroup.conf changes (slurm.conf stays the same in the pod): the wait is for every file. It times out
    (bounded by wait_timeout) without a reconfigure; the re-run, once the kubelet refreshed the pod, runs it."""
    node, audit = cluster.node, cluster.audit
    edited = _edited(cluster.docs, cgroup_config={"ConstrainRAMSpace": "no"})
    before, old = _recorded_digest(node), _configmap(node)
    assert _loaded(node, "ConstrainRAMSpace", "yes")[0]
    with _kubelet_cannot_refresh(node):
        mark = audit.mark()
        failed = _apply(cluster, edited, wait_timeout=5, expect_failed=True)
        cluster.docs = edited
        assert "pod %s/%s still sees the old cgroup.conf in /etc/slurm" % (NS, CONTROLLER) in failed["msg"], \
            failed["msg"]
        assert "ConfigMap %s/%s was applied" % (NS, CONFIGS) in failed["msg"]
        assert "reconfigure` was not run" in failed["msg"] and "a re-run of this task" in failed["msg"]
        execs = audit.execs(mark)
        assert execs and all(e.argv[0] == "sha256sum" for e in execs), execs
        # the ConfigMap stays applied; slurmctld is recorded as still running the old configs
        new = _configmap(node)
        assert "ConstrainRAMSpace=no" in new["cgroup.conf"] and new["slurm.conf"] == old["slurm.conf"]
        assert _recorded_digest(node) == before

        # check mode: the ConfigMap is as wanted now, the reload is owed: planned, nothing run or written
        mark = audit.mark()
        planned = _apply(cluster, edited, check=True)
        assert planned["changed"], planned
        assert planned["actions"] == ["would run scontrol reconfigure (configs not yet loaded by slurmctld)"]
        assert ("ConfigMap", CONFIGS, "unchanged") in [(o["kind"], o["name"], o["action"]) for o in planned["objects"]]
        assert audit.execs(mark) == [] and audit.writes(mark) == []
    assert _loaded(node, "ConstrainRAMSpace", "yes")[0]

    # the kubelet may refresh now: the re-run waits for it if need be, reconfigures and records what was loaded
    mark = audit.mark()
    done = _apply(cluster, edited)
    assert done["changed"] and done["actions"][-1] == "ran scontrol reconfigure (configs not yet loaded by slurmctld)"
    assert all(a.startswith("waited ") for a in done["actions"][:-1]), done["actions"]
    assert set(o["action"] for o in done["objects"]) == {"unchanged"}
    _reads_then_reconfigure(audit.execs(mark))
    _until("slurmctld to run with ConstrainRAMSpace no", lambda: _loaded(node, "ConstrainRAMSpace", "no"), timeout=60)
    assert done["status_updated"] and done["status"]["slurmConfigDigest"] == _recorded_digest(node) != before

    # converged: no exec, no write
    mark = audit.mark()
    third = _apply(cluster, edited)
    assert not third["changed"] and third["actions"] == [] and not third["status_updated"], third
    assert audit.execs(mark) == [] and audit.writes(mark) == []


def test_a_cluster_without_a_recorded_digest_is_reconfigured_once(cluster):
    """Deployed before the digest was kept: which configs slurmctld read is unknown, so one reconfigure settles it."""
    node, audit = cluster.node, cluster.audit
    node.kubectl("-n", NS, "patch", "slurmcluster", CLUSTER, "--subresource=status", "--type=json",
                 "-p", json.dumps([{"op": "remove", "path": "/status/slurmConfigDigest"}]))
    assert _recorded_digest(node) is None
    mark = audit.mark()
    once = _apply(cluster, cluster.docs)
    assert once["actions"] == ["ran scontrol reconfigure (configs not yet loaded by slurmctld)"], once["actions"]
    assert _reads_then_reconfigure(audit.execs(mark)) == 1     # the pod has the files already: one read
    assert once["status"]["slurmConfigDigest"] == _recorded_digest(node)

    mark = audit.mark()
    again = _apply(cluster, cluster.docs)
    assert not again["changed"] and again["actions"] == [], again
    assert audit.execs(mark) == [] and audit.writes(mark) == []


# ---------------------------------------------------------------- the backup controller takes over (last: it moves pod 0)

BACKUP = CLUSTER + "-controller-1"


def _http_status(node, pod, path):
    """The HTTP status slurmctld answers on SlurmctldPort (26.05's /livez, /readyz), asked at the pod's IP from the
    host, as the kubelet's probes ask; None when nothing answers."""
    ip = node.kubectl("-n", NS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}", check=False).stdout
    if not ip:
        return None
    try:
        with urllib.request.urlopen("http://%s:6817%s" % (ip, path), timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _pod(node, name):
    found = node.kubectl("-n", NS, "get", "pod", name, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def _job_state(node, pod, job):
    out = _in_pod(node, pod, "slurmctld", "scontrol", "show", "job", job).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def test_the_backup_takes_control_when_the_primary_pod_goes_and_jobs_run_on(cluster):
    """issue 30's must-show: a job runs; the primary's pod is deleted and kept from coming back (the only node
    cordoned: a lost node); the backup takes control, the job completes, sbatch works again (through the runner's
    exec transport, which falls back to the backup's pod), no node is lost; uncordoned, the primary comes back and
    26.05 hands control back to it (it asks the backup to relinquish when it starts, as 22.05 does)."""
    node = cluster.node
    name = node.info["real_node"]["name"]
    # both controllers up for minutes now: the standby was never killed by its liveness probe (/livez) and counts as
    # ready; only the one in control is ready by /readyz
    for pod in (CONTROLLER, BACKUP):
        found = _pod(node, pod)
        status = found["status"]["containerStatuses"][0]
        assert status["ready"] and status["restartCount"] == 0, (pod, status)
    assert _http_status(node, BACKUP, "/livez") == 204
    assert _http_status(node, BACKUP, "/readyz") == 500
    assert _http_status(node, CONTROLLER, "/readyz") in (200, 204)

    # sbatch where users run it: a node with the SPANK plugin plugstack.conf names (the controller image has none)
    job = _in_pod(node, "cpu-0", "slurmd", "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 60")
    assert job.returncode == 0, job.stderr
    job = job.stdout.strip()
    _until("job %s running" % job, lambda: (_job_state(node, CONTROLLER, job).get("JobState") == "RUNNING",
                                            _job_state(node, CONTROLLER, job)), timeout=60)
    node.kubectl("cordon", name)
    try:
        started = time.monotonic()
        old_uid = _pod(node, CONTROLLER)["metadata"]["uid"]
        node.kubectl("-n", NS, "delete", "pod", CONTROLLER, "--wait=false")
        # gone, not terminating: until its slurmctld has stopped, sbatch and the runner still reach the primary (seen)
        _until("the primary's pod gone", lambda: (
            (_pod(node, CONTROLLER) or {}).get("metadata", {}).get("uid") != old_uid, _pod(node, CONTROLLER)))

        def submitted():
            done = _in_pod(node, "cpu-0", "slurmd", "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true")
            return done.returncode == 0, (done.returncode, done.stdout, done.stderr)
        _until("sbatch to work again", submitted, timeout=120)
        failover = time.monotonic() - started
        print("pod deletion -> successful sbatch: %.1f s (SlurmctldTimeout 15)" % failover)
        # the runner's exec transport: the primary's pod has no node, so the command runs in the backup's
        runner = module_args.runner_from_params(_params(node))
        result, unused = runner.run(["scontrol", "show", "job", job])
        assert runner.describe()["pod"] == BACKUP and "JobId=%s" % job in result.stdout
        assert _http_status(node, BACKUP, "/readyz") in (200, 204)
        logs = node.kubectl("-n", NS, "logs", BACKUP).stdout
        assert "ControlMachine %s not responding, BackupController1 %s taking over" % (CONTROLLER, BACKUP) in logs, \
            logs[-3000:]
        # the new pod 0 waits for a node: the primary is still gone
        assert (_pod(node, CONTROLLER) or {}).get("status", {}).get("phase") in (None, "Pending")
        _until("job %s completed" % job, lambda: (_job_state(node, BACKUP, job).get("JobState") == "COMPLETED",
                                                  _job_state(node, BACKUP, job)), timeout=120)
        assert _job_state(node, BACKUP, job)["ExitCode"] == "0:0"

        def backup_sinfo():
            return dict((line.split("|")[0], tuple(line.split("|")[1:])) for line in _in_pod(
                node, BACKUP, "slurmctld", "sinfo", "-h", "-N", "-o", "%N|%t|%E").stdout.splitlines() if "|" in line)
        # no node lost: cpu-0 idle once the queued `true` has run too (never down, drained or not responding)
        _until("cpu-0 idle", lambda: (backup_sinfo() == {"cpu-0": ("idle", "none")}, backup_sinfo()), timeout=60)
    finally:
        node.kubectl("uncordon", name)
    # the primary's pod runs again and takes control back; the backup stands by again, alive
    _until("the primary in control again", lambda: (
        _http_status(node, CONTROLLER, "/readyz") in (200, 204) and _http_status(node, BACKUP, "/readyz") == 500,
        (_http_status(node, CONTROLLER, "/readyz"), _http_status(node, BACKUP, "/readyz"))), timeout=180)
    assert _http_status(node, BACKUP, "/livez") == 204
    # not `sbatch --wait` under the exec's 60 s: in a cold CI run its job had not ended after 60 s with the primary
    # back in control; a bounded wait that says what the job and the node were doing
    done = _in_pod(node, "cpu-0", "slurmd", "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true")
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip()
    _until("job %s completed with the primary back in control" % last, lambda: (
        _job_state(node, CONTROLLER, last).get("JobState") == "COMPLETED",
        (_job_state(node, CONTROLLER, last), _sinfo(node))), timeout=240, context=lambda: _slurm_views(node))
    assert _sinfo(node) == {"cpu-0": ("idle", "none")}
