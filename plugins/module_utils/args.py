# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared argument specs, all of them, and how a module reaches Slurm with them.

    module = SoperatorModule(my_options, shared=(SLURM_CONNECTION_SPEC, AUTH_ARG_SPEC), ...)   # module_base.py
    runner = runner_from_params(module.params)

The specs are documented by the doc fragments: soperator.slurm.slurm_connection (SLURM_CONNECTION_SPEC),
soperator.slurm.kube_target (KUBE_TARGET_SPEC, KUBE_API_SPEC) and kubernetes.core.k8s_auth_options (AUTH_ARG_SPEC).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, LocalTransport, SlurmCommandError, SlurmRunner)
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

# The options of kubernetes.core's k8s_auth_options and their aliases, known here so that a module can name them when
# that collection is missing instead of refusing them as unknown (test_module_contract keeps this equal to its spec).
AUTH_OPTIONS = {"kubeconfig": (), "context": (), "host": (), "api_key": (), "username": (), "password": (),
                "validate_certs": ("verify_ssl",), "ca_cert": ("ssl_ca_cert",), "client_cert": ("cert_file",),
                "client_key": ("key_file",), "proxy": (), "no_proxy": (), "proxy_headers": (), "persist_config": (),
                "impersonate_user": (), "impersonate_groups": ()}

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    HAS_KUBERNETES_CORE = True
except ImportError:  # a dependency of this collection; module_base fails clearly where a module needs it
    # Accepted, never used: module_base refuses a run that sets one (or reaches an API server), naming kubernetes.core.
    AUTH_ARG_SPEC = dict((name, dict(type="raw", no_log=True, aliases=list(aliases)))
                         for name, aliases in AUTH_OPTIONS.items())
    HAS_KUBERNETES_CORE = False

CONTROLLER_CONTAINER = "slurmctld"

SLURM_CONNECTION_SPEC = dict(
    transport=dict(type="str", choices=["local", "kubernetes"], default="local"),
    slurm_conf=dict(type="path"),
    namespace=dict(type="str"),
    cluster_name=dict(type="str"),
    controller_container=dict(type="str", default=CONTROLLER_CONTAINER),
    retries=dict(type="int", default=3),
    retry_delay=dict(type="float", default=2.0),
    command_timeout=dict(type="int", default=60),
)

SLURM_CONNECTION_REQUIRED_IF = [("transport", "kubernetes", ("namespace", "cluster_name"))]

TARGETS = ["kubernetes", "local"]

# How API requests are retried and bounded (doc fragment soperator.slurm.kube_target.api).
KUBE_API_SPEC = dict(
    api_retries=dict(type="int", default=3),
    api_timeout=dict(type="int", default=30),
)

# The Kubernetes target of slurm_cluster and slurm_nodeset (doc fragment soperator.slurm.kube_target).
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

# The spec documents a module reads: inline (definition) or from a YAML file (src); module_support reads either.
SPEC_SOURCE_SPEC = dict(
    definition=dict(type="raw"),
    src=dict(type="path"),
)


def merged_spec(options, *shared):
    """`options` (the module's own) plus a fresh copy of each shared spec: callers may change the result. An option
    defined twice is a bug: refused."""
    spec = copy.deepcopy(options)
    for part in shared:
        twice = set(spec) & set(part)
        if twice:
            raise ValueError("options defined twice: %s" % ", ".join(sorted(twice)))
        spec.update(copy.deepcopy(part))
    return spec


def slurm_connection_argument_spec():
    """The connection options plus kubernetes.core's auth options."""
    return merged_spec(SLURM_CONNECTION_SPEC, AUTH_ARG_SPEC)


def auth_params(params):
    """The kubernetes.core auth options that are set in `params`."""
    return dict((k, params.get(k)) for k in AUTH_ARG_SPEC if params.get(k) is not None)


def controller_pod(cluster_name, ordinal=0):
    """The controller StatefulSet is ``<cluster>-controller``: the primary slurmctld runs in pod 0, a backup
    (spec.controller.replicas 2) in pod 1."""
    return "%s-controller-%d" % (cluster_name, ordinal)


def _core_v1_factory(params):
    def factory():
        try:
            from kubernetes.client import CoreV1Api
            from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (
                KubeError, api_client_from_params)
        except ImportError as e:
            raise SlurmCommandError("transport=kubernetes needs the kubernetes python client and the kubernetes.core "
                                    "collection: %s" % e)
        try:
            return CoreV1Api(api_client_from_params(auth_params(params)))
        except KubeError as e:
            raise SlurmCommandError(str(e))
    return factory


def runner_from_params(params, sleep=None):
    """A SlurmRunner for the module's connection options."""
    if params.get("transport") == "kubernetes":
        transport = KubernetesTransport(
            namespace=params["namespace"], pod=controller_pod(params["cluster_name"]),
            # a backup controller's pod runs the command when the primary's is gone
            standby_pods=[controller_pod(params["cluster_name"], 1)],
            container=params.get("controller_container") or CONTROLLER_CONTAINER,
            slurm_conf=params.get("slurm_conf"), core_v1_factory=_core_v1_factory(params))
    else:
        transport = LocalTransport(slurm_conf=params.get("slurm_conf"))
    kwargs = {}
    if sleep is not None:
        kwargs["sleep"] = sleep
    retries = params.get("retries")
    if retries is not None and retries < 0:
        raise SlurmCommandError("retries must be >= 0, got %d" % retries)
    return SlurmRunner(transport, retries=3 if retries is None else retries,
                       retry_delay=2.0 if params.get("retry_delay") is None else params["retry_delay"],
                       timeout=params.get("command_timeout") or 60, **kwargs)


def require_positive(params, *names):
    """SoperatorError naming the first option of `names` that is not > 0 (timeouts, sleeps)."""
    for name in names:
        value = params[name]
        if value is not None and value <= 0:
            raise SoperatorError("%s must be > 0, got %s" % (name, value))


def require_non_negative(params, *names):
    """SoperatorError naming the first option of `names` that is < 0 (a wait that may be 0: do not wait)."""
    for name in names:
        value = params[name]
        if value is not None and value < 0:
            raise SoperatorError("%s must be >= 0, got %s" % (name, value))
