# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm version upgrades of a cluster on Kubernetes, in Slurm's documented order
(https://slurm.schedmd.com/upgrades.html): back up, slurmdbd, slurmctld, then slurmd and login.

A run whose spec changes the Slurm version of a component (the version its image tag says: slurm/versions.py):

1. is judged before any write (check mode too): a jump beyond the target release's compatibility window, a downgrade,
   a slurmctld newer than slurmdbd (or slurmd/login newer than slurmctld), or - unless allow_unversioned_images - a
   slurmdbd or slurmctld image whose tag says no version, fail the run naming the field, the versions and the
   supported path;
2. when slurmdbd moves: dumps the accounting database (mariadb-dump --single-transaction, which Slurm's guide allows
   while slurmdbd runs) with a Job of the MariaDB image onto the backup claim `<cluster>-backups`, waits for it,
   before anything else of the run is written;
3. applies the MariaDB and slurmdbd StatefulSets and waits until every pod runs their new template;
4. when slurmctld moves: stops it (its StatefulSet scaled to 0 under a field manager of its own), copies its
   StateSaveLocation (the spool claim) onto the backup claim with a Job, applies the new controller (which takes the
   replicas back) and waits for it;
5. leaves the rest (workers, login, ...) to the run's usual apply and the Slurm-aware roll of the workers.

Backups are ours but never pruned: the claim and the Jobs carry our name/instance/component labels and no managed-by
label, so no run, teardown or purge_volumes deletes them. A Job is named after what it backs up (the versions, the
StatefulSet's uid and generation): a re-run of the same upgrade finds it and takes no second dump; a failed one fails
the run until someone deletes it. An upgrade waits for each phase whatever `wait` says (bounded by wait_timeout).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import (
    BackendError, _rollout_done, job_failed, job_log_tail, observed, workload_state)
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import (
    ACCOUNTING, ACCOUNTING_DB, CONTROLLER, LOGIN, WORKER, selector_labels)
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import accounting_storage
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import versions as sv
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import accounting_db_secret_name

BACKUP = "backup"
BACKUP_MOUNT = "/backup"
STOP_FIELD_MANAGER = c.FIELD_MANAGER + "-upgrade"   # owns replicas=0 only while slurmctld's state is copied
DEFAULT_BACKUP_SIZE = "10Gi"
# The StatefulSet, its container, and the Slurm component of each kind of pod we run.
_CONTAINERS = {ACCOUNTING: ("slurmdbd", sv.ACCOUNTING), CONTROLLER: ("slurmctld", sv.CONTROLLER),
               WORKER: ("slurmd", sv.WORKER), LOGIN: ("sshd", sv.LOGIN)}


class UpgradeOptions(object):
    """The module options of upgrades (doc fragment soperator.slurm.kube_target)."""

    def __init__(self, allow_unversioned_images=False, backup_size=None, backup_storage_class=None):
        self.allow_unversioned_images = allow_unversioned_images
        self.backup_size = backup_size
        self.backup_storage_class = backup_storage_class


def backup_claim_name(model):
    return "%s-backups" % model.name


def _image(sts, container):
    for item in (((sts or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        if item.get("name") == container:
            return item.get("image")
    return None


def _label(obj, key):
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key)


def _field(model, component, node_set=None):
    """The spec field that sets a component's image, as errors name it."""
    images = (model.cluster_spec.get("spec") or {}).get("images") or {}
    where = "SlurmCluster/%s spec.images." % model.name
    if component == WORKER and node_set is not None:
        if ((model.node_set_specs.get(node_set) or {}).get("spec") or {}).get("image"):
            return "NodeSet/%s spec.image" % node_set
    key = {ACCOUNTING: "accounting", CONTROLLER: "controller", WORKER: "worker", LOGIN: "login"}[component]
    return where + (key if images.get(key) else "tag")


def components(model, changes, live, pods=()):
    """[versions.Component] of every Slurm StatefulSet of the run: those it applies (desired: the rendered image)
    and the other live ones (slurm_nodeset applies one NodeSet: the rest keep what they run)."""
    out, seen = [], set()
    running = {}
    for pod in pods:
        comp = _label(pod, c.LABEL_COMPONENT)
        if comp not in _CONTAINERS:
            continue
        owner = _label(pod, c.LABEL_NODESET) if comp == WORKER else None
        for item in (pod.get("spec") or {}).get("containers") or []:
            if item.get("name") == _CONTAINERS[comp][0] and item.get("image"):
                running.setdefault((comp, owner), set()).add(item["image"])
    candidates = [(ch.desired, ch.live) for ch in changes
                  if ch.kind == "StatefulSet" and ch.desired is not None and ch.action != ka.PRUNE]
    candidates += [(obj, obj) for key, obj in sorted(live.items()) if key[0] == "StatefulSet"]
    for desired, current in candidates:
        comp = _label(desired, c.LABEL_COMPONENT)
        name = desired["metadata"]["name"]
        if comp not in _CONTAINERS or name in seen:
            continue
        seen.add(name)
        container, slurm_name = _CONTAINERS[comp]
        node_set = _label(desired, c.LABEL_NODESET) if comp == WORKER else None
        pod_images = running.get((comp, node_set), set())
        out.append(sv.Component(slurm_name, name, _field(model, comp, node_set), _image(desired, container),
                                _image(current, container), tuple(sorted(pod_images))))
    return out


def _digest(*parts):
    return hashlib.sha256("\n".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:8]


def _version_text(image):
    version = sv.parse_image(image)
    return str(version) if version else "unversioned"


class ClusterUpgrade(object):
    """One run's Slurm version change on Kubernetes. plan() says whether there is one (refusing what Slurm does not
    support); backup_database() and apply_in_order() do it, report() says what was (or, in check mode, would be)
    done."""

    def __init__(self, backend, plan, changes, options):
        self.backend = backend
        self.model = backend.model
        self.client = backend.client
        self.plan = plan
        self.changes = changes
        self.options = options
        self.phases = []
        self.backup = {}

    # --- planning ------------------------------------------------------------------------------------------

    @classmethod
    def plan_for(cls, backend, changes, live, options):
        """The run's ClusterUpgrade, None when no Slurm version changes; BackendError (before any write) when the
        change is one Slurm does not support. The pods are listed only when some StatefulSet's version changes."""
        model = backend.model
        found = components(model, changes, live)
        if not any(comp.moves for comp in found):
            return None
        pods = backend.client.list("Pod", model.namespace, ka.owner_selector(model.name))
        found = components(model, changes, live, pods)
        try:
            plan = sv.plan(found, allow_unversioned=options.allow_unversioned_images)
        except sv.VersionError as e:
            raise BackendError(str(e))
        if not plan.moving:
            return None
        return cls(backend, plan, changes, options)

    def _sts_change(self, component):
        found = [ch for ch in self.changes if ch.kind == "StatefulSet" and ch.desired is not None and
                 _label(ch.desired, c.LABEL_COMPONENT) == component]
        return found[0] if found else None

    def _moving(self, component):
        change = self._sts_change(component)
        return change is not None and any(m.object_name == change.name for m in self.plan.moving)

    # --- the backup claim and Jobs -------------------------------------------------------------------------

    def _labels(self):
        # No managed-by label: never pruned, never deleted by a teardown (purge_volumes included).
        return selector_labels(self.model, BACKUP)

    def _claim(self):
        model = self.model
        db = model.accounting.in_cluster
        size = self.options.backup_size or (db.storage if db is not None else DEFAULT_BACKUP_SIZE)
        storage_class = self.options.backup_storage_class or (db.storage_class_name if db is not None else None)
        spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        if storage_class:
            spec["storageClassName"] = storage_class
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": backup_claim_name(model), "namespace": model.namespace,
                             "labels": self._labels()}, "spec": spec}

    def _selector(self):
        return ",".join("%s=%s" % kv for kv in sorted(self._labels().items()))

    def _ensure_claim(self):
        """The backup claim, created once; an existing one is left as it is (never resized or taken over)."""
        name = backup_claim_name(self.model)
        existing = [o for o in self.client.list("PersistentVolumeClaim", self.model.namespace, self._selector())
                    if o["metadata"]["name"] == name]
        if not existing:
            self.client.apply(self._claim(), force=False)

    def _job(self, name, container, volumes):
        model = self.model
        pod = {"restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
               "containers": [container], "volumes": volumes}
        if model.images.pull_secrets:
            pod["imagePullSecrets"] = [{"name": n} for n in model.images.pull_secrets]
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": model.namespace, "labels": self._labels()},
                "spec": {"backoffLimit": 1, "template": {"metadata": {"labels": self._labels()}, "spec": pod}}}

    def _container(self, script, mounts, env=()):
        return {"name": BACKUP, "image": self.model.images.mariadb, "imagePullPolicy": self.model.images.pull_policy,
                "command": ["sh", "-c", script], "env": list(env), "volumeMounts": mounts,
                "securityContext": {"allowPrivilegeEscalation": False}}

    def _dump_job(self, name, path):
        model = self.model
        storage = accounting_storage(model)
        external = model.accounting.external
        if external is not None:
            host, secret, key = external.host, external.password_secret.name, external.password_secret.key
        else:
            host = "%s.%s.svc.%s" % (storage.host, model.namespace, model.cluster_domain)
            secret, key = accounting_db_secret_name(model), s.DB_PASSWORD
        # Written under a temporary name and renamed when complete: a file without .partial is a whole dump.
        script = ('set -eu; mkdir -p "$(dirname "$DUMP")"; '
                  'mariadb-dump --single-transaction --routines --triggers --host="$DB_HOST" --port="$DB_PORT" '
                  '--user="$DB_USER" --databases "$DB_NAME" > "$DUMP.partial"; mv "$DUMP.partial" "$DUMP"; '
                  'ls -l "$DUMP"')
        env = [{"name": "DUMP", "value": path}, {"name": "DB_HOST", "value": host},
               {"name": "DB_PORT", "value": str(storage.port)}, {"name": "DB_USER", "value": storage.user},
               {"name": "DB_NAME", "value": storage.database},
               {"name": "MYSQL_PWD", "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}]
        container = self._container(script, [{"name": BACKUP, "mountPath": BACKUP_MOUNT}], env)
        return self._job(name, container, [{"name": BACKUP, "persistentVolumeClaim": {
            "claimName": backup_claim_name(model)}}])

    def _state_job(self, name, path):
        model = self.model
        # one controller: its claim template's claim; with a backup, the claim both share (render/kube_objects.py)
        spool = names.controller_spool_claim_name(model) if model.controller.replicas > 1 else \
            "spool-%s-0" % names.controller_name(model)
        script = ('set -eu; rm -rf "$TO.partial"; mkdir -p "$TO.partial"; cp -a %s/. "$TO.partial/"; '
                  'mv "$TO.partial" "$TO"; ls -l "$TO"' % c.CONTROLLER_SPOOL)
        container = self._container(script, [{"name": BACKUP, "mountPath": BACKUP_MOUNT},
                                             {"name": "spool", "mountPath": c.CONTROLLER_SPOOL, "readOnly": True}],
                                    [{"name": "TO", "value": path}])
        return self._job(name, container, [
            {"name": BACKUP, "persistentVolumeClaim": {"claimName": backup_claim_name(model)}},
            {"name": "spool", "persistentVolumeClaim": {"claimName": spool, "readOnly": True}}])

    def _names(self, change, what):
        """(Job name, file or folder on the backup claim) of a backup of `change`'s StatefulSet: the same for every
        run of this upgrade (versions, uid, generation), another for the next one."""
        meta = change.live.get("metadata") or {}
        container = _CONTAINERS[_label(change.desired, c.LABEL_COMPONENT)][0]
        before, after = _image(change.live, container), _image(change.desired, container)
        digest = _digest(what, before, after, meta.get("uid"), meta.get("generation"))
        job = "%s-%s-%s" % (self.model.name, what, digest)
        base = "%s-%s-to-%s-%s" % (what, _version_text(before), _version_text(after), digest)
        return job, base

    def _existing_job(self, name):
        for job in self.client.list("Job", self.model.namespace, self._selector()):
            if job["metadata"]["name"] == name:
                return job
        return None

    def _run_job(self, job, what):
        """Create `job` unless a Job of its name exists (an earlier run's: not taken again), wait until it completes;
        BackendError with its pod's last lines when it failed."""
        name = job["metadata"]["name"]
        existing = self._existing_job(name)
        if existing is not None and job_failed(existing):
            raise self._failed(name, existing)
        if existing is None:
            self.client.apply(job, force=False)

        def done():
            current = self._existing_job(name)
            if current is None:
                return False, "missing"
            if job_failed(current):
                raise self._failed(name, current)
            ready, text = workload_state(current)
            return ready, "Job %s (%s)" % (name, text)
        self.backend.wait_recorded(done, what, self.backend.options.wait_timeout)
        return existing is None

    def _failed(self, name, job):
        log = job_log_tail(self.client, self.model.namespace, name, (job.get("metadata") or {}).get("uid"))
        return BackendError("Job %s/%s (%s) failed: %s; nothing after it was changed. Delete the Job to take the "
                            "backup again%s" % (self.model.namespace, name, _label(job, c.LABEL_COMPONENT),
                                                workload_state(job)[1], log))

    # --- the phases ----------------------------------------------------------------------------------------

    def _backup_phase(self, change, what, where, record, phase_name, phase_key):
        """One backup's (Job name, path it writes, phase report): the path is `where` % a name of `change` below the
        backup claim; the result's backup records it, relative to the claim, as `record` and the Job as
        `record`_job. In check mode the phase is planned."""
        job, base = self._names(change, what)
        path = "%s/%s" % (BACKUP_MOUNT, where % base)
        self.backup["claim"] = backup_claim_name(self.model)
        self.backup[record] = path[len(BACKUP_MOUNT) + 1:]
        self.backup[record + "_job"] = job
        phase = {"phase": phase_name, "job": job, phase_key: self.backup[record], "claim": self.backup["claim"]}
        if self.backend.options.check_mode:
            phase["status"] = "planned"
        return job, path, phase

    def backup_database(self):
        """The database dump, before anything else of the run is written (when slurmdbd moves)."""
        change = self._sts_change(ACCOUNTING)
        if not self.model.accounting.enabled or not self._moving(ACCOUNTING):
            return
        job, path, phase = self._backup_phase(change, "dbdump", "accounting/%s.sql", "dump", "backup-database", "file")
        if not self.backend.options.check_mode:
            self._ensure_claim()
            phase["status"] = "done" if self._run_job(self._dump_job(job, path), "the accounting database dump") \
                else "done earlier"
        self.phases.append(phase)

    def apply_in_order(self, rest):
        """Apply the accounting StatefulSets, then the controller (its state saved first), each waited for; returns
        the changes of `rest` left for the run's usual apply."""
        rest = list(rest)
        accounting = [ch for ch in rest if ch.kind == "StatefulSet" and ch.desired is not None and
                      _label(ch.desired, c.LABEL_COMPONENT) in (ACCOUNTING_DB, ACCOUNTING)]
        if self.model.accounting.enabled and accounting:
            self._phase("slurmdbd", accounting)
        rest = [ch for ch in rest if ch not in accounting]
        controller = self._sts_change(CONTROLLER)
        if controller is not None and controller in rest:
            if self._moving(CONTROLLER):
                self._save_state(controller)
            self._phase("slurmctld", [controller])
            rest.remove(controller)
        others = [ch.name for ch in rest if ch.kind == "StatefulSet" and ch.writes]
        if others:
            # applied by the run's usual step; workers then roll Slurm-aware (the result's rollout)
            self.phases.append({"phase": "slurmd and login", "objects": others,
                                "status": "planned" if self.backend.options.check_mode else "applied"})
        return rest

    def _phase(self, name, changes):
        phase = {"phase": name, "objects": [ch.name for ch in changes]}
        self.backend.apply_changes(changes)
        if self.backend.options.check_mode:
            phase["status"] = "planned"
        else:
            keys = [ch.name for ch in changes]
            self.backend.wait_recorded(lambda: self._rolled_out(keys), "%s to run its new version" % name,
                                       self.backend.options.wait_timeout)
            phase["status"] = "ready"
        self.phases.append(phase)

    def _rolled_out(self, sts_names):
        """Every pod of these StatefulSets runs their current template and is ready (one list)."""
        objs = dict((o["metadata"]["name"], o) for o in self.client.list(
            "StatefulSet", self.model.namespace, ka.owner_selector(self.model.name)))
        waiting = []
        for name in sts_names:
            sts = objs.get(name)
            if sts is None or not observed(sts) or not _rollout_done(sts):
                status = (sts or {}).get("status") or {}
                waiting.append("StatefulSet %s (%s/%s updated and ready)" % (
                    name, min(int(status.get("updatedReplicas") or 0), int(status.get("readyReplicas") or 0)),
                    int(((sts or {}).get("spec") or {}).get("replicas") or 0)))
        return not waiting, "; ".join(waiting)

    def _save_state(self, change):
        """Stop slurmctld, copy its StateSaveLocation onto the backup claim (Slurm's guide: shut down, back up the
        StateSaveLocation, upgrade, restart)."""
        job, path, phase = self._backup_phase(change, "slurmctld-state", "slurmctld/%s", "state",
                                              "save-slurmctld-state", "folder")
        if self.backend.options.check_mode:
            self.phases.append(phase)
            return
        self._ensure_claim()
        existing = self._existing_job(job)
        if existing is None or not workload_state(existing)[0]:
            # slurmctld writes its state all the time: stopped first (with a backup, both at once: Slurm's upgrade
            # guide, "When multiple slurmctld hosts are used, all should be upgraded simultaneously").
            stop = {"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": change.name, "namespace": self.model.namespace}, "spec": {"replicas": 0}}
            self.client.apply(stop, force=True, field_manager=STOP_FIELD_MANAGER)
            selector = ",".join("%s=%s" % kv for kv in sorted(selector_labels(self.model, CONTROLLER).items()))
            self.backend.wait_recorded(
                lambda: (not self.client.list("Pod", self.model.namespace, selector), "slurmctld's pod"),
                "slurmctld to stop", self.backend.options.wait_timeout)
        phase["status"] = "done" if self._run_job(self._state_job(job, path), "slurmctld's state to be saved") \
            else "done earlier"
        self.phases.append(phase)

    def report(self):
        out = {"versions": self.plan.versions, "phases": list(self.phases)}
        if self.plan.unverified:
            out["unverified"] = True
        if self.backup:
            out["backup"] = dict(self.backup)
        return out
