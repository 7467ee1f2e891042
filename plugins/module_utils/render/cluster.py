# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole cluster rendered at once (Slurm configs + Kubernetes objects), and `state: rendered` on disk.

On disk: DEST/manifests/NN-kind-name.yaml (NN = apply order of the kind) and DEST/slurm/<file>; with the exporter
on, DEST/prometheus/soperator-slurm-rules.yml and DEST/grafana/<dashboard>.json for a Prometheus and a Grafana run
without the prometheus-operator (render/observe_files.py); and a record of
what was written (DEST/.soperator-render.json): a file an earlier render wrote, and nobody changed since, is
removed once it is no longer rendered; every other file in DEST is left alone. Nothing is written or read through
a symlink. Secrets are generated once per DEST: existing Secret
manifests are read back and their data kept, so re-rendering the same spec is byte-identical.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import stat
import tempfile

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c, files
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import render_manifests
from ansible_collections.soperator.slurm.plugins.module_utils.render.observe_files import (
    GRAFANA_DIR, PROMETHEUS_DIR, observe_files)
from ansible_collections.soperator.slurm.plugins.module_utils.render.observe_objects import exporter_target
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.secrets import ensure_secret_material
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import to_yaml, yaml

MANIFESTS_DIR = "manifests"
SLURM_DIR = "slurm"
RENDER_DIRS = (MANIFESTS_DIR, SLURM_DIR, PROMETHEUS_DIR, GRAFANA_DIR)
HIDDEN = "<secret data hidden>"
# What render wrote into DEST, so a later render removes its own stale files and nothing else.
RECORD = ".soperator-render.json"
RECORD_FORMAT = 1


class Rendered:
    def __init__(self, slurm_configs, manifests, generated_secrets, monitoring_files=None):
        self.slurm_configs = slurm_configs
        self.manifests = manifests
        self.generated_secrets = generated_secrets
        self.monitoring_files = monitoring_files or {}      # relative path -> text (observe_files)


def render_cluster(model, existing_secrets=None):
    """Every output of the model. `existing_secrets` (name -> {key: bytes}) is kept; missing material is generated."""
    material, generated = ensure_secret_material(model, existing_secrets or {})
    configs = render_slurm_configs(model)
    monitoring = observe_files(model.name, exporter_target(model)) if model.observability.exporter.enabled else {}
    return Rendered(configs, render_manifests(model, configs, material), generated, monitoring)


def is_secret(obj):
    return obj.get("kind") == "Secret"


def manifest_files(manifests):
    """file name -> object. The prefix is the rank of the object's kind in apply order, so `kubectl apply -f`
    of the sorted folder follows the same order and adding a NodeSet does not rename other files."""
    rank = {}
    for obj in manifests:
        rank.setdefault(obj["kind"], len(rank))
    files = {}
    for obj in manifests:
        name = "%02d-%s-%s.yaml" % (rank[obj["kind"]], obj["kind"].lower(), obj["metadata"]["name"])
        files[name] = obj
    return files


def _is_secret_file(name):
    """Secret manifests are the files manifest_files() names NN-secret-<name>.yaml."""
    return name.split("-", 1)[-1].startswith("secret-") and name.endswith(".yaml")


def secret_material(obj):
    """A Secret object's data as {key: bytes}."""
    return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}


class RenderDestError(SoperatorError):
    """DEST holds something render may not write through or over (a symlink, a folder where a file goes...)."""


def _read_regular(path):
    """Text of the regular file at `path`, None when nothing is there. Never follows a symlink: a link or anything
    but a regular file raises RenderDestError (its target is not ours to read into a diff, nor to overwrite)."""
    try:
        data = files.read_regular(path)
    except files.UnsafeFile as e:
        if os.path.islink(path):
            raise RenderDestError("%s is a symlink; render does not write through links: remove it" % path)
        if os.path.lexists(path) and not os.path.isfile(path):
            raise RenderDestError("%s is not a regular file; render does not replace it: remove it" % path)
        raise RenderDestError(str(e))
    return None if data is None else data.decode("utf-8", "replace")


