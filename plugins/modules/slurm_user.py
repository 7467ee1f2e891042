#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_user
short_description: Slurm users as declared (default account, accounts, admin level), through sacctmgr
version_added: 0.2.0
description:
  - Makes Slurm's users and their associations in the cluster hold what O(users) (or C(spec.accounting.users) of
    a spec) declares, with C(sacctmgr), on the local host or in the controller pod. The accounts named must exist
    (M(soperator.slurm.slurm_account) first). With O(purge), a user's association with an account we created that
    its entry no longer lists is deleted.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads the users and returns the C(sacctmgr) commands the same plan would run, changing nothing.
  diff_mode:
    support: full
    details: 'One line per user changed, C(user <name>: <field>=<value> ...), before and after.'
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.accounting_policy
  - soperator.slurm.slurm_connection
  - kubernetes.core.k8s_auth_options
options:
  users:
    description:
      - The users, each a dict with C(name) (required; the Unix user), C(defaultAccount) (required), C(accounts)
        (default the default account) and C(adminLevel) (V(None), V(Operator), V(Administrator)), as in
        C(spec.accounting.users).
      - Mutually exclusive with O(src) and O(definition).
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Alice charges physics by default, and chemistry too
  soperator.slurm.slurm_user:
    users:
      - name: alice
        defaultAccount: physics
        accounts: [physics, chemistry]
    slurm_conf: /var/lib/soperator/demo/etc/slurm.conf
"""

RETURN = r"""
commands:
  description: The modifying C(sacctmgr) commands run, or that would run in check mode. Empty when nothing differs.
  returned: always
  type: list
  elements: str
  sample: ["sacctmgr -i add user alice cluster=demo account=physics,chemistry defaultaccount=physics"]
queries:
  description: The read-only commands run (C(sacctmgr -n -P show ...), C(squeue) for purge).
  returned: always
  type: list
  elements: str
items:
  description: One entry per user declared, or association purged, with what is done to it and each changed field.
  returned: success
  type: list
  elements: dict
  sample: [{"kind": "user", "name": "alice", "action": "modify", "changes": {"defaultaccount": {"before": "physics", "after": "chemistry"}}}]
cluster:
  description: The Slurm cluster of the associations.
  returned: success
  type: str
diff:
  description: Before and after, one line per changed user.
  returned: when diff mode is on
  type: dict
transport:
  description: Where the commands ran.
  returned: always
  type: dict
errors:
  description: Each invalid field with its path (C(users[0].defaultAccount)); nothing ran.
  returned: when an entry is invalid
  type: list
  elements: dict
"""

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import accounting_setup


def main():
    accounting_setup.main("users")


if __name__ == "__main__":
    main()
