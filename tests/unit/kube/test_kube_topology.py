"""kube/topology.py: where the workers of spec.topology.nodeLabels run, read with one list of the worker pods and one
of the nodes that carry the leaf label, whatever the number of pods; KubeCluster renders the tree of that placement
and returns it. Against the real API server and slurmctld: tests/integration/test_topology_real.py."""
import pytest

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


# --- a replaced worker's place, before its resume (TopologyFollower) -----------------------------------------

class Controller:
    """The controller pod's side of the follower: it sees the ConfigMap as the API server holds it (the kubelet's
    refresh, at once) and records each command."""

    def __init__(self, api):
        self.api, self.commands = api, []

    def describe(self):
        return {"transport": "kubernetes", "namespace": "slurm", "pod": "c-controller-0"}

    def exec(self, argv, timeout):
        import hashlib
        self.commands.append(list(argv))
        if argv[0] == "sha256sum":
            data = self.api.objects[("ConfigMap", "slurm", "c-slurm-configs")]["data"]
            lines = ["%s  %s" % (hashlib.sha256(data[p.rsplit("/", 1)[1]].encode()).hexdigest(), p)
                     for p in argv[1:] if p.rsplit("/", 1)[1] in data]
            return 0, "".join(line + "\n" for line in lines), ""
        return 0, "", ""


def placed_cluster(monkeypatch):
    """A cluster applied with gpu-0, gpu-1 on leaf l0 (n0, n1) and gpu-2 on l1 (n2); n3 is on l1 too."""
    from test_kube_backend import FakeApi, no_sleep, no_slurm
    api = FakeApi()
    for i in range(3):
        api.objects[("Pod", "slurm", "gpu-%d" % i)] = dict(pod("gpu-%d" % i, "n%d" % i), metadata={
            "name": "gpu-%d" % i, "labels": {"app.kubernetes.io/name": "slurm", "app.kubernetes.io/instance": "c",
                                             "app.kubernetes.io/component": "worker"}})
    for i in range(4):
        api.objects[("Node", None, "n%d" % i)] = node("n%d" % i, **{SPINE: "s1", LEAF: "l%d" % (i // 2)})
    listed = FakeApi.list
    monkeypatch.setattr(FakeApi, "list", lambda self, kind, namespace=None, label_selector=None: [
        o for o in listed(self, kind, namespace) if LEAF in o["metadata"].get("labels", {})]
        if kind == "Node" else listed(self, kind, namespace, label_selector))
    KubeCluster(api, build_model(DOCS), KubeOptions(reconfigure=False), runner_factory=no_slurm,
                checker_factory=no_slurm, sleep=no_sleep).present()
    key = ("SlurmCluster", "slurm", "c")
    api.objects[key]["status"] = {"phase": "Ready", "slurmConfigDigest": "before"}
    return api


def follower_of(api):
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmRunner
    controller = Controller(api)
    runner = SlurmRunner(controller, retries=1, timeout=5)
    return kt.follower(api, build_model(DOCS), runner, timeout=5, poll=0, sleep=lambda s: None), controller


def test_a_worker_that_moved_is_put_in_its_new_place_with_one_reconfigure(monkeypatch):
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.reconfigure import configs_digest
    api = placed_cluster(monkeypatch)
    before = dict(api.objects[("ConfigMap", "slurm", "c-slurm-configs")]["data"])
    assert "SwitchName=l0 Nodes=gpu-[0-1]" in before["topology.conf"]
    api.objects[("Pod", "slurm", "gpu-1")]["spec"]["nodeName"] = "n3"        # replaced: its new pod is on l1
    follow, controller = follower_of(api)
    api.writes.clear()
    report = follow.follow("gpu-1")
    assert report["switch"] == "l1" and report["changed"] is True, report
    after = api.objects[("ConfigMap", "slurm", "c-slurm-configs")]["data"]
    assert "SwitchName=l1 Nodes=gpu-[1-2]" in after["topology.conf"] and "nodes: gpu-[1-2]" in after["topology.yaml"]
    # only the topology files changed
    assert dict((k, v) for k, v in after.items() if not k.startswith("topology")) == dict(
        (k, v) for k, v in before.items() if not k.startswith("topology"))
    assert [w[:3] for w in api.writes] == [("apply", "ConfigMap", "c-slurm-configs"),
                                           ("apply/status", "SlurmCluster", "c")]
    # the files were seen in the controller pod before the reconfigure
    assert [argv[0] for argv in controller.commands] == ["sha256sum", "scontrol"]
    assert controller.commands[-1] == ["scontrol", "reconfigure"]
    status = api.objects[("SlurmCluster", "slurm", "c")]["status"]
    assert status == {"phase": "Ready", "slurmConfigDigest": configs_digest(after)}
    assert follow.loaded_digest == configs_digest(after)
    # the next run of the reconcile finds the ConfigMap as it renders it: unchanged, no reload owed
    from test_kube_backend import no_sleep, no_slurm
    again = KubeCluster(api, build_model(DOCS), KubeOptions(reconfigure=False), runner_factory=no_slurm,
                        checker_factory=no_slurm, sleep=no_sleep).present()
    done = [(o["kind"], o["name"], o["action"]) for o in again["objects"]]
    assert ("ConfigMap", "c-slurm-configs", "unchanged") in done


def test_a_worker_back_in_its_place_changes_nothing(monkeypatch):
    api = placed_cluster(monkeypatch)
    follow, controller = follower_of(api)
    api.writes.clear()
    assert follow.follow("gpu-1") == {"switch": "l0", "changed": False, "actions": []}
    assert api.writes == [] and controller.commands == []


def test_a_worker_on_a_node_without_the_leaf_label_is_left_out_and_said_why(monkeypatch):
    api = placed_cluster(monkeypatch)
    api.objects[("Pod", "slurm", "gpu-1")]["spec"]["nodeName"] = "n9"        # not among the labelled nodes
    follow, controller = follower_of(api)
    report = follow.follow("gpu-1")
    assert report["switch"] is None and report["unplaced"] == "Kubernetes node n9 has no label %s" % LEAF
    assert report["changed"] is True and controller.commands[-1] == ["scontrol", "reconfigure"]


def test_a_configmap_that_differs_beyond_the_topology_is_left_to_the_reconcile(monkeypatch):
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError
    api = placed_cluster(monkeypatch)
    api.objects[("ConfigMap", "slurm", "c-slurm-configs")]["data"]["slurm.conf"] += "# edited\n"
    api.objects[("Pod", "slurm", "gpu-1")]["spec"]["nodeName"] = "n3"
    follow, controller = follower_of(api)
    api.writes.clear()
    with pytest.raises(RemediationError, match="differs from the spec in slurm.conf as well"):
        follow.follow("gpu-1")
    assert api.writes == [] and controller.commands == []


def test_no_follower_without_node_labels():
    assert kt.follower(None, build_model(documents(("gpu", {}))), None) is None
