# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes side of a Slurm-aware rolling upgrade (the plan and its execution: slurm/rollout.py): which worker
pods are outdated, read from the API server.

A pod is outdated when its ``controller-revision-hash`` label is not its StatefulSet's ``status.updateRevision``. That
status is the StatefulSet controller's answer to the template we applied, so after an apply we wait (bounded) until
``status.observedGeneration`` reaches the StatefulSet's generation before trusting it. A StatefulSet whose status says
every replica is updated (``updatedReplicas``) costs no further request: a no-op run stays one list per kind.

Check mode applies nothing, so the controller never sees the new template: when the dry run's answer has another pod
template than the live StatefulSet, every pod counts as outdated (the new revision has no name yet); otherwise the
live status decides, as in the real run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import (
    BackendError, _replicas, observed, wait_for)

REVISION_LABEL = "controller-revision-hash"
# The update revision check mode reports for a template the dry run changed (the controller names it once applied).
NEW_TEMPLATE = "(the new pod template)"


def all_updated(sts):
    """The live status says every replica runs the update revision (and describes the current generation)."""
    status = (sts or {}).get("status") or {}
    return observed(sts) and bool(status.get("updateRevision")) and \
        int(status.get("updatedReplicas") or 0) >= _replicas(sts)


def template_changes(change):
    """Does this planned StatefulSet change give its pods a new template? (the dry run's or the apply's answer)"""
    if change is None or change.live is None or change.after is None:
        return False
    return ((change.live.get("spec") or {}).get("template") !=
            (change.after.get("spec") or {}).get("template"))


class WorkerRevisions(object):
    """inputs() for slurm/rollout.Rollout: (nodes, revisions, update_revision) of one worker StatefulSet, read afresh
    each call: the StatefulSet (a list by our labels), then its pods (a list by its selector)."""

    def __init__(self, client, namespace, name, node_name, timeout, owner_selector, predicted_new=False, sleep=None,
                 clock=None, poll=2.0):
        self.client = client
        self.owner_selector = owner_selector    # our labels: the StatefulSet is listed (what remediation's Role allows)
        self.namespace = namespace
        self.name = name
        self.node_name = node_name          # ordinal -> node (= pod) name
        self.timeout = timeout
        self.predicted_new = predicted_new  # check mode: the apply would change the pod template
        self.sleep = sleep
        self.clock = clock
        self.poll = poll

    def statefulset(self):
        """The StatefulSet once its controller has observed its current generation (bounded wait)."""
        found = {}

        def current():
            listed = [o for o in self.client.list("StatefulSet", self.namespace, self.owner_selector)
                      if o["metadata"]["name"] == self.name]
            sts = found["sts"] = listed[0] if listed else None
            if sts is None:
                raise BackendError("StatefulSet %s/%s vanished during the roll" % (self.namespace, self.name))
            return observed(sts), "status.observedGeneration %s < generation %s" % (
                (sts.get("status") or {}).get("observedGeneration"), sts["metadata"].get("generation"))
        kw = dict((k, v) for k, v in (("sleep", self.sleep), ("clock", self.clock)) if v is not None)
        wait_for(current, "the StatefulSet controller to observe %s/%s" % (self.namespace, self.name),
                 self.timeout, poll=self.poll, **kw)
        return found["sts"]

    def __call__(self):
        sts = self.statefulset()
        update_revision = NEW_TEMPLATE if self.predicted_new else (sts.get("status") or {}).get("updateRevision")
        if not update_revision:
            raise BackendError("StatefulSet %s/%s has no status.updateRevision: is its controller running?"
                               % (self.namespace, self.name))
        selector = ",".join("%s=%s" % kv for kv in sorted(((sts.get("spec") or {}).get("selector") or {})
                                                          .get("matchLabels", {}).items()))
        pods = dict((p["metadata"]["name"], p) for p in self.client.list("Pod", self.namespace, selector)
                    if not p["metadata"].get("deletionTimestamp"))
        nodes = [self.node_name(i) for i in range(_replicas(sts))]
        revisions = {}
        for node in nodes:
            pod = pods.get(node)
            revisions[node] = ((pod["metadata"].get("labels") or {}).get(REVISION_LABEL) or "") if pod else None
        return nodes, revisions, update_revision
