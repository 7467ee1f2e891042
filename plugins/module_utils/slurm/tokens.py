# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's JSON Web Token for slurmrestd (spec.rest): `scontrol token username=<user> lifespan=<s>` through the
Slurm runner, as root or SlurmUser (the local process, or exec into the controller pod).

The lifespan is bounded by the max_token_lifespan slurmctld runs with (`scontrol show config`, AuthAltParameters,
rendered from spec.rest.maxTokenLifespan): slurmctld bounds a token a user asks for himself by it, but not one
SlurmUser asks for another user (src/slurmctld/proc_req.c of 22.05), so we check it before asking. A cluster without
auth/jwt is refused before any token is asked for. The token is returned, never put into an error or a command line
we report (the runner's commands hold the argv only).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import Dict, Optional

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmOutputError, SlurmRunner

# A Slurm user name as the token's `sun` claim takes it: one word, no '=' or space that would split the argument.
_USER = re.compile(r"\A[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,254}\Z")
_TOKEN = re.compile(r"^SLURM_JWT=([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)\s*$", re.M)
_CONFIG_LINE = re.compile(r"^(AuthAltTypes|AuthAltParameters)\s*=\s*(.*?)\s*$", re.M)


class TokenError(SoperatorError):
    pass


def jwt_settings(runner: SlurmRunner) -> Dict[str, Optional[str]]:
    """{'types': AuthAltTypes, 'parameters': AuthAltParameters} slurmctld runs with (None: not set)."""
    def parse(result):
        found = dict((m.group(1), m.group(2)) for m in _CONFIG_LINE.finditer(result.stdout))
        if not re.search(r"^ClusterName\s*=", result.stdout, re.M):
            raise SlurmOutputError("scontrol show config printed no ClusterName")
        return dict((key, None if found.get(name) in (None, "", "(null)") else found[name])
                    for key, name in (("types", "AuthAltTypes"), ("parameters", "AuthAltParameters")))
    return runner.run(["scontrol", "show", "config"], parse=parse)[1] or {}


def max_lifespan(parameters: Optional[str]) -> Optional[int]:
    """max_token_lifespan of AuthAltParameters, or None when it sets none."""
    for item in (parameters or "").split(","):
        key, _sep, value = item.strip().partition("=")
        if key.lower() == "max_token_lifespan" and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def check_request(user: str, lifespan: int) -> None:
    """Refuse a user name or lifespan before anything runs."""
    if not isinstance(user, str) or not _USER.match(user):
        raise TokenError("user %r is not a user name scontrol token takes (letters, digits, _ . @ -)" % (user,))
    if not isinstance(lifespan, int) or lifespan < 1:
        raise TokenError("lifespan must be a number of seconds >= 1, got %r" % (lifespan,))


def check_lifespan(runner: SlurmRunner, lifespan: int) -> Dict[str, Optional[int]]:
    """{'max_lifespan'} of a cluster that takes tokens, when `lifespan` is within it. Raises TokenError when the
    cluster does not take tokens or the lifespan is above its max_token_lifespan. Reads only."""
    settings = jwt_settings(runner)
    types = [t.strip() for t in (settings.get("types") or "").split(",")]
    if "auth/jwt" not in types:
        raise TokenError("the cluster does not accept tokens (AuthAltTypes is %r): enable spec.rest"
                         % (settings.get("types") or ""))
    bound = max_lifespan(settings.get("parameters"))
    if bound is not None and lifespan > bound:
        raise TokenError("lifespan %d is above the cluster's max_token_lifespan %d (spec.rest.maxTokenLifespan)"
                         % (lifespan, bound))
    return {"max_lifespan": bound}


def issue_token(runner: SlurmRunner, user: str, lifespan: int) -> Dict[str, object]:
    """A token for `user` valid `lifespan` seconds -> {'token', 'max_lifespan'} (check_lifespan first)."""
    check_request(user, lifespan)
    bound = check_lifespan(runner, lifespan)["max_lifespan"]

    def parse(result):
        m = _TOKEN.search(result.stdout)
        if not m:
            raise SlurmOutputError("scontrol token printed no SLURM_JWT=<token> line")
        return m.group(1)
    token = runner.run(["scontrol", "token", "username=%s" % user, "lifespan=%d" % lifespan], parse=parse)[1]
    return {"token": token, "max_lifespan": bound}
