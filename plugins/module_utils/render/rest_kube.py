# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes objects of spec.rest (spec/rest.py): slurmrestd's ServiceAccount, Service and Deployment, and the
JWT key Secret in the pods of slurmctld and slurmdbd.

The key (the `<cluster>-jwt-key` Secret, render/secrets.py: generated once, never rotated) is mounted read-only
(0400, root's) into the controller and slurmdbd containers at JWT_SECRET_DIR; the images' entrypoint copies it to
c.JWT_KEY, SlurmUser's own with mode 0600 (JWT_KEY_SOURCE says where it is), the file slurm.conf and slurmdbd.conf
name. slurmrestd never has it: it runs Debian's slurmrestd (in the controller image) directly, without the
entrypoint, as nobody (it refuses root and SlurmUser), with `SLURM_JWT=daemon` and the cluster's slurm.conf; no
munge key, no API access, a read-only root filesystem.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict, List

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_builders as kb
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.render.rest import (
    REST_ENV, openapi_plugins, slurmrestd_argv)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import ClusterModel
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (
    jwt_secret_name, rest_name, service_account_name)

REST = "rest"                                   # the app.kubernetes.io/component of slurmrestd's objects
JWT_SECRET_DIR = "/etc/slurm-jwt-secret"        # the Secret's file, root's; the entrypoint copies it to c.JWT_KEY
ENV_JWT_KEY_SOURCE = "JWT_KEY_SOURCE"           # the entrypoint's input (images/entrypoint.sh copy_jwt_key)
NOBODY = 65534                                  # Debian's nobody / nogroup
# slurmrestd locks itself down with unshare(CLONE_SYSVSEM) and unshare(CLONE_FILES) (src/slurmrestd/slurmrestd.c
# _lock_down) and dies when either fails. The RuntimeDefault seccomp profile of containerd allows unshare only with
# CAP_SYS_ADMIN, so on a real kubelet it always fails (EPERM; podman's default profile allows it, which is why the
# podman smoke test passed). Nothing is lost: the pod runs slurmrestd alone, with no semaphores or descriptors to share.
POD_ENV = {"SLURMRESTD_SECURITY": "disable_unshare_sysv,disable_unshare_files"}
SLURMRESTD = "/usr/sbin/slurmrestd"


def give_jwt_key(model: ClusterModel, stateful_set: Dict[str, Any], container_name: str) -> Dict[str, Any]:
    """With spec.rest, the pod of `stateful_set` mounts the key Secret and its container `container_name` (slurmctld
    or slurmdbd) is told where (the entrypoint makes SlurmUser's copy). Unchanged otherwise."""
    if model.rest_api is None:
        return stateful_set
    pod = stateful_set["spec"]["template"]["spec"]
    pod.setdefault("volumes", []).append(
        {"name": "jwt-key", "secret": {"secretName": jwt_secret_name(model), "defaultMode": 0o400,
                                       "items": [{"key": s.JWT_KEY_FILE, "path": s.JWT_KEY_FILE}]}})
    for container in pod["containers"]:
        if container["name"] == container_name:
            container.setdefault("volumeMounts", []).append(kb.mount("jwt-key", JWT_SECRET_DIR, True))
            container.setdefault("env", []).append(
                {"name": ENV_JWT_KEY_SOURCE, "value": "%s/%s" % (JWT_SECRET_DIR, s.JWT_KEY_FILE)})
    return stateful_set


def rest_objects(model: ClusterModel) -> List[Dict[str, Any]]:
    """slurmrestd's ServiceAccount (no token), ClusterIP Service and Deployment; none when spec.rest is off."""
    rest = model.rest_api
    if rest is None:
        return []
    name = rest_name(model)
    plugins = openapi_plugins(c.IMAGES_SLURM_VERSION, model.accounting.enabled)
    argv = slurmrestd_argv(SLURMRESTD, "0.0.0.0:%d" % rest.port, plugins, user=None)
    container = kb.container(
        model, "slurmrestd", model.images.controller, ports=[("http", rest.port)], command=argv[:1], args=argv[1:],
        env=[{"name": k, "value": v} for k, v in sorted(dict(REST_ENV, **POD_ENV).items())],
        mounts=[kb.mount("slurm-configs", c.SLURM_CONF_DIR, True)],
        # no CPU request, as the controller's and login's by default: on a small node its 100m kept a worker of
        # 1 CPU from being scheduled (the real-node accounting test: 2 CPUs, two 1-CPU workers)
        resources={"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        probe_port="http",
        security={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                  "runAsUser": NOBODY, "runAsGroup": NOBODY, "capabilities": {"drop": ["ALL"]},
                  "seccompProfile": {"type": "RuntimeDefault"}})
    pod = kb.pod_spec(model, REST, [container], [kb.configs_volume(model)], scheduling=model.controller.scheduling)
    return [
        kb.obj("ServiceAccount", kb.meta(model, service_account_name(model, REST), REST),
               automountServiceAccountToken=False),
        kb.obj("Service", kb.meta(model, name, REST), spec={
            "type": "ClusterIP", "selector": kb.selector_labels(model, REST),
            "ports": [{"name": "http", "port": rest.port, "targetPort": "http", "protocol": "TCP"}]}),
        kb.obj("Deployment", kb.meta(model, name, REST), spec={
            "replicas": rest.replicas, "selector": {"matchLabels": kb.selector_labels(model, REST)},
            "template": kb.template(model, REST, pod)}),
    ]
