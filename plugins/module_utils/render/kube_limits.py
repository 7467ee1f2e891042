# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Kubernetes stores: a spec whose rendered objects would exceed it is refused before the first write, with the
spec field that made them that large where it can be named (a 10 MB health check command, a huge config value).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import doc_label
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError, SpecIssue, child_path

# The API server refuses a ConfigMap whose data and binaryData (keys and values) add up to more than 1 MiB
# (ValidateConfigMap); etcd refuses any request over its default --max-request-bytes (1.5 MiB).
MAX_CONFIG_DATA_BYTES = 1 << 20
MAX_OBJECT_BYTES = 1536 * 1024
# Values shorter than this are not worth naming as the cause.
_NOTABLE = 4096


def _data_bytes(obj):
    """The size the API server checks of a ConfigMap (keys and values of data and binaryData), or None for any
    other kind (Secrets are not checked: we generate their values, at a fixed size)."""
    if obj["kind"] != "ConfigMap":
        return None
    return sum(len(k) + len(v.encode("utf-8")) for k, v in (obj.get("data") or {}).items()) + sum(
        len(k) + len(base64.b64decode(v)) for k, v in (obj.get("binaryData") or {}).items())


def _long_strings(documents):
    """(field path, text) of every string of the spec documents at least _NOTABLE long."""
    found = []
    for index, doc in enumerate(documents):
        todo = [(doc, doc_label(doc, index), "")]
        while todo:
            value, label, path = todo.pop()
            if isinstance(value, dict):
                todo.extend((v, label, child_path(path, k) if isinstance(k, str) else path) for k, v in value.items())
            elif isinstance(value, list):
                todo.extend((v, label, child_path(path, i)) for i, v in enumerate(value))
            elif isinstance(value, str) and len(value) >= _NOTABLE:
                found.append(("%s %s" % (label, path), value))
    return found


def _cause(obj_text, long_strings):
    """The field path of the longest spec string that shows up in the object's serialised text, or None."""
    causes = [(len(text), path) for path, text in long_strings if json.dumps(text)[1:-1] in obj_text]
    return max(causes)[1] if causes else None


def size_issues(objects, documents):
    """SpecIssues for the objects Kubernetes would refuse for their size; each names the spec field (in
    `documents`) that made it that large where one does, or the object."""
    issues, long_strings = [], _long_strings(documents)
    for obj in objects:
        what = "%s %s" % (obj["kind"], obj["metadata"]["name"])
        text = json.dumps(obj, separators=(",", ":"))
        problems = []
        data = _data_bytes(obj)
        if data is not None and data > MAX_CONFIG_DATA_BYTES:
            problems.append("the data of %s would be %d bytes: Kubernetes stores at most %d"
                            % (what, data, MAX_CONFIG_DATA_BYTES))
        if len(text.encode("utf-8")) > MAX_OBJECT_BYTES:
            problems.append("%s would be %d bytes: etcd takes at most %d per object"
                            % (what, len(text.encode("utf-8")), MAX_OBJECT_BYTES))
        if problems:
            cause = _cause(text, long_strings)
            issues.append(SpecIssue(cause or "", "; ".join(problems) + ("" if cause else " (no single spec value "
                                                                        "is the cause: shorten several)")))
    return issues


def check_kube_sizes(model, custom_resources=()):
    """SpecError when an object rendered for `model` (its custom resources `custom_resources`, and every object
    render_manifests gives but the Secrets, whose values we generate at a fixed size) is larger than Kubernetes
    stores. Generates no key: the Secrets are rendered with empty placeholders."""
    objects = list(custom_resources) + [
        o for o in kube_objects.render_manifests(model, render_slurm_configs(model),
                                                 kube_objects.placeholder_secret_material(model))
        if o["kind"] != "Secret"]
    documents = [model.cluster_spec] + [model.node_set_specs[ns.name] for ns in model.node_sets]
    issues = size_issues(objects, documents)
    if issues:
        raise SpecError(issues)
