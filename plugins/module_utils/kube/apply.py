# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan and apply a set of Kubernetes objects with server-side apply, and prune the ones we own that are gone.

How a run stays cheap and truthful:
- Live state is read once: one list per managed kind, selected by our labels.
- An object is unchanged when the live one carries the digest of exactly what we would apply (the annotation
  APPLIED_ANNOTATION, so a field we stopped rendering counts as a change) and every field we render has that value
  live (so an edit by someone else counts too). Unchanged objects are not sent: a no-op run makes no write.
- Changed objects are sent with server-side apply under one field manager, in the order given (dependencies first).
  Check mode sends the same requests with dryRun=All, so the plan and the diff are the API server's own answer.
- Pruning deletes objects carrying our labels that are no longer rendered, last and in reverse order. Persistent
  volume claims are kept unless purge_volumes: they hold the jail and the databases. One whose deletion is under way
  already (held by a finalizer, e.g. a claim a pod still mounts) is left to it: unchanged, noted, nothing sent.
- A StatefulSet whose immutable fields (STS_IMMUTABLE) differ cannot be applied: the plan finds it before anything is
  written and refuses unless recreate_statefulsets. Then it is deleted with propagationPolicy=Orphan (its pods keep
  running), and, once gone, applied again; the new one adopts the pods. Its claims are never touched.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import time

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils import wait
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeError, describe, object_key
from ansible_collections.soperator.slurm.plugins.module_utils.spec.quantity import is_quantity, parse_quantity
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import KIND_ORDER
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import to_yaml

APPLIED_ANNOTATION = "slurm.soperator.dev/applied"
HIDDEN = "<hidden>"
# Data of these kinds never appears in a diff or a result.
SECRET_KINDS = frozenset(["Secret"])
# Kept by pruning unless purge_volumes: they hold data (the jail, spools, the accounting database).
VOLUME_KINDS = frozenset(["PersistentVolumeClaim"])
# Run once: a Job's pod template is immutable and re-running it is a decision, not a reconcile.
RUN_ONCE_KINDS = frozenset(["Job"])
# Bookkeeping the server writes; never part of a diff.
_SERVER_METADATA = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")

# StatefulSet spec fields the API server refuses to change (422), with the value it defaults them to.
STS_IMMUTABLE = (("selector", None), ("serviceName", ""), ("podManagementPolicy", "OrderedReady"),
                 ("volumeClaimTemplates", []))
# What the server adds to a volumeClaimTemplate; not ours, so not compared.
_CLAIM_TEMPLATE_DEFAULTS = (("apiVersion",), ("kind",), ("status",), ("metadata", "creationTimestamp"),
                            ("spec", "volumeMode"))

CREATE, UPDATE, UNCHANGED, PRUNE, KEEP, RECREATE = "create", "update", "unchanged", "prune", "keep", "recreate"
# What a result reports, by planned action (check mode reports the same words as the real run).
DONE = {CREATE: "created", UPDATE: "updated", UNCHANGED: "unchanged", PRUNE: "pruned", KEEP: "kept",
        RECREATE: "recreated"}


def owner_selector(cluster_name):
    return "%s=%s,%s=%s" % (c.LABEL_MANAGED_BY, c.FIELD_MANAGER, c.LABEL_INSTANCE, cluster_name)


# --- comparing -----------------------------------------------------------------------------------------------

def applied_digest(obj):
    """Digest of what we apply. Secret values are left out (only their keys count): the digest is stored on the
    object in clear, and values are compared field by field anyway."""
    body = copy.deepcopy(obj)
    annotations = body.get("metadata", {}).get("annotations") or {}
    annotations.pop(APPLIED_ANNOTATION, None)
    if body.get("kind") in SECRET_KINDS:
        for field in ("data", "stringData"):
            if field in body:
                body[field] = sorted(body[field])
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def with_digest(obj):
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[APPLIED_ANNOTATION] = applied_digest(obj)
    return out


_FLOAT64_KEYS = frozenset(("maximum", "minimum", "multipleOf"))


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same_scalar(want, have, key):
    if want == have:
        return True
    # A CRD schema's bounds are float64 in the API server (JSONSchemaProps): 2**63-1 comes back as 2**63.
    if key in _FLOAT64_KEYS and _number(want) and _number(have):
        return float(want) == float(have)
    # The server stores quantities canonically (1000m -> 1, 1024Mi -> 1Gi).
    if isinstance(want, str) and isinstance(have, str) and is_quantity(want) and is_quantity(have) and \
            key not in ("name", "image"):
        return parse_quantity(want) == parse_quantity(have)
    return False


