"""A 4-nodeset cluster of --workers workers (default 1,024; bench_render.documents) applied to a real kube-apiserver (tools/k8s: needs
`make k8s-build`; the control plane is started in a temporary directory and stopped at the end): the first run, then
no-op re-runs. Requests are counted from the API server's audit log, not by the client.

Rows: the backend in-process (KubeCluster.present(), no Ansible), then `ansible-playbook
site.yml` no-op runs and an empty ansible-playbook for scale. No wait for readiness: 3 kwok nodes cannot hold 1,024
workers (nor the example's GPUs); before the no-op runs the StatefulSet controller has caught up (bounded wait), so
the status each run writes is final. Goal: the no-op run writes nothing and costs at most 2x an empty
ansible-playbook. Then (issue 32) the roll plan's inputs and plan over every worker (a new pod template: each
NodeSet's StatefulSet and pods listed, slurm/rollout.py plan() over them with every node idle, as sinfo would say
of a healthy cluster: Slurm records made here, no slurmctld), and the teardown (KubeCluster.absent()).
`--workers 5000` is issue 32's size; `--profile` prints cProfile's top functions of the first apply and the roll plan.
Each `site.yml` run also prints its slowest tasks (the json callback's start and end of each task).

The kwok nodes are sized so that every worker fits (big capacity, the GPU NodeSets' label and GPUs) and the claims
are bound ahead: the pods run (kwok makes them Running and Ready), as remediation needs. `--remediate N` (issue 32:
a remediation pass with 50 drained nodes) adds the host's Slurm 22.05: a local cluster (munged, slurmctld) whose
NodeSets have the same names and sizes, so every Slurm node is named like a worker pod, with a real `slurmd -N` for
the N nodes to drain (the others are taken out of FUTURE and resumed without a slurmd: idle and not responding, as
sinfo lists them, not held). The N are drained with our health-check reason as a failed check would (the check is
the spec's custom `fault-file` check, which fails while <dir>/fault-<node> exists), then one pass of
slurm_remediate's code (slurm/remediation_setup.remediate, target kubernetes, slurm_transport local: the local
checker runs the health-check program on this host) against the real API server: the real KubeReplacer deletes the N
pods, the StatefulSet controller makes them again, kwok marks them Ready. There is no kubelet: a thread of this bench
stands in for it - when the API server shows a node's pod recreated and Ready, it removes the node's fault file and
restarts that node's slurmd (LocalCluster.restart_node), which registers again. The pass waits for the
registrations, re-runs the check and resumes the nodes. Printed: the pass's wall time, its API requests by verb
and resource (the stand-in's own requests left out by their user agent), its Slurm commands, the health-check
program's runs, and how many of the N sinfo shows resumed. `--skip-site` leaves out the `site.yml` rows.
Prints numbers only.
"""
import argparse
import collections
import cProfile
import datetime
import importlib.util
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

import threading

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from bench_render import documents  # noqa: E402
from k8s_audit import AuditLog  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (  # noqa: E402
    KubeClient, api_client_from_params)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube.rollout import WorkerRevisions  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import rollout as slurm_rollout  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (  # noqa: E402
    DEFAULT_REASON_PREFIX as PREFIX)

sys.path.insert(0, os.path.join(ROOT, "tests"))     # tests/specs: the spec texts tests share
from specs import spec_text  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils import args as module_args  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import remediation_setup  # noqa: E402
from ansible_collections.soperator.slurm.plugins.modules import slurm_remediate  # noqa: E402

STAND_IN_AGENT = "bench-kubelet-stand-in"
FAULT_CHECK = "fault-file"

_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster", os.path.join(ROOT, "tools", "k8s",
                                                                                     "cluster.py"))
k8s = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s)


def counted(audit, mark, user):
    reqs = audit.requests(mark, user=user)
    reads = collections.Counter((r.group, r.resource) for r in reqs if r.read)
    return sum(reads.values()), max(reads.values() or [0]), sum(1 for r in reqs if r.write)


