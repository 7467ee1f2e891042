"""What a cluster renders does not grow with its worker count (issue 32): slurm.conf names each NodeSet's nodes as
one hostlist range, so 10,000 workers in 4 NodeSets render the same files as 4 workers, but for the digits of the
ranges (and render/size.py's few size-aware lines past 256 nodes); every ConfigMap stays far under Kubernetes'
1 MiB."""
import copy
import os

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
