# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""topology.conf and topology.yaml of a ClusterModel (render/slurm_conf.py writes them with the other files): the
static switch tree of spec.topology (or one leaf switch per NodeSet under one root), or the tree of
spec.topology.nodeLabels that spec/topology.py computes from where the workers run. Pure: no I/O.

The nodeLabels tree goes into topology.conf for every Slurm, and into topology.yaml as well for Slurm 25.05 and
later, which reads topology.yaml and then ignores topology.conf (topology.yaml(5)): one file set serves images on
either side of 25.05.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import to_yaml
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import comment, slurm_line
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.hostlist import compress
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import switch_cycles
from ansible_collections.soperator.slurm.plugins.module_utils.spec.topology import BLOCK, topology_tree

# Slurm reads topology.yaml (and ignores topology.conf) since 25.05; topology/block exists since 23.11.
TOPOLOGY_YAML_SINCE = (25, 5)
BLOCK_SINCE = (23, 11)
# The one topology of our topology.yaml: the cluster's default (partitions name no other).
TOPOLOGY_NAME = "default"


def _unique_name(wanted, taken):
    name, n = wanted, 1
    while name in taken:
        n += 1
        name = "%s-%d" % (wanted, n)
    taken.add(name)
    return name


def _topology_switches(model):
    """[(switch name, nodes hostlist or None, [child switch names])] in file order; empty when disabled.

    topology/tree takes a switch's Nodes or its Switches, not both, and stops on a switch with neither. So a switch
    given both gets its nodes on an added leaf switch `<name>-nodes`, and switches left without any child (their
    NodeSets all have maxReplicas 0) are dropped, with their parents' references to them.
    """
    if not model.topology.enabled:
        return []
    defined = dict((ns.name, ns) for ns in parts.defined_node_sets(model))
    taken = set(defined) | set(s.name for s in model.topology.switches)
    if not model.topology.switches:
        if not defined:
            return []
        leaves = [(name, defined[name].node_range, []) for name in sorted(defined)]
        return leaves + [(_unique_name("root", taken), None, sorted(defined))]
    nodes = {}
    children = {}
    for switch in model.topology.switches:
        nodes[switch.name] = ",".join(defined[n].node_range for n in switch.node_sets if n in defined)
        children[switch.name] = list(switch.switches)
    _check_no_cycle(children)
    # Drop switches that end up with no child at all, until none is left to drop.
    alive = set(nodes)
    changed = True
    while changed:
        changed = False
        for name in sorted(alive):
            if not nodes[name] and not [s for s in children[name] if s in alive]:
                alive.discard(name)
                changed = True
    result = []
    for switch in model.topology.switches:
        name = switch.name
        if name not in alive:
            continue
        kids = [s for s in children[name] if s in alive]
        if nodes[name] and kids:
            leaf = _unique_name("%s-nodes" % name, taken)
            result.append((leaf, nodes[name], []))
            result.append((name, None, kids + [leaf]))
        elif nodes[name]:
            result.append((name, nodes[name], []))
        else:
            result.append((name, None, kids))
    return result


def _check_no_cycle(children):
    """A switch that is its own ancestor makes topology/tree loop: refuse it (spec reports it first, with its path)."""
    cycles = switch_cycles(children)
    if cycles:
        raise ValueError("topology.conf: switches form a cycle: %s" % " -> ".join(cycles[0]))


def topology_plugin(model):
    """slurm.conf's TopologyPlugin, or None. nodeLabels: always its plugin (slurmctld cannot change the plugin on a
    reconfigure, and the tree follows the pods); the static tree: topology/tree only when there is a switch to
    describe (on an empty topology.conf it logs errors)."""
    if model.topology.node_labels is not None:
        return model.topology.node_labels.plugin
    return "topology/tree" if _topology_switches(model) else None


def _check_block(tree, target):
    if tree.plugin == BLOCK and tuple(target.slurm_version) < BLOCK_SINCE:
        raise ValueError("topology/block (spec.topology.nodeLabels.plugin) needs Slurm %d.%02d or later; this one "
                         "is %d.%02d" % (BLOCK_SINCE + tuple(target.slurm_version)))


