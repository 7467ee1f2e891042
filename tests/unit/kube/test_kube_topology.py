"""kube/topology.py: where the workers of spec.topology.nodeLabels run, read with one list of the worker pods and one
of the nodes that carry the leaf label, whatever the number of pods; KubeCluster renders the tree of that placement
and returns it. Against the real API server and slurmctld: tests/integration/test_topology_real.py."""
from ansible_collections.soperator.slurm.plugins.module_utils.kube import topology as kt
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from specs import documents

SPINE, LEAF = "example.com/spine", "example.com/leaf"
DOCS = documents(("gpu", {"replicas": 3}), topology={"nodeLabels": {"tiers": [SPINE, LEAF], "nodeSets": ["gpu"]}})


def pod(name, node=None, deleting=False):
    meta = dict({"name": name}, **({"deletionTimestamp": "2026-11-27T00:00:00Z"} if deleting else {}))
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def node(name, **labels):
    return {"metadata": {"name": name, "labels": dict((k.replace("_", "/"), v) for k, v in labels.items())}}


class Lists:
    """A client that answers list() from fixed pods and nodes and records each call."""

    def __init__(self, pods, nodes):
        self.pods, self.nodes, self.calls = pods, nodes, []

    def list(self, kind, namespace=None, label_selector=None):
        self.calls.append((kind, namespace, label_selector))
        return {"Pod": self.pods, "Node": self.nodes}[kind]


def test_placement_takes_each_bound_pods_node_labels_among_the_tiers():
    pods = [pod("gpu-0", "n0"), pod("gpu-1", "n1"), pod("gpu-2"), pod("gpu-3", "n0", deleting=True)]
    nodes = [node("n0", **{SPINE: "s1", LEAF: "l1", "other": "x"})]
    assert kt.placement(pods, nodes, (SPINE, LEAF)) == {
        "gpu-0": m.Placement("n0", {SPINE: "s1", LEAF: "l1"}),
        "gpu-1": m.Placement("n1", {}),          # its node was not listed: no leaf label (or gone)
        "gpu-2": m.Placement(None, {})}          # not scheduled yet; gpu-3 is being deleted: no place


def test_one_list_of_pods_and_one_of_labelled_nodes_per_run():
    model = build_model(DOCS)
    client = Lists([pod("gpu-%d" % i, "n%d" % i) for i in range(3)],
                   [node("n%d" % i, **{SPINE: "s1", LEAF: "l%d" % (i % 2)}) for i in range(3)])
    placed = kt.with_placement(client, model)
    assert client.calls == [
        ("Pod", "slurm", "app.kubernetes.io/name=slurm,app.kubernetes.io/instance=c,"
                         "app.kubernetes.io/component=worker"),
        ("Node", None, LEAF)]
    assert placed.topology.node_labels.placement["gpu-2"] == m.Placement("n2", {SPINE: "s1", LEAF: "l0"})
    assert kt.with_placement(client, build_model(documents(("gpu", {})))) is not None and len(client.calls) == 2


def test_present_renders_the_tree_of_the_pods_nodes_and_returns_it(monkeypatch):
    from test_kube_backend import FakeApi, no_sleep, no_slurm
    api = FakeApi()
    cluster = KubeCluster(api, build_model(DOCS), KubeOptions(), runner_factory=no_slurm,
                          checker_factory=no_slurm, sleep=no_sleep)
    first = cluster.present()
    assert [u["node"] for u in first["topology"]["unplaced"]] == ["gpu-0", "gpu-1", "gpu-2"]
    for i in range(3):
        api.objects[("Pod", "slurm", "gpu-%d" % i)] = dict(pod("gpu-%d" % i, "n%d" % i), metadata={
            "name": "gpu-%d" % i, "labels": {"app.kubernetes.io/name": "slurm",
                                             "app.kubernetes.io/instance": "c",
                                             "app.kubernetes.io/component": "worker"}})
        api.objects[("Node", None, "n%d" % i)] = node("n%d" % i, **{SPINE: "s1", LEAF: "l%d" % (i // 2)})
    # the fake's selector takes key=value terms only; the leaf label's selector is a bare key (exists)
    listed = FakeApi.list
    monkeypatch.setattr(FakeApi, "list", lambda self, kind, namespace=None, label_selector=None: [
        o for o in listed(self, kind, namespace) if LEAF in o["metadata"].get("labels", {})]
        if kind == "Node" else listed(self, kind, namespace, label_selector))
    cluster = KubeCluster(api, build_model(DOCS), KubeOptions(reconfigure=False), runner_factory=no_slurm,
                          checker_factory=no_slurm, sleep=no_sleep)
    second = cluster.present()
    assert second["topology"]["units"] == [{"name": "s1", "children": ["l0", "l1"]},
                                           {"name": "l0", "nodes": ["gpu-0", "gpu-1"]},
                                           {"name": "l1", "nodes": ["gpu-2"]}]
    config = api.objects[("ConfigMap", "slurm", "c-slurm-configs")]["data"]
    assert "SwitchName=l0 Nodes=gpu-[0-1]" in config["topology.conf"]
    assert "switch: l1" in config["topology.yaml"]
    done = [(o["kind"], o["name"], o["action"]) for o in second["objects"]]
    assert ("ConfigMap", "c-slurm-configs", "updated") in done