def contained(want, have, key=None):
    """Every field of `want` is in `have` with the same value (the server may add fields: defaults, status)."""
    if have is None and (want is False or (isinstance(want, (list, dict, str, int)) and not want)):
        # the API server stores no zero value of an omitempty field: [], {}, "", 0, false come back absent
        return True
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(contained(v, have.get(k), k) if v is not None else have.get(k) is None for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list):
            return False
        # volumeMounts are keyed by mountPath (one volume may be mounted at several paths), the rest by name.
        id_key = "mountPath" if key == "volumeMounts" else "name"
        named = want and all(isinstance(w, dict) and id_key in w for w in want)
        if named and all(isinstance(h, dict) for h in have):
            # Lists keyed by name (containers, env, volumes, ports) may gain entries from others: match by name.
            wanted = [w[id_key] for w in want]
            wanted_names = set(wanted)
            by_name = dict((h.get(id_key), h) for h in have)
            in_live_order = [h.get(id_key) for h in have if h.get(id_key) in wanted_names]
            return wanted == in_live_order and all(contained(w, by_name.get(w[id_key])) for w in want)
        return len(want) == len(have) and all(contained(w, h, key) for w, h in zip(want, have))
    return _same_scalar(want, have, key)


def _without_claim_defaults(templates):
    out = copy.deepcopy(templates)
    for template in out if isinstance(out, list) else []:
        for path in _CLAIM_TEMPLATE_DEFAULTS:
            parent = template
            for part in path[:-1]:
                parent = parent.get(part) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
    return out


def immutable_changes(desired, live):
    """The immutable StatefulSet fields ("spec.x") that applying `desired` over `live` would change. Compared both
    ways (server defaults aside), so a field we stop rendering counts too."""
    if desired.get("kind") != "StatefulSet" or live is None:
        return []
    want_spec, have_spec = desired.get("spec") or {}, live.get("spec") or {}
    fields = []
    for field, default in STS_IMMUTABLE:
        want, have = want_spec.get(field, default), have_spec.get(field, default)
        if field == "volumeClaimTemplates":
            same = contained(want, have, field) and contained(_without_claim_defaults(have), want, field)
        else:
            same = contained(want, have, field) and contained(have, want, field)
        if not same:
            fields.append("spec." + field)
    return fields


def unchanged(desired, live):
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    if annotations.get(APPLIED_ANNOTATION) != applied_digest(desired):
        return False
    return contained(desired, live)


def display(obj):
    """An object as a diff shows it: no server bookkeeping, no status, Secret values hidden."""
    if obj is None:
        return ""
    out = copy.deepcopy(obj)
    meta = out.get("metadata") or {}
    for field in _SERVER_METADATA:
        meta.pop(field, None)
    annotations = meta.get("annotations")
    if annotations is not None:
        annotations.pop(APPLIED_ANNOTATION, None)
        if not annotations:
            meta.pop("annotations")
    out.pop("status", None)
    if out.get("kind") in SECRET_KINDS:
        for field in ("data", "stringData"):
            if field in out:
                out[field] = dict((k, HIDDEN) for k in out[field])
    return to_yaml(out)


# --- plan ----------------------------------------------------------------------------------------------------

class Change(object):
    """One object and what a run does to it."""

    def __init__(self, action, desired=None, live=None, note=None, fields=None):
        self.action = action
        self.desired = desired
        self.live = live
        self.after = None
        self.note = note
        self.fields = fields or []     # RECREATE: the immutable fields that force it
        obj = desired if desired is not None else live
        self.kind, self.namespace, self.name = object_key(obj)

    @property
    def writes(self):
        return self.action in (CREATE, UPDATE, PRUNE, RECREATE)

    def describe(self):
        return describe(self.kind, self.name, self.namespace)

    def result(self):
        out = {"kind": self.kind, "name": self.name, "action": DONE[self.action]}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.note:
            out["note"] = self.note
        if self.fields:
            out["fields"] = list(self.fields)
        return out

    def diff(self):
        before = display(self.live)
        after = "" if self.action == PRUNE else display(self.after if self.after is not None else self.desired)
        header = "%s %s" % (self.describe(), DONE[self.action])
        return {"before_header": header, "after_header": header, "before": before, "after": after}


class PlanError(SoperatorError):
    """The plan needs something the caller did not allow; nothing was written."""


