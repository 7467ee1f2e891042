#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_qos
short_description: Slurm QOS as declared (priority, preemption, limits), through sacctmgr
version_added: 0.2.0
description:
  - Makes Slurm's QOS hold what O(qos) (or C(spec.accounting.qos) of a spec) declares, with C(sacctmgr), on the
    local host or in the controller pod. QOS that preempt each other are added first and linked after.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads the QOS and returns the C(sacctmgr) commands the same plan would run, changing nothing.
  diff_mode:
    support: full
    details: 'One line per QOS changed, C(qos <name>: <field>=<value> ...), before and after.'
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.accounting_policy
  - soperator.slurm.slurm_connection
  - kubernetes.core.k8s_auth_options
options:
  qos:
    description:
      - The QOS, each a dict with C(name) (required), C(description), C(priority), C(preempt) (a list of QOS names),
        C(preemptMode) (V(cluster), V(cancel), V(requeue)) and C(limits) (C(GrpTRES), C(GrpJobs),
        C(GrpSubmitJobs), C(MaxTRESPerUser), C(MaxJobsPerUser), C(MaxSubmitJobsPerUser), C(MaxWall) in minutes or
        C([days-]hours:minutes), C(MaxTRESPerJob)), as in C(spec.accounting.qos).
      - Mutually exclusive with O(src) and O(definition).
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: A high-priority QOS that requeues jobs of the default one
  soperator.slurm.slurm_qos:
    qos:
      - name: high
        priority: 1000
        preempt: [normal]
        preemptMode: requeue
        limits: {MaxTRESPerUser: "cpu=64", MaxWall: "1-00:00"}
    slurm_conf: /var/lib/soperator/demo/etc/slurm.conf

- name: The QOS of a spec, in the controller pod
  soperator.slurm.slurm_qos:
    src: /srv/slurm/demo.yml   # its SlurmCluster has spec.accounting
    transport: kubernetes
    namespace: slurm
    cluster_name: demo
"""

RETURN = r"""
commands:
  description: The modifying C(sacctmgr) commands run, or that would run in check mode. Empty when nothing differs.
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i add qos high 'description=soperator: high' priority=1000",
           "sacctmgr -i modify qos where name=high set preempt=normal"]
queries:
  description: The read-only commands run (C(sacctmgr -n -P show ...), C(squeue) for purge).
  returned: always
  type: list
  elements: str
items:
  description: One entry per QOS declared or purged, with what is done to it and each changed field.
  returned: success
  type: list
  elements: dict
  sample: [{"kind": "qos", "name": "high", "action": "modify", "changes": {"priority": {"before": "10", "after": "1000"}}}]
cluster:
  description: The Slurm cluster (null for QOS, which are not per cluster).
  returned: success
  type: str
diff:
  description: Before and after, one line per changed QOS.
  returned: when diff mode is on
  type: dict
transport:
  description: Where the commands ran.
  returned: always
  type: dict
errors:
  description: Each invalid field with its path (C(qos[0].preempt[0])); nothing ran.
  returned: when an entry is invalid
  type: list
  elements: dict
"""

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import accounting_setup


def main():
    accounting_setup.main("qos")


if __name__ == "__main__":
    main()