def settle(kubeconfig, namespace, timeout=300):
    """Until every StatefulSet's controller has observed its spec and made its pods (bounded)."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    apps = client.AppsV1Api(api)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            items = apps.list_namespaced_stateful_set(namespace).items
            if items and all(s.status.observed_generation == s.metadata.generation
                             and (s.status.replicas or 0) == s.spec.replicas for s in items):
                return
            time.sleep(1)
    finally:
        api.close()
    raise SystemExit("the StatefulSets did not settle in %ss" % timeout)


def playbook(argv):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_NOCOLOR="1")
    started = time.perf_counter()
    proc = subprocess.run(["ansible-playbook"] + argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit("ansible-playbook failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    result = json.loads(proc.stdout)
    return seconds, result["stats"].get("localhost", {}).get("changed", 0), slowest_tasks(result)


def slowest_tasks(result, count=4):
    """'name s, ...' of the playbook's slowest tasks, from the json callback's start and end of each task."""
    def seconds(duration):
        start, end = (datetime.datetime.strptime(duration[k], "%Y-%m-%dT%H:%M:%S.%fZ") for k in ("start", "end"))
        return (end - start).total_seconds()
    tasks = [(seconds(t["task"]["duration"]), t["task"]["name"]) for play in result.get("plays", [])
             for t in play.get("tasks", []) if t.get("task", {}).get("duration", {}).get("end")]
    return ", ".join("%s %.2f s" % (name, secs) for secs, name in sorted(tasks, reverse=True)[:count])


def profiled(profile, call):
    if profile is None:
        return call()
    profile.enable()
    try:
        return call()
    finally:
        profile.disable()


def roll_plan(client, model, audit, user, profile):
    """A new pod template for every NodeSet (an annotation), then what a Slurm-aware roll computes first: each
    NodeSet's (nodes, revisions, update revision) from the API server and its plan. Prints one row."""
    from kubernetes import client as k8s_client
    apps = k8s_client.AppsV1Api(client.api)
    for ns in model.node_sets:      # a worker StatefulSet is named after its NodeSet (kube/backend.py roll_workers)
        apps.patch_namespaced_stateful_set(ns.name, model.namespace, {"spec": {"template": {"metadata": {
            "annotations": {"bench/roll": str(time.time())}}}}})
    settle_revisions(client, model)
    mark = audit.mark()
    started = time.perf_counter()
    outdated = batches = 0
    for ns in model.node_sets:
        read = WorkerRevisions(client, model.namespace, ns.name, ns.node_name, 300, ka.owner_selector(model.name))
        nodes, revisions, update_revision = profiled(profile, read)
        records = dict((n, NodeRecord(name=n, base_state="IDLE")) for n in nodes)
        plan = profiled(profile, lambda: slurm_rollout.plan(nodes, revisions, update_revision, records, {},
                                                            ns.update_strategy.max_unavailable, PREFIX))
        outdated += len(slurm_rollout.outdated(nodes, revisions, update_revision))
        batches += len(plan.batches)
    seconds = time.perf_counter() - started
    reads, most, writes = counted(audit, mark, user)
    print("%-28s %-8.2f %-6d %-14d %-7d %d outdated, %d batches" % ("roll plan", seconds, reads, most, writes,
                                                                    outdated, batches))


