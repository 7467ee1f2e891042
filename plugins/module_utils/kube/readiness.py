# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When our Kubernetes workloads are ready, when a Job failed and what its pod said, and the backend's bounded wait
(module_utils/wait.py) with the backend's error.

Ours, not kubernetes.core's waiter predicates: those read the dynamic client's ResourceInstances (we hold plain
objects) and want exact replica counts, where ours count a StatefulSet ready at *at least* spec.replicas (a scale-down
is ready before its surplus pods are gone) and say what is missing as text; the waiter has no Job predicate.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils import wait

# The Job controller labels its pods with the Job's uid (the first one since Kubernetes 1.27).
JOB_UID_LABELS = frozenset(["batch.kubernetes.io/controller-uid", "controller-uid"])


class BackendError(SoperatorError):
    pass


def _replicas(obj):
    return int(((obj or {}).get("spec") or {}).get("replicas") or 0)


def _rollout_done(sts):
    """Every replica of the StatefulSet runs the current template and is ready."""
    status = (sts or {}).get("status") or {}
    want = _replicas(sts)
    return bool(status.get("updateRevision")) and status.get("updateRevision") == status.get("currentRevision") and \
        int(status.get("updatedReplicas") or 0) >= want and int(status.get("readyReplicas") or 0) >= want


def observed(obj):
    """Its controller has seen the object's current generation: its status describes what we applied last."""
    return ((obj or {}).get("status") or {}).get("observedGeneration", 0) >= \
        ((obj or {}).get("metadata") or {}).get("generation", 0)


def workload_state(obj):
    """(ready, text) of a StatefulSet, Deployment or Job, from its status."""
    status = obj.get("status") or {}
    if obj["kind"] == "Job":
        failed = _job_condition(obj, "Failed")
        if failed is not None:
            return False, "failed: %s" % (failed.get("message") or failed.get("reason") or "")
        if _job_condition(obj, "Complete") is not None:
            return True, "complete"
        return False, "running (%s succeeded)" % status.get("succeeded", 0)
    want = _replicas(obj)
    ready = int(status.get("readyReplicas") or 0)
    if obj["kind"] == "Deployment":
        # its old pods stay ready while a new template's pod fails to start: that one counts as unavailable
        updated, unavailable = int(status.get("updatedReplicas") or 0), int(status.get("unavailableReplicas") or 0)
        return ready >= want and updated >= want and not unavailable and observed(obj), \
            "%d/%d ready, %d updated, %d unavailable" % (ready, want, updated, unavailable)
    return ready >= want and observed(obj), "%d/%d ready" % (ready, want)


def _job_condition(obj, ctype):
    """The Job's condition of this type when it is True, else None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def job_failed(obj):
    return _job_condition(obj, "Failed") is not None


def job_pods(client, namespace, job, uid=None):
    """The pods of a Job, oldest first; with `uid`, only those of that Job (not of an earlier one of the same name)."""
    pods = client.list("Pod", namespace, "job-name=%s" % job)
    if uid is not None:
        labels = [(p["metadata"].get("labels") or {}) for p in pods]
        if any(JOB_UID_LABELS & set(lb) for lb in labels):
            pods = [p for p, lb in zip(pods, labels) if uid in (lb.get(k) for k in JOB_UID_LABELS)]
    return sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


def job_log_tail(client, namespace, job, uid=None, tail_lines=50):
    """The last lines of the log of a Job's newest pod, as text to add to an error ("" without a pod)."""
    pods = job_pods(client, namespace, job, uid)
    if not pods:
        return ""
    name = pods[-1]["metadata"]["name"]
    return "\nlast lines of pod %s:\n%s" % (name, client.pod_log(namespace, name, tail_lines=tail_lines))


def wait_for(probe, what, timeout, sleep=time.sleep, clock=time.monotonic, poll=2.0, timeout_error=None):
    """wait.wait_until with the backend's error: at `timeout`, BackendError naming what is not ready, or the
    exception timeout_error(text) returns. -> seconds waited."""
    if timeout_error is None:
        def timeout_error(text):
            return BackendError("timed out after %ds waiting for %s; not ready: %s" % (timeout, what, text))
    return wait.wait_until(probe, what, timeout, poll=poll, sleep=sleep, clock=clock, timeout_error=timeout_error)
