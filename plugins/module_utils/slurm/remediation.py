# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation loop (the slurm_remediate module): bring back nodes we drained, and only those.

One pass:

1. read every node (one ``sinfo --json``) and the running jobs (one ``squeue``);
2. for each node out of service:
   * held by someone else (its reason lacks our prefix, e.g. an admin's or Slurm's own "Not responding"): left
     alone, ``skipped-foreign``;
   * drained by our scale-down (``<prefix> scale-down``): the NodeSet is shrinking, ``skipped-scale-down``;
   * still running jobs (DRAINING, or squeue lists a job on it): ``skipped-busy``, a later pass comes back;
   * ours and idle: *replace* it - delete its worker pod so the StatefulSet recreates it (Kubernetes; optionally
     cordoning the Kubernetes node it ran on first) or restart its slurmd (local) - then wait, bounded, for the new
     slurmd to register; then, with spec.topology.nodeLabels, put it in its place in the topology (its pod may
     have landed under another switch: kube/topology.py TopologyFollower writes the files and reconfigures, only
     when the place changed; the node is held drained with HOLD_REASON meanwhile, so that its own health check
     cannot resume it first); then *re-check* it (the health-check program with ``--check-only`` in the node's own
     environment) and *resume* it only when every check passes. A failing or unrunnable check leaves it drained.
3. A node whose slurmd registered after the drain was set has been replaced already (by an earlier pass, or by
   someone else): it is re-checked, not replaced again. So a node with a lasting fault is replaced once, and later
   passes change nothing until its checks pass; a pass over a healthy cluster changes nothing at all.

Check mode reads the nodes and runs the (read-only) checks of nodes it would not replace, and reports what it would
do. Kubernetes Events on the SlurmCluster record every replacement and resume, and every node left drained after a
replacement.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.wait import WaitTimeout, wait_until
from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    SCALE_DOWN_REASON, full_reason, read_jobs, read_nodes, set_state)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, SlurmError, TransientError)
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

REPLACED, RECHECKED, RESUMED, LEFT_DRAINED = "replaced", "rechecked", "resumed", "left-drained"
PLACED = "placed"       # the topology moved the node to where its new pod runs (before the resume)
# The drain reason a health-drained node is held with while it is replaced, when a topology follows the pods: the
# new slurmd's own health check resumes a node drained "<prefix> health:..." as soon as its checks pass - before the
# pass has put it in its new place. It leaves this reason alone; the pass resumes the node itself.
HOLD_REASON = "replacing"
SKIPPED_FOREIGN, SKIPPED_BUSY, SKIPPED_SCALE_DOWN = "skipped-foreign", "skipped-busy", "skipped-scale-down"
SKIPPED_POWER = "skipped-power-saving"
ACTIONS = (REPLACED, RECHECKED, RESUMED, LEFT_DRAINED, SKIPPED_FOREIGN, SKIPPED_BUSY, SKIPPED_SCALE_DOWN)
# What a pass did, counted by step and result (the remediation record, observe/remediation_record.py): a replacement
# that came back registered, a re-check whose checks pass, a resume that Slurm took count as success.
REPLACE, RECHECK, RESUME = "replace", "recheck", "resume"
SUCCESS, FAILURE = "success", "failure"
WORKER_CONTAINER = "slurmd"
REPORTING_CONTROLLER = c.FIELD_MANAGER
# health-check --check-only exit codes (the program's contract).
CHECK_HEALTHY, CHECK_UNHEALTHY = 0, 1


class RemediationError(SoperatorError):
    """A step of one node failed (replacement not ready in time, API error): the node stays drained."""


# --- checks ------------------------------------------------------------------------------------------------------

def parse_check_output(rc, stdout, stderr):
    """(healthy, detail) from ``health-check --check-only``: healthy is True / False, or None when the checks could
    not run (exit 2, no JSON, a program that is missing): never resumed on a guess."""
    report = None
    for line in reversed((stdout or "").strip().splitlines()):
        try:
            report = json.loads(line)
            break
        except ValueError:
            continue
    if rc in (CHECK_HEALTHY, CHECK_UNHEALTHY) and isinstance(report, dict) and \
            isinstance(report.get("healthy"), bool) and report["healthy"] == (rc == CHECK_HEALTHY):
        return report["healthy"], report
    text = (stderr or stdout or "").strip()[-500:]
    return None, {"rc": rc, "error": text or "no report"}


