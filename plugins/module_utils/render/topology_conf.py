# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""topology.conf of a ClusterModel (render/slurm_conf.py writes it with the other files): the switch tree of
spec.topology, or one leaf switch per NodeSet under one root. Pure: no I/O."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import comment, slurm_line
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import switch_cycles


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


def topology_enabled(model):
    """topology/tree only when there is a switch to describe (on an empty topology.conf it logs errors)."""
    return bool(_topology_switches(model))


def render_topology_conf(model, target):
    lines = parts.header(model, "topology.conf", target)
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
