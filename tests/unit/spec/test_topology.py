"""spec.topology.nodeLabels (spec/topology.py): what the spec accepts and refuses, with field paths, the tree a
placement makes (bad labels: the node left out, with the reason), and the files it renders - topology.conf for
Slurm 22.05, topology.yaml as well for 25.05+ (render/topology_conf.py). The tree against the real API server and
slurmctld: tests/integration/test_topology_real.py; topology.yaml against the images' slurmctld: images/check_topology.py."""
import dataclasses

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import SlurmTarget
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.topology import topology_tree

from specs import documents

SPINE, LEAF = "example.com/spine", "example.com/leaf"
GPU = ("gpu", {"replicas": 4, "maxReplicas": 4})
CPU = ("cpu", {"replicas": 2})
SLURM_22 = SlurmTarget(slurm_version=(22, 5))


def labels(**node_labels):
    return {"nodeLabels": dict({"tiers": [SPINE, LEAF], "nodeSets": ["gpu"]}, **node_labels)}


def issues_of(docs):
    with pytest.raises(SpecError) as e:
        spec.build_model(docs)
    return dict((i.path, i.message) for i in e.value.issues)


def placed(docs, where):
    """The model of `docs` with its workers placed: {node: (host, {label: value})}."""
    model = spec.build_model(docs)
    placement = dict((node, m.Placement(host, values)) for node, (host, values) in where.items())
    node_labels = dataclasses.replace(model.topology.node_labels, placement=placement)
    return dataclasses.replace(model, topology=dataclasses.replace(model.topology, node_labels=node_labels))


def on(host, spine=None, leaf=None):
    return host, dict(([(SPINE, spine)] if spine else []) + ([(LEAF, leaf)] if leaf else []))


FOUR = {"gpu-0": on("n0", "s1", "l1"), "gpu-1": on("n1", "s1", "l1"), "gpu-2": on("n2", "s1", "l2"),
        "gpu-3": on("n3", "s1", "l2")}


def units(tree):
    return [(u.name, list(u.nodes), list(u.children)) for u in tree.units]


# --- the spec ----------------------------------------------------------------------------------------------------

def test_the_model_holds_plugin_tiers_and_node_sets_with_no_placement_yet():
    model = spec.build_model(documents(GPU, CPU, topology=labels()))
    assert model.topology.node_labels == m.NodeLabels("topology/tree", (SPINE, LEAF), ("gpu",))
    assert spec.build_model(documents(GPU)).topology.node_labels is None


@pytest.mark.parametrize("topology, path, message", [
    (labels(nodeSets=["gpu", "tpu"]), "spec.topology.nodeLabels.nodeSets[1]", "unknown NodeSet 'tpu'"),
    (labels(plugin="topology/block"), "spec.topology.nodeLabels.tiers", "topology/block takes one tier"),
    (labels(plugin="topology/torus3d"), "spec.topology.nodeLabels.plugin", "must be one of"),
    (labels(tiers=["bad key!"]), "spec.topology.nodeLabels.tiers[0]", "is not a qualified name"),
    (labels(tiers=[LEAF, LEAF]), "spec.topology.nodeLabels.tiers", "one tier only"),
    (labels(tiers=[]), "spec.topology.nodeLabels.tiers", "at least 1"),
    (labels(nodeSets=[]), "spec.topology.nodeLabels.nodeSets", "at least 1"),
    (dict(labels(), enabled=True), "spec.topology.nodeLabels", "replaces spec.topology.enabled and switches"),
])
def test_bad_node_labels_are_refused_at_their_path(topology, path, message):
    found = issues_of(documents(GPU, CPU, topology=topology))
    assert message in found.get("SlurmCluster/c " + path, ""), found


def test_an_ephemeral_node_set_cannot_take_part():
    eph = ("gpu", {"maxReplicas": 4, "ephemeral": {"enabled": True, "minReplicas": 1}})
    found = issues_of(documents(eph, topology=labels()))
    assert "is ephemeral" in found["SlurmCluster/c spec.topology.nodeLabels.nodeSets[0]"], found


# --- the tree ----------------------------------------------------------------------------------------------------

def test_each_tier_value_is_a_switch_under_its_parent_value():
    tree = topology_tree(placed(documents(GPU, topology=labels()), FOUR))
    assert units(tree) == [("s1", [], ["l1", "l2"]), ("l1", ["gpu-0", "gpu-1"], []), ("l2", ["gpu-2", "gpu-3"], [])]
    assert tree.unplaced == ()
    assert tree.node_units() == {"gpu-0": "l1", "gpu-1": "l1", "gpu-2": "l2", "gpu-3": "l2"}


def test_a_root_joins_several_top_switches_and_other_node_sets_get_a_leaf_of_their_own():
    where = dict(FOUR, **{"gpu-3": on("n3", "s2", "l3")})
    tree = topology_tree(placed(documents(GPU, CPU, topology=labels()), where))
    assert units(tree) == [("root", [], ["s1", "s2", "cpu"]), ("s1", [], ["l1", "l2"]), ("s2", [], ["l3"]),
                           ("l1", ["gpu-0", "gpu-1"], []), ("l2", ["gpu-2"], []), ("l3", ["gpu-3"], []),
                           ("cpu", ["cpu-0", "cpu-1"], [])]


