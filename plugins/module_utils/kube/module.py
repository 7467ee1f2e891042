# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules share for the Kubernetes target: the client, the KubeCluster of slurm_cluster and slurm_nodeset
with its Slurm runner, and a KubeCluster run as a module result (its options are args.KUBE_TARGET_SPEC and
args.KUBE_API_SPEC)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.args import auth_params, runner_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.upgrade import UpgradeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (
    HAS_KUBERNETES, KubeClient, KubeError, api_client_from_params)


def make_client(params):
    if not HAS_KUBERNETES:
        raise KubeError("the kubernetes Python client is required for the Kubernetes target")
    return KubeClient(api_client_from_params(auth_params(params)), c.FIELD_MANAGER,
                      retries=max(params["api_retries"], 0), timeout=params["api_timeout"])


def make_cluster(module, model, client=None):
    params = module.params

    def runner():
        slurm = dict(auth_params(params), transport=params["slurm_transport"], namespace=model.namespace,
                     cluster_name=model.name, slurm_conf=params.get("slurm_conf"))
        return runner_from_params(slurm)

    client = client or make_client(params)

    def checker():
        from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation_setup import kube_checker
        return kube_checker(params, client, model.namespace)

    options = KubeOptions(
        check_mode=module.check_mode, install_crds=params.get("install_crds", False),
        create_namespace=params["create_namespace"], purge_volumes=params["purge_volumes"], wait=params["wait"],
        wait_timeout=params["wait_timeout"], drain_timeout=params["drain_timeout"], force=params["force"],
        reconfigure=params["reconfigure"], manage_rbac=params.get("manage_rbac", True),
        recreate_statefulsets=params["recreate_statefulsets"], poll=params["wait_sleep"],
        rollout_timeout=params["rollout_timeout"],
        upgrade=UpgradeOptions(params["allow_unversioned_images"], params.get("backup_size"),
                               params.get("backup_storage_class")))
    return KubeCluster(client, model, options, runner_factory=runner, checker_factory=checker)


def result_of(module, cluster_factory, operation, extra=None):
    """operation(cluster_factory())'s result with `extra` (and the diff when asked); a BackendError or KubeError as a
    SoperatorError with the partial result of what was done."""
    cluster = None
    try:
        cluster = cluster_factory()
        result = operation(cluster)
    except (BackendError, KubeError) as e:
        partial = cluster.result() if cluster is not None else {}
        partial.pop("changed", None)
        partial.update(extra or {})
        raise SoperatorError(str(e), **partial)
    result.update(extra or {})
    if module._diff:
        result["diff"] = cluster.diff()
    return result
