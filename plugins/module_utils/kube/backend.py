# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes target: a whole cluster (slurm_cluster) or one NodeSet (slurm_nodeset) brought to the spec.

One run, in order:
1. read what we own: one list per managed kind (labels managed-by + instance), plus the namespace;
2. render from the spec, keeping the Secret material that is already live (generated once, never rotated);
3. remove workers safely: nodes that a smaller or deleted NodeSet loses are drained, waited for and taken out of
   Slurm before anything else changes (slurm/removal.py);
4. apply what changed (kube_apply), the populate Job before the workloads that mount the jail (waiting for it when
   wait=true), then prune what is no longer rendered;
5. reload Slurm: a changed slurm.conf reaches slurmctld with `scontrol reconfigure`, once the controller pod sees the
   new file (the kubelet updates mounted ConfigMaps late); changed node definitions roll the controller through its
   pod template instead (render/kube_objects.node_definitions_hash); kube/reconfigure.py;
   then, with wait=true, a scale-up of worker StatefulSets beyond spec.workers.maxStartingPods goes on in steps,
   each waited for (kube/stagger.py; step 4 applied its first);
6. roll the workers of NodeSets with updateStrategy slurmAware onto their new pod template, Slurm-aware: in batches
   of at most maxUnavailable, idle nodes first, busy ones drained and replaced only once they run no job, each new
   slurmd re-checked before it is resumed (slurm/rollout.py plans and executes, kube/rollout.py reads the revisions);
7. wait for readiness (wait=true) and write .status of the SlurmCluster and NodeSets when it changed.
Check mode runs 1-4 with the API server's dry run and the Slurm side as a plan, and 6 as the roll's plan.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import time
from dataclasses import dataclass, field

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import (
    BackendError, _replicas, job_failed, job_log_tail, wait_for, workload_state)
from ansible_collections.soperator.slurm.plugins.module_utils.kube.reconfigure import (
    CONFIG_DIGEST_FIELD, SlurmConfigReload)
from ansible_collections.soperator.slurm.plugins.module_utils.kube.status import cluster_status, node_set_status
from ansible_collections.soperator.slurm.plugins.module_utils.kube import rollout as kube_rollout
from ansible_collections.soperator.slurm.plugins.module_utils.kube.stagger import ScaleUp
from ansible_collections.soperator.slurm.plugins.module_utils.kube import topology as kube_topology
from ansible_collections.soperator.slurm.plugins.module_utils.kube.identity_refs import check_identity_refs
from ansible_collections.soperator.slurm.plugins.module_utils.kube import upgrade as kube_upgrade
from ansible_collections.soperator.slurm.plugins.module_utils.kube.pod_replace import KubeReplacer
from ansible_collections.soperator.slurm.plugins.module_utils.kube import power_roll
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import maintenance
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import remediation as rm
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import power_down, removal
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import rollout as slurm_rollout
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.spec.crds import crds
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.topology import topology_tree
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (
    CR_API_VERSION, KubeError, NotFound, RESOURCES, object_key)
from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster, secret_material
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_limits import check_kube_sizes
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import (
    APP_NAME, KIND_ORDER, WORKER, labels as component_labels)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError

# Everything we may own, in apply order; the CRs go first so the cluster's own record exists before its parts.
MANAGED_KINDS = ("SlurmCluster", "NodeSet") + KIND_ORDER
# With manage_rbac=false these are neither read, applied nor pruned (nor the remediation ServiceAccount): the
# in-cluster remediation run may not grant itself rights (privilege escalation) and needs no RBAC verbs at all.
RBAC_KINDS = frozenset(["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"])
CRD_SELECTOR = "%s=%s" % (c.LABEL_MANAGED_BY, c.FIELD_MANAGER)
# .status fields another writer owns (jail_populate, under its own field manager): kept, not compared.
STATUS_OWNED_ELSEWHERE = ("jail",)


# --- desired state -------------------------------------------------------------------------------------------