class LocalChecker(object):
    """Runs the health-check program on this host, in the environment slurmd gives it (SLURM_CONF, node name)."""

    def __init__(self, program, slurm_conf=None, timeout=60):
        self.program = program
        self.slurm_conf = slurm_conf
        self.timeout = timeout

    def argv(self, node):
        return [self.program, "--check-only", "--node", node]

    def check(self, node):
        env = dict(os.environ, SLURMD_NODENAME=node, LC_ALL="C")
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        try:
            proc = subprocess.run(self.argv(node), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            return None, {"error": "the checks did not finish within %ss" % self.timeout}
        except OSError as e:
            return None, {"error": "cannot run %s: %s" % (self.program, e)}
        return parse_check_output(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                  proc.stderr.decode("utf-8", "replace"))


class KubeChecker(LocalChecker):
    """Runs the health-check program in the node's worker pod (container slurmd) through the exec API."""

    def __init__(self, namespace, core_v1_factory, program=c.HEALTH_CHECK_PROGRAM, timeout=60, stream_func=None):
        super(KubeChecker, self).__init__(program, timeout=timeout)
        self.namespace = namespace
        self.core_v1_factory = core_v1_factory
        self.stream_func = stream_func
        self._core_v1 = None

    def check(self, node):
        if self._core_v1 is None:
            self._core_v1 = self.core_v1_factory()
        transport = KubernetesTransport(self.namespace, node, container=WORKER_CONTAINER, core_v1=self._core_v1,
                                        stream_func=self.stream_func)
        try:
            rc, out, err = transport.exec(self.argv(node), self.timeout)
        except (SlurmError, TransientError) as e:
            return None, {"error": str(e)}
        return parse_check_output(rc, out, err)


# --- replacing a node --------------------------------------------------------------------------------------------

class Replacer(object):
    """What a pass replaces nodes with: replace(node) one, replace_all(nodes) several (here: one after the other;
    a backend that can start them together, and wait for them together, does so)."""

    def replace(self, node, check_mode=False):
        raise NotImplementedError

    def replace_all(self, nodes, check_mode=False):
        """-> {node: the replacement's report, or the RemediationError that left it drained}."""
        out = {}
        for node in nodes:
            try:
                out[node] = self.replace(node, check_mode=check_mode)
            except RemediationError as e:
                out[node] = e
        return out


class LocalReplacer(Replacer):
    """Local backend: replacing a node is restarting its slurmd (LocalCluster.restart_node)."""

    def __init__(self, cluster):
        self.cluster = cluster

    def replace(self, node, check_mode=False):
        if check_mode:
            return {"would": "restart the slurmd of %s" % node}
        try:
            return self.cluster.restart_node(node)
        except Exception as e:  # LocalClusterError, OSError: report it on the node
            raise RemediationError("restarting the slurmd of %s failed: %s" % (node, e))


# --- events ------------------------------------------------------------------------------------------------------

@dataclass
class EventRecorder:
    """core/v1 Events on the SlurmCluster (kubectl describe slurmcluster shows them)."""
    client: object
    namespace: str
    cluster_name: str
    api_version: str
    _uid: Optional[str] = None          # the SlurmCluster's, read once
    sent: list = field(default_factory=list)

    def emit(self, reason, message, warning=False, check_mode=False):
        event = {"reason": reason, "message": message, "type": "Warning" if warning else "Normal"}
        if check_mode:
            return
        if self._uid is None:
            cluster = self.client.get("SlurmCluster", self.cluster_name, self.namespace) or {}
            self._uid = (cluster.get("metadata") or {}).get("uid", "")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "%s." % self.cluster_name, "namespace": self.namespace},
            "involvedObject": {"apiVersion": self.api_version, "kind": "SlurmCluster", "name": self.cluster_name,
                               "namespace": self.namespace, "uid": self._uid},
            "reason": reason, "message": message[:1024], "type": event["type"],
            "source": {"component": REPORTING_CONTROLLER},
            "reportingComponent": REPORTING_CONTROLLER, "reportingInstance": os.uname()[1][:128],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        self.client.create(body)
        self.sent.append(event)


# --- the pass ----------------------------------------------------------------------------------------------------

