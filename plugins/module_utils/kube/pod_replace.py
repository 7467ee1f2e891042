# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation's replacement of a worker on Kubernetes (slurm/remediation.py's replacer for the kube backend):
delete the worker pod so its StatefulSet recreates it and wait for the new one. It lives here, beside the client
whose errors it turns into RemediationError, so that slurm/ imports no backend."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeError
from ansible_collections.soperator.slurm.plugins.module_utils.render.power_kube import EPHEMERAL_LABEL
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError
from ansible_collections.soperator.slurm.plugins.module_utils.wait import wait_until


class KubeReplacer(object):
    """Kubernetes: delete the worker pod (same name as the Slurm node) so its StatefulSet recreates it, after
    cordoning the Kubernetes node it ran on when asked; wait, bounded, for the new pod to be Ready."""

    def __init__(self, client, namespace, cordon=False, timeout=300, poll=2.0, sleep=time.sleep,
                 clock=time.monotonic):
        self.client = client
        self.namespace = namespace
        self.cordon = cordon
        self.timeout = timeout
        self.poll = poll
        self.sleep = sleep
        self.clock = clock

    def replace(self, node, check_mode=False):
        try:
            pod = self.client.get("Pod", node, self.namespace)
            if EPHEMERAL_LABEL in (((pod or {}).get("metadata") or {}).get("labels") or {}):
                # No StatefulSet makes it again: Slurm's power saving owns this worker (docs/ephemeral-workers.md).
                raise RemediationError("pod %s/%s is an ephemeral worker's: not replaced (Slurm's power saving "
                                       "starts and removes it)" % (self.namespace, node))
            info = {"pod": "%s/%s" % (self.namespace, node)}
            host = ((pod or {}).get("spec") or {}).get("nodeName")
            if host:
                info["kubernetes_node"] = host
            if self.cordon and host:
                if not check_mode:
                    self.client.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": host},
                                       "spec": {"unschedulable": True}}, force=True)
                info["cordoned"] = host
            if check_mode:
                info["would"] = "delete pod %s/%s" % (self.namespace, node) if pod else \
                    "wait for pod %s/%s (it does not exist)" % (self.namespace, node)
                return info
            old_uid = (pod or {}).get("metadata", {}).get("uid")
            if pod is not None:
                self.client.delete("Pod", node, self.namespace)
                info["deleted_uid"] = old_uid

            def replaced():
                new = self.client.get("Pod", node, self.namespace)
                if new is not None and new["metadata"].get("uid") != old_uid and _pod_ready(new):
                    info["new_uid"] = new["metadata"].get("uid")
                    return True, "ready"
                return False, "no new Ready pod"

            info["waited_for_pod"] = wait_until(
                replaced, "pod %s/%s" % (self.namespace, node), self.timeout, sleep=self.sleep, clock=self.clock,
                poll=self.poll, timeout_error=lambda unused: RemediationError(
                    "pod %s/%s was deleted but no new pod became Ready within %ss" % (self.namespace, node,
                                                                                      self.timeout)))
            return info
        except KubeError as e:
            raise RemediationError("replacing pod %s/%s: %s" % (self.namespace, node, e))


def _pod_ready(pod):
    # Not kubernetes.core's waiter.pod_ready (containerStatuses only): the Ready condition also counts readiness
    # gates, and a terminating pod is no replacement.
    status = pod.get("status") or {}
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions") or [])
