# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What spec.rest (spec/rest.py) puts into slurm.conf and slurmdbd.conf, and slurmrestd's command line.

slurmctld and slurmdbd load auth/jwt beside munge and verify HS256 tokens with the key at target.jwt_key (both must
read the same key; auth/jwt of 22.05 mmaps it as it is). slurmrestd serves the OpenAPI plugins of its Slurm release
(`slurmrestd -s list`) and passes the X-SLURM-USER-* headers of each request on (rest_auth/jwt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import List, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.render.target import SlurmTarget
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import ClusterModel

JWT_AUTH = "auth/jwt"
REST_AUTH = "rest_auth/jwt"
# slurmrestd's environment: with SLURM_JWT set, Slurm's auth layer loads auth/jwt as its AuthType
# (src/common/slurm_auth.c), which passes each request's token on; without it auth/munge refuses the tokens.
REST_ENV = {"SLURM_JWT": "daemon"}
# slurmrestd drops to this user (it refuses root and SlurmUser); Debian and the images have it.
REST_USER = "nobody"


def auth_alt_settings(model: ClusterModel, target: SlurmTarget) -> List[Tuple[str, str]]:
    """AuthAltTypes / AuthAltParameters of slurm.conf and slurmdbd.conf; none when the REST API is off."""
    rest = model.rest_api
    if rest is None:
        return []
    return [("AuthAltTypes", JWT_AUTH),
            ("AuthAltParameters", "jwt_key=%s,max_token_lifespan=%d" % (target.jwt_key, rest.max_token_lifespan))]


def openapi_plugins(slurm_version: Tuple[int, int], accounting: bool) -> List[str]:
    """The OpenAPI plugins slurmrestd of `slurm_version` serves: slurmctld's, and slurmdbd's with accounting (a
    slurmdbd plugin without slurmdbd in slurm.conf is fatal). 22.05 and 23.02 name one plugin per API version (the
    newest of the release: `slurmrestd -s list`); 23.11 on, one per daemon, serving every data parser it ships."""
    version = tuple(slurm_version)
    if version >= (23, 11):
        return ["openapi/slurmctld"] + (["openapi/slurmdbd"] if accounting else [])
    api = "v0.0.39" if version >= (23, 2) else "v0.0.38"
    return ["openapi/%s" % api] + (["openapi/db%s" % api] if accounting else [])


def slurmrestd_argv(slurmrestd: str, listen: str, plugins: List[str], user: Optional[str] = REST_USER) -> List[str]:
    """slurmrestd listening on `listen` (host:port) with JWT authentication only, serving `plugins`
    (openapi_plugins); `user`: drop to this user (None: run as the caller, which must then be neither root nor
    SlurmUser)."""
    argv = [slurmrestd, "-a", REST_AUTH, "-s", ",".join(plugins)]
    if user is not None:
        argv += ["-u", user]
    return argv + [listen]
