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
    description:
      - Every write is sent as a server-side dry run; RV(objects) lists what would change and RV(actions) which nodes
        would be drained and removed.
  diff_mode:
    support: full
    description:
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
    type: path
  replicas:
    description:
      - Number of workers; overrides C(spec.replicas) of the definition (or of the NodeSet in the cluster). Must
        not exceed C(maxReplicas).
    type: int
  wait_timeout:
    description:
      - With O(wait=true), the longest wait in seconds for the NodeSet's workers to become ready.
      - Also the longest wait for a changed slurm.conf to reach the controller pod before C(scontrol reconfigure)
        (see O(reconfigure)).
    type: int
    default: 300
extends_documentation_fragment:
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

import copy

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.soperator.slurm.plugins.module_utils.args import fail_spec_error, require_positive
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import module as km
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.kube.apply import APPLIED_ANNOTATION
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import SpecError, build_model, documents_from
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import HAS_YAML

_OUR_LABELS = (c.LABEL_MANAGED_BY, c.LABEL_INSTANCE, c.LABEL_COMPONENT, c.LABEL_NAME, c.LABEL_NODESET)


def _definition(module):
    params = module.params
    if not params["src"] and params["definition"] is None:
        return None
    try:
        docs = documents_from(params["src"], params["definition"])
    except (IOError, OSError) as e:
        module.fail_json(msg="cannot read src %s: %s" % (params["src"], e))
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "NodeSet":
        module.fail_json(msg="definition/src must hold exactly one NodeSet document")
    return copy.deepcopy(docs[0])


def _as_spec_document(obj):
    """A live custom resource as a spec document: what the user wrote, without server bookkeeping or our labels."""
    meta = obj.get("metadata") or {}
    out_meta = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    user_labels = dict((k, v) for k, v in (meta.get("labels") or {}).items() if k not in _OUR_LABELS)
    if user_labels:
        out_meta["labels"] = user_labels
    annotations = dict((k, v) for k, v in (meta.get("annotations") or {}).items()
                       if k != APPLIED_ANNOTATION and not k.startswith("kubectl.kubernetes.io/"))
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": out_meta,
            "spec": copy.deepcopy(obj.get("spec") or {})}


def _identity(module, definition):
    params = module.params
    meta = (definition or {}).get("metadata") or {}
    name = params["name"] or meta.get("name")
    namespace = params["namespace"] or meta.get("namespace")
    cluster = params["cluster_name"] or ((definition or {}).get("spec") or {}).get("clusterName")
    missing = [what for what, value in (("name", name), ("namespace", namespace), ("cluster_name", cluster))
               if not value]
    if missing:
        module.fail_json(msg="missing %s: give the option(s) or a definition that has them" % ", ".join(missing))
    if definition is not None:
        for what, given, found in (("name", params["name"], meta.get("name")),
                                   ("namespace", params["namespace"], meta.get("namespace"))):
            if given and found and given != found:
                module.fail_json(msg="%s %r differs from the definition's %r" % (what, given, found))
    return name, namespace, cluster


def _model(module, client, name, namespace, cluster_name, definition):
    cluster = client.get("SlurmCluster", cluster_name, namespace)
    if cluster is None:
        module.fail_json(msg="SlurmCluster %s/%s does not exist: deploy it with soperator.slurm.slurm_cluster first"
                         % (namespace, cluster_name))
    docs = [_as_spec_document(cluster)]
    current = None
    for obj in client.list("NodeSet", namespace):
        if (obj.get("spec") or {}).get("clusterName") != cluster_name:
            continue
        if obj["metadata"]["name"] == name:
            current = obj
            continue
        docs.append(_as_spec_document(obj))
    params = module.params
    if params["state"] == "present":
        mine = definition if definition is not None else (_as_spec_document(current) if current else None)
        if mine is None:
            module.fail_json(msg="NodeSet %s/%s does not exist: give its definition (or src) to create it"
                             % (namespace, name))
        mine.setdefault("metadata", {}).setdefault("namespace", namespace)
        mine["metadata"]["name"] = name
        mine.setdefault("spec", {})["clusterName"] = cluster_name
        if params["replicas"] is not None:
            mine["spec"]["replicas"] = params["replicas"]
        docs.append(mine)
    try:
        return build_model(docs), current
    except SpecError as e:
        fail_spec_error(module, e)


def main():
    argument_spec = dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        name=dict(type="str"),
        namespace=dict(type="str"),
        cluster_name=dict(type="str"),
        definition=dict(type="raw"),
        src=dict(type="path"),
        replicas=dict(type="int"),
        wait_timeout=dict(type="int", default=300),
    )
    argument_spec.update(km.kube_target_argument_spec())
    module = AnsibleModule(argument_spec=argument_spec, mutually_exclusive=[("definition", "src")],
                           supports_check_mode=True)
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"))
    params = module.params
    require_positive(module, "wait_timeout", "drain_timeout", "api_timeout", "wait_sleep")
    if params["replicas"] is not None and params["replicas"] < 0:
        module.fail_json(msg="replicas must be >= 0, got %d" % params["replicas"])
    try:
        definition = _definition(module)
    except SpecError as e:
        module.fail_json(msg=str(e))
    name, namespace, cluster_name = _identity(module, definition)
    try:
        client = km.make_client(params)
        model, current = _model(module, client, name, namespace, cluster_name, definition)
    except km.KubeError as e:
        module.fail_json(msg=str(e))
    cluster = km.make_cluster(module, model, client)
    slurm_configs = names.slurm_configs_name(model)
    controller = names.controller_name(model)

    def ours(obj):
        meta = obj.get("metadata") or {}
        return (meta.get("labels") or {}).get(c.LABEL_NODESET) == name or \
            (obj.get("kind") == "NodeSet" and meta.get("name") == name)

    def affected(obj):
        """This NodeSet's objects and the cluster-wide ones that name its nodes."""
        kind, obj_name = obj.get("kind"), (obj.get("metadata") or {}).get("name")
        return ours(obj) or (kind, obj_name) in (("ConfigMap", slurm_configs), ("StatefulSet", controller))

    extra = {}
    # The NodeSet CR may lack our labels (created by hand); it is ours to update or delete all the same.
    extra_live = [current] if current is not None else []
    if params["state"] == "present":
        node_set = model.node_set(name)
        extra["node_set"] = {"name": node_set.name, "replicas": node_set.replicas,
                             "max_replicas": node_set.max_replicas, "nodes": node_set.node_range}
        km.run(module, cluster, lambda kc: kc.present(desired_filter=affected, prune_filter=ours,
                                                      extra_live=extra_live), extra)
    extra["node_set"] = {"name": name, "replicas": 0, "max_replicas": 0, "nodes": None}
    km.run(module, cluster, lambda kc: kc.present(desired_filter=affected, prune_filter=ours, extra_live=extra_live),
           extra)


if __name__ == "__main__":
    main()
