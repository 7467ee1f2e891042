#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_nodeset
short_description: Add, change, scale or remove one NodeSet of a Slurm cluster on Kubernetes
version_added: 0.1.0
description:
  - Manages one NodeSet (a group of identical Slurm worker nodes) of a SlurmCluster that
    M(soperator.slurm.slurm_cluster) deployed - its C(NodeSet) custom resource, its worker StatefulSet and its
    PodDisruptionBudget - and the cluster-wide objects that name its nodes (the Slurm configs ConfigMap, and the
    controller when node definitions change).
  - The SlurmCluster and the other NodeSets are read from the API server, so slurm.conf always lists every NodeSet.
  - New nodes join without a slurmctld restart - Slurm nodes are defined up to C(maxReplicas) as FUTURE nodes and a
    worker pod registers itself when its slurmd starts. Raising C(maxReplicas) changes the node definitions and rolls
    the controller.
  - Scale-down is safe - the highest ordinals are drained with the cluster's drain reason prefix, waited for until
    they run no job (O(drain_timeout), or not at all with O(force=true)), taken out of Slurm, and only then is the
    StatefulSet shrunk. At the timeout the task fails, the nodes stay drained and nothing else changes.
  - With O(state=absent), all of the NodeSet's nodes are removed that way, then its objects are deleted.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details:
      - Every write is sent as a server-side dry run; RV(objects) lists what would change and RV(actions) which nodes
        would be drained and removed.
  diff_mode:
    support: full
    details:
      - The before and after of every object that changes, as YAML.
options:
  state:
    description:
      - V(present) creates or updates the NodeSet; V(absent) removes its nodes safely and deletes it.
    type: str
    choices: [present, absent]
    default: present
  name:
    description:
      - Name of the NodeSet. Required unless O(definition) or O(src) gives it.
    type: str
  namespace:
    description:
      - Namespace of the cluster. Defaults to the namespace of O(definition) or O(src).
    type: str
  cluster_name:
    description:
      - Name of the SlurmCluster. Defaults to C(spec.clusterName) of O(definition) or O(src).
    type: str
  definition:
    description:
      - The NodeSet document (a dict or YAML text). Without it, the NodeSet as it is in the cluster is used.
      - Mutually exclusive with O(src).
    type: raw
  src:
    description:
      - Path of a YAML file holding the NodeSet document.
      - Read as UTF-8 only (a file in UTF-16 or another encoding is refused, naming it). Each document may nest
        at most 64 levels and expand to at most 1.5 MiB (what YAML aliases repeat counted each time).
    type: path
  replicas:
    description:
      - Number of workers; overrides C(spec.replicas) of the definition (or of the NodeSet in the cluster). Must
        not exceed C(maxReplicas).
    type: int
  wait_timeout:
    description:
      - With O(wait=true), the longest wait in seconds for the NodeSet's workers to become ready, and for each step
        of a staggered scale-up (RV(scale_up), C(spec.workers.maxStartingPods) of the SlurmCluster).
      - Also the longest wait for a changed slurm.conf to reach the controller pod before C(scontrol reconfigure)
        (see O(reconfigure)).
    type: int
    default: 300
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.kube_target
  - soperator.slurm.kube_target.api
  - kubernetes.core.k8s_auth_options
seealso:
  - module: soperator.slurm.slurm_cluster
  - module: soperator.slurm.slurm_drain
"""

EXAMPLES = r"""
- name: Scale the gpu NodeSet to 8 workers (removed workers are drained and waited for first)
  soperator.slurm.slurm_nodeset:
    name: gpu
    namespace: slurm
    cluster_name: demo
    replicas: 8
    wait: true

- name: See which nodes a scale-down would drain, changing nothing
  soperator.slurm.slurm_nodeset:
    name: gpu
    namespace: slurm
    cluster_name: demo
    replicas: 2
  check_mode: true

- name: Add a NodeSet
  soperator.slurm.slurm_nodeset:
    definition:
      apiVersion: slurm.soperator.dev/v1alpha1
      kind: NodeSet
      metadata: {name: cpu, namespace: slurm}
      spec:
        clusterName: demo
        replicas: 4
        maxReplicas: 16
        resources: {cpu: "32", memory: 128Gi}

- name: Remove it (its nodes are drained, waited for at most an hour, and removed from Slurm first)
  soperator.slurm.slurm_nodeset:
    state: absent
    name: cpu
    namespace: slurm
    cluster_name: demo
    drain_timeout: 3600
"""

RETURN = r"""
objects:
  description:
    - The objects of the NodeSet and what was done to each - created, updated, unchanged, pruned or recreated (see
      O(recreate_statefulsets)).
  returned: always
  type: list
  elements: dict
  sample: [{kind: StatefulSet, namespace: slurm, name: gpu, action: updated}]