class Remediator(object):
    """One remediation pass over every node of the cluster (see the module docstring)."""

    def __init__(self, runner, prefix, checker, replacer=None, events=None, check_mode=False,
                 register_timeout=300, poll=2.0, sleep=time.sleep, clock=time.monotonic, topology=None):
        self.runner = runner
        # follow(node) -> report: the node's place in the topology made true before its resume (None: no
        # topology follows the pods)
        self.topology = topology
        self.prefix = prefix
        self.checker = checker
        self.replacer = replacer
        self.events = events
        self.check_mode = check_mode
        self.register_timeout = register_timeout
        self.poll = poll
        self.sleep = sleep
        self.clock = clock
        self.errors = []
        self.actions = dict((step, {SUCCESS: 0, FAILURE: 0}) for step in (REPLACE, RECHECK, RESUME))

    def _count(self, step, ok):
        if not self.check_mode:
            self.actions[step][SUCCESS if ok else FAILURE] += 1

    def run(self):
        records = read_nodes(self.runner)
        jobs = read_jobs(self.runner)
        scale_down = full_reason(self.prefix, SCALE_DOWN_REASON)
        nodes, restore = [], []
        for name, record in records.items():
            if not record.held:
                continue
            entry = {"name": name, "state": record.state, "reason": record.reason, "steps": []}
            if not record.ours(self.prefix):
                self._finish(entry, SKIPPED_FOREIGN, "held by someone else: its reason lacks %r" % self.prefix)
            elif record.power:
                # Slurm's power saving owns it: replacing its worker would power it up behind Slurm's back
                self._finish(entry, SKIPPED_POWER, "%s by Slurm's power saving (an ephemeral NodeSet): Slurm "
                             "starts its worker when a job needs it" % record.power.replace("_", " "))
            elif record.reason == scale_down:
                self._finish(entry, SKIPPED_SCALE_DOWN, "drained by a scale-down of its NodeSet")
            elif record.busy or jobs.get(name):
                self._finish(entry, SKIPPED_BUSY, "%d job(s) still run on it; a later pass comes back"
                             % (jobs.get(name) or 0) if jobs.get(name) else "still DRAINING")
            else:
                restore.append((record, entry, self._replace(record)))
            nodes.append(entry)
        self.restore_all(restore)
        changed = any(REPLACED in n["steps"] or RESUMED in n["steps"] for n in nodes)
        return {"changed": changed, "nodes": nodes, "errors": list(self.errors),
                "events": list(self.events.sent) if self.events else [],
                "actions": dict((k, dict(v)) for k, v in self.actions.items())}

    @staticmethod
    def _finish(entry, action, why):
        entry["steps"].append(action)
        entry["action"] = action
        entry["why"] = why

    def _event(self, reason, message, warning=False):
        if self.events is None or self.check_mode:
            return
        try:
            self.events.emit(reason, message, warning=warning)
        except Exception as e:  # an event is a report: its failure must not stop the pass
            self.errors.append("could not record event %s: %s" % (reason, e))

    def _replace(self, record):
        """Whether the pass replaces this node before its re-check. Same second counts as after: a slurmd whose first
        checks drained it is new already (replacing it again would loop)."""
        replaced_since_drain = bool(record.slurmd_start_time and record.reason_changed_at and
                                    record.slurmd_start_time >= record.reason_changed_at)
        return self.replacer is not None and not replaced_since_drain

    def _replace_failed(self, entry, name, error):
        """A replacement that failed, or whose new slurmd did not register: counted, reported, the node left drained."""
        self.errors.append("%s: %s" % (name, error))
        self._count(REPLACE, False)
        self._event("NodeReplaceFailed", "%s: %s" % (name, error), warning=True)
        self._finish(entry, LEFT_DRAINED, str(error))

    def restore(self, record, entry, replace=True):
        """Bring back one drained, idle node: replace it (when `replace`), wait for its new slurmd to register,
        re-check it and resume it only when every check passes. The steps go to entry['steps'], the outcome to
        entry['action'] / entry['why'] (resumed, or left-drained); failures to self.errors. Shared by the
        remediation pass and the rolling upgrade (slurm/rollout.py). With a topology that follows the pods, the node
        is put in its (new) place before it is re-checked and resumed: a node whose place cannot be made true in
        Slurm stays drained."""
        self.restore_all([(record, entry, replace)])

    def restore_all(self, items):
        """restore() of several nodes, [(record, entry, replace)]: every replacement first, then one wait for all
        new slurmds (one Slurm read per poll, whatever the number of nodes; one wait after the other made 50
        replacements 50 registration times long), then each node's place, re-check and resume."""
        ready, replaced, started = [], [], []
        for record, entry, replace in items:
            if not replace:
                ready.append((record, entry))
                continue
            try:
                self._hold(record, entry)
            except RemediationError as e:
                self._replace_failed(entry, record.name, e)
                continue
            started.append((record, entry))
        # all together: on Kubernetes one read of the pods, the deletes, one read per poll (not one wait per node)
        outcomes = self.replacer.replace_all([record.name for record, _entry in started],
                                             check_mode=self.check_mode) if started else {}
        for record, entry in started:
            outcome = outcomes[record.name]
            if isinstance(outcome, RemediationError):
                self._replace_failed(entry, record.name, outcome)
                continue
            entry["replacement"] = outcome
            entry["steps"].append(REPLACED)
            if self.check_mode:
                entry["action"] = REPLACED
                entry["why"] = "drained by us (%s) and idle: would replace it, then re-run its checks" % record.reason
                continue
            replaced.append((record, entry))
        registered, late = self._wait_registered([record for record, _entry in replaced])
        for record, entry in replaced:
            if record.name in late:
                self._replace_failed(entry, record.name, late[record.name])
                continue
            entry["replacement"]["registered"] = True
            self._count(REPLACE, True)
            self._event("NodeReplaced", "%s replaced (drained: %s)" % (record.name, entry["reason"]))
            ready.append((registered[record.name], entry))
        self._resume([(record, entry) for record, entry in ready
                      if self._place(record, entry) and self._recheck(record, entry)])

    def _place(self, record, entry):
        """With a topology that follows the pods, the node's place made true in Slurm (files and reconfigure, only
        when it changed); False, the entry finished (left drained), when that fails."""
        if self.topology is None or self.check_mode:
            return True
        try:
            entry["topology"] = self.topology.follow(record.name)
        except RemediationError as e:
            self.errors.append("%s: %s" % (record.name, e))
            self._finish(entry, LEFT_DRAINED, str(e))
            return False
        if entry["topology"]["changed"]:
            entry["steps"].append(PLACED)
        return True

    def _recheck(self, record, entry):
        """Whether the node's checks pass; if not, the entry is finished (left drained)."""
        name = record.name
        healthy, report = self.checker.check(name)
        entry["steps"].append(RECHECKED)
        entry["checks"] = report
        self._count(RECHECK, healthy is True)
        if healthy is not True:
            if healthy is None:
                why = "its checks could not run (%s): it stays drained" % report.get("error")
            else:
                why = "checks still fail: %s" % ", ".join(
                    "%s (%s)" % (f.get("check"), f.get("detail")) for f in report.get("failed") or []) or "unknown"
            if REPLACED in entry["steps"]:
                self._event("NodeLeftDrained", "%s replaced, but %s" % (name, why), warning=True)
            self._finish(entry, LEFT_DRAINED, why)
            return False
        return True

    def _resume(self, items):
        """Resume the nodes whose checks pass, [(record, entry)]: one set_state (one scontrol per action) for all of
        them; when that fails, node by node, so that one node's refusal keeps no other drained."""
        if not items:
            return
        try:
            done = set_state(self.runner, [record.name for record, _entry in items], "resumed", prefix=self.prefix,
                             check_mode=self.check_mode)
        except SlurmError as e:
            if len(items) > 1:
                for item in items:
                    self._resume([item])
                return
            name, entry = items[0][0].name, items[0][1]
            self._count(RESUME, False)
            self.errors.append("%s: resume failed: %s" % (name, e))
            self._finish(entry, LEFT_DRAINED, "checks pass but the resume failed: %s" % e)
            return
        for record, entry in items:
            entry["commands"] = done["commands"]
            self._count(RESUME, True)
            self._event("NodeResumed", "%s passed its checks and is back in service (was: %s)"
                        % (record.name, entry["reason"]))
            self._finish(entry, RESUMED, "checks pass%s" % (" after the replacement" if REPLACED in entry["steps"]
                                                            else ""))

    def _hold(self, record, entry):
        """With a topology that follows the pods, a node our health check drained: drained again with HOLD_REASON
        (the old reason kept after it), so that its new slurmd's health check does not resume it before its place is
        known. Other reasons (an upgrade's) are no health drain: nothing resumes them. RemediationError when Slurm
        refuses."""
        if self.topology is None or self.check_mode or \
                not record.reason.startswith(health_check.health_reason_prefix(self.prefix)):
            return
        was = record.reason[len(self.prefix):].strip() if record.reason.startswith(self.prefix) else record.reason
        reason = full_reason(self.prefix, "%s (%s)" % (HOLD_REASON, was) if was else HOLD_REASON)
        try:
            set_state(self.runner, record.name, "drained", reason=reason, prefix=self.prefix)
        except SlurmError as e:
            raise RemediationError("could not hold %s drained (%s) for its replacement: %s" % (record.name, reason, e))
        entry["held"] = reason

    def _wait_registered(self, befores):
        """Until each node's slurmd registered again (a newer slurmd start time) and answers; bounded, all at once.
        -> ({name: its new record}, {name: RemediationError} of those not registered in time)."""
        pending = dict((b.name, b) for b in befores)
        registered, states = {}, {}

        def all_registered():
            for name, current in read_nodes(self.runner, sorted(pending)).items():
                states[name] = current.state
                newer = current.slurmd_start_time and current.slurmd_start_time != pending[name].slurmd_start_time
                if newer and "NOT_RESPONDING" not in current.flags:
                    registered[name] = current
                    del pending[name]
            return not pending, sorted(pending)

        if pending:
            try:
                wait_until(all_registered, "slurmd of %s" % ", ".join(sorted(pending)), self.register_timeout,
                           sleep=self.sleep, clock=self.clock, poll=self.poll)
            except WaitTimeout:
                pass            # those still pending are reported below, each node on its own
        return registered, dict((name, RemediationError("the new slurmd of %s did not register within %ss (state %s)"
                                                        % (name, self.register_timeout, states.get(name))))
                                for name in pending)
