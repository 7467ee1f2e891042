# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`spec.topology.nodeLabels`: Slurm's network topology from the labels of the Kubernetes nodes the workers run on
(one place for its schema, its rules, its model and the topology it computes).

`tiers` are label keys, top tier first (e.g. a spine label, then a leaf-switch label): each distinct value of a tier
is a switch, under the switch its nodes' value of the tier above names; the workers of `nodeSets` sit on the leaf
switch of their Kubernetes node. topology/block takes one tier: each value is a block. The backend that reads the
cluster fills the model's `placement` (kube/topology.py); `topology_tree` turns it into one Tree, which
render/topology_conf.py writes as topology.conf (Slurm < 25.05) and topology.yaml (25.05+).

A worker whose place is not known - no pod on a node yet, its node lacks a tier label, or a switch of its path sits
under two different parents (a node "in two places") - is left out of the tree (`unplaced`, with the reason). Slurm
allocates nodes only within the switch tree (topology.conf(5): "All nodes in the network must be connected to at
least one switch"), so such a node gets no job until its place is known; nothing is drained, and the next run puts
it back as soon as its labels say where it is. NodeSets that do not take part get a leaf switch (a block) of their
own, so they stay usable, off the fabric's switches.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import Arr, Node, Obj, SpecIssue, Str

TREE, BLOCK = "topology/tree", "topology/block"
PLUGINS = (TREE, BLOCK)
MAX_TIERS = 8
# Slurm refuses a switch name longer than this (topology.conf(5) SwitchName).
MAX_SWITCH_NAME = 64


def node_labels_schema(label_key: Node, node_set_name: Node) -> Node:
    return Obj("Slurm's topology from the labels of the Kubernetes nodes the workers run on (instead of enabled "
               "and switches): each run reads them and rewrites topology.conf (Slurm < 25.05) and topology.yaml "
               "(25.05+). A worker whose node lacks a tier label is left out of the tree (no job until its place "
               "is known).", {
                   "plugin": Str("topology/tree (switches, one per value of each tier) or topology/block (one "
                                 "tier: a block per value).", enum=list(PLUGINS), default=TREE),
                   "tiers": Arr(label_key, "Kubernetes node label keys naming each tier, top tier first (e.g. "
                                "spine, then leaf switch; topology/block: the block label alone).", min_items=1,
                                checks=[_tiers_problem]),
                   "nodeSets": Arr(node_set_name, "NodeSets whose workers take part; the others get a leaf "
                                   "switch (a block) of their own, off the fabric (CPU-only NodeSets).",
                                   min_items=1),
               }, required=("tiers", "nodeSets"), optional=True)


def _tiers_problem(tiers: Any) -> Optional[str]:
    if not isinstance(tiers, list):
        return None
    if len(tiers) > MAX_TIERS:
        return "at most %d tiers, got %d" % (MAX_TIERS, len(tiers))
    if len(set(tiers)) != len(tiers):
        return "a label key may name one tier only, got %s" % ", ".join(map(str, tiers))
    return None


# The CRD's rules on spec.topology; topology_issues() says the same with each field's own path.
CEL_RULES = [
    ("!has(self.nodeLabels) || ((!has(self.enabled) || !self.enabled) && "
     "(!has(self.switches) || size(self.switches) == 0))",
     "nodeLabels replaces enabled and switches: leave those out", ".nodeLabels"),
    ("!has(self.nodeLabels) || !has(self.nodeLabels.plugin) || self.nodeLabels.plugin != 'topology/block' || "
     "size(self.nodeLabels.tiers) == 1", "topology/block takes one tier (the block label)", ".nodeLabels.tiers"),
]


def topology_issues(cluster_label: str, topology: Any,
                    node_sets: Sequence[Tuple[str, Dict[str, Any]]]) -> List[SpecIssue]:
    """Rules of spec.topology.nodeLabels across fields and with the NodeSets. `node_sets`: (label, validated
    document) pairs."""
    labels = topology.get("nodeLabels") if isinstance(topology, dict) else None
    if not isinstance(labels, dict):
        return []
    path = "%s spec.topology.nodeLabels" % cluster_label
    issues = []
    if topology.get("enabled") is True or topology.get("switches"):
        issues.append(SpecIssue(path, "replaces spec.topology.enabled and switches (the static tree): leave "
                                      "those out"))
    tiers = labels.get("tiers")
    if labels.get("plugin") == BLOCK and isinstance(tiers, list) and len(tiers) != 1:
        issues.append(SpecIssue(path + ".tiers", "topology/block takes one tier (the block label), got %d"
                                % len(tiers)))
    docs: Dict[str, Dict[str, Any]] = {}
    for _label, doc in node_sets:
        name = _name(doc)
        if name:
            docs[name] = doc
    for i, ref in enumerate(labels.get("nodeSets") or []):
        if ref not in docs:
            issues.append(SpecIssue("%s.nodeSets[%d]" % (path, i), "unknown NodeSet %r (known: %s)"
                                    % (ref, ", ".join(sorted(docs)) or "none")))
            continue
        eph = (docs[ref].get("spec") or {}).get("ephemeral")
        if isinstance(eph, dict) and eph.get("enabled") is True:
            issues.append(SpecIssue("%s.nodeSets[%d]" % (path, i),
                                    "NodeSet %r is ephemeral: its powered-down nodes have no Kubernetes node, so "
                                    "they would stay out of the tree and Slurm would never power them up" % ref))
    return issues


def _name(doc: Any) -> Optional[str]:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def node_labels_model(topology: Dict[str, Any]) -> Optional[m.NodeLabels]:
    labels = topology.get("nodeLabels")
    if not labels:
        return None
    return m.NodeLabels(plugin=labels["plugin"], tiers=tuple(labels["tiers"]), node_sets=tuple(labels["nodeSets"]))


# --- the topology a placement makes ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Unit:
    """A switch (topology/tree) or a block: the Slurm nodes right under it and its child switches."""
    name: str
    nodes: Tuple[str, ...] = ()
    children: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Tree:
    """The topology to write: `units` top first; `unplaced`: (Slurm node, why) of the nodes left out."""
    plugin: str
    units: Tuple[Unit, ...]
    unplaced: Tuple[Tuple[str, str], ...]

    def report(self) -> Dict[str, Any]:
        """What slurm_cluster returns as `topology`."""
        return {"plugin": self.plugin,
                "units": [dict([("name", u.name)] + ([("nodes", list(u.nodes))] if u.nodes else []) +
                               ([("children", list(u.children))] if u.children else [])) for u in self.units],
                "unplaced": [{"node": node, "reason": why} for node, why in self.unplaced]}

    def node_units(self) -> Dict[str, str]:
        """Slurm node -> the unit it sits on."""
        return dict((node, u.name) for u in self.units for node in u.nodes)


def _unique(wanted: str, taken: Set[str]) -> str:
    """`wanted`, or `wanted-N` when taken, cut to Slurm's longest switch name."""
    name, n = wanted[:MAX_SWITCH_NAME], 1
    while name in taken:
        n += 1
        suffix = "-%d" % n
        name = wanted[:MAX_SWITCH_NAME - len(suffix)] + suffix
    taken.add(name)
    return name


def _path(node: str, placement: Optional[m.Placement], tiers: Sequence[str]) -> Tuple[Optional[Tuple[str, ...]],
                                                                                      str]:
    """(the tier values of a node's Kubernetes node, top first) or (None, why it is unknown)."""
    if placement is None or placement.host is None:
        return None, "its pod is not running on a Kubernetes node"
    # the leaf tier first: the backend reads only the nodes that carry it (kube/topology.py)
    for key in reversed(tiers):
        if not placement.labels.get(key):
            return None, "Kubernetes node %s has no label %s" % (placement.host, key)
    return tuple(placement.labels[key] for key in tiers), ""


def topology_tree(model: m.ClusterModel) -> Optional[Tree]:
    """The Tree of spec.topology.nodeLabels for the placement in the model; None when nodeLabels is not set."""
    labels = model.topology.node_labels
    if labels is None:
        return None
    placement = labels.placement or {}
    taking_part = [ns for ns in model.node_sets if ns.name in labels.node_sets and ns.max_replicas > 0]
    others = [ns for ns in model.node_sets if ns.name not in labels.node_sets and ns.max_replicas > 0]
    paths: Dict[str, Tuple[str, ...]] = {}
    unplaced: Dict[str, str] = {}
    for ns in taking_part:
        for ordinal in range(ns.max_replicas):
            node = ns.node_name(ordinal)
            path, why = _path(node, placement.get(node), labels.tiers)
            if path is None:
                unplaced[node] = why
            else:
                paths[node] = path
    # A switch under two different parents cannot be drawn as a tree: its nodes are left out.
    parents: Dict[Tuple[int, str], Set[str]] = {}
    for path in paths.values():
        for depth in range(1, len(path)):
            parents.setdefault((depth, path[depth]), set()).add(path[depth - 1])
    for node, path in sorted(paths.items()):
        for depth in range(1, len(path)):
            above = parents[(depth, path[depth])]
            if len(above) > 1:
                unplaced[node] = "%s=%s is under more than one %s (%s)" % (
                    labels.tiers[depth], path[depth], labels.tiers[depth - 1], ", ".join(sorted(above)))
                del paths[node]
                break
    taken: Set[str] = set()
    names: Dict[Tuple[int, str], str] = {}
    for depth in range(len(labels.tiers)):
        for value in sorted(set(p[depth] for p in paths.values())):
            names[(depth, value)] = _unique(value, taken)
    own = [(ns, _unique(ns.name, taken)) for ns in others]
    units: List[Unit] = []
    for depth in range(len(labels.tiers)):
        last = depth == len(labels.tiers) - 1
        for value in sorted(set(p[depth] for p in paths.values())):
            under = [p for n, p in paths.items() if p[depth] == value]
            if last:
                nodes = tuple(sorted((n for n, p in paths.items() if p[depth] == value), key=_natural))
                units.append(Unit(names[(depth, value)], nodes=nodes))
            else:
                kids = sorted(set(names[(depth + 1, p[depth + 1])] for p in under))
                units.append(Unit(names[(depth, value)], children=tuple(kids)))
    units += [Unit(name, nodes=tuple(ns.node_name(i) for i in range(ns.max_replicas))) for ns, name in own]
    tops = sorted(names[(0, v)] for v in set(p[0] for p in paths.values())) + [name for _ns, name in own]
    if labels.plugin == TREE and len(tops) > 1:
        # one root over the top tier, so a job may span it (Slurm allocates only within one connected tree)
        units.insert(0, Unit(_unique("root", taken), children=tuple(tops)))
    return Tree(labels.plugin, tuple(units), tuple(sorted(unplaced.items(), key=lambda item: _natural(item[0]))))


def _natural(name: str) -> Tuple[Any, ...]:
    head, sep, tail = name.rpartition("-")
    return (head, int(tail)) if sep and tail.isdigit() else (name, -1)
