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
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError, Replacer
from ansible_collections.soperator.slurm.plugins.module_utils.wait import WaitTimeout, wait_until


# The label the StatefulSet controller gives each pod it makes (its own name): one list of the pods of any nodes
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
# names per list: the selector goes in the URL (50 names are 1 KB; a roll batch may hold many more)
NAMES_PER_LIST = 200


class KubeReplacer(Replacer):
    """Kubernetes: delete the worker pod (same name as the Slurm node) so its StatefulSet recreates it, after
    cordoning the Kubernetes node it ran on when asked; wait, bounded, for the new pod to be Ready. Several nodes are
    replaced together: their pods read with one list (by the StatefulSet's pod-name label; a pod the list lacks - an
    ephemeral worker's, made by no StatefulSet - read alone), deleted, and waited for with one list per poll."""

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
        outcome = self.replace_all([node], check_mode=check_mode)[node]
        if isinstance(outcome, RemediationError):
            raise outcome
        return outcome

    def replace_all(self, nodes, check_mode=False):
        out, waiting = {}, {}
        try:
            pods = self._pods(nodes)
        except KubeError as e:
            return dict((node, RemediationError("reading pods %s: %s" % (", ".join(nodes), e))) for node in nodes)
        cordoned = set()       # each Kubernetes node once, however many of its pods go
        for node in nodes:
            try:
                info = self._delete(node, pods.get(node), check_mode, cordoned)
            except RemediationError as e:
                out[node] = e
                continue
            except KubeError as e:
                out[node] = RemediationError("replacing pod %s/%s: %s" % (self.namespace, node, e))
                continue
            if check_mode:
                out[node] = info
            else:
                waiting[node] = info
        out.update(self._wait_ready(waiting))
        return out

    def _pods(self, nodes):
        """{name: pod} of these nodes' pods: one list per NAMES_PER_LIST names, then a GET of each the lists lack."""
        found = self._pods_listed(nodes)
        for node in nodes:
            if node not in found:
                found[node] = self.client.get("Pod", node, self.namespace)
        return found

    def _delete(self, node, pod, check_mode, cordoned):
        """Cordon (when asked) and delete one node's pod -> its report (with the uid deleted)."""
        if EPHEMERAL_LABEL in (((pod or {}).get("metadata") or {}).get("labels") or {}):
            # No StatefulSet makes it again: Slurm's power saving owns this worker (docs/ephemeral-workers.md).
            raise RemediationError("pod %s/%s is an ephemeral worker's: not replaced (Slurm's power saving "
                                   "starts and removes it)" % (self.namespace, node))
        info = {"pod": "%s/%s" % (self.namespace, node)}
        host = ((pod or {}).get("spec") or {}).get("nodeName")
        if host:
            info["kubernetes_node"] = host
        if self.cordon and host:
            if not check_mode and host not in cordoned:
                self.client.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": host},
                                   "spec": {"unschedulable": True}}, force=True)
                cordoned.add(host)
            info["cordoned"] = host
        if check_mode:
            info["would"] = "delete pod %s/%s" % (self.namespace, node) if pod else \
                "wait for pod %s/%s (it does not exist)" % (self.namespace, node)
            return info
        info["deleted_uid"] = (pod or {}).get("metadata", {}).get("uid")
        if pod is not None:
            self.client.delete("Pod", node, self.namespace)
        return info

    def _wait_ready(self, waiting):
        """Until every deleted pod is back (a new uid) and Ready, bounded, all at once -> {node: report, or the
        RemediationError of a pod not back in time}."""
        pending = dict(waiting)
        if not pending:
            return {}

        def all_ready():
            for node, new in self._pods_listed(sorted(pending)).items():
                info = pending[node]
                if new["metadata"].get("uid") != info["deleted_uid"] and _pod_ready(new):
                    info["new_uid"] = new["metadata"].get("uid")
                    del pending[node]
            return not pending, "no new Ready pod: %s" % ", ".join(sorted(pending))

        error = None
        try:
            waited = wait_until(all_ready, "pods %s" % ", ".join(sorted(pending)), self.timeout, sleep=self.sleep,
                                clock=self.clock, poll=self.poll)
        except WaitTimeout:
            waited = None
        except KubeError as e:
            waited, error = None, e
        out = {}
        for node, info in waiting.items():
            if node not in pending:
                info["waited_for_pod"] = waited
                out[node] = info
            elif error is not None:
                out[node] = RemediationError("waiting for pod %s/%s: %s" % (self.namespace, node, error))
            else:
                out[node] = RemediationError("pod %s/%s was deleted but no new pod became Ready within %ss"
                                             % (self.namespace, node, self.timeout))
        return out

    def _pods_listed(self, nodes):
        """{name: pod} of the pods the StatefulSets made of these nodes (the lists only: what we wait for is theirs)."""
        found = {}
        for first in range(0, len(nodes), NAMES_PER_LIST):
            selector = "%s in (%s)" % (POD_NAME_LABEL, ",".join(nodes[first:first + NAMES_PER_LIST]))
            for pod in self.client.list("Pod", self.namespace, label_selector=selector):
                found[pod["metadata"]["name"]] = pod
        return found


def _pod_ready(pod):
    # Not kubernetes.core's waiter.pod_ready (containerStatuses only): the Ready condition also counts readiness
    # gates, and a terminating pod is no replacement.
    status = pod.get("status") or {}
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions") or [])
