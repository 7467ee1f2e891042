"""The shipped CRDs: in sync with the Python schema, valid for Kubernetes, structural, with the subresources we use."""
import dataclasses
import os
import re
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.crds import crds
from repo_root import ROOT

VERSIONS = ["1.32.0", kubernetes_validate.latest_version()]


def test_shipped_files_match_the_schema():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from generate_crds import crd_files
    for name, text in crd_files().items():
        with open(os.path.join(ROOT, "crds", name)) as f:
            assert f.read() == text, "crds/%s is stale: run tools/generate_crds.py" % name
    assert sorted(os.listdir(os.path.join(ROOT, "crds"))) == sorted(crd_files())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_crd_is_valid_kubernetes(crd, version):
    kubernetes_validate.validate(crd, version, strict=True)


def _walk(schema, path="spec"):
    yield path, schema
    for name, child in (schema.get("properties") or {}).items():
        yield from _walk(child, path + "." + name)
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], path + "[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], path + "{}")


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_schema_is_structural(crd):
    """The API server refuses a non-structural schema: every node needs a type unless it is int-or-string or
    preserves unknown fields, and `properties` and `additionalProperties` never meet."""
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(root, "root"):
        assert "type" in node or node.get("x-kubernetes-int-or-string") or \
            node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "anyOf" in node:
            assert all(set(branch) <= {"type"} for branch in node["anyOf"]), path


def test_nodeset_scale_and_status_subresources():
    cluster, node_set = crds()
    version = node_set["spec"]["versions"][0]
    expected = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector"}
    assert version["subresources"]["scale"] == expected
    assert "status" in version["subresources"]
    assert "status" in cluster["spec"]["versions"][0]["subresources"]
    assert "scale" not in cluster["spec"]["versions"][0]["subresources"]


def _shipped_spec_schema(name):
    with open(os.path.join(ROOT, "crds", name)) as f:
        return yaml.safe_load(f)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _crd_defaults(schema, path=()):
    """(path, default) of every default in a shipped CRD's spec schema, but an object's {} (its fields' defaults are
    the ones that count); "[]" stands for a list's items."""
    if "default" in schema and not (schema["default"] == {} and "properties" in schema):
        yield path, schema["default"]
    for name, child in (schema.get("properties") or {}).items():
        yield from _crd_defaults(child, path + (name,))
    if isinstance(schema.get("items"), dict):
        yield from _crd_defaults(schema["items"], path + ("[]",))


def _cluster_documents(spec, node_set_spec):
    api = "slurm.soperator.dev/v1alpha1"
    return [{"apiVersion": api, "kind": "SlurmCluster", "metadata": {"name": "c", "namespace": "slurm"},
             "spec": dict({"jail": {"volume": {"size": "1Ti"}}}, **spec)},
            {"apiVersion": api, "kind": "NodeSet", "metadata": {"name": "cpu", "namespace": "slurm"},
             "spec": dict({"clusterName": "c", "resources": {"cpu": "2", "memory": "1Gi"}}, **node_set_spec)}]


# (SlurmCluster spec, NodeSet spec) pairs that leave the defaulted fields unset, or give one item to a list whose
# items have defaults: together, build_model fills in every default. The database variants exclude each other.
_TOLERATION = [{"key": "k"}]
DEFAULTED_SPECS = [
    ({}, {}),
    ({"controller": {"tolerations": _TOLERATION}, "login": {"tolerations": _TOLERATION},
      "partitions": [{"name": "p", "nodeSets": ["cpu"]}], "topology": {"switches": [{"name": "s"}]},
      "healthChecks": {"passive": {"custom": [{"name": "x", "command": "true"}]},
                       "active": [{"name": "a", "type": "sbatch", "schedule": "0 * * * *", "script": "#!/bin/sh"}]}},
     {"tolerations": _TOLERATION}),
    ({"accounting": {"database": {"inCluster": {}}}}, {}),
    ({}, {"ephemeral": {"enabled": True}, "maxReplicas": 4}),
    ({"topology": {"nodeLabels": {"tiers": ["example.com/leaf"], "nodeSets": ["cpu"]}}}, {}),
    ({"accounting": {"database": {"external": {"host": "db", "user": "u", "passwordSecret": {"name": "s"}}}}}, {}),
    ({"identity": {"ldap": {"uri": "ldaps://ldap", "searchBase": "dc=x", "bindDN": "cn=b,dc=x",
                            "bindPasswordSecret": {"name": "b"}, "caConfigMap": {"name": "ca"}}}}, {}),
    ({"identity": {"sssdConfigSecret": {"name": "s"}}}, {}),
]

