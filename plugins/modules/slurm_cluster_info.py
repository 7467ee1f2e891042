#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_cluster_info
short_description: Read a SlurmCluster and its NodeSets from Kubernetes, as a definition for slurm_cluster
version_added: 0.1.0
description:
  - Reads the SlurmCluster O(name) in O(namespace) and every NodeSet of that namespace whose C(spec.clusterName) is
    O(name), and returns them in RV(definition) - the documents M(soperator.slurm.slurm_cluster) and
    M(soperator.slurm.slurm_remediate) take, without status and server bookkeeping. So C(kubectl edit slurmcluster)
    is picked up by the next remediation run.
  - Two requests (a get and a namespaced list); no API discovery, no cluster-scoped read.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
    details: Reads only; there is nothing to show a difference of.
extends_documentation_fragment:
  - soperator.slurm.attributes
  - kubernetes.core.k8s_auth_options
  - soperator.slurm.kube_target.api
options:
  name:
    description: Name of the SlurmCluster.
    type: str
    required: true
  namespace:
    description: Its namespace.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the cluster
  soperator.slurm.slurm_cluster_info:
    name: demo
    namespace: slurm
  register: demo

- name: Reconcile it as it is specified in the cluster
  soperator.slurm.slurm_cluster:
    state: present
    target: kubernetes
    definition: "{{ demo.definition }}"
"""

RETURN = r"""
definition:
  description: The SlurmCluster first, then its NodeSets by name - apiVersion, kind, metadata (name, namespace,
    your labels and annotations, without those the collection and kubectl add) and spec.
  returned: always
  type: list
  elements: dict
node_sets:
  description: Names of the NodeSets found.
  returned: always
  type: list
  elements: str
  sample: [cpu, gpu]
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.kube import live
from ansible_collections.soperator.slurm.plugins.module_utils.kube import module as km
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule

OPTIONS = dict(name=dict(type="str", required=True), namespace=dict(type="str", required=True))


def _run(module):
    params = module.params
    cluster, node_sets = live.read_cluster(km.make_client(params), params["name"], params["namespace"])
    if cluster is None:
        raise SoperatorError("SlurmCluster %s/%s does not exist" % (params["namespace"], params["name"]))
    node_sets.sort(key=lambda o: o["metadata"]["name"])
    return dict(changed=False, definition=[live.spec_document(o) for o in [cluster] + node_sets],
                node_sets=[o["metadata"]["name"] for o in node_sets])


def main():
    module = SoperatorModule(OPTIONS, shared=(args.KUBE_API_SPEC, args.AUTH_ARG_SPEC),
                             uses_kubernetes=lambda p: True, supports_check_mode=True)
    module.run(_run)


if __name__ == "__main__":
    main()
