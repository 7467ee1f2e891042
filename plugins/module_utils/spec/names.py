# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names of the Kubernetes objects of a cluster. Slurm configs name some of them too (hosts are pod DNS names), so
both renderers take them from here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import TYPE_CHECKING, Protocol

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


def slurm_configs_name(model: Named) -> str:
    return "%s-slurm-configs" % model.name


def slurmdbd_config_name(model: Named) -> str:
    return "%s-slurmdbd" % model.name


def authorized_keys_name(model: Named) -> str:
    return "%s-root-authorized-keys" % model.name


def sshd_config_name(model: Named) -> str:
    return "%s-sshd-config" % model.name


def jail_claim_name(model: "ClusterModel") -> str:
    return model.jail.volume.existing_claim or "%s-jail" % model.name


def controller_name(model: Named) -> str:
    return "%s-controller" % model.name


def exporter_name(model: Named) -> str:
    return "%s-exporter" % model.name


def login_name(model: Named) -> str:
    return "%s-login" % model.name


def login_headless_name(model: Named) -> str:
    return "%s-login-headless" % model.name


def accounting_name(model: Named) -> str:
    return "%s-accounting" % model.name


def accounting_db_name(model: Named) -> str:
    return "%s-accounting-db" % model.name


def populate_jail_name(model: Named) -> str:
    return "%s-populate-jail" % model.name


def remediation_name(model: Named) -> str:
    return "%s-remediation" % model.name


def remediation_status_name(model: Named) -> str:
    """ConfigMap holding the remediation record (observe/remediation_record.py)."""
    return "%s-remediation-status" % model.name


def active_check_name(model: Named, check_name: str) -> str:
    """CronJob of one active health check."""
    return "%s-check-%s" % (model.name, check_name)


def remediation_cluster_role_name(model: Namespaced) -> str:
    # Cluster-scoped: the namespace is part of the name so two clusters never share it.
    return "soperator-slurm-%s-%s-remediation" % (model.namespace, model.name)


def service_account_name(model: Named, component: str) -> str:
    return "%s-%s" % (model.name, component)


def munge_secret_name(model: Named) -> str:
    return "%s-munge" % model.name


def ssh_host_keys_secret_name(model: Named) -> str:
    return "%s-ssh-host-keys" % model.name


def accounting_db_secret_name(model: Named) -> str:
    return "%s-accounting-db" % model.name


def statefulset_pod_host(model: "ClusterModel", statefulset: str, ordinal: int = 0) -> str:
    """The stable DNS name of one StatefulSet pod (via its governing headless Service of the same name)."""
    return model.dns_name("%s-%d" % (statefulset, ordinal), statefulset)
