# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole cluster rendered at once (Slurm configs + Kubernetes objects), and `state: rendered` on disk.

On disk: DEST/manifests/NN-kind-name.yaml (NN = apply order of the kind) and DEST/slurm/<file>. We own those two
folders: files there that are no longer rendered are removed. Secrets are generated once per DEST: existing Secret
manifests are read back and their data kept, so re-rendering the same spec is byte-identical.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import tempfile

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render_kube import render_manifests
from ansible_collections.soperator.slurm.plugins.module_utils.render_slurm import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.secrets import ensure_secret_material
from ansible_collections.soperator.slurm.plugins.module_utils.yaml_dump import to_yaml, yaml

MANIFESTS_DIR = "manifests"
SLURM_DIR = "slurm"
HIDDEN = "<secret data hidden>"


class Rendered:
    def __init__(self, slurm_configs, manifests, generated_secrets):
        self.slurm_configs = slurm_configs
        self.manifests = manifests
        self.generated_secrets = generated_secrets


def render_cluster(model, existing_secrets=None):
    """Every output of the model. `existing_secrets` (name -> {key: bytes}) is kept; missing material is generated."""
    material, generated = ensure_secret_material(model, existing_secrets or {})
    configs = render_slurm_configs(model)
    return Rendered(configs, render_manifests(model, configs, material), generated)


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


def read_secret_material(dest):
    """Secret data from an earlier render in DEST (our Secrets only), as name -> {key: bytes}."""
    folder = os.path.join(dest, MANIFESTS_DIR)
    material = {}
    if not os.path.isdir(folder):
        return material
    for name in sorted(os.listdir(folder)):
        if not _is_secret_file(name):
            continue
        with open(os.path.join(folder, name)) as f:
            obj = yaml.safe_load(f)
        labels = (obj or {}).get("metadata", {}).get("labels", {})
        if is_secret(obj or {}) and labels.get(c.LABEL_MANAGED_BY) == c.FIELD_MANAGER:
            material[obj["metadata"]["name"]] = secret_material(obj)
    return material


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def _write_atomic(path, text, mode):
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except Exception:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_rendered(dest, rendered, check_mode=False):
    """Bring DEST in line with `rendered`. Returns (files, diffs): files lists {path, action} with action
    created | updated | unchanged | removed; diffs holds before/after text per changed file, secrets hidden."""
    wanted = {}
    for name, obj in manifest_files(rendered.manifests).items():
        wanted[os.path.join(MANIFESTS_DIR, name)] = (to_yaml(obj), 0o600 if is_secret(obj) else 0o644,
                                                     is_secret(obj))
    for name, text in rendered.slurm_configs.items():
        wanted[os.path.join(SLURM_DIR, name)] = (text, 0o644, False)

    files, diffs = [], []
    existing = set()
    for folder in (MANIFESTS_DIR, SLURM_DIR):
        full = os.path.join(dest, folder)
        if os.path.isdir(full):
            existing.update(os.path.join(folder, n) for n in os.listdir(full) if not n.startswith("."))

    for rel in sorted(wanted):
        text, mode, secret = wanted[rel]
        path = os.path.join(dest, rel)
        before = _read(path)
        if before is None:
            action = "created"
        elif before != text:
            action = "updated"
        elif (os.stat(path).st_mode & 0o777) != mode:
            action = "updated"
        else:
            action = "unchanged"
        files.append({"path": rel, "action": action})
        if action != "unchanged":
            diffs.append({"before_header": rel, "after_header": rel,
                          "before": HIDDEN if secret and before is not None else (before or ""),
                          "after": HIDDEN if secret else text})
            if not check_mode:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                _write_atomic(path, text, mode)
    for rel in sorted(existing - set(wanted)):
        path = os.path.join(dest, rel)
        files.append({"path": rel, "action": "removed"})
        before = _read(path)
        diffs.append({"before_header": rel, "after_header": "/dev/null",
                      "before": HIDDEN if _is_secret_file(os.path.basename(rel)) else (before or ""),
                      "after": ""})
        if not check_mode:
            os.unlink(path)
    return files, diffs
