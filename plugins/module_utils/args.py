# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared argument specs: how a module reaches Slurm (documented by the soperator.slurm.slurm_connection fragment,
plus kubernetes.core.k8s_auth_options for the Kubernetes transport).

    argument_spec = dict(my_options, **slurm_connection_argument_spec())
    module = AnsibleModule(argument_spec, required_if=SLURM_CONNECTION_REQUIRED_IF, ...)
    runner = runner_from_params(module.params)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, LocalTransport, SlurmCommandError, SlurmRunner)

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
except ImportError:  # pragma: no cover - kubernetes.core is a dependency of this collection
    AUTH_ARG_SPEC = {}

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

# The spec documents a module reads: inline (definition) or from a YAML file (src); module_support reads either.
SPEC_SOURCE_SPEC = dict(
    definition=dict(type="raw"),
    src=dict(type="path"),
)


def slurm_connection_argument_spec():
    """The connection options plus kubernetes.core's auth options (a fresh copy: callers may change it)."""
    spec = copy.deepcopy(SLURM_CONNECTION_SPEC)
    spec.update(copy.deepcopy(AUTH_ARG_SPEC))
    return spec


def spec_source_argument_spec(**options):
    """`definition` and `src` (mutually exclusive where used) plus the module's own `options`."""
    spec = copy.deepcopy(SPEC_SOURCE_SPEC)
    spec.update(options)
    return spec


def auth_params(params):
    """The kubernetes.core auth options that are set in `params`."""
    return dict((k, params.get(k)) for k in AUTH_ARG_SPEC if params.get(k) is not None)


def controller_pod(cluster_name):
    """The controller StatefulSet is ``<cluster>-controller``; slurmctld runs in its only pod."""
    return "%s-controller-0" % cluster_name


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


def require_positive(module, *names):
    """fail_json naming the first option of `names` that is not > 0 (timeouts, sleeps)."""
    for name in names:
        value = module.params[name]
        if value is not None and value <= 0:
            module.fail_json(msg="%s must be > 0, got %s" % (name, value))


def require_non_negative(module, *names):
    """fail_json naming the first option of `names` that is < 0 (a wait that may be 0: do not wait)."""
    for name in names:
        value = module.params[name]
        if value is not None and value < 0:
            module.fail_json(msg="%s must be >= 0, got %s" % (name, value))


def fail_spec_error(module, error, **extra):
    """A SpecError as the module's failure: the message and every issue with its field path."""
    module.fail_json(msg=str(error), errors=[{"path": i.path, "message": i.message} for i in error.issues], **extra)
