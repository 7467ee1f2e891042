#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_node_info
short_description: Read the state of Slurm nodes
version_added: 0.1.0
description:
  - Returns Slurm nodes with their state, flags, reason, partitions, GRES, CPUs, memory and the number of jobs on
    them, read with one C(sinfo --json) (and one C(squeue) for the job counts).
  - Read-only; the companion of M(soperator.slurm.slurm_drain).
  - A requested node that Slurm does not know, a controller that does not answer, or output that cannot be parsed
    fails the task; an empty answer is never mistaken for "no nodes".
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads only; runs the same in check mode.
  diff_mode:
    support: none
    details: Changes nothing, so there is nothing to show.
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.slurm_connection
  - kubernetes.core.k8s_auth_options
options:
  nodes:
    description:
      - Only these nodes (a Slurm hostlist expression or a list of them), in that order. FUTURE nodes named here are
        included (looked up with C(scontrol --future show node)).
      - By default every node C(sinfo) shows.
    type: raw
  include_future:
    description:
      - Without O(nodes), also return the FUTURE nodes (defined in slurm.conf, not running), which C(sinfo) hides.
    type: bool
    default: false
  jobs:
    description:
      - Count the running, completing and suspended jobs of each node (one C(squeue) call). V(false) leaves
        RV(nodes[].jobs) null.
    type: bool
    default: true
  reason_prefix:
    description:
      - The prefix of the drain reasons this collection sets; RV(nodes[].ours) tells whether a node's reason has it.
    type: str
    default: "soperator:"
seealso:
  - module: soperator.slurm.slurm_drain
"""

EXAMPLES = r"""
- name: Read every node
  soperator.slurm.slurm_node_info:
  register: slurm

- name: Nodes that someone else drained
  ansible.builtin.debug:
    msg: >-
      {{ slurm.nodes | selectattr('state', 'in', ['DRAINED', 'DRAINING']) | rejectattr('ours')
         | map(attribute='name') }}

- name: Read two nodes of the cluster "demo" through its controller pod
  soperator.slurm.slurm_node_info:
    transport: kubernetes
    namespace: slurm
    cluster_name: demo
    nodes: gpu-[0-1]
  register: gpus
"""

RETURN = r"""
nodes:
  description: The nodes, in the requested order (sinfo's order without O(nodes)).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Slurm node name.
      type: str
      sample: gpu-0
    state:
      description: The state as sinfo names it, without the C(*) of NOT_RESPONDING (see C(flags)).
      type: str
      sample: DRAINING
      choices: [IDLE, MIXED, ALLOCATED, COMPLETING, DRAINING, DRAINED, FAIL, FAILING, DOWN, UNKNOWN, ERROR, FUTURE]
    base_state:
      description: Slurm's base state, without the flags.
      type: str
      sample: MIXED
    flags:
      description: Slurm state flags (DRAIN, COMPLETING, NOT_RESPONDING, FAIL, POWERED_DOWN, ...).
      type: list
      elements: str
      sample: [DRAIN]
    reason:
      description: The node's reason (empty when none).
      type: str
      sample: "soperator: firmware update"
    reason_set_by_user:
      description: Who set the reason.
      type: str
      sample: root
    reason_changed_at:
      description: When the reason was set (Unix time), null if never.
      type: int
      sample: 1795287964
    ours:
      description: Whether the reason starts with O(reason_prefix).
      type: bool
      sample: true
    drained:
      description: DRAIN flag set and no job left (DRAINED, not DRAINING).
      type: bool
      sample: false
    busy:
      description: Jobs (or their epilogs) still run on the node.
      type: bool
      sample: true
    jobs:
      description: Running, completing and suspended jobs on the node; null with O(jobs=false).
      type: int
      sample: 2
    partitions:
      description: Partitions the node is in.
      type: list
      elements: str
      sample: [main, gpu]
    gres:
      description: Configured GRES.
      type: str
      sample: "gpu:h100:8"
    gres_used:
      description: GRES in use (sinfo; empty for FUTURE nodes).
      type: str
      sample: "gpu:h100:2(IDX:0-1)"
    features:
      description: Node features.
      type: list
      elements: str
      sample: [h100, ib]
    cpus:
      description: CPUs (null for FUTURE nodes).
      type: int
      sample: 128
    alloc_cpus:
      description: Allocated CPUs (null for FUTURE nodes).
      type: int
      sample: 16
    real_memory:
      description: RealMemory in MiB (null for FUTURE nodes).
      type: int
      sample: 1638400
    alloc_memory:
      description: Allocated memory in MiB (null for FUTURE nodes).
      type: int
      sample: 0
    address:
      description: NodeAddr.
      type: str
      sample: gpu-0.demo-workers.slurm.svc.cluster.local
    hostname:
      description: NodeHostname.
      type: str
      sample: gpu-0
queries:
  description: The commands run.
  returned: always
  type: list
  elements: str
  sample: ["sinfo --json", "squeue --noheader --all --states=RUNNING,COMPLETING,SUSPENDED --format=%N"]
transport:
  description: Where the commands ran.
  returned: always
  type: dict
  sample: {"transport": "local", "slurm_conf": "/etc/slurm/slurm.conf"}
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    DEFAULT_REASON_PREFIX, check_nodes_option, node_info)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError

OPTIONS = dict(
    nodes=dict(type="raw"),
    include_future=dict(type="bool", default=False),
    jobs=dict(type="bool", default=True),
    reason_prefix=dict(type="str", default=DEFAULT_REASON_PREFIX),
)


def _run(module):
    params = module.params
    runner = None
    try:
        check_nodes_option(params["nodes"], optional=True)
        runner = args.runner_from_params(params)
        records = node_info(runner, nodes=params["nodes"], jobs=params["jobs"],
                            include_future=params["include_future"], prefix=params["reason_prefix"])
    except SlurmError as e:     # with the queries that ran
        raise SoperatorError(e.msg, queries=runner.commands if runner else [],
                             transport=runner.describe() if runner else {})
    return dict(changed=False, nodes=records, queries=runner.commands, transport=runner.describe())


def main():
    module = SoperatorModule(OPTIONS, shared=(args.SLURM_CONNECTION_SPEC, args.AUTH_ARG_SPEC),
                             uses_kubernetes=lambda p: p["transport"] == "kubernetes",
                             required_if=args.SLURM_CONNECTION_REQUIRED_IF, supports_check_mode=True)
    module.run(_run)


if __name__ == "__main__":
    main()
