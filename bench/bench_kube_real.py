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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--profile", action="store_true")
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
            print("workers %d in %d nodesets; control plane from %s" % (
                model.total_workers, len(model.node_sets), bin_dir))
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
                    settle(kubeconfig, model.namespace, timeout=max(300, args.workers // 4))
                    print("%-28s %-8.2f (the StatefulSet controller made every pod; kube-controller-manager's "
                          "default 20 requests/s)" % ("  pods created", time.perf_counter() - started))
            spec = os.path.join(tmp, "spec.yml")
            with open(spec, "w") as f:
                yaml.safe_dump_all(docs, f)
            for label in ("site.yml: no-op", "site.yml: no-op"):
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
            for label in ("empty ansible-playbook",) * 2:
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
