#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_drain
short_description: Drain, resume or undrain Slurm nodes safely
version_added: 0.1.0
description:
  - Drives Slurm nodes to O(state=drained), O(state=resumed) or O(state=undrained) with one C(scontrol update) per
    distinct action (a hostlist expression, never one call per node). It plans from one C(sinfo --json) and verifies
    every change by reading the changed nodes back with one C(scontrol --future show node <hostlist>); each round of
    O(wait) is one C(sinfo --json).
  - Every drain it sets carries O(reason_prefix). A node held by someone else (drained, failed or down with a reason
    that lacks the prefix) is never resumed, undrained or re-drained unless O(force=true); such nodes are left alone
    and reported in RV(skipped_nodes) with their reason.
  - A node that Slurm does not know, a controller that does not answer (after O(retries)), output that cannot be
    parsed, or a change that does not show up when read back fails the task. It never reports success it did not
    verify.
  - Nodes defined in slurm.conf as FUTURE (soperator defines every possible node of a NodeSet that way; they are not
    running) are hidden by C(sinfo); they are looked up with C(scontrol --future show node) and are an error unless
    O(force=true). With O(force=true), V(drained) sets their DRAIN flag (the node registers drained) and V(resumed) /
    V(undrained) clear it with C(UNDRAIN), never C(RESUME), which would take the node out of FUTURE.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads the nodes, reports the predicted states and the C(scontrol update) commands that would run,
      and changes nothing. O(wait) is ignored.
  diff_mode:
    support: full
    details: 'One line per changed node, C(<node>: <state> (<reason>)), before and after.'
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.slurm_connection
  - kubernetes.core.k8s_auth_options
options:
  nodes:
    description:
      - The nodes, as a Slurm hostlist expression (V(gpu-[0-3,7])) or a list of them. Duplicates are ignored.
    type: raw
    required: true
  state:
    description:
      - V(drained) sets the DRAIN flag with O(reason) (jobs that run go on; new ones are not scheduled there).
      - V(resumed) makes the nodes schedulable again with C(scontrol update State=RESUME), which clears DRAIN, FAIL
        and DOWN of our own drains.
      - V(undrained) only clears the DRAIN flag (C(State=UNDRAIN)); a DOWN node stays DOWN.
    type: str
    choices: [drained, resumed, undrained]
    default: drained
  reason:
    description:
      - Why the nodes are drained; required with O(state=drained). O(reason_prefix) and a space are put in front
        unless the reason already starts with it.
      - One line of printable text; a line break or another control character is refused before any command runs
        (slurmctld would store it and the drain could not be read back).
    type: str
  reason_prefix:
    description:
      - The prefix of every drain reason this collection sets; a drain or down reason without it belongs to someone
        else. Matches C(spec.remediation.drainReasonPrefix) of the SlurmCluster.
    type: str
    default: "soperator:"
  force:
    description:
      - Also act on nodes held by someone else (their reason lacks O(reason_prefix)) and on FUTURE nodes.
    type: bool
    default: false
  wait:
    description:
      - With O(state=drained), return only when every drained node runs no more jobs (DRAINED, not DRAINING).
      - With O(state=resumed), return only when every resumed node answers again (Slurm marks a resumed node
        NOT_RESPONDING until its slurmd answers the next ping).
      - The task fails if that does not happen within O(timeout). Nodes skipped as someone else's and FUTURE nodes
        are not waited for. Ignored with O(state=undrained) and in check mode.
    type: bool
    default: false
  timeout:
    description:
      - Seconds O(wait) waits.
    type: int
    default: 600
    aliases: [wait_timeout]
  wait_sleep:
    description:
      - Seconds between two state reads while waiting.
    type: float
    default: 2.0
notes:
  - A drain with a different reason on a node we drained already updates its reason (and counts as a change).
  - Slurm 22.05 exits 1 from C(RESUME)/C(UNDRAIN) of a node whose slurmd never registered (state UNKNOWN) although it
    clears the drain; the module trusts the state it reads back, and warns.
seealso:
  - module: soperator.slurm.slurm_node_info
"""

EXAMPLES = r"""
- name: Drain two GPU nodes for a firmware update and wait until their jobs are gone
  soperator.slurm.slurm_drain:
    nodes: gpu-[3,7]
    reason: firmware update
    wait: true
    timeout: 3600

- name: Put them back in service
  soperator.slurm.slurm_drain:
    nodes: gpu-[3,7]
    state: resumed

- name: Drain through the controller pod of the cluster "demo" in namespace "slurm"
  soperator.slurm.slurm_drain:
    transport: kubernetes
    namespace: slurm
    cluster_name: demo
    kubeconfig: ~/.kube/config
    nodes:
      - cpu-0
      - gpu-[0-1]
    reason: scale-down

- name: Take over a drain someone else set (their reason lacks "soperator:")
  soperator.slurm.slurm_drain:
    nodes: cpu-4
    reason: replaced after hw failure
    force: true