def settle_revisions(client, model, timeout=300):
    """Until every worker StatefulSet's controller has observed the new template (its updateRevision is new)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = client.list("StatefulSet", model.namespace, ka.owner_selector(model.name))
        mine = [s for s in listed if s["metadata"]["name"] in set(ns.name for ns in model.node_sets)]
        if mine and all((s.get("status") or {}).get("observedGeneration") == s["metadata"]["generation"]
                        and s["status"].get("updateRevision") != s["status"].get("currentRevision") for s in mine):
            return
        time.sleep(1)
    raise SystemExit("the StatefulSets did not observe the new template in %ss" % timeout)


def fit_nodes(kubeconfig, workers, prefix="fit"):
    """kwok nodes every worker fits on: pods 1,000 each, CPUs, memory and GPUs far beyond the NodeSets' requests, with
    the GPU NodeSets' product label (their nodeSelector). kwok runs them as it runs tools/k8s's own nodes."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        core = client.CoreV1Api(api)
        names = ["%s-%d" % (prefix, i) for i in range(workers // 1000 + 2)]
        for name in names:
            node = k8s._fake_node(name)
            capacity = {"cpu": "100000", "memory": "10000Ti", "pods": "1000", "ephemeral-storage": "10000Ti",
                        "nvidia.com/gpu": "100000"}
            node["status"] = {"capacity": capacity, "allocatable": capacity}
            node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
            core.create_node(node)
        return names
    finally:
        api.close()


def bind_claims(kubeconfig, namespace):
    """A PersistentVolume bound ahead (claimRef) to each claim of the namespace still Pending (no provisioner runs
    here), as tests/integration's volumes fixture does. -> how many."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        core = client.CoreV1Api(api)
        made = 0
        for claim in core.list_namespaced_persistent_volume_claim(namespace).items:
            if claim.status.phase == "Bound":
                continue
            spec = {"capacity": {"storage": "100Ti"}, "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/nonexistent/" + claim.metadata.name},
                    "claimRef": {"namespace": namespace, "name": claim.metadata.name}}
            if claim.spec.storage_class_name:
                spec["storageClassName"] = claim.spec.storage_class_name
            core.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume",
                                           "metadata": {"name": "bench-" + claim.metadata.name}, "spec": spec})
            made += 1
        return made
    finally:
        api.close()


def running(kubeconfig, namespace, workers, timeout):
    """Seconds until `workers` worker pods are Running and Ready (bounded), listed every 5 s."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    ready = 0
    try:
        while time.monotonic() < deadline:
            pods = client.CoreV1Api(api).list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/component=worker").items
            ready = sum(1 for p in pods if p.status.phase == "Running" and any(
                cond.type == "Ready" and cond.status == "True" for cond in p.status.conditions or []))
            if ready >= workers:
                return time.perf_counter() - started
            time.sleep(5)
    finally:
        api.close()
    raise SystemExit("%d of %d workers Running and Ready after %ss" % (ready, workers, timeout))


def slurm_docs(model, drained, faults):
    """A local cluster of the host's Slurm whose NodeSets are the kube model's (names, maxReplicas), each running
    slurmd for the first of its nodes that the bench drains ({nodeset: how many})."""
    docs = []
    cluster = spec_text("health-faults", cluster="benchrem", interval=0, faults=faults, workers=0)
    cluster_doc, nodeset_doc = [d for d in yaml.safe_load_all(cluster) if d]
    cluster_doc["spec"]["slurmConfig"] = {"SlurmdTimeout": 3600}
    docs.append(cluster_doc)
    for ns in model.node_sets:
        doc = yaml.safe_load(yaml.safe_dump(nodeset_doc))
        doc["metadata"]["name"] = ns.name
        doc["spec"]["replicas"] = drained.get(ns.name, 0)
        doc["spec"]["maxReplicas"] = ns.max_replicas
        docs.append(doc)
    return docs


class KubeletStandIn(object):
    """What a kubelet does when a worker pod starts: its slurmd starts and registers. Here: when the API server shows
    a node's pod recreated (a new uid) and Ready, the node's fault file goes (the new pod is a new machine's) and
    its local slurmd is restarted. Lists only these nodes' pods, with its own user agent."""

    def __init__(self, kubeconfig, namespace, cluster, nodes, faults, poll=0.5):
        from kubernetes import client, config
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.api.user_agent = STAND_IN_AGENT
        self.core = client.CoreV1Api(self.api)
        self.namespace, self.cluster, self.nodes, self.faults, self.poll = namespace, cluster, nodes, faults, poll
        self.uids = dict((n, p.metadata.uid) for n, p in self._pods().items())
        self.restarted, self.failures = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _pods(self):
        selector = "statefulset.kubernetes.io/pod-name in (%s)" % ",".join(self.nodes)
        return dict((p.metadata.name, p) for p in self.core.list_namespaced_pod(
            self.namespace, label_selector=selector).items)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=60)
        self.api.close()

    def _loop(self):
        while not self._stop.is_set():
            try:
                for name, pod in self._pods().items():
                    ready = pod.metadata.deletion_timestamp is None and any(
                        cond.type == "Ready" and cond.status == "True" for cond in pod.status.conditions or [])
                    if ready and pod.metadata.uid != self.uids.get(name):
                        fault = os.path.join(self.faults, "fault-" + name)
                        if os.path.exists(fault):
                            os.remove(fault)
                        self.cluster.restart_node(name)
                        self.uids[name] = pod.metadata.uid
                        self.restarted.append(name)
            except Exception as e:  # pylint: disable=broad-except  # reported, tried again at the next poll
                self.failures.append(repr(e))
            self._stop.wait(self.poll)


def remediation_params(kubeconfig, slurm_conf, program):
    """slurm_remediate's parameters as Ansible would give them: every option's default, then ours."""
    params = {}
    for part in (slurm_remediate.OPTIONS, slurm_remediate.SLURM_ACCESS, module_args.KUBE_API_SPEC,
                 module_args.AUTH_ARG_SPEC, module_args.SPEC_SOURCE_SPEC):
        params.update((name, option.get("default")) for name, option in part.items())
    params.update(target="kubernetes", kubeconfig=kubeconfig, slurm_transport="local", slurm_conf=slurm_conf,
                  health_check_program=program, replace_drained_nodes=True, register_timeout=240)
    return params


def remediation_pass(model, kubeconfig, audit, user, count, tmp):
    """Drain `count` nodes (spread over the NodeSets) as a failed health check would, run one remediation pass over
    the cluster, print what it cost and whether every drained node is back."""
    per_set = dict((ns.name, count // len(model.node_sets) + (1 if i < count % len(model.node_sets) else 0))
                   for i, ns in enumerate(model.node_sets))
    drained = [ns.node_name(i) for ns in model.node_sets for i in range(per_set[ns.name])]
    faults = os.path.join(tmp, "faults")
    os.makedirs(faults)
    state_dir = tempfile.mkdtemp(prefix="sop-bench-rem-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, build_model(slurm_docs(model, per_set, faults)), timeout=600)
    try:
        started = time.perf_counter()
        cluster.ensure_started()
        for ns in model.node_sets:       # the nodes without a slurmd: out of FUTURE, then idle (not responding)
            rest = ns.range_of(per_set[ns.name], ns.max_replicas)
            if rest:
                cluster.run(["scontrol", "update", "NodeName=" + rest, "State=DOWN", "Reason=bench: no slurmd"],
                            timeout=300)
                cluster.run(["scontrol", "update", "NodeName=" + rest, "State=RESUME"], timeout=300)
        slurm_conf = cluster.env()["SLURM_CONF"]
        nodes = dict((n["name"], n) for n in cluster.sinfo_nodes())
        print("slurm: %d nodes in sinfo, %d slurmd (the nodes to drain), started in %.1f s" % (
            len(nodes), len(drained), time.perf_counter() - started))
        time.sleep(1.1)        # a drain in its slurmd's start second counts as after a replacement (remediation.py)
        for name in drained:
            open(os.path.join(faults, "fault-" + name), "w").close()
        reason = health_check.drain_reason(PREFIX, FAULT_CHECK, "bench: the fault file is there")
        cluster.run(["scontrol", "update", "NodeName=" + ",".join(drained), "State=DRAIN", "Reason=" + reason],
                    timeout=120)
        program = os.path.join(cluster.state_dir, "bin", "health-check")
        healthy, report = remediation_setup.rm.LocalChecker(program, slurm_conf=slurm_conf).check(drained[0])
        print("drained %d nodes (reason %r); the check on %s now: healthy=%s %s" % (
            len(drained), reason, drained[0], healthy, [f.get("check") for f in report.get("failed") or []]))
        # the pass cordons the Kubernetes nodes the drained pods ran on (the example's cordonKubernetesNode): a
        # thousand pods share a kwok node here, so the new pods need room elsewhere
        spare = fit_nodes(kubeconfig, len(drained), prefix="spare")
        counting = CountingProgram(program, os.path.join(tmp, "health-check-counted"))
        params = remediation_params(kubeconfig, slurm_conf, counting.path)
        mark = audit.mark()
        with KubeletStandIn(kubeconfig, model.namespace, cluster, drained, faults) as kubelet:
            started = time.perf_counter()
            result = remediation_setup.remediate(params, model)
            seconds = time.perf_counter() - started
        requests = [r for r in audit.requests(mark, user=user) if r.event.get("userAgent") != STAND_IN_AGENT]
        by_verb = collections.Counter("%s %s" % (r.verb, r.resource + ("/" + r.subresource if r.subresource else ""))
                                      for r in requests)
        commands = collections.Counter(q.split()[0] for q in result["queries"])
        steps = collections.Counter(",".join(n["steps"]) for n in result["nodes"])
        after = dict((n["name"], n) for n in cluster.sinfo_nodes())
        back = [n for n in drained if not set(after[n]["state_flags"]) & {"DRAIN", "NOT_RESPONDING"}]
        states = collections.Counter("%s%s" % (after[n]["state"], "+" + "+".join(after[n]["state_flags"])
                                               if after[n]["state_flags"] else "") for n in drained)
        waited = sorted(set(n["replacement"].get("waited_for_pod") for n in result["nodes"] if n.get("replacement")),
                        key=str)
        print("remediation pass (%d drained of %d): %.2f s; errors %d" % (
            len(drained), model.total_workers, seconds, len(result["errors"])))
        print("  API requests: %d: %s" % (len(requests), ", ".join("%s %d" % kv for kv in sorted(by_verb.items()))))
        print("  per-pod requests: GET of a pod %d, DELETE of a pod %d, pod lists %d" % (
            sum(1 for r in requests if r.resource == "pods" and r.verb == "get"),
            sum(1 for r in requests if r.resource == "pods" and r.verb == "delete"),
            sum(1 for r in requests if r.resource == "pods" and r.verb == "list")))
        print("  Slurm commands: %d: %s" % (len(result["queries"]), ", ".join(
            "%s %d" % kv for kv in sorted(commands.items()))))
        print("  health-check program runs: %d; the stand-in restarted %d slurmd (%d failed polls)" % (
            counting.runs(), len(kubelet.restarted), len(kubelet.failures)))
        print("  nodes by steps: %s; actions %s; Kubernetes nodes cordoned %d (%d spare nodes added before)" % (
            dict(steps), result["actions"], len(set(n.get("replacement", {}).get("cordoned") for n in result["nodes"]
                                                    if n.get("replacement", {}).get("cordoned"))), len(spare)))
        print("  the pass waited %s s for the new pods (all at once); re-checks and the rest: the remainder" % waited)
        print("  after the pass, sinfo: %d of %d without DRAIN or NOT_RESPONDING; states %s" % (
            len(back), len(drained), dict(states)))
        if result["errors"]:
            print("  first errors: %s" % result["errors"][:3])
    finally:
        cluster.stop(purge=True)


class CountingProgram(object):
    """The health-check program behind a wrapper that appends a line per run (to count the re-checks)."""

    def __init__(self, program, path):
        self.path, self.log = path, path + ".runs"
        with open(path, "w") as f:
            f.write('#!/bin/sh\necho run >> %s\nexec %s "$@"\n' % (self.log, program))
        os.chmod(path, 0o755)

    def runs(self):
        if not os.path.exists(self.log):
            return 0
        with open(self.log) as f:
            return len(f.readlines())


PROFILE_MODULE = """
import cProfile, io, json, pstats, runpy, sys, time
path, args, out = sys.argv[1:4]
sys.argv = [path, args]
profile = cProfile.Profile()
started = time.perf_counter()
stdout, sys.stdout = sys.stdout, io.StringIO()
try:
    profile.runcall(runpy.run_path, path, run_name="__main__")
except SystemExit:
    pass
result, sys.stdout = sys.stdout.getvalue(), stdout
seconds = time.perf_counter() - started
profile.dump_stats(out)
print(json.dumps({"seconds": seconds, "changed": json.loads(result).get("changed"), "failed": json.loads(result).get(
    "failed"), "msg": json.loads(result).get("msg")}))
"""


def profile_module(spec, kubeconfig, tmp, top=30):
    """The slurm_cluster module's no-op run as site.yml's converge task runs it (its arguments), in a fresh Python
    without AnsiballZ, under cProfile: its wall time, then where it went (cumulative, and by own time)."""
    args = os.path.join(tmp, "slurm_cluster-args.json")
    with open(args, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": {"state": "present", "target": "kubernetes", "src": spec,
                                           "kubeconfig": kubeconfig, "wait": False}}, f)
    out = os.path.join(tmp, "slurm_cluster.prof")
    path = os.path.join(ROOT, "plugins", "modules", "slurm_cluster.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "collections"))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROFILE_MODULE, path, args, out], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit("the profiled module failed:\n" + proc.stdout[-2000:] + proc.stderr[-3000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print("slurm_cluster module, no-op, profiled: %.2f s in the module (%.2f s with Python's start); changed %s%s" % (
        report["seconds"], wall, report["changed"], " FAILED: %s" % report["msg"] if report["failed"] else ""))
    stats = pstats.Stats(out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--remediate", type=int, default=0, metavar="N", help="a remediation pass with N drained nodes")
    parser.add_argument("--skip-site", action="store_true", help="no site.yml and empty ansible-playbook rows")
    parser.add_argument("--profile-module", action="store_true",
                        help="cProfile the slurm_cluster module's no-op run (no Ansible around it)")
    args = parser.parse_args()
    bin_dir = k8s.cached_bin()
    if not bin_dir:
        raise SystemExit("no control plane built: run `make k8s-build` first")
    docs = documents(args.workers)
    model = build_model(docs)
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "k8s")
        try:
            info = k8s.up(state, bin_dir, nodes=3)
            kubeconfig, audit = info["kubeconfig"], AuditLog(info["audit_log"])
            fit = fit_nodes(kubeconfig, args.workers)
            spec = os.path.join(tmp, "spec.yml")
            with open(spec, "w") as f:
                yaml.safe_dump_all(docs, f)
            print("workers %d in %d nodesets; control plane from %s; %d kwok nodes sized to fit" % (
                model.total_workers, len(model.node_sets), bin_dir, len(fit)))
            print("%-28s %-8s %-6s %-14s %-7s %s" % ("run", "wall s", "reads", "max reads/kind", "writes",
                                                     "changed"))
            user = "soperator-admin"
            client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), c.FIELD_MANAGER)
            for label in ("backend: first", "backend: no-op", "backend: no-op"):
                mark = audit.mark()
                started = time.perf_counter()
                cluster = KubeCluster(client, model, KubeOptions(wait=False))
                result = profiled(profile if label.endswith("first") else None, cluster.present)
                seconds = time.perf_counter() - started
                reads, most, writes = counted(audit, mark, user)
                print("%-28s %-8.2f %-6d %-14d %-7d %s" % (label, seconds, reads, most, writes, result["changed"]))
                if label.endswith("first"):
                    started = time.perf_counter()
                    claims = bind_claims(kubeconfig, model.namespace)
                    settle(kubeconfig, model.namespace, timeout=max(300, args.workers // 4))
                    print("%-28s %-8.2f (the StatefulSet controller made every pod; kube-controller-manager's "
                          "default 20 requests/s; %d claims bound ahead)" % ("  pods created",
                                                                             time.perf_counter() - started, claims))
                    print("%-28s %-8.2f" % ("  pods Running and Ready", running(
                        kubeconfig, model.namespace, model.total_workers, max(300, args.workers // 4))))
            if args.remediate:
                remediation_pass(model, kubeconfig, audit, user, args.remediate, tmp)
            if args.profile_module:
                profile_module(spec, kubeconfig, tmp)
            for label in ("site.yml: no-op", "site.yml: no-op") if not args.skip_site else ():
                mark = audit.mark()
                seconds, changed, slowest = playbook([os.path.join(ROOT, "playbooks", "site.yml"), "-e",
                                                      "spec_file=" + spec, "-e", "kubeconfig=" + kubeconfig, "-e",
                                                      "wait=false"])
                reads, most, writes = counted(audit, mark, user)
                print("%-28s %-8.2f %-6d %-14d %-7d %s" % (label, seconds, reads, most, writes, changed))
                print("  slowest tasks: " + slowest)
            empty = os.path.join(tmp, "empty.yml")
            with open(empty, "w") as f:
                f.write("- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks: []\n")
            for label in ("empty ansible-playbook",) * (0 if args.skip_site else 2):
                seconds, _changed, _slowest = playbook([empty])
                print("%-28s %-8.2f" % (label, seconds))
            roll_plan(client, model, audit, user, profile)
            mark = audit.mark()
            started = time.perf_counter()
            result = KubeCluster(client, model, KubeOptions(wait=False)).absent()
            reads, most, writes = counted(audit, mark, user)
            print("%-28s %-8.2f %-6d %-14d %-7d %s" % (
                "teardown (absent)", time.perf_counter() - started, reads, most, writes, result["changed"]))
            if profile is not None:
                pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        finally:
            k8s.down(state)


if __name__ == "__main__":
    main()
