#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_token
short_description: Get a user's JSON Web Token for Slurm's REST API
version_added: 0.1.0
description:
  - Runs C(scontrol token username=<user> lifespan=<seconds>) as root or SlurmUser (on the managed host, or in the
    controller pod) and returns the token, for the C(X-SLURM-USER-NAME) / C(X-SLURM-USER-TOKEN) headers of
    slurmrestd (spec.rest of the SlurmCluster).
  - The lifespan is checked against the C(max_token_lifespan) slurmctld runs with (spec.rest.maxTokenLifespan)
    before a token is asked for (slurmctld itself does not bound the tokens SlurmUser asks for other users).
  - A cluster that does not accept tokens (no C(AuthAltTypes=auth/jwt)) fails the task.
  - The token is a secret, so give the task C(no_log) (as the examples do). The signing key is never read.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details: Reads the cluster's token settings and checks the request; asks for no token (RV(token) is null).
  diff_mode:
    support: none
    details: Changes nothing on the cluster (slurmctld keeps no record of the tokens it signs).
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.slurm_connection
  - kubernetes.core.k8s_auth_options
options:
  user:
    description:
      - The user the token is for (the token's C(sun) claim; Slurm runs the requests as this user).
    type: str
    required: true
  lifespan:
    description:
      - Seconds the token is valid, at most the cluster's spec.rest.maxTokenLifespan.
    type: int
    default: 1800
seealso:
  - module: soperator.slurm.slurm_cluster
"""

EXAMPLES = r"""
- name: A token for alice, valid 30 minutes
  soperator.slurm.slurm_token:
    user: alice
    lifespan: 1800
  register: alice_token
  no_log: true

- name: Her jobs, over REST
  ansible.builtin.uri:
    url: http://127.0.0.1:6820/slurm/v0.0.38/jobs
    headers:
      X-SLURM-USER-NAME: alice
      X-SLURM-USER-TOKEN: "{{ alice_token.token }}"
  no_log: true

- name: A token through the controller pod of the cluster "demo"
  soperator.slurm.slurm_token:
    transport: kubernetes
    namespace: slurm
    cluster_name: demo
    user: ci-bot
    lifespan: 600
  register: bot_token
  no_log: true
"""

RETURN = r"""
token:
  description: The token (null in check mode). A secret.
  returned: always
  type: str
user:
  description: The user it is for.
  returned: always
  type: str
  sample: alice
lifespan:
  description: Seconds it is valid from now.
  returned: always
  type: int
  sample: 1800
max_lifespan:
  description: The cluster's max_token_lifespan (null when it sets none).
  returned: always
  type: int
  sample: 3600
queries:
  description: The Slurm commands that ran (argv only).
  returned: always
  type: list
  elements: str
transport:
  description: How Slurm was reached.
  returned: always
  type: dict
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import tokens
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError

OPTIONS = dict(
    user=dict(type="str", required=True),
    lifespan=dict(type="int", default=1800),
)


def _run(module):
    params = module.params
    runner = None
    try:
        tokens.check_request(params["user"], params["lifespan"])
        runner = args.runner_from_params(params)
        if module.check_mode:
            got = tokens.check_lifespan(runner, params["lifespan"])
        else:
            got = tokens.issue_token(runner, params["user"], params["lifespan"])
    except SlurmError as e:     # with the queries that ran
        raise SoperatorError(e.msg, queries=runner.commands if runner else [],
                             transport=runner.describe() if runner else {})
    return dict(changed=False, token=got.get("token"), user=params["user"], lifespan=params["lifespan"],
                max_lifespan=got["max_lifespan"], queries=runner.commands, transport=runner.describe())


def main():
    module = SoperatorModule(OPTIONS, shared=(args.SLURM_CONNECTION_SPEC, args.AUTH_ARG_SPEC),
                             uses_kubernetes=lambda p: p["transport"] == "kubernetes",
                             required_if=args.SLURM_CONNECTION_REQUIRED_IF, supports_check_mode=True)
    module.run(_run)


if __name__ == "__main__":
    main()
