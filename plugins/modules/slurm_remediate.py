#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_remediate
short_description: Replace, re-check and resume the Slurm nodes this collection drained
version_added: 0.1.0
description:
  - One pass of the remediation loop over every node of a cluster. Safe to run every few minutes; the in-cluster
    remediation CronJob runs it through the C(soperator.slurm.remediate) playbook.
  - A node that is drained (or down) with a reason that lacks O(reason_prefix) belongs to someone else (an admin,
    Slurm itself) and is never touched (V(skipped-foreign)). A node drained by our own scale-down is left to it
    (V(skipped-scale-down)). A node of ours that still runs jobs is left for a later pass (V(skipped-busy)).
  - A node Slurm's power saving has powered down (or is powering up or down, in an ephemeral NodeSet) is never
    replaced (V(skipped-power-saving)); Slurm starts its worker when a job needs it. With O(target=kubernetes) the pod
    of a powered-up node of an ephemeral NodeSet is not replaced either (no StatefulSet would make it again); the
    replacement fails and the node stays drained.
  - A node drained with our prefix and idle is replaced - with O(target=kubernetes) its worker pod (named like the
    node) is deleted so its StatefulSet recreates it, optionally after cordoning the Kubernetes node it ran on; with
    O(target=local) its slurmd is restarted - and the module waits, at most O(register_timeout) seconds, for the
    new slurmd to register. Then the node's checks are run (the health-check program with C(--check-only), in the
    worker pod or, locally, in the node's environment) and the node is resumed only when all of them pass.
  - A node whose slurmd registered after its drain was set was replaced already; it is only re-checked. So a node
    with a lasting fault is replaced once and then stays drained without further changes until its checks pass.
  - The outcome of every node out of service is returned in RV(nodes). With O(target=kubernetes) replacements,
    resumes and nodes left drained after a replacement are also recorded as Kubernetes Events on the SlurmCluster.
  - Every pass (not in check mode) adds what it did to the remediation record the Prometheus exporter reports - with
    O(target=local) the file C(<state_dir>/status/remediation.json), with O(target=kubernetes) the ConfigMap
    C(<name>-remediation-status) - counts of replacements, re-checks and resumes by result, and the time and
    outcome of the last pass. A record that cannot be written fails the task.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads the nodes and reports what would be done. Nodes that would be replaced are not checked (their
      checks run after the replacement); the others are checked (read-only) and reported as would-be resumed or left
      drained. Nothing is deleted, restarted, cordoned, resumed or recorded.
  diff_mode:
    support: full
    details: Shows the state and reason of each node the pass replaces or resumes, before and after.
extends_documentation_fragment:
  - soperator.slurm.attributes
  - kubernetes.core.k8s_auth_options
  - soperator.slurm.kube_target.api
