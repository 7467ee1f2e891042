"""What a cluster renders does not grow with its worker count (issue 32): slurm.conf names each NodeSet's nodes as
one hostlist range, so 10,000 workers in 4 NodeSets render the same files as 4 workers, but for the digits of the
ranges (and render/size.py's few size-aware lines past 256 nodes); every ConfigMap stays far under Kubernetes'
1 MiB."""
import copy
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.render import cluster as render
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from repo_root import ROOT

SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
NODESETS = ("cpu", "gpu", "mem", "big")


def rendered(workers_per_nodeset):
    with open(SMALL) as f:
        docs = load_documents(f.read())
    nodeset = docs[1]
    docs = docs[:1]
    for name in NODESETS:
        one = copy.deepcopy(nodeset)
        one["metadata"]["name"] = name
        one["spec"]["replicas"] = one["spec"]["maxReplicas"] = workers_per_nodeset
        docs.append(one)
    return render.render_cluster(spec.build_model(docs))


def _grows_by_digits_only(small, large):
    assert sorted(small.slurm_configs) == sorted(large.slurm_configs)
    for name, text in large.slurm_configs.items():
        # 'cpu-0' becomes 'cpu-[0-2499]': at most a few characters per NodeSet, per place a NodeSet's nodes are named
        assert len(text) - len(small.slurm_configs[name]) <= 64 * len(NODESETS), name


def test_ten_thousand_workers_render_what_four_do():
    # render/size.py adds its few lines once, above 256 nodes: from there on the files grow by digits only
    _grows_by_digits_only(rendered(1), rendered(64))
    _grows_by_digits_only(rendered(65), rendered(2500))
    small, large = rendered(1), rendered(2500)
    assert "NodeName=cpu-[0-2499]" in large.slurm_configs["slurm.conf"]
    assert [(o["kind"], o["metadata"]["name"]) for o in small.manifests] == [
        (o["kind"], o["metadata"]["name"]) for o in large.manifests]
    for obj in large.manifests:
        if obj["kind"] == "ConfigMap":
            assert sum(len(v) for v in obj.get("data", {}).values()) < 64 * 1024, obj["metadata"]["name"]


GPU_EXAMPLE = os.path.join(ROOT, "examples", "gpu-accounting.yml")
SPINE, LEAF = "example.com/spine", "example.com/leaf"


def gpu_cluster(per_nodeset, node_labels=False):
    """examples/gpu-accounting.yml (gres, accounting, health checks, an active check, topology) with 4 NodeSets of
    `per_nodeset` maxReplicas each (2 GPU, 2 CPU); with `node_labels`, its topology from the Kubernetes nodes' labels
    for all four (no worker placed yet: a render without a cluster)."""
    with open(GPU_EXAMPLE) as f:
        cluster, gpu, cpu = load_documents(f.read())
    node_sets = [gpu, cpu]
    for name, like in (("gpu2", gpu), ("cpu2", cpu)):
        one = copy.deepcopy(like)
        one["metadata"]["name"] = name
        node_sets.append(one)
    for p in cluster["spec"]["partitions"]:
        p["nodeSets"] = [n["metadata"]["name"] for n in node_sets if n["metadata"]["name"].rstrip("2") in p["nodeSets"]]
    for one in node_sets:
        one["spec"]["replicas"], one["spec"]["maxReplicas"] = 1, per_nodeset
    if node_labels:
        cluster["spec"]["topology"] = {"nodeLabels": {"tiers": [SPINE, LEAF],
                                                      "nodeSets": [n["metadata"]["name"] for n in node_sets]}}
    return [cluster] + node_sets


def _config_maps(rendered_cluster):
    return dict((o["metadata"]["name"], sum(len(v.encode()) for v in o.get("data", {}).values()))
                for o in rendered_cluster.manifests if o["kind"] == "ConfigMap")


def _without_size_lines(text):
    """slurm.conf's lines but render/size.py's block (its header to the blank line after it), which it adds once,
    above 256 nodes."""
    kept, in_block = [], False
    for line in text.splitlines():
        if line.startswith("# --- Size:"):
            in_block = True
        elif in_block:
            in_block = line != ""
        else:
            kept.append(line)
    return kept


@pytest.mark.parametrize("node_labels", [False, True], ids=["static-topology", "node-labels-topology"])
def test_ten_thousand_workers_render_as_many_lines_as_forty(node_labels):
    small = render.render_cluster(spec.build_model(gpu_cluster(10, node_labels)))
    model = spec.build_model(gpu_cluster(2500, node_labels))
    large = render.render_cluster(model)
    assert sum(ns.max_replicas for ns in model.node_sets) == 10000
    assert sorted(small.slurm_configs) == sorted(large.slurm_configs)
    for name, text in large.slurm_configs.items():
        # every file: the same lines (a NodeSet's nodes are one hostlist range), a few more digits in some of them;
        # slurm.conf also has render/size.py's block
        count = len(_without_size_lines(text) if name == "slurm.conf" else text.splitlines())
        assert count == len(small.slurm_configs[name].splitlines()), name
        assert len(text) - len(small.slurm_configs[name]) <= 512, name
    assert "NodeName=gpu-[0-2499]" in large.slurm_configs["slurm.conf"]
    assert "SchedulerParameters=max_rpc_cnt=100" in large.slurm_configs["slurm.conf"]
    sizes = _config_maps(large)
    assert sizes.keys() == _config_maps(small).keys()
    for name, size in sizes.items():
        assert size < 64 * 1024, name       # Kubernetes refuses a ConfigMap over 1 MiB
