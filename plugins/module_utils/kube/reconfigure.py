# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a changed Slurm config reaches slurmctld on Kubernetes (step 5 of KubeCluster's run): `scontrol reconfigure`
once the controller pod sees the new ConfigMap, a roll of the controller when its pod template changed, and the
digest of the configs slurmctld is known to have loaded (kept in the SlurmCluster's .status).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import posixpath
import re
import time

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import (
    BackendError, _rollout_done, wait_for, workload_state)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    SlurmCommandError, SlurmError, SlurmOutputError)
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names

# .status of the SlurmCluster: configs_digest() of the Slurm configs slurmctld is known to have loaded. Recorded only
# when that is certain, so a run that applied the ConfigMap but failed to reconfigure leaves the reload owed.
CONFIG_DIGEST_FIELD = "slurmConfigDigest"


# The files of spec.topology.nodeLabels: the part of the configs that follows where the pods run.
TOPOLOGY_FILES = ("topology.conf", c.TOPOLOGY_YAML)


SHA256SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def _sha256sum_digests(result):
    """path -> digest from `sha256sum FILE...`. Exit code 1 is a file that does not exist (yet, or any more): it is
    left out. Any other failure, or a line we cannot read, is not guessed at."""
    if result.rc not in (0, 1):
        raise SlurmCommandError("%s failed (rc=%s): %s" % (result.cmd, result.rc, (result.stderr or result.stdout)
                                                           .strip()))
    digests = {}
    for line in result.stdout.splitlines():
        match = SHA256SUM_LINE.match(line)
        if not match:
            raise SlurmOutputError("unexpected output of %s: %r" % (result.cmd, line[:200]))
        digests[match.group(2)] = match.group(1)
    return digests


def _rolls_pods(change):
    """An update or recreate that changes the pod template: the StatefulSet replaces its pods (which then read the
    Slurm configs afresh when slurmctld starts)."""
    if change.action not in (ka.UPDATE, ka.RECREATE):
        return False
    return not ka.contained(change.desired["spec"].get("template"), change.live["spec"].get("template"))