def _unplaced_comments(tree):
    """One comment per reason, naming its nodes as a hostlist: the nodes of a cluster with no pod placed yet (every
    node of maxReplicas) make one line, not one each (issue 32: the ConfigMap stays small at 10,000 workers)."""
    by_reason = {}
    for node, why in tree.unplaced:
        by_reason.setdefault(why, []).append(node)
    return [comment("%s: left out (no job until its place is known): %s" % (compress(nodes), why))
            for why, nodes in sorted(by_reason.items())]


def _node_labels_conf(model, target):
    tree = topology_tree(model)
    _check_block(tree, target)
    lines = [comment("From the labels %s of the Kubernetes nodes the workers of %s run on (spec.topology.nodeLabels)."
                     % (", ".join(model.topology.node_labels.tiers), ", ".join(model.topology.node_labels.node_sets)))]
    if tuple(target.slurm_version) >= TOPOLOGY_YAML_SINCE:
        lines.append(comment("Slurm 25.05 and later read topology.yaml instead; the same tree."))
    lines += _unplaced_comments(tree)
    if not tree.units:
        lines.append(comment("No worker is placed yet: no %s." % ("block" if tree.plugin == BLOCK else "switch")))
        return lines
    lines.append("")
    key = "BlockName" if tree.plugin == BLOCK else "SwitchName"
    for unit in tree.units:
        lines.append(slurm_line("topology.conf", [(key, unit.name), ("Nodes", compress(list(unit.nodes)))
                                                  if unit.nodes else ("Switches", ",".join(unit.children))]))
    return lines


def render_topology_yaml(model, target):
    """topology.yaml (Slurm 25.05+) of spec.topology.nodeLabels, or None: no nodeLabels, an older Slurm, or no unit
    to describe yet (then Slurm reads topology.conf, which says so)."""
    tree = topology_tree(model)
    if tree is None or tuple(target.slurm_version) < TOPOLOGY_YAML_SINCE or not tree.units:
        return None
    _check_block(tree, target)
    if tree.plugin == BLOCK:
        body = {"block": {"blocks": [{"block": u.name, "nodes": compress(list(u.nodes))} for u in tree.units]}}
    else:
        switches = []
        for unit in tree.units:
            child = ("nodes", compress(list(unit.nodes))) if unit.nodes else ("children", ",".join(unit.children))
            switches.append(dict([("switch", unit.name), child]))
        body = {"tree": {"switches": switches}}
    topology = dict([("topology", TOPOLOGY_NAME), ("cluster_default", True)] + list(body.items()))
    head = [comment("topology.yaml: generated by soperator.slurm from SlurmCluster %s (namespace %s)."
                    % (model.name, model.namespace)),
            comment("Do not edit: every apply rewrites it. Format: topology.yaml(5), Slurm %d.%02d."
                    % tuple(target.slurm_version))]
    head += _unplaced_comments(tree)
    return "\n".join(head) + "\n" + to_yaml([topology])


def render_topology_conf(model, target):
    lines = parts.header(model, "topology.conf", target)
    if model.topology.node_labels is not None:
        return parts.text(lines + _node_labels_conf(model, target))
    switches = _topology_switches(model)
    if not model.topology.enabled:
        lines.append(comment("Topology-aware scheduling is off (spec.topology.enabled is false)."))
    elif not switches:
        lines.append(comment("spec.topology.enabled is true, but no NodeSet defines a node yet: topology/tree is "
                             "off."))
    else:
        if not model.topology.switches:
            lines.append(comment("One leaf switch per NodeSet, all under one root switch (spec.topology.switches is "
                                 "empty)."))
        lines.append("")
        for name, nodes, kids in switches:
            lines.append(slurm_line("topology.conf", [("SwitchName", name),
                                                      ("Nodes", nodes) if nodes else ("Switches", ",".join(kids))]))
    return parts.text(lines)
