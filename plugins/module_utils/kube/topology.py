# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the workers of spec.topology.nodeLabels run: two reads per run, whatever the cluster's size - one list of
the cluster's worker pods (our selector) and one list of the Kubernetes nodes that carry the leaf tier's label (a
label selector) - never one read per pod. The model gets each worker's Placement; spec/topology.py makes the tree
and render/topology_conf.py the files, which reach slurmctld as any changed config does (kube/reconfigure.py).

A worker replaced between two runs (remediation, a rolling upgrade) may land on a Kubernetes node of another switch:
`TopologyFollower` puts it in its new place before it is resumed (Remediator.restore calls it), so no job is
scheduled on it by the old tree."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
import time

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import CR_API_VERSION, KubeError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.reconfigure import (
    CONFIG_DIGEST_FIELD, TOPOLOGY_FILES, configs_digest, wait_for_controller_config)
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import APP_NAME, CONFIG, WORKER
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import slurm_configs_config_map
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.topology import topology_tree


def worker_selector(model):
    return "%s=%s,%s=%s,%s=%s" % (c.LABEL_NAME, APP_NAME, c.LABEL_INSTANCE, model.name, c.LABEL_COMPONENT, WORKER)


def placement(pods, nodes, tiers):
    """Slurm node -> Placement from the worker pods and the Kubernetes nodes read. A pod being deleted, or not
    bound yet, has no place; a node not among `nodes` (it lacks the leaf label, or is gone) has no labels."""
    labels = dict((n["metadata"]["name"], (n["metadata"].get("labels") or {})) for n in nodes)
    out = {}
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        host = (pod.get("spec") or {}).get("nodeName") or None
        own = labels.get(host, {}) if host else {}
        out[meta["name"]] = m.Placement(host, dict((k, own[k]) for k in tiers if k in own))
    return out


def with_placement(client, model):
    """The model with the placement of its workers read from the API server; unchanged without nodeLabels."""
    node_labels = model.topology.node_labels
    if node_labels is None:
        return model
    pods = client.list("Pod", model.namespace, worker_selector(model))
    nodes = client.list("Node", None, node_labels.tiers[-1])
    placed = dataclasses.replace(node_labels, placement=placement(pods, nodes, node_labels.tiers))
    return dataclasses.replace(model, topology=dataclasses.replace(model.topology, node_labels=placed))


class TopologyFollower(object):
    """The topology's part of a worker's replacement, between its new slurmd's registration and its resume
    (slurm/remediation.py Remediator.restore, which the rolling upgrade shares): read where the workers run now (the
    same two lists as a run), and when the topology files change, write them into the configs ConfigMap, wait until
    slurmctld's side sees them and `scontrol reconfigure` - the node, still drained, is resumed into its new place.
    Nothing moved: nothing written, no reconfigure. The configs digest on the SlurmCluster's .status is brought up
    to date, so the next run does not reconfigure again.

    Only the topology files may change here: when the ConfigMap differs from the spec in any other file, the
    follow-up refuses (the node stays drained, with our reason) and leaves the whole change to the reconcile."""

    def __init__(self, client, model, runner, timeout=300, poll=2.0, sleep=time.sleep, clock=time.monotonic):
        self.client = client
        self.model = model
        self.runner = runner
        self.timeout = timeout
        self.poll = poll
        self.sleep = sleep
        self.clock = clock
        self.placed = None          # the model with the placement last read
        self.loaded_digest = None   # the configs digest slurmctld runs on after the last reconfigure here

    def _live_configs(self, name):
        # a list by our labels, as the remediation's Role allows (it has no get on ConfigMaps)
        selector = "%s,%s=%s" % (ka.owner_selector(self.model.name), c.LABEL_COMPONENT, CONFIG)
        for item in self.client.list("ConfigMap", self.model.namespace, label_selector=selector):
            if item.get("metadata", {}).get("name") == name:
                return item
        return None

    def follow(self, node):
        """-> {"switch": the unit `node` sits on now (None: left out of the tree, "unplaced" says why), "changed",
        "actions"}. RemediationError when the place could not be made true in Slurm."""
        try:
            return self._follow(node)
        except (KubeError, SlurmError, BackendError, ka.ApplyError) as e:
            raise RemediationError("its place in the topology could not be updated: %s" % e)

    def _follow(self, node):
        placed = self.placed = with_placement(self.client, self.model)
        tree = topology_tree(placed)
        report = {"switch": tree.node_units().get(node), "changed": False, "actions": []}
        unplaced = dict(tree.unplaced)
        if node in unplaced:
            report["unplaced"] = unplaced[node]
        desired = slurm_configs_config_map(placed, render_slurm_configs(placed))
        name = desired["metadata"]["name"]
        live = self._live_configs(name)
        if live is None:
            raise RemediationError("its place in the topology could not be updated: no ConfigMap %s/%s (the "
                                   "reconcile makes it)" % (self.model.namespace, name))
        want, have = desired["data"], live.get("data") or {}
        others = sorted(k for k in set(want) | set(have) if k not in TOPOLOGY_FILES and want.get(k) != have.get(k))
        if others:
            raise RemediationError("its place in the topology was not updated: ConfigMap %s/%s differs from the "
                                   "spec in %s as well; the reconcile (site.yml) applies that first"
                                   % (self.model.namespace, name, ", ".join(others)))
        if all(want.get(k) == have.get(k) for k in TOPOLOGY_FILES):
            return report
        change = ka.Change(ka.UPDATE, desired, live)
        ka.execute(self.client, [change])
        report["actions"].append("updated ConfigMap %s/%s (the topology files)" % (self.model.namespace, name))
        waited = wait_for_controller_config(self.runner, placed, change, self.timeout, poll=self.poll,
                                            sleep=self.sleep, clock=self.clock)
        if waited:
            report["actions"].append(waited)
        self.runner.run(["scontrol", "reconfigure"])
        where = report["switch"] or "no switch: unplaced"
        report["actions"].append("ran scontrol reconfigure (%s moved to %s)" % (node, where))
        report["changed"] = True
        self.loaded_digest = configs_digest(want)
        self._record_loaded(self.loaded_digest)
        return report

    def _record_loaded(self, digest):
        """The digest of the configs slurmctld now runs on the SlurmCluster's .status (where the reconcile keeps it),
        the rest of the status as it is: the same field manager owns all of it."""
        cluster = self.client.get("SlurmCluster", self.model.name, self.model.namespace)
        status = dict((cluster or {}).get("status") or {})
        if cluster is None or status.get(CONFIG_DIGEST_FIELD) == digest:
            return
        status[CONFIG_DIGEST_FIELD] = digest
        self.client.apply({"apiVersion": CR_API_VERSION, "kind": "SlurmCluster",
                           "metadata": {"name": self.model.name, "namespace": self.model.namespace},
                           "status": status}, subresource="status", force=True)


def follower(client, model, runner, timeout=300, poll=2.0, sleep=time.sleep, clock=time.monotonic):
    """A TopologyFollower for a cluster with spec.topology.nodeLabels, else None (nothing follows the pods)."""
    if model.topology.node_labels is None:
        return None
    return TopologyFollower(client, model, runner, timeout=timeout, poll=poll, sleep=sleep, clock=clock)
