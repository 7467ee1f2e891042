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
  volume claims are kept unless purge_volumes: they hold the jail and the databases.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.kube_client import KubeError, describe, object_key
from ansible_collections.soperator.slurm.plugins.module_utils.quantity import is_quantity, parse_quantity
from ansible_collections.soperator.slurm.plugins.module_utils.render_kube import KIND_ORDER
from ansible_collections.soperator.slurm.plugins.module_utils.yaml_dump import to_yaml

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

CREATE, UPDATE, UNCHANGED, PRUNE, KEEP = "create", "update", "unchanged", "prune", "keep"
# What a result reports, by planned action (check mode reports the same words as the real run).
DONE = {CREATE: "created", UPDATE: "updated", UNCHANGED: "unchanged", PRUNE: "pruned", KEEP: "kept"}


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


def _same_scalar(want, have, key):
    if want == have:
        return True
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

    def __init__(self, action, desired=None, live=None, note=None):
        self.action = action
        self.desired = desired
        self.live = live
        self.after = None
        self.note = note
        obj = desired if desired is not None else live
        self.kind, self.namespace, self.name = object_key(obj)

    @property
    def writes(self):
        return self.action in (CREATE, UPDATE, PRUNE)

    def describe(self):
        return describe(self.kind, self.name, self.namespace)

    def result(self):
        out = {"kind": self.kind, "name": self.name, "action": DONE[self.action]}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.note:
            out["note"] = self.note
        return out

    def diff(self):
        before = display(self.live)
        after = "" if self.action == PRUNE else display(self.after if self.after is not None else self.desired)
        header = "%s %s" % (self.describe(), DONE[self.action])
        return {"before_header": header, "after_header": header, "before": before, "after": after}


def plan(desired, live, purge_volumes=False):
    """Changes that bring `live` (key -> object we own) to `desired` (objects in apply order)."""
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
        else:
            changes.append(Change(UPDATE, obj, current))
    # Reverse apply order: workloads go before what they mount, the custom resources last.
    order = dict((kind, i) for i, kind in enumerate(("SlurmCluster", "NodeSet") + KIND_ORDER))
    gone = [obj for key, obj in live.items() if key not in wanted]
    gone.sort(key=lambda o: (-order.get(o["kind"], -1), object_key(o)[1] or "", object_key(o)[2]))
    for obj in gone:
        if obj["kind"] in VOLUME_KINDS and not purge_volumes:
            changes.append(Change(KEEP, live=obj, note="volumes are kept unless purge_volumes"))
        else:
            changes.append(Change(PRUNE, live=obj))
    return changes


def index(objects):
    return dict((object_key(o), o) for o in objects)


# --- apply ---------------------------------------------------------------------------------------------------

class ApplyError(Exception):
    def __init__(self, msg, change, error=None):
        super(ApplyError, self).__init__(msg)
        self.change = change
        self.error = error


def execute(client, changes, dry_run=False, force_conflicts=True):
    """Send the writes of `changes` in order. Fills change.after with the server's answer (a dry run's answer in
    check mode). Raises ApplyError naming the object on the first failure; the changes before it were made."""
    for change in changes:
        try:
            if change.action in (CREATE, UPDATE):
                change.after, _created = client.apply(with_digest(change.desired), dry_run=dry_run,
                                                      force=force_conflicts)
            elif change.action == PRUNE:
                client.delete(change.kind, change.name, change.namespace, dry_run=dry_run)
        except KubeError as e:
            raise ApplyError(str(e), change, e)
