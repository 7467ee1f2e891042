# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What slurm_cluster and slurm_nodeset share for the Kubernetes target: options (documented by the
soperator.slurm.kube_target and kubernetes.core.k8s_auth_options fragments), the client, the Slurm runner, and
turning a KubeCluster run into a module result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.args import AUTH_ARG_SPEC, auth_params, runner_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster
from ansible_collections.soperator.slurm.plugins.module_utils.kube.upgrade import UpgradeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (
    HAS_KUBERNETES, KubeClient, KubeError, api_client_from_params)

# How API requests are retried and bounded (doc fragment soperator.slurm.kube_target.api).
KUBE_API_SPEC = dict(
    api_retries=dict(type="int", default=3),
    api_timeout=dict(type="int", default=30),
)

KUBE_TARGET_SPEC = dict(
    wait=dict(type="bool", default=False),
    create_namespace=dict(type="bool", default=True),
    purge_volumes=dict(type="bool", default=False),
    recreate_statefulsets=dict(type="bool", default=False),
    drain_timeout=dict(type="int", default=3600),
    force=dict(type="bool", default=False),
    reconfigure=dict(type="bool", default=True),
    wait_sleep=dict(type="float", default=2.0),
    slurm_transport=dict(type="str", choices=["kubernetes", "local"], default="kubernetes"),
    slurm_conf=dict(type="path"),
    rollout_timeout=dict(type="int", default=600),
    health_check_program=dict(type="path"),
    allow_unversioned_images=dict(type="bool", default=False),
    backup_size=dict(type="str"),
    backup_storage_class=dict(type="str"),
)


def kube_target_argument_spec():
    spec = copy.deepcopy(KUBE_TARGET_SPEC)
    spec.update(copy.deepcopy(KUBE_API_SPEC))
    spec.update(copy.deepcopy(AUTH_ARG_SPEC))
    return spec


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

    return KubeCluster(
        client, model, runner_factory=runner, check_mode=module.check_mode,
        install_crds=params.get("install_crds", False), create_namespace=params["create_namespace"],
        purge_volumes=params["purge_volumes"], wait=params["wait"], wait_timeout=params["wait_timeout"],
        drain_timeout=params["drain_timeout"], force=params["force"], reconfigure=params["reconfigure"],
        manage_rbac=params.get("manage_rbac", True), recreate_statefulsets=params["recreate_statefulsets"],
        poll=params["wait_sleep"], rollout_timeout=params["rollout_timeout"], checker_factory=checker,
        upgrade_options=UpgradeOptions(params["allow_unversioned_images"], params.get("backup_size"),
                                       params.get("backup_storage_class")))


def run(module, cluster, operation, extra=None):
    """Run operation(cluster) and exit the module with its result (fail with the partial result on error)."""
    try:
        result = operation(cluster)
    except (BackendError, KubeError) as e:
        partial = cluster.result()
        partial.pop("changed", None)
        partial.update(extra or {})
        module.fail_json(msg=str(e), **partial)
    result.update(extra or {})
    if module._diff:
        result["diff"] = cluster.diff()
    module.exit_json(**result)
