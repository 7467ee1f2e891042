"""The staggered worker start (issue 32, spec.workers.maxStartingPods) on a real kube-apiserver with kwok nodes
(tools/k8s: needs `make k8s-build`; started in a temporary directory with the hostPath provisioner, so claims bind,
and stopped at the end): a cluster of one worker (examples/small-cpu.yml, workers of 1 CPU and 1Gi, kwok nodes of 64
CPUs, enough for all) scaled up to --workers by KubeCluster.present() with wait=true, once per bound: the default
and 0 (no bound). A watch of the worker pods counts the most that existed and were not Ready at once; the audit log
counts the backend's requests during the scale-up. Each cluster is torn down (its pods gone) before the next.
Prints numbers only.
"""
import argparse
import collections
import importlib.util
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from kubernetes import client as kube_client, config  # noqa: E402
from k8s_audit import AuditLog  # noqa: E402
from pod_watch import NotReadyWatch  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (  # noqa: E402
    KubeClient, api_client_from_params)
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402

_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster", os.path.join(ROOT, "tools", "k8s",
                                                                                     "cluster.py"))
k8s = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s)


def docs_for(namespace, replicas, workers, bound):
    docs = documents_from(os.path.join(ROOT, "examples", "small-cpu.yml"), None)
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    docs[0]["spec"]["workers"] = {"maxStartingPods": bound}
    docs[1]["spec"].update(replicas=replicas, maxReplicas=workers, resources={"cpu": "1", "memory": "1Gi"})
    return docs


def pods_gone(client, namespace, timeout=900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.list("Pod", namespace, None):
            return
        time.sleep(2)
    raise SystemExit("the pods of %s did not go in %ss" % (namespace, timeout))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--bounds", default="%d,0" % m.DEFAULT_MAX_STARTING_PODS,
                        help="maxStartingPods values to run, comma-separated (0: no bound)")
    args = parser.parse_args()
    bin_dir = k8s.cached_bin()
    if not bin_dir:
        raise SystemExit("no control plane built: run `make k8s-build` first")
    nodes = args.workers // 60 + 2         # 64 CPUs each: room for every worker and the cluster's other pods
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "k8s")
        try:
            info = k8s.up(state, bin_dir, nodes=nodes, provisioner=True, timeout=300)
            kubeconfig, audit = info["kubeconfig"], AuditLog(info["audit_log"])
            client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), c.FIELD_MANAGER)
            core = kube_client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))  # the watch's own
            print("scale-up of 1 to %d workers, %d kwok nodes, control plane from %s" % (
                args.workers, nodes, bin_dir))
            print("%-16s %-8s %-6s %-16s %-8s %s" % ("maxStartingPods", "wall s", "steps", "most not Ready",
                                                     "reads", "reads by resource (most)"))
            for i, bound in enumerate(int(b) for b in args.bounds.split(",")):
                namespace = "stagger-%d" % i
                small = build_model(docs_for(namespace, 1, args.workers, bound))
                KubeCluster(client, small, KubeOptions(wait=True, wait_timeout=600, poll=1.0)).present()
                model = build_model(docs_for(namespace, args.workers, args.workers, bound))
                with NotReadyWatch(core, namespace, "cpu") as watch:
                    time.sleep(1)
                    mark = audit.mark()
                    started = time.perf_counter()
                    result = KubeCluster(client, model, KubeOptions(wait=True, wait_timeout=1800, poll=1.0)).present()
                    seconds = time.perf_counter() - started
                reqs = audit.requests(mark, user="soperator-admin")
                # the watch of this bench (the same user) is left out: its verb is watch
                reads = collections.Counter(r.resource for r in reqs if r.read and r.verb != "watch")
                steps = (result["scale_up"] or {}).get("step_count", 1)
                print("%-16s %-8.1f %-6d %-16d %-8d %s" % (
                    bound or "0 (none)", seconds, steps, watch.most, sum(reads.values()), dict(reads.most_common(3))))
                KubeCluster(client, model, KubeOptions(purge_volumes=True)).absent()
                pods_gone(client, namespace)
        finally:
            k8s.down(state)


if __name__ == "__main__":
    main()
