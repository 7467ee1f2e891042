"""Every object rendered for every example (and a few variants) is valid Kubernetes, strictly: no unknown field.

Validated against Kubernetes 1.32 and the newest schema version the installed kubernetes-validate ships.
"""
import copy
import glob
import json
import os

import pytest
from repo_root import ROOT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import render_manifests  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (  # noqa: E402
    accounting_db_secret_name, jwt_secret_name, munge_secret_name, ssh_host_keys_secret_name)

EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.yml")))
OLDEST = "1.32"
NEWEST = kubernetes_validate.utils.latest_version()
VERSIONS = sorted(set([OLDEST, NEWEST]))


def _fake_material(model):
    # Values do not matter to the schema; fake ones keep the test fast (no RSA key generation).
    material = {munge_secret_name(model): {s.MUNGE_KEY: b"k" * s.MUNGE_KEY_BYTES},
                ssh_host_keys_secret_name(model): dict((k, b"key") for k in s.SSH_HOST_KEY_FILES)}
    if model.accounting.enabled and model.accounting.in_cluster is not None:
        material[accounting_db_secret_name(model)] = {s.DB_PASSWORD: b"p" * 32, s.DB_ROOT_PASSWORD: b"r" * 32}
    if model.rest_api is not None:
        material[jwt_secret_name(model)] = {s.JWT_KEY_FILE: b"j" * s.JWT_KEY_BYTES}
    return material


def _variants(documents):
    """The example as written, plus edits that reach the branches the examples do not."""
    yield "as-is", documents

    def edited(edit):
        docs = copy.deepcopy(documents)
        edit(docs[0]["spec"])
        return docs

    yield "existing-claim", edited(lambda spec: spec["jail"].update(volume={"existingClaim": "jail"}))
    yield "external-db", edited(lambda spec: spec.update(accounting={"enabled": True, "database": {"external": {
        "host": "db.example", "user": "slurm", "passwordSecret": {"name": "db", "key": "password"}}}}))
    yield "observability", edited(lambda spec: spec.update(observability={
        "exporter": {"enabled": True}, "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "prometheusRule": {"enabled": True}, "dashboards": {"labels": {"grafana_dashboard": "1", "team": "hpc"}}}))
    yield "rest", edited(lambda spec: spec.update(rest={"enabled": True, "replicas": 2, "port": 8080}))
    yield "no-accounting-no-remediation", edited(lambda spec: spec.update(
        accounting={"enabled": False}, remediation={"enabled": False}))
    yield "nodeport-cordon-pullsecrets", edited(lambda spec: spec.update(
        login={"service": {"type": "NodePort", "nodePort": 30022, "annotations": {"a.example/b": "c"}}},
        remediation={"cordonKubernetesNode": True},
        images={"pullSecrets": ["regcred"], "pullPolicy": "Always"},
        controller={"priorityClassName": "system-cluster-critical",
                    "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
                                     "tolerationSeconds": 60}]}))


def _cases():
    assert EXAMPLES, "no examples/*.yml found"
    for path in EXAMPLES:
        with open(path) as f:
            documents = load_documents(f.read())
        for variant, docs in _variants(documents):
            yield pytest.param(docs, id="%s-%s" % (os.path.basename(path)[:-4], variant))


def _render(documents):
    model = build_model(documents)
    return render_manifests(model, render_slurm_configs(model), _fake_material(model))


def _version(text):
    return tuple(int(p) for p in text.split(".")[:2])


def test_newest_version_is_at_least_the_oldest():
    assert _version(NEWEST) >= _version(OLDEST)


# (version, the object as canonical JSON) -> why it is invalid, or None. The variants render mostly the same objects
# (679 objects over the cases, 205 of them different): each different one is validated once per version and worker.
_JUDGED = {}


def _invalid(obj, version):
    key = (version, json.dumps(obj, sort_keys=True))
    if key not in _JUDGED:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            _JUDGED[key] = None
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            _JUDGED[key] = str(e).splitlines()[0]
    return _JUDGED[key]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("documents", list(_cases()))
def test_rendered_objects_are_valid(documents, version):
    objects = _render(documents)
    assert objects
    failures = []
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue        # the prometheus-operator's kinds: no schema here (tests/unit/render/test_render_observe.py)
        why = _invalid(obj, version)
        if why is not None:
            failures.append("%s/%s: %s" % (obj["kind"], obj["metadata"]["name"], why))
    assert failures == []


@pytest.mark.parametrize("version", VERSIONS)
def test_strict_validation_rejects_an_unknown_field(version):
    """The check above can fail: a misspelt field in a rendered StatefulSet is caught."""
    with open(EXAMPLES[0]) as f:
        objects = _render(load_documents(f.read()))
    sts = copy.deepcopy([o for o in objects if o["kind"] == "StatefulSet"][0])
    sts["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert "imagePullPolicyy" in _invalid(sts, version)
    assert "imagePullPolicyy" in _invalid(copy.deepcopy(sts), version)      # judged again from the cache: the same
    bad_type = copy.deepcopy([o for o in objects if o["kind"] == "Service"][0])
    bad_type["spec"]["ports"][0]["port"] = "not-a-port"
    assert _invalid(bad_type, version) is not None
