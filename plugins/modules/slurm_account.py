#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_account
short_description: Slurm accounts as declared (a tree, fairshare, limits, QOS), through sacctmgr
version_added: 0.2.0
description:
  - Makes Slurm's accounts and their associations in the cluster hold what O(accounts) (or
    C(spec.accounting.accounts) of a spec) declares, with C(sacctmgr), on the local host or in the controller pod.
    Parents are added before their children; QOS named must exist (M(soperator.slurm.slurm_qos) first).
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads the accounts and returns the C(sacctmgr) commands the same plan would run, changing nothing.
  diff_mode:
    support: full
    details: 'One line per account changed, C(account <name>: <field>=<value> ...), before and after.'
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.accounting_policy
  - soperator.slurm.slurm_connection
  - kubernetes.core.k8s_auth_options
options:
  accounts:
    description:
      - The accounts, each a dict with C(name) (required), C(parent) (default V(root)), C(description),
        C(fairshare), C(qos) (a list of QOS names), C(defaultQos) and C(limits) (C(GrpTRES), C(GrpJobs),
        C(GrpSubmitJobs), C(MaxJobs), C(MaxSubmitJobs), C(MaxWall) in minutes or C([days-]hours:minutes),
        C(MaxTRESPerJob)), as in C(spec.accounting.accounts).
      - Mutually exclusive with O(src) and O(definition).
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Two groups sharing the cluster 1:3, one capped at 64 CPUs
  soperator.slurm.slurm_account:
    accounts:
      - name: physics
        fairshare: 1
        limits: {GrpTRES: "cpu=64", MaxJobs: 20}
      - name: chemistry
        fairshare: 3
    slurm_conf: /var/lib/soperator/demo/etc/slurm.conf

- name: Remove the accounts we created that the spec no longer has (refused while they have jobs)
  soperator.slurm.slurm_account:
    src: /srv/slurm/demo.yml   # its SlurmCluster has spec.accounting
    purge: true
"""

RETURN = r"""
commands:
  description: The modifying C(sacctmgr) commands run, or that would run in check mode. Empty when nothing differs.
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i add account physics cluster=demo 'description=soperator: physics' parent=root fairshare=1"]
queries:
  description: The read-only commands run (C(sacctmgr -n -P show ...), C(squeue) for purge).
  returned: always
  type: list
  elements: str
items:
  description: One entry per account declared or purged, with what is done to it and each changed field.
  returned: success
  type: list
  elements: dict
  sample: [{"kind": "account", "name": "physics", "action": "modify", "changes": {"fairshare": {"before": "1", "after": "3"}}}]
cluster:
  description: The Slurm cluster of the associations.
  returned: success
  type: str
diff:
  description: Before and after, one line per changed account.
  returned: when diff mode is on
  type: dict
transport:
  description: Where the commands ran.
  returned: always
  type: dict
errors:
  description: Each invalid field with its path (C(accounts[1].limits.GrpTRES)); nothing ran.
  returned: when an entry is invalid
  type: list
  elements: dict
"""

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import accounting_setup


def main():
    accounting_setup.main("accounts")


if __name__ == "__main__":
    main()