actions:
  description: What was done in Slurm (nodes drained, waited for, removed; C(scontrol reconfigure)); in check mode
    what would be done.
  returned: always
  type: list
  elements: str
  sample: ["drained gpu-[6-7]", "waited 40s until gpu-[6-7] ran no job", "removed gpu-[6-7] from Slurm (state FUTURE)"]
upgrade:
  description:
    - The Slurm version change of this run (the NodeSet's workers against the cluster's other daemons), done in Slurm's
      order, as RV(soperator.slurm.slurm_cluster#module:upgrade) describes it (C(versions), C(phases), C(backup));
      V(null) when no daemon's Slurm version changes (a re-run after an upgrade - no new dump).
  returned: always
  type: dict
  sample: {versions: {slurmd/cpu: "25.11.2 -> 26.05.5"},
           phases: [{phase: slurmd and login, status: applied, objects: [cpu]}]}
rollout:
  description:
    - The Slurm-aware rolling upgrade of this NodeSet's workers when its pod template changed and its
      C(spec.updateStrategy.type) is C(slurmAware), as RV(soperator.slurm.slurm_cluster#module:rollout) describes
      it - one entry per node (C(node), C(node_set), C(batch), C(step), C(reason), C(steps)).
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-1, node_set: gpu, batch: 1, step: resumed, reason: "checks pass after the replacement",
            steps: [drained, replaced, rechecked, resumed]}]
scale_up:
  description:
    - With O(wait=true), the worker StatefulSets this run raised in steps so that at most
      C(spec.workers.maxStartingPods) worker pods of the cluster (all NodeSets) were asked for and not Ready at once;
      V(null) when the room held the whole scale-up (one apply, as without a bound), with O(wait=false) (the replicas
      are applied at once) and with a bound of 0.
    - C(targets) the replicas wanted per StatefulSet, C(steps) the replicas each step set (in check mode the steps
      the real run would take if each step became Ready before the next; the diff shows the final replicas),
      C(step_count) how many. Each step after the first waits (up to O(wait_timeout)) until the step's pods are
      Ready; a timed-out run leaves the replicas of its last step, and a re-run continues from them.
  returned: always
  type: dict
  sample: {max_starting_pods: 100, targets: {gpu: 250}, steps: [{gpu: 100}, {gpu: 200}, {gpu: 250}], step_count: 3}
reservations:
  description:
    - With C(spec.updateStrategy.type=scheduled), what became of this NodeSet's maintenance reservation, as
      RV(soperator.slurm.slurm_cluster#module:reservations) describes it.
  returned: always
  type: list
  elements: dict
  sample: [{node_set: gpu, reservation: soperator-upgrade-gpu, action: removed, nodes: "",
            window: {start: "2026-11-28T02:00:00Z", end: "2026-11-28T06:00:00Z"},
            commands: ["scontrol delete reservation soperator-upgrade-gpu"]}]
node_set:
  description: The NodeSet after the run.
  returned: always
  type: dict
  sample: {name: gpu, replicas: 8, max_replicas: 16, nodes: "gpu-[0-15]"}
waited:
  description: With O(wait=true), what was waited for and how long (seconds).
  returned: always
  type: list
  elements: dict
status_updated:
  description: Whether the NodeSet's C(.status) was written (not counted as C(changed)).
  returned: always
  type: bool
requests:
  description: API requests made - reads, writes, and dry-run writes.
  returned: always
  type: dict
errors:
  description: When the resulting cluster spec is invalid, every problem found, each with its field path.
  returned: failure
  type: list
  elements: dict
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils import module_support as ms
from ansible_collections.soperator.slurm.plugins.module_utils.kube import module as km
from ansible_collections.soperator.slurm.plugins.module_utils.kube import nodeset
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule

OPTIONS = dict(
    state=dict(type="str", choices=["present", "absent"], default="present"),
    name=dict(type="str"),
    namespace=dict(type="str"),
    cluster_name=dict(type="str"),
    replicas=dict(type="int"),
    wait_timeout=dict(type="int", default=300),
)


def _run(module):
    ms.require_yaml()
    args.require_positive(module.params, "wait_timeout", "drain_timeout", "api_timeout", "wait_sleep")
    args.require_non_negative(module.params, "rollout_timeout")
    change = nodeset.prepare(module.params, km.make_client)
    # The NodeSet CR may lack our labels (created by hand); it is ours to update or delete all the same.
    extra_live = [change.current] if change.current is not None else []
    return km.result_of(
        module, lambda: km.make_cluster(module, change.model, change.client),
        lambda kc: kc.present(desired_filter=change.affected, prune_filter=change.ours, extra_live=extra_live),
        {"node_set": change.summary})


def main():
    module = SoperatorModule(
        OPTIONS, shared=(args.SPEC_SOURCE_SPEC, args.KUBE_TARGET_SPEC, args.KUBE_API_SPEC, args.AUTH_ARG_SPEC),
        uses_kubernetes=lambda p: True, mutually_exclusive=[("definition", "src")], supports_check_mode=True)
    module.run(_run)


if __name__ == "__main__":
    main()
