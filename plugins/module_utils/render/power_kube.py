# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes objects of ephemeral NodeSets (spec/ephemeral.py, docs/ephemeral-workers.md): what slurmctld's
power programs (plugins/module_utils/node/power_kube.py, in the controller image) need to create and delete the
worker pods of the nodes Slurm powers up and down. A cluster without an ephemeral NodeSet gets none of this.

- One bare Pod per powered-up node, named as the Slurm node (`gpu-5`), made by the program from a template rendered
  here: the NodeSet's StatefulSet pod template (kube_objects._worker) with `slurmd -b` (its host did not reboot:
  without -b slurmctld waits for a newer boot time until ResumeTimeout), hostname = the node and subdomain = the
  workers' headless Service, so its DNS name is the one a StatefulSet pod of that name would have.
- Its labels are ours (managed-by, instance, component=worker: the workers' Service selects it) but NOT the NodeSet
  label: the StatefulSet's selector has it, and a StatefulSet adopts an orphan pod its selector matches and named
  like its own, then deletes it as an ordinal above replicas. EPHEMERAL_LABEL names the NodeSet instead.
- A ConfigMap with these templates (and the drain reason prefix), mounted read-only into the controller pod.
- A ServiceAccount of their own, the controller pod's only when ephemeral NodeSets exist; its Role: pods create (a
  create cannot be limited by name), get and delete only of the CLOUD nodes' names. Nothing else.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_builders as kb
from ansible_collections.soperator.slurm.plugins.module_utils.render.power_save import ephemeral_node_sets
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import power_name

POWER = "power"                      # the component of these objects
EPHEMERAL_LABEL = "slurm.soperator.dev/ephemeral-nodeset"
# The digest of the template a pod was made from: a pod whose digest is not its NodeSet's current one runs an older
# template (kube/power_roll.py powers its node down once idle, so that the next resume makes it anew).
TEMPLATE_ANNOTATION = "slurm.soperator.dev/pod-template-hash"
POWER_CONFIG_DIR = "/etc/soperator/power"
POWER_CONFIG_FILE = "power.json"


def ephemeral_pod_labels(model, node_set):
    labels = kb.labels(model, kb.WORKER)
    labels[EPHEMERAL_LABEL] = node_set.name
    return labels


def ephemeral_pod(model, worker_stateful_set, node_set):
    """The Pod the resume program creates for a node of `node_set`, from the NodeSet's rendered StatefulSet; the
    program sets metadata.name and spec.hostname to the node's name."""
    template = worker_stateful_set["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    spec["subdomain"] = model.worker_service
    for container in spec["containers"]:
        if container["name"] == "slurmd":
            container["args"] = container["args"][:1] + [c.SLURMD_BOOTED_FLAG] + container["args"][1:]
    metadata = {"namespace": model.namespace, "labels": ephemeral_pod_labels(model, node_set),
                "annotations": dict(template["metadata"].get("annotations") or {})}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    metadata["annotations"][TEMPLATE_ANNOTATION] = template_hash(pod)
    return pod


def template_hash(pod):
    """The digest of an ephemeral pod template: its labels, annotations (but this one) and spec."""
    annotations = dict((k, v) for k, v in (pod["metadata"].get("annotations") or {}).items()
                       if k != TEMPLATE_ANNOTATION)
    text = json.dumps([pod["metadata"].get("labels"), annotations, pod["spec"]], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def power_config(model, worker_stateful_sets):
    """What the power programs read: the reason prefix of the nodes they set DOWN and, per ephemeral NodeSet, its
    CLOUD ordinals and pod template. worker_stateful_sets: NodeSet name -> its rendered StatefulSet."""
    return {
        "reasonPrefix": model.remediation.drain_reason_prefix,
        "nodeSets": dict((ns.name, {"firstOrdinal": ns.first_cloud_ordinal, "endOrdinal": ns.max_replicas,
                                    "pod": ephemeral_pod(model, worker_stateful_sets[ns.name], ns)})
                         for ns in ephemeral_node_sets(model)),
    }


def power_rules(model):
    names = model.cloud_nodes     # what the power ServiceAccount may get and delete pods of
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": names, "verbs": ["get", "delete"]},
    ]


def power_objects(model, worker_stateful_sets):
    """The ServiceAccount, Role, RoleBinding and ConfigMap of the power programs ([] without ephemeral NodeSets)."""
    if not ephemeral_node_sets(model):
        return []
    name = power_name(model)
    text = json.dumps(power_config(model, worker_stateful_sets), indent=1, sort_keys=True) + "\n"
    return [
        kb.obj("ServiceAccount", kb.meta(model, name, POWER), automountServiceAccountToken=False),
        kb.obj("Role", kb.meta(model, name, POWER), rules=power_rules(model)),
        kb.obj("RoleBinding", kb.meta(model, name, POWER),
               subjects=[{"kind": "ServiceAccount", "name": name, "namespace": model.namespace}],
               roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}),
        kb.obj("ConfigMap", kb.meta(model, name, POWER), data={POWER_CONFIG_FILE: text}),
    ]


def give_controller_power(model, controller_stateful_set):
    """The controller pod runs the power programs: with ephemeral NodeSets it runs as the power ServiceAccount
    (with its token) and mounts their config read-only. Unchanged otherwise."""
    if not ephemeral_node_sets(model):
        return controller_stateful_set
    pod = controller_stateful_set["spec"]["template"]["spec"]
    pod["serviceAccountName"] = power_name(model)
    pod["automountServiceAccountToken"] = True
    pod.setdefault("volumes", []).append({"name": "power", "configMap": {"name": power_name(model)}})
    for container in pod["containers"]:
        if container["name"] == "slurmctld":
            container.setdefault("volumeMounts", []).append(kb.mount("power", POWER_CONFIG_DIR, True))
    return controller_stateful_set
