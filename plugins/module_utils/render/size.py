# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Size-aware slurm.conf settings: what a cluster's node count changes in slurmctld's limits (issue 32).

The node count is the number of nodes slurm.conf defines: the sum of the NodeSets' maxReplicas (never replicas, so
scaling a NodeSet up or down renders the same files). Thresholds:

- up to LARGE (256) nodes: nothing; a small cluster renders what it rendered before this module existed.
- above LARGE, where half of Slurm's default 512 connections is one per node (slurm.conf.html):
  - SchedulerParameters `max_rpc_cnt=100` (slurm.conf.html, all releases): scheduling yields while 100 RPCs are
    being served, well under slurmctld's 256 server threads, so a registration storm is served first (22.05's
    slurmctld logs "consider configuring max_rpc_cnt" when RPCs pile up at a cycle's end).
  - SlurmctldParameters `conmgr_max_connections=max(1024, 2 x nodes rounded up to a power of two)` (slurm.conf.html,
    24.11+): every slurmd registering at once holds a connection; the default 512 makes the rest wait.
  - SlurmctldParameters `validate_nodeaddr_threads=nodes/256` (2 to 64; slurm.conf.html, 23.02+): a restarted
    slurmctld resolves every registered node's address before it serves; one thread does it one name at a time.
- above TWO_HOPS (128 x 128 = 16,384) nodes: TreeWidth = ceil(sqrt(nodes)) (at most 65533; slurm.conf.html,
  big_sys.html), so every node stays within two hops of slurmctld as TreeWidth=128 keeps smaller clusters.

Left as they are, with why: SlurmdTimeout is already 300 s (big_sys.html asks >= 120 on very large systems);
MessageTimeout stays 10 s because a backup controller's SlurmctldTimeout is derived from it (spec/controller.py);
`enable_stepmgr` and `defer_batch` change what jobs see, not just their cost, so they stay the user's choice.

A word goes only to a Slurm release that reads it (WORD_SINCE: slurm.conf(5) at each release's tag), and an explicit
spec.slurmConfig key always wins: a user's SchedulerParameters or SlurmctldParameters replaces ours whole.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import SlurmTarget
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import ClusterModel

Entry = Tuple[str, Any, Optional[str]]
Section = Tuple[str, List[Entry]]

LARGE = 256
TWO_HOPS = 128 * 128
DEFAULT_TREE_WIDTH = 128            # what render/slurm_conf.py writes up to TWO_HOPS nodes
MAX_TREE_WIDTH = 65533              # slurm.conf(5): "The value may not exceed 65533"
MAX_RPC_CNT = 100
MIN_CONNECTIONS = 1024
NODES_PER_ADDR_THREAD = 256
ADDR_THREADS = (2, 64)              # 64: the most slurmctld takes (read_config.c)

# The first Slurm release whose slurm.conf(5) names each word (checked at the slurm-YY-MM-0-1 tags).
WORD_SINCE = {
    "max_rpc_cnt": (22, 5),
    "validate_nodeaddr_threads": (23, 2),
    "conmgr_max_connections": (24, 11),
}


def node_count(model: ClusterModel) -> int:
    """The nodes slurm.conf defines: the NodeSets' maxReplicas added up."""
    return sum(ns.max_replicas for ns in parts.defined_node_sets(model))


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def tree_width(nodes: int) -> int:
    if nodes <= TWO_HOPS:
        return DEFAULT_TREE_WIDTH
    return min(MAX_TREE_WIDTH, int(math.ceil(math.sqrt(nodes))))


def size_words(nodes: int, version: Sequence[int]) -> List[Tuple[str, str, str]]:
    """(slurm.conf key, word, why) the cluster's size adds, for the Slurm release `version`; none up to LARGE."""
    if nodes <= LARGE:
        return []
    threads = min(ADDR_THREADS[1], max(ADDR_THREADS[0], nodes // NODES_PER_ADDR_THREAD))
    words = [
        ("SchedulerParameters", "max_rpc_cnt=%d" % MAX_RPC_CNT,
         "scheduling yields to RPCs while %d are served (a registration storm)" % MAX_RPC_CNT),
        ("SlurmctldParameters", "conmgr_max_connections=%d" % max(MIN_CONNECTIONS, _next_power_of_two(2 * nodes)),
         "room for every slurmd to connect at once"),
        ("SlurmctldParameters", "validate_nodeaddr_threads=%d" % threads,
         "a restarted slurmctld resolves node addresses in parallel"),
    ]
    return [(key, word, why) for key, word, why in words
            if tuple(version) >= WORD_SINCE[word.split("=", 1)[0]]]


def with_size_settings(sections: List[Section], model: ClusterModel, target: SlurmTarget) -> List[Section]:
    """`sections` (render/slurm_conf.py's) with the size-aware values: TreeWidth set where it stands, words merged
    into an existing SchedulerParameters or SlurmctldParameters entry, the others in a section of their own."""
    nodes = node_count(model)
    by_key: Dict[str, List[Tuple[str, str]]] = {}
    for key, word, why in size_words(nodes, target.slurm_version):
        by_key.setdefault(key, []).append((word, why))
    width = tree_width(nodes)
    out: List[Section] = []
    for title, entries in sections:
        new_entries = []
        for key, value, note in entries:
            if key == "TreeWidth" and width != DEFAULT_TREE_WIDTH:
                value, note = width, "About the square root of the %d nodes: each within two hops." % nodes
            elif key in by_key:
                value = parts.merged_words(value, [word for word, _why in by_key.pop(key)])
            new_entries.append((key, value, note))
        out.append((title, new_entries))
    own: List[Entry] = [(key, ",".join(w for w, _why in pairs), "; ".join(why for _w, why in pairs) + ".")
                        for key, pairs in sorted(by_key.items())]
    if own:
        out.append(("Size: %d nodes (render/size.py; slurm.conf.html, big_sys.html)" % nodes, own))
    return out