def _made_by_a_controller(obj):
    """We set no ownerReferences: a controller made this one from a template of ours, labels included (the Jobs the
    remediation CronJob starts). Not ours to prune: the garbage collector removes it with its owner."""
    return any(ref.get("controller") for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _being_deleted(obj):
    """The finalizers that hold an object whose deletion is under way (deletionTimestamp set), else None."""
    meta = obj.get("metadata") or {}
    return list(meta.get("finalizers") or []) if meta.get("deletionTimestamp") else None


def plan(desired, live, purge_volumes=False, recreate_statefulsets=False):
    """Changes that bring `live` (key -> object we own) to `desired` (objects in apply order). PlanError when a
    StatefulSet's immutable fields changed and recreate_statefulsets is off."""
    changes = []
    wanted = set()
    for obj in desired:
        key = object_key(obj)
        wanted.add(key)
        current = live.get(key)
        if current is None:
            changes.append(Change(CREATE, obj))
        elif obj["kind"] in RUN_ONCE_KINDS:
            note = None if contained(obj.get("spec"), current.get("spec")) else \
                "runs once: its spec changed, delete the Job to run it again"
            changes.append(Change(UNCHANGED, obj, current, note=note))
        elif unchanged(obj, current):
            changes.append(Change(UNCHANGED, obj, current))
        elif immutable_changes(obj, current):
            changes.append(Change(RECREATE, obj, current, fields=immutable_changes(obj, current),
                                  note="immutable fields changed: deleted with its pods orphaned (kept running) "
                                       "and created again; its volume claims are kept"))
        else:
            changes.append(Change(UPDATE, obj, current))
    # Reverse apply order: workloads go before what they mount, the custom resources last.
    order = dict((kind, i) for i, kind in enumerate(("SlurmCluster", "NodeSet") + KIND_ORDER))
    gone = [obj for key, obj in live.items() if key not in wanted and not _made_by_a_controller(obj)]
    gone.sort(key=lambda o: (-order.get(o["kind"], -1), object_key(o)[1] or "", object_key(o)[2]))
    for obj in gone:
        finalizers = _being_deleted(obj)
        if finalizers is not None:
            # Deleted already (by an earlier run, or by someone else) and held by finalizers - a claim that a pod
            # still mounts (kubernetes.io/pvc-protection): nothing to send. Deleting it again reported a change on
            # every run until the pod went; reporting it kept would hide that it is going.
            changes.append(Change(UNCHANGED, live=obj, note="being deleted, held by finalizers: %s" % (
                ", ".join(finalizers) or "none")))
        elif obj["kind"] in VOLUME_KINDS and not purge_volumes:
            changes.append(Change(KEEP, live=obj, note="volumes are kept unless purge_volumes"))
        else:
            changes.append(Change(PRUNE, live=obj))
    refused = [ch for ch in changes if ch.action == RECREATE]
    if refused and not recreate_statefulsets:
        raise PlanError(
            "%s: immutable field%s cannot be changed in place; nothing was changed. Set recreate_statefulsets=true "
            "to delete %s with its pods orphaned (they keep running, volume claims are kept) and create %s again"
            % ("; ".join("%s: %s" % (ch.describe(), ", ".join(ch.fields)) for ch in refused),
               "s" if sum(len(ch.fields) for ch in refused) > 1 else "",
               "them" if len(refused) > 1 else "it", "them" if len(refused) > 1 else "it"))
    return changes


def index(objects):
    return dict((object_key(o), o) for o in objects)


# --- apply ---------------------------------------------------------------------------------------------------

class ApplyError(SoperatorError):
    def __init__(self, msg, change, error=None):
        super(ApplyError, self).__init__(msg)
        self.change = change
        self.error = error


def execute(client, changes, dry_run=False, force_conflicts=True, gone_timeout=300, sleep=time.sleep,
            clock=time.monotonic, poll=1.0):
    """Send the writes of `changes` in order. Fills change.after with the server's answer (a dry run's answer in
    check mode). Raises ApplyError naming the object on the first failure; the changes before it were made."""
    for change in changes:
        try:
            if change.action in (CREATE, UPDATE):
                change.after, _created = client.apply(with_digest(change.desired), dry_run=dry_run,
                                                      force=force_conflicts)
            elif change.action == PRUNE:
                client.delete(change.kind, change.name, change.namespace, dry_run=dry_run)
            elif change.action == RECREATE:
                recreate(client, change, dry_run, force_conflicts, gone_timeout, sleep, clock, poll)
        except KubeError as e:
            raise ApplyError(str(e), change, e)


def recreate(client, change, dry_run, force_conflicts, gone_timeout, sleep, clock, poll):
    """Delete the live object (exactly the one planned against: uid precondition) leaving its dependents (pods)
    orphaned, wait until it is gone, apply the desired one. A dry run only deletes with dryRun; the server cannot
    show the new object while the old one exists, so `after` is what we would apply."""
    uid = (change.live.get("metadata") or {}).get("uid")
    client.delete(change.kind, change.name, change.namespace, dry_run=dry_run, propagation="Orphan", uid=uid)
    if dry_run:
        change.after = with_digest(change.desired)
        return

    def gone():
        current = client.get(change.kind, change.name, change.namespace)
        return current is None or (current.get("metadata") or {}).get("uid") != uid, "still there"

    wait.wait_until(gone, "%s to be gone" % change.describe(), gone_timeout, poll=poll, sleep=sleep, clock=clock,
                    timeout_error=lambda unused: ApplyError(
                        "%s was deleted (pods orphaned) but is still there after %ds; a re-run creates it once it is "
                        "gone" % (change.describe(), gone_timeout), change))
    change.after, _created = client.apply(with_digest(change.desired), dry_run=False, force=force_conflicts)
