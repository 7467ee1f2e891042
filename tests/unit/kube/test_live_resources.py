"""The one reader of live SlurmCluster / NodeSet objects (kube/live.py), slurm_nodeset's preparation on top of it
(kube/nodeset.py), the modules' shared checks (module_support.py) and the `nodes` option check (slurm/nodes.py)."""
import copy
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils import module_support as ms
from ansible_collections.soperator.slurm.plugins.module_utils.kube import live
from ansible_collections.soperator.slurm.plugins.module_utils.kube import nodeset
from ansible_collections.soperator.slurm.plugins.module_utils.kube.apply import APPLIED_ANNOTATION
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import check_nodes_option
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmCommandError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from
from repo_root import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "small-cpu.yml")


def live_object(doc, **extra_labels):
    """`doc` as the API server returns it after slurm_cluster applied it."""
    obj = copy.deepcopy(doc)
    meta = obj["metadata"]
    meta.update(uid="u-1", resourceVersion="42", generation=3, managedFields=[{"manager": c.FIELD_MANAGER}],
                creationTimestamp="2025-01-01T00:00:00Z")
    meta["labels"] = dict({c.LABEL_MANAGED_BY: c.FIELD_MANAGER, c.LABEL_INSTANCE: "small",
                           c.LABEL_COMPONENT: "cluster", c.LABEL_NAME: "slurm"}, **extra_labels)
    meta["annotations"] = {APPLIED_ANNOTATION: "sha256:0",
                           "kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "hpc"}
    obj["status"] = {"phase": "Ready"}
    return obj


class FakeClient(object):
    def __init__(self, objects):
        self.objects = objects
        self.calls = []

    def get(self, kind, name, namespace):
        self.calls.append(("get", kind, name, namespace))
        for obj in self.objects:
            if obj["kind"] == kind and obj["metadata"]["name"] == name and obj["metadata"]["namespace"] == namespace:
                return obj
        return None

    def list(self, kind, namespace):
        self.calls.append(("list", kind, namespace))
        return [o for o in self.objects if o["kind"] == kind and o["metadata"]["namespace"] == namespace]


def example_docs():
    return documents_from(EXAMPLE)


def other_cluster_node_set():
    doc = copy.deepcopy(example_docs()[1])
    doc["metadata"]["name"] = "elsewhere"
    doc["spec"]["clusterName"] = "other"
    return doc


def test_spec_document_keeps_what_the_user_wrote_only():
    cluster = live_object(example_docs()[0], team="hpc")
    doc = live.spec_document(cluster)
    assert doc == {"apiVersion": cluster["apiVersion"], "kind": "SlurmCluster",
                   "metadata": {"name": "small", "namespace": "slurm", "labels": {"team": "hpc"},
                                "annotations": {"team": "hpc"}},
                   "spec": example_docs()[0]["spec"]}
    doc["spec"]["login"]["replicas"] = 9
    assert cluster["spec"]["login"]["replicas"] == 1


def test_spec_document_without_user_labels_or_annotations_has_neither():
    obj = live_object(example_docs()[1], **{c.LABEL_NODESET: "cpu"})
    obj["metadata"]["annotations"].pop("team")
    assert live.spec_document(obj)["metadata"] == {"name": "cpu", "namespace": "slurm"}


def test_read_cluster_takes_only_the_clusters_node_sets_in_two_requests():
    docs = example_docs()
    client = FakeClient([live_object(d) for d in docs] + [live_object(other_cluster_node_set())])
    cluster, node_sets = live.read_cluster(client, "small", "slurm")
    assert cluster["metadata"]["name"] == "small" and [o["metadata"]["name"] for o in node_sets] == ["cpu"]
    assert client.calls == [("get", "SlurmCluster", "small", "slurm"), ("list", "NodeSet", "slurm")]
    assert live.cluster_documents(client, "small", "slurm") == [live.spec_document(live_object(d)) for d in docs]


def test_a_missing_cluster_is_none_and_nothing_is_listed():
    client = FakeClient([live_object(example_docs()[1])])
    assert live.read_cluster(client, "small", "slurm") == (None, [])
    assert live.cluster_documents(client, "small", "slurm") is None
    assert client.calls == [("get", "SlurmCluster", "small", "slurm")] * 2


def params(**kw):
    out = dict(state="present", name=None, namespace=None, cluster_name=None, definition=None, src=None,
               replicas=None)
    out.update(kw)
    return out


def test_nodeset_scales_the_live_definition_and_names_its_objects():
    client = FakeClient([live_object(d) for d in example_docs()])
    change = nodeset.prepare(params(name="cpu", namespace="slurm", cluster_name="small", replicas=3),
                             lambda p: client)
    assert change.summary == {"name": "cpu", "replicas": 3, "max_replicas": 4, "nodes": change.summary["nodes"]}
    assert change.current["metadata"]["name"] == "cpu"
    assert change.ours({"kind": "NodeSet", "metadata": {"name": "cpu"}})
    assert change.ours({"kind": "StatefulSet", "metadata": {"name": "x", "labels": {c.LABEL_NODESET: "cpu"}}})
    assert not change.ours({"kind": "StatefulSet", "metadata": {"name": "x", "labels": {c.LABEL_NODESET: "gpu"}}})
    assert not change.ours({"kind": "ConfigMap", "metadata": {"name": "small-slurm-configs"}})
    assert change.affected({"kind": "ConfigMap", "metadata": {"name": "small-slurm-configs"}})
    assert change.affected({"kind": "StatefulSet", "metadata": {"name": "small-controller"}})
    assert not change.affected({"kind": "StatefulSet", "metadata": {"name": "small-login"}})


def test_nodeset_absent_summary_and_refusals():
    client = FakeClient([live_object(d) for d in example_docs()])
    change = nodeset.prepare(params(state="absent", name="cpu", namespace="slurm", cluster_name="small"),
                             lambda p: client)
    assert change.summary == {"name": "cpu", "replicas": 0, "max_replicas": 0, "nodes": None}
    with pytest.raises(nodeset.NodeSetError, match="replicas must be >= 0, got -1"):
        nodeset.prepare(params(replicas=-1), lambda p: client)
    with pytest.raises(nodeset.NodeSetError, match="missing name, namespace, cluster_name"):
        nodeset.prepare(params(), lambda p: client)
    with pytest.raises(nodeset.NodeSetError, match="exactly one NodeSet"):
        nodeset.prepare(params(definition=example_docs()[0]), lambda p: client)
    with pytest.raises(nodeset.NodeSetError, match="namespace 'other' differs from the definition's 'slurm'"):
        nodeset.prepare(params(namespace="other", definition=example_docs()[1]), lambda p: client)
    with pytest.raises(nodeset.NodeSetError, match="SlurmCluster slurm/nope does not exist"):
        nodeset.prepare(params(name="cpu", namespace="slurm", cluster_name="nope"), lambda p: client)
    with pytest.raises(nodeset.NodeSetError, match="NodeSet slurm/gpu does not exist"):
        nodeset.prepare(params(name="gpu", namespace="slurm", cluster_name="small"), lambda p: client)
    bad = copy.deepcopy(example_docs()[1])
    bad["spec"]["replicas"] = 99
    with pytest.raises(SpecError):
        nodeset.prepare(params(definition=bad), lambda p: client)


def test_require_positive_names_the_option():
    args.require_positive(dict(a=1, b=None), "a", "b")
    with pytest.raises(SoperatorError, match="b must be > 0, got 0"):
        args.require_positive(dict(a=1, b=0), "a", "b")


def test_model_from_options_fails_with_field_paths_or_the_unreadable_src(tmp_path):
    assert ms.model_from_options(dict(src=EXAMPLE, definition=None)).name == "small"
    bad = copy.deepcopy(example_docs())
    bad[1]["spec"]["replicas"] = 99
    with pytest.raises(SpecError) as err:
        ms.model_from_options(dict(src=None, definition=bad))
    assert err.value.result["errors"] == [
        {"path": "NodeSet/cpu spec", "message": "maxReplicas (4) must be >= replicas (99)"}]
    missing = str(tmp_path / "missing.yml")
    with pytest.raises(SoperatorError, match="cannot read src %s" % missing):
        ms.model_from_options(dict(src=missing, definition=None))


@pytest.mark.parametrize("nodes", ["w-[0-3]", ["w-0", "w-[1-2]"], ("a",)])
def test_nodes_option_accepts_hostlists(nodes):
    check_nodes_option(nodes)


@pytest.mark.parametrize("nodes", [None, 3, ["w-0", 1], {"w-0": 1}])
def test_nodes_option_refuses_other_values(nodes):
    with pytest.raises(SlurmCommandError, match="nodes must be a hostlist expression or a list of them"):
        check_nodes_option(nodes)
    if nodes is None:
        check_nodes_option(nodes, optional=True)