def _check_folder(path):
    """A folder render writes into must be a real directory (or absent), not a link to somewhere else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise RenderDestError("%s is %s, not a directory; render does not write through it" % (
            path, "a symlink" if stat.S_ISLNK(st.st_mode) else "a file"))


def read_secret_material(dest):
    """Secret data from an earlier render in DEST (our Secrets only), as name -> {key: bytes}."""
    folder = os.path.join(dest, MANIFESTS_DIR)
    material = {}
    _check_folder(folder)
    if not os.path.isdir(folder):
        return material
    for name in sorted(os.listdir(folder)):
        if not _is_secret_file(name):
            continue
        obj = yaml.safe_load(_read_regular(os.path.join(folder, name)) or "")
        labels = (obj or {}).get("metadata", {}).get("labels", {})
        if is_secret(obj or {}) and labels.get(c.LABEL_MANAGED_BY) == c.FIELD_MANAGER:
            material[obj["metadata"]["name"]] = secret_material(obj)
    return material


def _sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _recordable(rel):
    """Only names render writes: one plain file name in one of our folders (never '..', never absolute)."""
    folder, dummy, name = str(rel).partition("/")
    return folder in RENDER_DIRS and name not in ("", ".", "..") and "/" not in name \
        and not name.startswith(".")


def read_record(dest):
    """{relative path: sha256 of what we wrote} of the files an earlier render wrote into DEST ({} when none)."""
    text = _read_regular(os.path.join(dest, RECORD))
    if text is None:
        return {}
    try:
        record = json.loads(text)
        files = record["files"]
        if record.get("format") != RECORD_FORMAT or not isinstance(files, dict):
            raise ValueError("unknown format")
        for rel in files:
            if not _recordable(rel):
                raise ValueError("it names %r, which render never writes" % rel)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RenderDestError("%s is not a render record of ours (%s); remove it to render here again"
                              % (os.path.join(dest, RECORD), e))
    return dict((str(k), str(v)) for k, v in files.items())


def _write_atomic(path, text, mode):
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.rename(tmp, path)    # replaces the name, never writes through what was there
    except Exception:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def _plan(dest, rendered):
    """Every file action, decided from what is on disk before anything is written."""
    wanted = {}
    for name, obj in manifest_files(rendered.manifests).items():
        wanted[os.path.join(MANIFESTS_DIR, name)] = (to_yaml(obj), 0o600 if is_secret(obj) else 0o644,
                                                     is_secret(obj))
    for name, text in rendered.slurm_configs.items():
        wanted[os.path.join(SLURM_DIR, name)] = (text, 0o644, False)
    for rel, text in rendered.monitoring_files.items():
        wanted[rel] = (text, 0o644, False)
    for folder in RENDER_DIRS:
        _check_folder(os.path.join(dest, folder))
    record = read_record(dest)

    steps = []      # (rel, action, before, after text or None, mode, secret)
    for rel in sorted(wanted):
        text, mode, secret = wanted[rel]
        path = os.path.join(dest, rel)
        before = _read_regular(path)
        if before is None:
            action = "created"
        elif before != text or (os.lstat(path).st_mode & 0o777) != mode:
            action = "updated"
        else:
            action = "unchanged"
        steps.append((rel, action, before, text, mode, secret))
    # Only files this render wrote earlier (the record) are ever removed, and only as we wrote them: a file of the
    # user's beside ours is none of our business, and one of ours edited since is kept and reported.
    for rel in sorted(set(record) - set(wanted)):
        try:
            before = _read_regular(os.path.join(dest, rel))
        except RenderDestError:
            before = False      # replaced by a link or a folder since: not ours any more
        if before is None:
            continue
        action = "removed" if before is not False and _sha256(before) == record[rel] else "kept"
        steps.append((rel, action, before or "", None, None, _is_secret_file(os.path.basename(rel))))
    return steps


def write_rendered(dest, rendered, check_mode=False):
    """Bring DEST in line with `rendered`. Returns (files, diffs): files lists {path, action} with action
    created | updated | unchanged | removed | kept (a file we rendered earlier, no longer rendered, that was changed
    since: left alone); diffs holds before/after text per changed file, secrets hidden. Raises RenderDestError,
    before any write, when DEST holds a link or a folder where render writes."""
    steps = _plan(dest, rendered)
    files, diffs = [], []
    for rel, action, before, text, dummy, secret in steps:
        files.append({"path": rel, "action": action})
        if action in ("unchanged", "kept"):
            continue
        diffs.append({"before_header": rel, "after_header": rel if text is not None else "/dev/null",
                      "before": HIDDEN if secret and before is not None else (before or ""),
                      "after": "" if text is None else (HIDDEN if secret else text)})
    if check_mode:
        return files, diffs

    old_record = read_record(dest)
    record = dict(old_record)
    for rel, action, dummy, text, mode, dummy in steps:
        path = os.path.join(dest, rel)
        if action in ("created", "updated"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomic(path, text, mode)
            record[rel] = _sha256(text)
        elif action == "removed":
            os.unlink(path)
            del record[rel]
        elif action == "kept":
            del record[rel]     # the user's now
        elif action == "unchanged":
            record[rel] = _sha256(text)     # also adopts an identical file a render without a record wrote
    if record != old_record:
        _write_atomic(os.path.join(dest, RECORD),
                      json.dumps({"format": RECORD_FORMAT, "files": record}, indent=1, sort_keys=True) + "\n", 0o644)
    return files, diffs