options:
  target:
    description:
      - V(kubernetes) - the cluster runs on the Kubernetes cluster of the kubernetes.core auth options.
      - V(local) - the cluster runs as local processes (the local backend) under O(state_dir).
    type: str
    required: true
    choices: [kubernetes, local]
  definition:
    description:
      - The SlurmCluster and its NodeSets (a list of documents, one document, or multi-document YAML). Gives the
        cluster's name and namespace and its C(spec.remediation) settings. Mutually exclusive with O(src).
    type: raw
  src:
    description:
      - Path of a multi-document YAML file holding the SlurmCluster and its NodeSets.
      - Read as UTF-8 only (a file in UTF-16 or another encoding is refused, naming it). Each document may nest
        at most 64 levels and expand to at most 1.5 MiB (what YAML aliases repeat counted each time).
    type: path
  state_dir:
    description:
      - With O(target=local), the cluster's state directory (default C(~/.local/state/soperator/<cluster name>)).
    type: path
  reason_prefix:
    description:
      - The prefix of our drain reasons. Default - C(spec.remediation.drainReasonPrefix) of the cluster.
    type: str
  replace_drained_nodes:
    description:
      - Replace a node before re-checking it. Default - C(spec.remediation.replaceDrainedNodes). Without it, drained
        nodes are only re-checked and resumed when their checks pass.
    type: bool
  cordon_kubernetes_node:
    description:
      - With O(target=kubernetes), cordon the Kubernetes node a replaced pod ran on, so its replacement lands
        elsewhere. Default - C(spec.remediation.cordonKubernetesNode). Needs the right to patch nodes (the
        ClusterRole the cluster renders when C(cordonKubernetesNode) is set).
    type: bool
  health_check_program:
    description:
      - The health-check program. Default - C(<state_dir>/bin/health-check) with O(target=local), else
        C(/opt/soperator/bin/health-check) (in the worker pod with O(slurm_transport=kubernetes)).
    type: path
  check_timeout:
    description:
      - Seconds the checks of one node may take.
    type: int
    default: 60
  register_timeout:
    description:
      - Seconds to wait for a replaced node - its new pod to be Ready, and its new slurmd to register with
        slurmctld. At the timeout the node stays drained, the pass goes on with the other nodes, and the task fails.
    type: int
    default: 300
  wait_sleep:
    description:
      - Seconds between two reads while waiting.
    type: float
    default: 2.0
  events:
    description:
      - With O(target=kubernetes), record what was done as Events on the SlurmCluster.
    type: bool
    default: true
  slurm_transport:
    description:
      - With O(target=kubernetes), how Slurm commands and the checks run. V(kubernetes) - in the controller pod and
        in each worker pod through the exec API. V(local) - on this host, with O(slurm_conf).
    type: str
    choices: [kubernetes, local]
    default: kubernetes
  slurm_conf:
    description:
      - With O(slurm_transport=local), the C(slurm.conf) the Slurm commands and the checks use.
    type: path
notes:
  - Resumes go through the same rules as M(soperator.slurm.slurm_drain) - a drain without our prefix is never
    cleared.
  - Checks that cannot run (no program, exit code 2, no report) leave the node drained - never resumed on a guess.
seealso:
  - module: soperator.slurm.slurm_drain
  - module: soperator.slurm.slurm_cluster
"""

EXAMPLES = r"""
- name: One remediation pass over a cluster on Kubernetes
  soperator.slurm.slurm_remediate:
    target: kubernetes
    src: examples/gpu-accounting.yml
  register: remediation

- name: What it would do, changing nothing
  soperator.slurm.slurm_remediate:
    target: kubernetes
    src: examples/gpu-accounting.yml
  check_mode: true

- name: Against the local backend's cluster (replace = restart the node's slurmd)
  soperator.slurm.slurm_remediate:
    target: local
    src: examples/small-cpu.yml
    state_dir: /tmp/slurm-small