def test_switch_names_stay_unique_when_a_value_repeats_across_tiers():
    where = {"gpu-0": on("n0", "a", "a"), "gpu-1": on("n1", "a", "b")}
    tree = topology_tree(placed(documents(("gpu", {"replicas": 2}), topology=labels()), where))
    assert units(tree) == [("a", [], ["a-2", "b"]), ("a-2", ["gpu-0"], []), ("b", ["gpu-1"], [])]


def test_a_repeated_long_value_stays_within_slurms_64_characters():
    long = "v" * 63
    where = {"gpu-0": on("n0", long, long)}
    tree = topology_tree(placed(documents(("gpu", {"replicas": 1}), topology=labels()), where))
    assert [u.name for u in tree.units] == [long, "v" * 62 + "-2"]


def test_nodes_of_unknown_place_are_left_out_with_the_reason():
    where = {"gpu-0": on("n0", "s1", "l1"), "gpu-1": on("n1", "s1"), "gpu-2": on("n2", None, "l1"),
             "gpu-3": (None, {})}
    tree = topology_tree(placed(documents(GPU, topology=labels()), where))
    assert units(tree) == [("s1", [], ["l1"]), ("l1", ["gpu-0"], [])]
    assert dict(tree.unplaced) == {
        "gpu-1": "Kubernetes node n1 has no label %s" % LEAF,
        "gpu-2": "Kubernetes node n2 has no label %s" % SPINE,
        "gpu-3": "its pod is not running on a Kubernetes node"}


def test_a_switch_under_two_parents_leaves_its_nodes_out():
    # l2 under s1 (gpu-2) and under s2 (gpu-3): a node "in two places"
    where = dict(FOUR, **{"gpu-3": on("n3", "s2", "l2")})
    tree = topology_tree(placed(documents(GPU, topology=labels()), where))
    assert units(tree) == [("s1", [], ["l1"]), ("l1", ["gpu-0", "gpu-1"], [])]
    assert dict(tree.unplaced) == dict((n, "%s=l2 is under more than one %s (s1, s2)" % (LEAF, SPINE))
                                       for n in ("gpu-2", "gpu-3"))


def test_no_placement_read_leaves_every_worker_out():
    tree = topology_tree(spec.build_model(documents(GPU, topology=labels())))
    assert tree.units == () and [n for n, _why in tree.unplaced] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_block_makes_one_block_per_value():
    docs = documents(GPU, CPU, topology=labels(plugin="topology/block", tiers=[LEAF]))
    tree = topology_tree(placed(docs, FOUR))
    assert units(tree) == [("l1", ["gpu-0", "gpu-1"], []), ("l2", ["gpu-2", "gpu-3"], []),
                           ("cpu", ["cpu-0", "cpu-1"], [])]
    assert tree.report()["plugin"] == "topology/block"


# --- the files ---------------------------------------------------------------------------------------------------

def lines(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_slurm_22_05_reads_the_tree_from_topology_conf_and_gets_no_topology_yaml():
    where = dict(FOUR, **{"gpu-3": on("n3", "s1")})
    files = render_slurm_configs(placed(documents(GPU, topology=labels()), where), SLURM_22)
    assert "topology.yaml" not in files
    assert lines(files["topology.conf"]) == ["SwitchName=s1 Switches=l1,l2", "SwitchName=l1 Nodes=gpu-[0-1]",
                                             "SwitchName=l2 Nodes=gpu-2"]
    assert "# gpu-3: left out (no job until its place is known): Kubernetes node n3 has no label %s" % LEAF \
        in files["topology.conf"]
    assert "TopologyPlugin=topology/tree" in lines(files["slurm.conf"])


def test_slurm_26_05_gets_the_same_tree_in_topology_yaml():
    files = render_slurm_configs(placed(documents(GPU, topology=labels()), FOUR))
    assert yaml.safe_load(files["topology.yaml"]) == [{
        "topology": "default", "cluster_default": True, "tree": {"switches": [
            {"switch": "s1", "children": "l1,l2"}, {"switch": "l1", "nodes": "gpu-[0-1]"},
            {"switch": "l2", "nodes": "gpu-[2-3]"}]}}]
    assert lines(files["topology.conf"]) == ["SwitchName=s1 Switches=l1,l2", "SwitchName=l1 Nodes=gpu-[0-1]",
                                             "SwitchName=l2 Nodes=gpu-[2-3]"]


def test_block_topology_yaml_and_conf():
    docs = documents(GPU, topology=labels(plugin="topology/block", tiers=[LEAF]))
    files = render_slurm_configs(placed(docs, FOUR))
    assert yaml.safe_load(files["topology.yaml"])[0]["block"] == {"blocks": [
        {"block": "l1", "nodes": "gpu-[0-1]"}, {"block": "l2", "nodes": "gpu-[2-3]"}]}
    assert lines(files["topology.conf"]) == ["BlockName=l1 Nodes=gpu-[0-1]", "BlockName=l2 Nodes=gpu-[2-3]"]
    assert "TopologyPlugin=topology/block" in lines(files["slurm.conf"])
    with pytest.raises(ValueError, match="topology/block .* needs Slurm 23.11"):
        render_slurm_configs(placed(docs, FOUR), SLURM_22)


def test_no_worker_placed_yet_keeps_the_plugin_and_writes_no_unit():
    files = render_slurm_configs(spec.build_model(documents(GPU, topology=labels())))
    assert "topology.yaml" not in files      # Slurm 26.05 then reads topology.conf, which has no switch either
    assert lines(files["topology.conf"]) == []
    assert "No worker is placed yet" in files["topology.conf"]
    assert "TopologyPlugin=topology/tree" in lines(files["slurm.conf"])