- name: Against the local backend's cluster
  soperator.slurm.slurm_drain:
    nodes: cpu-[0-999]
    reason: test
    slurm_conf: /var/lib/soperator/demo/etc/slurm/slurm.conf
"""

RETURN = r"""
nodes:
  description: Every requested node, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Slurm node name.
      type: str
      sample: gpu-3
    action:
      description: What was done (or would be in check mode).
      type: str
      sample: drain
      choices: [drain, resume, undrain, none, skipped]
    before:
      description: State before; C(state) as sinfo names it (IDLE, MIXED, ALLOCATED, DRAINING, DRAINED, DOWN,
        FUTURE, ...), C(flags) the raw Slurm state flags, C(reason) the node's reason.
      type: dict
      sample: {"state": "MIXED", "flags": [], "reason": ""}
    after:
      description: State read back from slurmctld after the change (predicted in check mode).
      type: dict
      sample: {"state": "DRAINING", "flags": ["DRAIN"], "reason": "soperator: firmware update"}
skipped_nodes:
  description: Nodes left alone because someone else holds them (reason without O(reason_prefix)).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "gpu-7", "state": "DRAINED", "reason": "hw: bad dimm",
            "why": "held by someone else (DRAINED): its reason lacks 'soperator:'; force=true overrides"}]
commands:
  description: The C(scontrol update) commands run, or that would run in check mode.
  returned: always
  type: list
  elements: str
  sample: ["scontrol update 'NodeName=gpu-[3,7]' State=DRAIN 'Reason=soperator: firmware update'"]
queries:
  description: The read-only commands run (C(sinfo --json), C(scontrol --future show node)).
  returned: always
  type: list
  elements: str
  sample: ["sinfo --json", "scontrol --oneliner --future show node 'gpu-[3,7]'"]
reason:
  description: The full drain reason set (with the prefix); null unless O(state=drained).
  returned: always
  type: str
  sample: "soperator: firmware update"
diff:
  description: Before and after, one line per changed node.
  returned: success
  type: dict
  sample: {"before": "gpu-3: MIXED\n", "after": "gpu-3: DRAINING (soperator: firmware update)\n"}
transport:
  description: Where the commands ran.
  returned: always
  type: dict
  sample: {"transport": "kubernetes", "namespace": "slurm", "pod": "demo-controller-0", "container": "slurmctld"}
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    DEFAULT_REASON_PREFIX, STATES, check_nodes_option, set_state)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError

OPTIONS = dict(
    nodes=dict(type="raw", required=True),
    state=dict(type="str", choices=list(STATES), default="drained"),
    reason=dict(type="str"),
    reason_prefix=dict(type="str", default=DEFAULT_REASON_PREFIX),
    force=dict(type="bool", default=False),
    wait=dict(type="bool", default=False),
    timeout=dict(type="int", default=600, aliases=["wait_timeout"]),
    wait_sleep=dict(type="float", default=2.0),
)
SHARED = (args.SLURM_CONNECTION_SPEC, args.AUTH_ARG_SPEC)


def argument_spec():
    return args.merged_spec(OPTIONS, *SHARED)


def run_module(params, check_mode=False, sleep=None):
    """The module without AnsibleModule: (ok, result). Used by main() and by the benchmark."""
    result = {"changed": False, "nodes": [], "skipped_nodes": [], "commands": [], "queries": []}
    runner = None
    try:
        runner = args.runner_from_params(params, sleep=sleep)
        result["transport"] = runner.describe()
        nodes = params["nodes"]
        check_nodes_option(nodes)
        kwargs = {}
        if sleep is not None:
            kwargs["sleep"] = sleep
        result.update(set_state(
            runner, nodes, params["state"], reason=params.get("reason"), prefix=params["reason_prefix"],
            force=params["force"], wait=params["wait"], timeout=params["timeout"], wait_sleep=params["wait_sleep"],
            check_mode=check_mode, **kwargs))
        return True, result
    except SlurmError as e:
        partial = e.details.get("result") or {}
        result.update(partial)
        result["msg"] = e.msg
        if runner is not None:
            result["queries"] = [r.cmd for r in runner.history if r.argv[:2] != ["scontrol", "update"]]
            result["commands"] = [r.cmd for r in runner.history if r.argv[:2] == ["scontrol", "update"]]
        return False, result


def _run(module):
    ok, result = run_module(module.params, check_mode=module.check_mode)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if not ok:
        # Updates that ran (or may have: the controller stopped answering) before the failure count as a change.
        result["changed"] = bool(result.get("commands")) and not module.check_mode
        raise SoperatorError(result.pop("msg"), **result)
    return result


def main():
    module = SoperatorModule(
        OPTIONS, shared=SHARED, uses_kubernetes=lambda p: p["transport"] == "kubernetes",
        required_if=[("state", "drained", ("reason",))] + args.SLURM_CONNECTION_REQUIRED_IF,
        supports_check_mode=True,
    )
    module.run(_run)


if __name__ == "__main__":
    main()