"""

RETURN = r"""
nodes:
  description: Every node out of service (drained, failed or down) and what the pass did with it.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Slurm node name.
      type: str
      sample: gpu-3
    state:
      description: Its state when the pass began (as sinfo names it).
      type: str
      sample: DRAINED
    reason:
      description: Its reason when the pass began.
      type: str
      sample: "soperator: health:gpu_count 7 of 8 GPUs"
    action:
      description: The outcome.
      type: str
      choices: [replaced, rechecked, resumed, left-drained, skipped-foreign, skipped-busy, skipped-scale-down,
                skipped-power-saving]
      sample: resumed
    steps:
      description: Every step done (or, in check mode, that would be), in order. V(placed) - with
        C(spec.topology.nodeLabels), the replaced worker's new pod runs under another switch, and the topology files
        were rewritten and slurmctld reconfigured before the re-check and the resume.
      type: list
      elements: str
      sample: [replaced, placed, rechecked, resumed]
    why:
      description: Why the node got its outcome.
      type: str
      sample: checks pass after the replacement
    replacement:
      description: What the replacement did - the pod and its new uid (Kubernetes), the old and new slurmd pid
        (local), the Kubernetes node cordoned.
      type: dict
      returned: when the node was replaced
    held:
      description: With C(spec.topology.nodeLabels), the reason a node our health check drained was drained again
        with before its replacement (its new slurmd's health check would resume a C(health:) drain before its new
        place in the topology is known).
      type: str
      returned: when such a node was replaced
      sample: "soperator: replacing (health:gpu_count 7 of 8 GPUs)"
    topology:
      description: With C(spec.topology.nodeLabels) on Kubernetes, the node's place after its replacement - C(switch)
        (the leaf switch or block, V(null) when it is left out of the tree, C(unplaced) saying why), C(changed)
        (whether the topology files were rewritten and slurmctld reconfigured) and C(actions).
      type: dict
      returned: when a node with a topology that follows the pods was restored
      sample: {switch: leaf-2, changed: true, actions: ["updated ConfigMap slurm/demo-slurm-configs (the topology
               files)", "ran scontrol reconfigure (gpu-3 moved to leaf-2)"]}
    checks:
      description: The report of the health-check program (C(healthy), C(failed), C(passed)), or C(error) when it
        could not run.
      type: dict
      returned: when the node was re-checked
changed:
  description: True when a node was replaced or resumed (in check mode - would be).
  returned: always
  type: bool
errors:
  description: Failures of single nodes (a replacement that did not come back in time, an API error). The nodes
    stay drained; the task fails when this is not empty.
  returned: always
  type: list
  elements: str
events:
  description: The Kubernetes Events recorded on the SlurmCluster (C(reason), C(type), C(message)).
  returned: always
  type: list
  elements: dict
  sample: [{"reason": "NodeResumed", "type": "Normal", "message": "gpu-3 passed its checks and is back in service"}]
actions:
  description: The steps this pass took, counted by result - C(replace) (a replacement that registered again),
    C(recheck) (checks that pass), C(resume) (a resume Slurm took) - as added to the remediation record. In
    check mode every count is 0.
  returned: always
  type: dict
  sample: {"replace": {"success": 1, "failure": 0}, "recheck": {"success": 1, "failure": 1},
           "resume": {"success": 1, "failure": 0}}
queries:
  description: The Slurm commands run.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils import module_support as ms
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import remediation_setup as setup

OPTIONS = dict(
    target=dict(type="str", required=True, choices=args.TARGETS),
    state_dir=dict(type="path"),
    reason_prefix=dict(type="str"),
    replace_drained_nodes=dict(type="bool"),
    cordon_kubernetes_node=dict(type="bool"),
    health_check_program=dict(type="path"),
    check_timeout=dict(type="int", default=60),
    register_timeout=dict(type="int", default=300),
    wait_sleep=dict(type="float", default=2.0),
    events=dict(type="bool", default=True),
)
# How the Slurm commands are run, as slurm_cluster's Kubernetes target does.
SLURM_ACCESS = dict((name, args.KUBE_TARGET_SPEC[name]) for name in ("slurm_transport", "slurm_conf"))


def _run(module):
    ms.require_yaml()
    args.require_positive(module.params, "check_timeout", "register_timeout", "api_timeout")
    model = ms.model_from_options(module.params)
    result = setup.remediate(module.params, model, check_mode=module.check_mode)
    if module._diff:
        result["diff"] = setup.diff(result["nodes"])
    if result["errors"]:
        failures = "; ".join(result["errors"])
        raise SoperatorError("remediation of %d node(s) failed: %s" % (len(result["errors"]), failures), **result)
    return result


def main():
    module = SoperatorModule(
        OPTIONS, shared=(args.SPEC_SOURCE_SPEC, SLURM_ACCESS, args.KUBE_API_SPEC, args.AUTH_ARG_SPEC),
        uses_kubernetes=lambda p: p["target"] == "kubernetes", mutually_exclusive=[("definition", "src")],
        required_one_of=[("definition", "src")], supports_check_mode=True)
    module.run(_run)


if __name__ == "__main__":
    main()
