"""Render the whole cluster (Slurm configs + every Kubernetes object) for 16, 1,024 and 10,000 workers in 4 nodesets.

Prints seconds per render (best of N) and slurm.conf size. Targets: 1,024 workers <= 0.1 s, 10,000 <= 0.5 s on a
2-core machine; slurm.conf size flat in worker count. Prints numbers only; it asserts nothing.
"""
import copy
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.render.secrets import ensure_secret_material  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402


def documents(workers):
    with open(os.path.join(ROOT, "examples", "gpu-accounting.yml")) as f:
        docs = load_documents(f.read())
    cluster, gpu, cpu = docs
    extra = []
    for name in ("gpu2", "cpu2"):
        doc = copy.deepcopy(gpu if name.startswith("gpu") else cpu)
        doc["metadata"]["name"] = name
        extra.append(doc)
    node_sets = [gpu, cpu] + extra
    for p in cluster["spec"]["partitions"]:
        p["nodeSets"] = [n["metadata"]["name"] for n in node_sets
                         if any(n["metadata"]["name"].startswith(x) for x in p["nodeSets"])]
    for ns in node_sets:
        ns["spec"]["replicas"] = ns["spec"]["maxReplicas"] = workers // 4
    return [cluster] + node_sets


def main():
    print("%-8s %-12s %-12s %-14s %-9s" % ("workers", "spec->model", "render s", "slurm.conf B", "objects"))
    for workers in (16, 1024, 10000):
        docs = documents(workers)
        model = build_model(docs)
        secrets, dummy = ensure_secret_material(model, {})  # secret generation happens once per cluster, not per render
        runs = 20 if workers < 10000 else 10
        best_model = best_render = float("inf")
        for dummy in range(runs):
            t0 = time.perf_counter()
            model = build_model(docs)
            t1 = time.perf_counter()
            rendered = render_cluster(model, secrets)
            t2 = time.perf_counter()
            best_model, best_render = min(best_model, t1 - t0), min(best_render, t2 - t1)
        print("%-8d %-12.4f %-12.4f %-14d %-9d" % (
            workers, best_model, best_render, len(rendered.slurm_configs["slurm.conf"].encode()),
            len(rendered.manifests)))


if __name__ == "__main__":
    main()