def custom_resources(model):
    """The SlurmCluster and NodeSet objects as we apply them: the validated, defaulted spec plus our labels."""
    out = []
    docs = [model.cluster_spec] + [model.node_set_specs[ns.name] for ns in model.node_sets]
    for doc in docs:
        node_set = doc["metadata"]["name"] if doc["kind"] == "NodeSet" else None
        meta = {"name": doc["metadata"]["name"], "namespace": model.namespace}
        user_labels = dict(doc["metadata"].get("labels") or {})
        user_labels.update(component_labels(model, "cluster" if node_set is None else WORKER, node_set))
        meta["labels"] = user_labels
        if doc["metadata"].get("annotations"):
            meta["annotations"] = dict(doc["metadata"]["annotations"])
        out.append({"apiVersion": CR_API_VERSION, "kind": doc["kind"], "metadata": meta,
                    "spec": without_nulls(doc["spec"])})
    return out


def without_nulls(value):
    """The defaulted spec holds None for optional fields left unset; the CRDs' schema (like the API server) has no
    nullable fields, so they are left out."""
    if isinstance(value, dict):
        return dict((k, without_nulls(v)) for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return [without_nulls(v) for v in value if v is not None]
    return copy.deepcopy(value)


def live_secret_material(live):
    """name -> {key: bytes} of the Secrets we own that exist: reused, so secrets are generated once."""
    material = {}
    for (kind, _namespace, name), obj in live.items():
        if kind == "Secret":
            material[name] = secret_material(obj)
    return material


def _component(obj):
    return ((obj.get("metadata") or {}).get("labels") or {}).get(c.LABEL_COMPONENT)


# --- the run -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KubeOptions:
    """What a KubeCluster run may do and how long it waits: the module's options (kube/module.py makes them)."""
    check_mode: bool = False
    install_crds: bool = True
    create_namespace: bool = True
    purge_volumes: bool = False
    force_conflicts: bool = True
    wait: bool = False
    wait_timeout: int = 600
    drain_timeout: int = 3600
    force: bool = False
    reconfigure: bool = True
    poll: float = 2.0               # seconds between the reads of a wait
    manage_rbac: bool = True
    recreate_statefulsets: bool = False
    rollout_timeout: int = 600
    upgrade: kube_upgrade.UpgradeOptions = field(default_factory=kube_upgrade.UpgradeOptions)


class KubeCluster(SlurmConfigReload):
    """One cluster on one API server, run with `options` (KubeOptions). `runner_factory()` gives the SlurmRunner,
    made only when Slurm is needed; `checker_factory()` the health checker of a roll (slurm/remediation.py)."""

    def __init__(self, client, model, options=None, runner_factory=None, checker_factory=None, sleep=time.sleep,
                 clock=time.monotonic):
        self.client = client
        self.model = model
        self.options = options or KubeOptions()
        self.runner_factory = runner_factory
        self.checker_factory = checker_factory
        self.sleep = sleep
        self.clock = clock
        self._runner = None
        self.upgrade = None         # this run's Slurm version change (kube/upgrade.py), if any
        self.rollout_steps = []
        self.scale_up = None        # this run's staggered scale-up of worker StatefulSets (kube/stagger.py), if any
        self.reservations = []                      # scheduled NodeSets: what became of their reservation
        self.now = time.time                        # the wall clock of maintenance windows
        self.changes = []
        self.actions = []      # what was done outside Kubernetes objects: Slurm commands
        self.waited = []
        self.namespace_missing = False
        self.status = None
        self.status_updated = False
        self._last_workloads = None
        self.loaded_digest = None   # digest of the configs slurmctld is known to run with after this run

    @property
    def runner(self):
        if self._runner is None:
            if self.runner_factory is None:
                raise BackendError("this change needs Slurm access (draining or reconfiguring), and none was given")
            self._runner = self.runner_factory()
        return self._runner

    @property
    def prefix(self):
        return self.model.remediation.drain_reason_prefix

    # --- reading -------------------------------------------------------------------------------------------

    def read_live(self):
        """key -> object for everything of this cluster we own: one request per kind."""
        selector = ka.owner_selector(self.model.name)
        live = {}
        namespaced_prefix = "soperator-slurm-%s-%s-" % (self.model.namespace, self.model.name)
        for kind in MANAGED_KINDS:
            if not self.options.manage_rbac and kind in RBAC_KINDS:
                continue
            namespaced = RESOURCES[kind][2]
            for obj in self.client.list(kind, self.model.namespace if namespaced else None, selector):
                # cluster-scoped objects carry the namespace in their name: another namespace's cluster of the
                # same name is not ours
                if not namespaced and not obj["metadata"]["name"].startswith(namespaced_prefix):
                    continue
                if self.manages(obj):
                    live[object_key(obj)] = obj
        return live

    def manages(self, obj):
        """False for the objects manage_rbac=false leaves alone: RBAC kinds and the ServiceAccounts they grant rights
        to (remediation's, the power programs')."""
        if self.options.manage_rbac:
            return True
        return obj["kind"] not in RBAC_KINDS and not (
            obj["kind"] == "ServiceAccount"
            and obj["metadata"]["name"] in (names.remediation_name(self.model), names.power_name(self.model)))

    def ensure_namespace(self):
        ns = self.model.namespace
        if not self.options.create_namespace:
            # It must exist; not even read (namespaces are cluster-scoped: the in-cluster run has no right to them).
            return None
        if self.client.get("Namespace", ns) is not None:
            return None
        change = ka.Change(ka.CREATE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if self.options.check_mode:
            self.namespace_missing = True
        else:
            change.after = self.client.create(change.desired)
        return change

    # --- applying ------------------------------------------------------------------------------------------

    def apply_changes(self, changes):
        """Apply `changes` (ours and kube/upgrade.py's phases); in check mode a dry run (skipped where the namespace or
        CRD does not exist yet)."""
        if self.options.check_mode and self.namespace_missing:
            return
        try:
            opts = self.options
            ka.execute(self.client, changes, dry_run=opts.check_mode, force_conflicts=opts.force_conflicts,
                       gone_timeout=opts.wait_timeout, sleep=self.sleep, clock=self.clock, poll=opts.poll)
        except ka.ApplyError as e:
            if self.options.check_mode and isinstance(e.error, NotFound):
                # dry run against a kind whose CRD is not installed yet: report the plan without the server's view
                rest = changes[changes.index(e.change) + 1:]
                self.apply_changes([ch for ch in rest if ch.kind != e.change.kind])
                return
            raise BackendError("%s (objects before it were applied; a re-run continues)" % e)

    def apply_crds(self):
        if not self.options.install_crds:
            return []
        live = ka.index(self.client.list("CustomResourceDefinition", None, CRD_SELECTOR))
        wanted = crds()
        changes = ka.plan(wanted, live)   # never pruned: deleting a CRD deletes every cluster's objects
        self.apply_changes(changes)
        if not self.options.check_mode and any(ch.writes for ch in changes):
            crd_names = [crd["metadata"]["name"] for crd in wanted]
            self.wait_recorded(lambda: self._crds_established(crd_names), "CustomResourceDefinitions established",
                               self.options.wait_timeout)
        return changes

    def _crds_established(self, crd_names):
        missing = []
        for name in crd_names:
            live = self.client.get("CustomResourceDefinition", name) or {}
            conds = (live.get("status") or {}).get("conditions") or []
            if not any(cd.get("type") == "Established" and cd.get("status") == "True" for cd in conds):
                missing.append(name)
        return not missing, ", ".join(missing)

    def wait_recorded(self, probe, what, timeout):
        """Wait until `probe` holds (readiness.wait_for), recording the wait in the result's `waited`; the upgrade
        waits through it too."""
        seconds = wait_for(probe, what, timeout, sleep=self.sleep, clock=self.clock, poll=self.options.poll)
        self.waited.append({"for": what, "seconds": seconds})

    # --- the Slurm side ------------------------------------------------------------------------------------

    def scale_down(self, desired, live):
        """Drain and remove the nodes that shrinking or deleted worker StatefulSets lose."""
        wanted = dict((object_key(o), o) for o in desired if o["kind"] == "StatefulSet")
        nodes = []
        for key, obj in sorted(live.items()):
            if key[0] != "StatefulSet" or _component(obj) != WORKER:
                continue
            target = _replicas(wanted[key]) if key in wanted else 0
            nodes += removal.removed_nodes(key[2], _replicas(obj), target)
        if not nodes:
            return
        try:
            opts = self.options
            self.actions += removal.remove_nodes(
                self.runner, nodes, self.prefix, opts.drain_timeout, force=opts.force, check_mode=opts.check_mode,
                sleep=self.sleep, clock=self.clock, poll=opts.poll)
        except removal.ScaleDownError as e:
            self.actions += e.actions
            raise BackendError(str(e))
        except SlurmError as e:
            raise BackendError("scale-down of %s: %s" % (", ".join(nodes), e))

    def roll_workers(self, changes):
        """Slurm-aware rolling upgrade of each NodeSet whose updateStrategy is slurmAware, or scheduled (inside its
        window; a maintenance reservation before it: slurm/maintenance.py), and whose workers (some of them) run an
        older pod template. A StatefulSet this run left unchanged and whose status counts every replica updated
        costs no request."""
        opts = self.options
        for node_set in self.model.node_sets:
            strategy = node_set.update_strategy
            if not strategy.slurm_aware:
                continue
            change = self._change(changes, "StatefulSet", node_set.name)
            if change is None or change.live is None or change.action == ka.PRUNE:
                continue        # another NodeSet's run (slurm_nodeset), or new pods: nothing to roll
            predicted_new = opts.check_mode and kube_rollout.template_changes(change)
            if not predicted_new and (change.action == ka.UNCHANGED or opts.check_mode) and \
                    kube_rollout.all_updated(change.live):
                continue
            read = kube_rollout.WorkerRevisions(
                self.client, self.model.namespace, node_set.name, node_set.node_name, opts.wait_timeout,
                ka.owner_selector(self.model.name), predicted_new=predicted_new, sleep=self.sleep, clock=self.clock,
                poll=opts.poll)
            first = read()
            nodes, revisions, update_revision = first
            if not strategy.scheduled and not slurm_rollout.outdated(nodes, revisions, update_revision):
                # every pod current (the status lagged): no Slurm access at all. A scheduled NodeSet goes on: a
                # template set back before its window leaves a reservation to remove.
                continue
            if self.checker_factory is None:
                raise BackendError("rolling NodeSet %s needs its health checks, and no checker was given"
                                   % node_set.name)
            replacer = KubeReplacer(self.client, self.model.namespace, timeout=opts.wait_timeout, poll=opts.poll,
                                    sleep=self.sleep, clock=self.clock)
            events = rm.EventRecorder(self.client, self.model.namespace, self.model.name, CR_API_VERSION)
            topology = kube_topology.follower(self.client, self.model, self.runner, timeout=opts.wait_timeout,
                                              poll=opts.poll, sleep=self.sleep, clock=self.clock)
            remediator = rm.Remediator(self.runner, self.prefix, self.checker_factory(), replacer=replacer,
                                       events=events, check_mode=opts.check_mode,
                                       register_timeout=opts.wait_timeout, poll=opts.poll, sleep=self.sleep,
                                       clock=self.clock, topology=topology)
            roll = slurm_rollout.Rollout(self.runner, self.prefix, read, remediator, strategy.max_unavailable,
                                         opts.rollout_timeout, node_set.name, check_mode=opts.check_mode,
                                         poll=opts.poll, sleep=self.sleep, clock=self.clock)
            try:
                if strategy.scheduled:
                    steps, reservation = maintenance.ScheduledRollout(
                        self.runner, roll, node_set.name, strategy.window_start, strategy.window_end,
                        check_mode=opts.check_mode, now=self.now).run(first)
                    self.reservations += [reservation] if reservation else []
                else:
                    steps = roll.run(first)
                self.rollout_steps += steps
            except SlurmError as e:
                raise BackendError("rolling NodeSet %s: %s" % (node_set.name, e))
            finally:
                if topology is not None and topology.loaded_digest:
                    # a replaced worker moved: the topology and the configs slurmctld runs on are the follower's
                    self.model, self.loaded_digest = topology.placed, topology.loaded_digest
            if roll.errors:
                raise BackendError("rolling NodeSet %s: %s" % (node_set.name, "; ".join(roll.errors)))

    def roll_ephemeral(self, desired):
        """Ephemeral workers whose pod runs an older template than their NodeSet's: handed back to Slurm's power
        saving, which powers them down once idle (slurm/power_down.py); the next resume makes them anew. One pod
        list per run, only for a cluster with ephemeral NodeSets; Slurm is read only when a pod is outdated."""
        digests = power_roll.current_digests(self.model, desired)
        if digests is None or self.namespace_missing:
            return
        stale = power_roll.outdated_pods(self.client, self.model, digests)
        if not stale:
            return
        try:
            self.actions += power_down.power_down_outdated(self.runner, stale, self.prefix,
                                                           check_mode=self.options.check_mode)
        except SlurmError as e:
            raise BackendError("powering down outdated ephemeral workers %s: %s" % (", ".join(stale), e))

    def _stagger(self, rest, live):
        """Plan the staggered scale-up (kube/stagger.py) of the worker StatefulSets `rest` grows: only in a run that
        waits (wait=false applies the replicas at once). -> the changes to apply, the growing ones held at the
        first step."""
        opts = self.options
        bound = self.model.workers.max_starting_pods if opts.wait else 0
        self.scale_up = ScaleUp(self.client, self.model.namespace, ka.owner_selector(self.model.name), bound,
                                opts.wait_timeout, check_mode=opts.check_mode, force_conflicts=opts.force_conflicts,
                                poll=opts.poll, sleep=self.sleep, clock=self.clock)
        return self.scale_up.plan(rest, [o for key, o in sorted(live.items()) if key[0] == "StatefulSet"])

    def _scale_up_steps(self):
        if self.scale_up.staggered and not self.options.check_mode:
            seconds = self.scale_up.run()
            self.waited.append({"for": "the workers' scale-up in %d steps" % len(self.scale_up.steps),
                                "seconds": seconds})

    def _change(self, changes, kind, name):
        found = [ch for ch in changes if ch.kind == kind and ch.name == name]
        return found[0] if found else None

    # --- entry points --------------------------------------------------------------------------------------

    def present(self, desired_filter=None, prune_filter=None, extra_live=()):
        """Bring the cluster to the model. desired_filter/prune_filter(obj) narrow what is applied/pruned (for one
        NodeSet); extra_live are objects of ours that lack our labels. Returns the result dict."""
        self.changes = []
        try:
            check_kube_sizes(self.model, custom_resources(self.model))   # before the namespace, the first write
        except SpecError as e:
            raise BackendError(str(e))
        check_identity_refs(self.client, self.model)     # the Secrets spec.identity names, before any write
        ns_change = self.ensure_namespace()
        # Plan before applying the CRDs, so a refused plan (a StatefulSet to recreate) writes nothing; the namespace
        # was created only if missing, and then nothing of ours exists to refuse.
        live = {} if self.namespace_missing else self.read_live()
        if not self.namespace_missing:
            # spec.topology.nodeLabels: where the workers run now decides topology.conf / topology.yaml
            self.model = kube_topology.with_placement(self.client, self.model)
        for obj in extra_live:
            live.setdefault(object_key(obj), obj)
        rendered = render_cluster(self.model, live_secret_material(live))
        desired = [o for o in custom_resources(self.model) + rendered.manifests if self.manages(o)]
        if desired_filter is not None:
            desired = [o for o in desired if desired_filter(o)]
        desired_keys = set(object_key(o) for o in desired)
        scoped_live = live
        if prune_filter is not None:
            scoped_live = dict((k, o) for k, o in live.items() if prune_filter(o) or k in desired_keys)
        try:
            changes = ka.plan(desired, scoped_live, purge_volumes=self.options.purge_volumes,
                              recreate_statefulsets=self.options.recreate_statefulsets)
        except ka.PlanError as e:
            raise BackendError(str(e))
        # A Slurm version change Slurm does not support is refused here, before any write; a slurmdbd one dumps the
        # accounting database before anything else is written.
        self.upgrade = kube_upgrade.ClusterUpgrade.plan_for(self, changes, live, self.options.upgrade)
        if self.upgrade is not None:
            self.upgrade.backup_database()
        crd_changes = self.apply_crds()
        self.changes = ([ns_change] if ns_change else []) + crd_changes + changes
        self.scale_down(desired, scoped_live)
        # The populate Job before the workloads that mount the jail.
        first = [ch for ch in changes if ch.action != ka.PRUNE and
                 (ch.kind in ("SlurmCluster", "NodeSet") or KIND_ORDER.index(ch.kind) <= KIND_ORDER.index("Job"))]
        rest = [ch for ch in changes if ch not in first]
        self.apply_changes(first)
        # created now, or created by an earlier run that did not see it complete
        job = [ch for ch in first if ch.kind == "Job" and (ch.live is None or not workload_state(ch.live)[0])]
        if job and self.options.wait and not self.options.check_mode:
            self.wait_recorded(lambda: self._workloads_ready([("Job", job[0].name)]), "the jail to be populated",
                               self.options.wait_timeout)
        if self.upgrade is not None:
            rest = self.upgrade.apply_in_order(rest)     # slurmdbd, then slurmctld, each waited for
        rest = self._stagger(rest, live)
        self.apply_changes(rest)
        self.scale_up.after_apply(rest)
        self.reload_slurm(changes)
        self._scale_up_steps()
        self.roll_workers(changes)
        self.roll_ephemeral(desired)
        return self._finish(desired)

    def absent(self):
        """Delete what we own of the cluster. Nothing is drained: slurmctld goes with the workers, and so do the jobs
        (removing a NodeSet from a cluster that stays drains its nodes first). Volumes stay unless purge_volumes;
        CRDs always stay."""
        self.changes = []
        if self.client.get("Namespace", self.model.namespace) is None:
            return self.result()
        live = self.read_live()
        live.update(self.template_claims(live))
        self.changes = ka.plan([], live, purge_volumes=self.options.purge_volumes)
        self.apply_changes(self.changes)
        return self.result()

    def template_claims(self, live):
        """key -> claim, for the volume claims the StatefulSet controller made from our claim templates (the
        controller's spool, the in-cluster database): `<template>-<StatefulSet>-<ordinal>`. They carry the
        template's labels and no managed-by label (never pruned with their StatefulSet), so read_live does not see
        them; a teardown reports them kept, or deletes them with purge_volumes. The StatefulSets are the rendered
        ones and the live ones (a teardown may follow one that kept the claims and deleted the StatefulSets)."""
        sets = [o for o in render_cluster(self.model, live_secret_material(live)).manifests
                if o["kind"] == "StatefulSet"]
        sets += [o for key, o in sorted(live.items()) if key[0] == "StatefulSet"]
        prefixes = set()
        for sts in sets:
            for template in sts["spec"].get("volumeClaimTemplates") or []:
                prefixes.add("%s-%s-" % (template["metadata"]["name"], sts["metadata"]["name"]))
        if not prefixes:
            return {}
        selector = "%s=%s,%s=%s" % (c.LABEL_NAME, APP_NAME, c.LABEL_INSTANCE, self.model.name)
        claims = {}
        for claim in self.client.list("PersistentVolumeClaim", self.model.namespace, selector):
            name = claim["metadata"]["name"]
            if any(name.startswith(p) and name[len(p):].isdigit() for p in prefixes):
                claims[object_key(claim)] = claim
        return claims

    def _workloads_ready(self, keys):
        objs = {}
        for kind in set(k for k, _n in keys):
            for obj in self.client.list(kind, self.model.namespace, ka.owner_selector(self.model.name)):
                objs[(kind, obj["metadata"]["name"])] = obj
        waiting = []
        for key in keys:
            obj = objs.get(key)
            ready, text = workload_state(obj) if obj else (False, "missing")
            if key[0] == "Job" and obj is not None and job_failed(obj):
                log = self._job_log(key[1])
                raise BackendError("Job %s/%s failed: %s%s" % (self.model.namespace, key[1], text, log))
            if not ready:
                waiting.append("%s %s (%s)" % (key[0], key[1], text))
        self._last_workloads = objs
        return not waiting, "; ".join(waiting)

    def _ready_as_read(self, keys):
        objs = dict(((ch.kind, ch.name), ch.live) for ch in self.changes if ch.live is not None)
        if not all(key in objs and workload_state(objs[key])[0] for key in keys):
            return False
        self._last_workloads = objs
        return True

    def _job_log(self, job):
        return job_log_tail(self.client, self.model.namespace, job)

    def _finish(self, desired):
        # slurmrestd's Deployment (spec.rest) too: a pod that cannot start fails the run instead of passing it by
        workload_keys = [(o["kind"], o["metadata"]["name"]) for o in desired
                         if o["kind"] in ("StatefulSet", "Job", "Deployment")]
        self._last_workloads = None
        if self.options.wait and not self.options.check_mode:
            if not any(ch.writes for ch in self.changes) and self._ready_as_read(workload_keys):
                # nothing was written: what the run read at its start is current, and shows the cluster ready
                self.waited.append({"for": "the cluster to be ready", "seconds": 0.0})
            else:
                self.wait_recorded(lambda: self._workloads_ready(workload_keys), "the cluster to be ready",
                                   self.options.wait_timeout)
        if not self.options.check_mode:
            self._note_loaded_by_start()
            self.write_status()
        return self.result()

    def _current_workloads(self):
        """StatefulSets and Jobs as they are now: the last wait's read, else the apply answers and the first read."""
        if self._last_workloads is not None:
            return self._last_workloads
        objs = {}
        for ch in self.changes:
            if ch.kind in ("StatefulSet", "Job") and ch.action != ka.PRUNE:
                obj = ch.after if ch.after is not None else ch.live
                if obj is not None:
                    objs[(ch.kind, ch.name)] = obj
        return objs

    def write_status(self):
        """Apply .status of the SlurmCluster and its NodeSets, only where it changed."""
        workloads = self._current_workloads()
        for ch in self.changes:
            if ch.kind not in ("SlurmCluster", "NodeSet") or ch.action == ka.PRUNE or ch.desired is None:
                continue   # not rendered any more: pruned, or being deleted already
            obj = ch.after if ch.after is not None else ch.live
            previous = (ch.live or {}).get("status") or {}
            generation = (obj.get("metadata") or {}).get("generation", 0)
            if ch.kind == "SlurmCluster":
                status = cluster_status(self.model, workloads, generation, previous)
                # kept as it was unless this run knows what slurmctld loaded (the writer owns the whole .status)
                digest = self.loaded_digest or previous.get(CONFIG_DIGEST_FIELD)
                if digest:
                    status[CONFIG_DIGEST_FIELD] = digest
                self.status = status
            else:
                node_set = self.model.node_set(ch.name)
                status = node_set_status(self.model, node_set, workloads.get(("StatefulSet", ch.name)),
                                         generation, previous)
            ours = dict((k, v) for k, v in previous.items() if k not in STATUS_OWNED_ELSEWHERE)
            if ka.contained(status, ours) and ka.contained(ours, status):
                continue
            body = {"apiVersion": CR_API_VERSION, "kind": ch.kind,
                    "metadata": {"name": ch.name, "namespace": self.model.namespace}, "status": status}
            try:
                self.client.apply(body, subresource="status", force=True)
            except KubeError as e:
                raise BackendError("the cluster was applied, but writing its status failed: %s" % e)
            self.status_updated = True

    def result(self):
        changed = any(ch.writes for ch in self.changes) or any(
            not a.startswith("kept ") for a in self.actions) or any(
            slurm_rollout.acted(step, self.options.check_mode) for step in self.rollout_steps) or any(
            maintenance.acted(entry) for entry in self.reservations)
        tree = topology_tree(self.model)
        return {
            "topology": tree.report() if tree is not None else None,
            "upgrade": self.upgrade.report() if self.upgrade is not None else None,
            "rollout": list(self.rollout_steps),
            "scale_up": self.scale_up.report() if self.scale_up is not None else None,
            "reservations": list(self.reservations),
            "changed": changed,
            "objects": [ch.result() for ch in self.changes],
            "actions": list(self.actions),
            "waited": list(self.waited),
            "status": self.status,
            "status_updated": self.status_updated,
            "requests": dict(self.client.calls),
        }

    def diff(self):
        out = [ch.diff() for ch in self.changes if ch.action != ka.UNCHANGED and ch.action != ka.KEEP]
        report = self.scale_up.report() if self.scale_up is not None else None
        if report:
            header = "worker StatefulSets scaled up in %d steps (spec.workers.maxStartingPods %d)" % (
                report["step_count"], report["max_starting_pods"])
            lines = ["step %d: %s\n" % (i + 1, ", ".join("%s replicas %d" % kv for kv in sorted(step.items())))
                     for i, step in enumerate(report["steps"])]
            out.append({"before_header": header, "after_header": header, "before": "", "after": "".join(lines)})
        return out