# Where the ClusterModel names a spec field otherwise than its snake_case (spec path prefix -> model path prefix);
# nodeSelector and tolerations sit in the model's `scheduling` of their component.
MODEL_NAMES = [
    (("jail", "populate", "overwrite"), ("jail", "overwrite")),
    (("jail", "populate", "backoffLimit"), ("jail", "populate_backoff_limit")),
    (("controller", "spool", "size"), ("controller", "spool_size")),
    (("controller", "spool", "accessModes"), ("controller", "spool_access_modes")),
    (("accounting", "database", "inCluster"), ("accounting", "in_cluster")),
    (("accounting", "database", "external"), ("accounting", "external")),
    (("nodeSets", "[]", "slurmNode"), ("nodeSets", "[]")),
    (("accounting", "accounts"), ("accounting", "policy", "accounts")),
    (("accounting", "users"), ("accounting", "policy", "users")),
    (("accounting", "qos"), ("accounting", "policy", "qos")),
]
# Defaults the model does not hold as such, checked on the defaulted document build_model keeps (model.cluster_spec):
# the image registry and tag are folded into each image reference; no partitions means one partition "main".
DOCUMENT_ONLY = {"images.registry", "images.tag", "partitions"}


def _model_path(path):
    for spec_part, model_part in MODEL_NAMES:
        if path[:len(spec_part)] == spec_part:
            path = model_part + path[len(spec_part):]
    for scheduling_field in ("nodeSelector", "tolerations"):
        if scheduling_field in path:
            at = path.index(scheduling_field)
            path = path[:at] + ("scheduling",) + path[at:]
    return tuple(part if part == "[]" else re.sub(r"(?<=[a-z])([A-Z])", r"_\1", part).lower() for part in path)


def _lookup(value, path):
    """`value` at `path` (attributes of the model's dataclasses, or keys of a document); KeyError when absent."""
    for part in path:
        if part == "[]":
            if not value:
                raise KeyError(part)
            value = value[0]
        elif isinstance(value, dict):
            value = value[part]
        elif dataclasses.is_dataclass(value) and hasattr(value, part):
            value = getattr(value, part)
        else:
            raise KeyError(part)
    return value


def _has(document, path):
    try:
        _lookup(document, path)
        return True
    except KeyError:
        return False


def _plain(value):
    """A model value as the CRD writes it: tuples as lists, dataclasses (a default {} of an object) as dicts."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value


def test_shipped_crd_defaults_are_the_defaults_build_model_applies():
    """A spec defaulted by the API server (the shipped CRD files) and one defaulted by build_model agree: every leaf
    default of the shipped CRDs is the value the ClusterModel holds when the field is left out (fails when a default
    changes in the Python schema or in the shipped CRD alone)."""
    cluster_schema = _shipped_spec_schema("slurmclusters.slurm.soperator.dev.yaml")
    node_set_schema = _shipped_spec_schema("nodesets.slurm.soperator.dev.yaml")
    assert cluster_schema["properties"]["login"]["properties"]["replicas"]["default"] == 2
    assert cluster_schema["properties"]["remediation"]["properties"]["drainReasonPrefix"]["default"] == "soperator:"
    models = [(documents, s.build_model(documents))
              for documents in (_cluster_documents(*specs) for specs in DEFAULTED_SPECS)]

    leaves = [(path, default) for path, default in _crd_defaults(cluster_schema)
              if ".".join(path) not in DOCUMENT_ONLY]
    leaves += [(("nodeSets", "[]") + path, default) for path, default in _crd_defaults(node_set_schema)]
    checked, absent = [], []
    for path, default in leaves:
        found = []
        for documents, model in models:
            given = {"nodeSets": [documents[1]["spec"]]} if path[0] == "nodeSets" else documents[0]["spec"]
            if _has(given, path):
                continue                # the test spec gives this field: build_model has nothing to default
            if "[]" in path and not _has(given, path[:max(i for i, p in enumerate(path) if p == "[]") + 1]):
                continue                # list items the test spec did not give (partitions: "main" is derived)
            try:
                found.append(_plain(_lookup(model, _model_path(path))))
            except KeyError:
                pass
        if not found:
            absent.append(".".join(path))
            continue
        assert found == [default] * len(found), "%s: the CRD defaults it to %r, build_model to %r" % (
            ".".join(path), default, found)
        checked.append(path)
    assert absent == [], "CRD defaults with no place in the ClusterModel: %s" % absent
    assert len(checked) > 60
    for dotted in sorted(DOCUMENT_ONLY):
        path = tuple(dotted.split("."))
        assert _lookup(models[0][1].cluster_spec["spec"], path) == \
            _lookup(cluster_schema, sum((("properties", p) for p in path), ()))["default"], dotted


def test_nodeset_has_printer_columns_and_keyed_lists():
    node_set = crds()[1]["spec"]["versions"][0]
    assert [c["name"] for c in node_set["additionalPrinterColumns"]][:3] == ["Cluster", "Replicas", "Ready"]
    partitions = crds()[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["partitions"]
    assert partitions["x-kubernetes-list-type"] == "map" and partitions["x-kubernetes-list-map-keys"] == ["name"]


def test_generator_script_runs(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tools'); "
                          "from generate_crds import crd_files; print(len(crd_files()))"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"
    assert yaml.safe_load(open(os.path.join(ROOT, "crds", "nodesets.slurm.soperator.dev.yaml")))["kind"] == \
        "CustomResourceDefinition"
