# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster's `spec.rest`: Slurm's REST API (slurmrestd) with JSON Web Tokens (one place for its schema, its
rules across fields and its model).

With `enabled`, slurmctld and slurmdbd accept HS256 tokens signed with one generated key besides munge
(`AuthAltTypes=auth/jwt`, `AuthAltParameters=jwt_key=<key>,max_token_lifespan=<maxTokenLifespan>`; render/rest.py),
and slurmrestd (`-a rest_auth/jwt`) passes each request's X-SLURM-USER-NAME / X-SLURM-USER-TOKEN through to them.
slurmrestd refuses to run as root or as SlurmUser: it runs as an unprivileged user. Tokens come from `scontrol
token` (the slurm_token module). Slurm bounds the lifespan of a token a user asks for himself by
max_token_lifespan, but not one SlurmUser asks for another user (src/slurmctld/proc_req.c of 22.05): the module
bounds those by the same `maxTokenLifespan`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import Bool, Int, Node, Obj

DEFAULT_PORT = 6820                 # slurmrestd's customary port (Slurm's examples and its systemd unit's)
DEFAULT_MAX_TOKEN_LIFESPAN = 3600
DEFAULT_TOKEN_LIFESPAN = 1800       # Slurm's own default lifespan of `scontrol token` (DEFAULT_AUTH_TOKEN_LIFESPAN)
MAX_REPLICAS = 16
INT32_MAX = 2 ** 31 - 1


def rest_schema() -> Node:
    return Obj("Slurm's REST API: slurmrestd, authenticating each request with a JSON Web Token (HS256, one key the "
               "collection generates and keeps; slurmctld and slurmdbd verify it). Get a token with the "
               "slurm_token module.", {
                   "enabled": Bool("Run slurmrestd and accept tokens (AuthAltTypes=auth/jwt).", default=False),
                   "replicas": Int("slurmrestd replicas on Kubernetes (it keeps no state: any may answer); a local "
                                   "cluster runs one.", minimum=1, maximum=MAX_REPLICAS, default=1),
                   "port": Int("Port slurmrestd serves HTTP on (its Service's); a local cluster's slurmrestd "
                               "listens on 127.0.0.1 at a port of its block (status 'rest').",
                               minimum=1, maximum=65535, default=DEFAULT_PORT),
                   "maxTokenLifespan": Int("Longest lifespan of a token in seconds (AuthAltParameters "
                                           "max_token_lifespan; slurm_token refuses a longer one).",
                                           minimum=1, maximum=INT32_MAX, default=DEFAULT_MAX_TOKEN_LIFESPAN),
               })


def rest_model(rest: Dict[str, Any]) -> m.Rest:
    """The model of a validated spec.rest (ClusterModel.rest_api: it when enabled)."""
    return m.Rest(enabled=rest["enabled"], replicas=rest["replicas"], port=rest["port"],
                  max_token_lifespan=rest["maxTokenLifespan"])