def configs_digest(data):
    """One digest over the data of the Slurm configs ConfigMap (every file, by name)."""
    return hashlib.sha256(json.dumps(data or {}, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


class SlurmConfigReload(object):
    """KubeCluster's reload of Slurm. Uses its model, changes, runner, options (check_mode, wait, reconfigure,
    wait_timeout, poll), sleep, clock, actions, runner_factory, _change() and _last_workloads; sets loaded_digest."""

    def _recorded_digest(self, changes):
        """(known, digest): the configs digest in the SlurmCluster's .status; known=False when this run does not
        handle the SlurmCluster (slurm_nodeset) or it is new."""
        cluster = [ch for ch in changes if ch.kind == "SlurmCluster"]
        if not cluster or cluster[0].live is None:
            return False, None
        return True, ((cluster[0].live.get("status") or {}).get(CONFIG_DIGEST_FIELD))

    def reload_slurm(self, changes):
        """`scontrol reconfigure` when the Slurm configs changed on a running controller whose pods are not replaced
        by this run (a changed pod template - node definitions - rolls the controller, and slurmctld reads the new
        files when it starts). Also when the ConfigMap is unchanged but the configs digest recorded in .status (what
        slurmctld loaded) differs: an earlier run applied the ConfigMap and failed before its reconfigure."""
        config = self._change(changes, "ConfigMap", names.slurm_configs_name(self.model))
        if not self.options.reconfigure or config is None or config.action not in (ka.UPDATE, ka.UNCHANGED):
            return
        digest = configs_digest(config.desired.get("data"))
        if config.action == ka.UNCHANGED:
            known, recorded = self._recorded_digest(changes)
            # No digest recorded yet (a cluster deployed before it was kept, or whose controller was created
            # without a known load): reconfigure once rather than guess from timestamps which configs the running
            # slurmctld read; the reload is cheap and harmless, and the digest is recorded after it.
            # Without Slurm access (a caller that gave no runner) an owed reload is left for a run that has it.
            if not known or recorded == digest or self.runner_factory is None:
                return
            reason = "configs not yet loaded by slurmctld"
        else:
            reason = "slurm.conf changed"
        controller = self._change(changes, "StatefulSet", names.controller_name(self.model))
        if controller is None or controller.action == ka.CREATE or _rolls_pods(controller):
            return
        ready, _text = workload_state(controller.live)
        if not ready:
            return
        argv = ["scontrol", "reconfigure"]
        if self.options.check_mode:
            self.actions.append("would run scontrol reconfigure (%s)" % reason)
            return
        self.wait_for_controller_config(config)
        try:
            self.runner.run(argv)
        except SlurmError as e:
            raise BackendError("the Slurm configs were updated but `scontrol reconfigure` failed (a re-run of this "
                               "task tries it again; or restart slurmctld): %s" % e)
        self.actions.append("ran scontrol reconfigure (%s)" % reason)
        self.loaded_digest = digest

    def _note_loaded_by_start(self):
        """After the run (and its wait): the digest of the configs when slurmctld is known to have read them at its
        start in this run. Conservative: a controller created in an existing cluster may have adopted pods orphaned
        by an earlier recreate (which keep their old configs), and a roll is only known done after wait=true."""
        if self.loaded_digest is not None:
            return
        config = self._change(self.changes, "ConfigMap", names.slurm_configs_name(self.model))
        controller = self._change(self.changes, "StatefulSet", names.controller_name(self.model))
        cluster = [ch for ch in self.changes if ch.kind == "SlurmCluster"]
        applied = (ka.CREATE, ka.UPDATE, ka.UNCHANGED)
        if config is None or controller is None or not cluster or config.action not in applied:
            return
        digest = configs_digest(config.desired.get("data"))
        if controller.action == ka.CREATE and cluster[0].action == ka.CREATE:
            # a new cluster: the controller's first pod starts after the ConfigMap above was applied
            self.loaded_digest = digest
        elif _rolls_pods(controller) and self.options.wait and not self.options.check_mode and \
                self._last_workloads is not None:
            sts = self._last_workloads.get(("StatefulSet", controller.name))
            if sts is not None and _rollout_done(sts):
                self.loaded_digest = digest

    def wait_for_controller_config(self, config_change):
        """wait_for_controller_config() with this run's runner, model and options; the wait goes to actions."""
        waited = wait_for_controller_config(self.runner, self.model, config_change, self.options.wait_timeout,
                                            poll=self.options.poll, sleep=self.sleep, clock=self.clock)
        if waited is not None:
            self.actions.append(waited)


def wait_for_controller_config(runner, model, config_change, timeout, poll=2.0, sleep=None, clock=None):
    """Wait (at most `timeout`) until the controller pod sees the ConfigMap just applied. The kubelet refreshes
    a mounted ConfigMap only on its next sync (a minute or more), and a reconfigure before that makes slurmctld
    re-read the old files. Every key is compared, not only slurm.conf: a change may touch cgroup.conf or
    gres.conf alone. The kubelet swaps the whole volume at once (the `..data` symlink), so the pod never sees a
    mix of old and new files, and one read of all of them tells which version it has. -> the action to report
    when it had to wait, else None. Used by the reload of a run and by the topology's follow-up of a replaced
    worker (kube/topology.py)."""
    where = runner.describe()
    desired = config_change.desired.get("data") or {}
    if where.get("transport") == "kubernetes":
        pod, conf_dir, keys = "%s/%s" % (where["namespace"], where["pod"]), c.SLURM_CONF_DIR, None
    elif model.topology.node_labels is not None and where.get("slurm_conf"):
        # slurm_transport=local: that slurmctld reads its own slurm.conf, which this ConfigMap does not feed; only
        # the topology files of spec.topology.nodeLabels (they follow the pods) are the ConfigMap's, mirrored
        # beside its slurm.conf by whoever runs it there: wait for them as for a pod.
        pod, conf_dir, keys = "slurmctld of %s" % where["slurm_conf"], posixpath.dirname(where["slurm_conf"]), \
            TOPOLOGY_FILES
    else:
        return None
    # keys an update dropped must be gone from the pod; an unchanged ConfigMap (a reload owed by an earlier
    # run) may hold keys of another writer, which stay
    removed = set((config_change.live or {}).get("data") or {}) - set(desired) \
        if config_change.action == ka.UPDATE else set()
    wanted = dict((posixpath.join(conf_dir, key), hashlib.sha256(text.encode("utf-8")).hexdigest())
                  for key, text in desired.items() if keys is None or key in keys)
    # None: the file must be gone
    wanted.update((posixpath.join(conf_dir, key), None) for key in removed if keys is None or key in keys)
    if not wanted:
        return None
    argv = ["sha256sum"] + sorted(wanted)
    reads = []

    def seen_by_pod():
        reads.append(1)
        try:
            unused, seen = runner.run(argv, parse=_sha256sum_digests, check=False)
        except SlurmError as e:
            raise BackendError("%s was applied, but reading the Slurm configs in pod %s failed, so `scontrol "
                               "reconfigure` was not run: %s" % (config_change.describe(), pod, e))
        stale = sorted(posixpath.basename(path) for path, digest in wanted.items() if seen.get(path) != digest)
        return not stale, ", ".join(stale)

    seconds = wait_for(seen_by_pod, "the Slurm configs in pod %s" % pod, timeout,
                       sleep=sleep or time.sleep, clock=clock or time.monotonic, poll=poll,
                       timeout_error=lambda stale: BackendError(
                           "%s was applied, but after %ds pod %s still sees the old %s in %s, so `scontrol "
                           "reconfigure` was not run. The kubelet refreshes mounted ConfigMaps on its sync period; "
                           "a re-run of this task once the pod shows the new files runs the reconfigure "
                           "(slurmctld is recorded as still running the old configs)."
                           % (config_change.describe(), timeout, pod, stale, conf_dir)))
    if len(reads) > 1:
        return "waited %d s for the changed Slurm configs to reach the controller pod %s" % (round(seconds), pod)
    return None
