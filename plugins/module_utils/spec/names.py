# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names of the Kubernetes objects of a cluster. Slurm configs name some of them too (hosts are pod DNS names), so
both renderers take them from here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # the model's module needs none of these names; only mypy reads this import
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import ClusterModel


class Named(Protocol):
    """What most names need of a cluster: its name (a ClusterModel, or validate.py's stand-in before there is one)."""

    @property
    def name(self) -> str:
        """The SlurmCluster's metadata.name."""


class Namespaced(Named, Protocol):
    @property
    def namespace(self) -> str:
        """The SlurmCluster's namespace."""


def _cluster_suffixed(suffix: str) -> Callable[[Named], str]:
    """The name function of an object named `<cluster>-<suffix>`: the rule of most names, in one place."""
    def name(model: Named) -> str:
        return "%s-%s" % (model.name, suffix)
    return name


slurm_configs_name = _cluster_suffixed("slurm-configs")
slurmdbd_config_name = _cluster_suffixed("slurmdbd")
authorized_keys_name = _cluster_suffixed("root-authorized-keys")
sshd_config_name = _cluster_suffixed("sshd-config")
controller_name = _cluster_suffixed("controller")
exporter_name = _cluster_suffixed("exporter")
login_name = _cluster_suffixed("login")
login_headless_name = _cluster_suffixed("login-headless")
accounting_name = _cluster_suffixed("accounting")
# the power programs' ServiceAccount, Role, RoleBinding and ConfigMap (ephemeral NodeSets)
power_name = _cluster_suffixed("power")
accounting_db_name = _cluster_suffixed("accounting-db")
populate_jail_name = _cluster_suffixed("populate-jail")
remediation_name = _cluster_suffixed("remediation")
# the ConfigMap of the remediation record (observe/remediation_record.py)
remediation_status_name = _cluster_suffixed("remediation-status")
munge_secret_name = _cluster_suffixed("munge")
ssh_host_keys_secret_name = _cluster_suffixed("ssh-host-keys")
accounting_db_secret_name = _cluster_suffixed("accounting-db")
# spec.rest: the JWT key Secret, slurmrestd's Service and Deployment (render/rest_kube.py)
jwt_secret_name = _cluster_suffixed("jwt-key")
rest_name = _cluster_suffixed("rest")
# spec.identity: the sssd.conf template and nsswitch.conf files (render/identity_kube.py)
sssd_config_name = _cluster_suffixed("sssd")
# spec.controller.replicas 2: the one spool claim both controller pods mount (render/kube_objects.py)
controller_spool_claim_name = _cluster_suffixed("controller-spool")


def jail_claim_name(model: "ClusterModel") -> str:
    return model.jail.volume.existing_claim or "%s-jail" % model.name


def active_check_name(model: Named, check_name: str) -> str:
    """CronJob of one active health check."""
    return "%s-check-%s" % (model.name, check_name)


def remediation_cluster_role_name(model: Namespaced) -> str:
    # Cluster-scoped: the namespace is part of the name so two clusters never share it.
    return "soperator-slurm-%s-%s-remediation" % (model.namespace, model.name)


def service_account_name(model: Named, component: str) -> str:
    return "%s-%s" % (model.name, component)


def statefulset_pod_host(model: "ClusterModel", statefulset: str, ordinal: int = 0) -> str:
    """The stable DNS name of one StatefulSet pod (via its governing headless Service of the same name)."""
    return model.dns_name("%s-%d" % (statefulset, ordinal), statefulset)
