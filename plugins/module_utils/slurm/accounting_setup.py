# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run of slurm_account, slurm_user and slurm_qos (wiring: options -> entries -> runner -> plan).

The entries come from the module's own list option (validated as spec.accounting's entries are, field paths such as
``accounts[1].limits.GrpTRES``) or from a spec (src / definition: its spec.accounting, validated whole). Nothing runs
before they validate.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils import args, module_support
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import accounting_policy
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError
from ansible_collections.soperator.slurm.plugins.module_utils.spec import accounting as spec_accounting

MODELS = {"accounts": spec_accounting.account_model, "users": spec_accounting.user_model,
          "qos": spec_accounting.qos_model}

# The options each of the three modules has beside its list (doc fragment: in each module's DOCUMENTATION).
POLICY_OPTIONS = dict(
    purge=dict(type="bool", default=False),
)
SHARED = (POLICY_OPTIONS, args.SPEC_SOURCE_SPEC, args.SLURM_CONNECTION_SPEC, args.AUTH_ARG_SPEC)


def entries(params: Dict[str, Any], kind: str) -> Tuple[Any, Any]:
    """(model entries, the spec's ClusterModel or None) from the module's list or its spec."""
    if params.get(kind) is not None:
        listed = spec_accounting.module_entries(kind, params[kind])
        return tuple(MODELS[kind](e) for e in listed), None
    module_support.require_yaml()
    model = module_support.model_from_options(params)
    policy = model.accounting.policy
    return {"accounts": policy.accounts, "users": policy.users, "qos": policy.qos}[kind], model


def connection_params(params: Dict[str, Any], model: Any) -> Dict[str, Any]:
    """The connection options, the controller pod's namespace and cluster taken from the spec when not given."""
    params = dict(params)
    if model is not None:
        params["namespace"] = params.get("namespace") or model.namespace
        params["cluster_name"] = params.get("cluster_name") or model.name
    if params["transport"] == "kubernetes" and not (params.get("namespace") and params.get("cluster_name")):
        raise SoperatorError("transport=kubernetes needs namespace and cluster_name (or a spec: src, definition)")
    return params


def run(module: Any, kind: str) -> Dict[str, Any]:
    """The module's result; SoperatorError (with the partial result) when it fails."""
    desired, model = entries(module.params, kind)
    params = connection_params(module.params, model)
    runner = args.runner_from_params(params)
    if not desired and not params["purge"]:
        return {"changed": False, "commands": [], "queries": [], "items": [], "cluster": params.get("cluster_name"),
                "transport": runner.describe()}
    try:
        result = accounting_policy.apply(runner, kind, desired, purge=module.params["purge"],
                                         check_mode=module.check_mode,
                                         cluster=params.get("cluster_name"))
    except SlurmError as e:
        partial = dict(e.details.get("result") or {})
        partial["queries"] = [r.cmd for r in runner.history if r.argv[1:2] != ["-i"]]
        partial.setdefault("changed", False)
        partial["transport"] = runner.describe()
        raise SoperatorError(str(e), **partial)
    result["queries"] = [r.cmd for r in runner.history if r.argv[1:2] != ["-i"]]
    result["transport"] = runner.describe()
    if not module._diff:
        result.pop("diff")
    return result


def main(kind: str) -> None:
    """The whole main() of slurm_account, slurm_user and slurm_qos: `kind`'s list option, or a spec."""
    module = SoperatorModule(
        {kind: dict(type="list", elements="dict")}, shared=SHARED,
        uses_kubernetes=lambda p: p["transport"] == "kubernetes",
        mutually_exclusive=[(kind, "src", "definition")], required_one_of=[(kind, "src", "definition")],
        supports_check_mode=True)
    module.run(lambda m: run(m, kind))
