"""The shipped CRDs: in sync with the Python schema, valid for Kubernetes, structural, with the subresources we use."""
import os
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.crds import crds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def test_schema_defaults_equal_python_defaults():
    """A spec defaulted by the API server and one defaulted by build_model agree: compare leaf defaults."""
    root = crds()[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert root["properties"]["login"]["properties"]["replicas"]["default"] == 2
    assert root["properties"]["remediation"]["properties"]["drainReasonPrefix"]["default"] == "soperator:"
    validated = s.CLUSTER_SPEC.validate({"jail": {"volume": {"size": "1Ti"}}}, "spec", [])

    def leaves(schema, value, path):
        if "default" in schema and schema["default"] != {}:
            yield path, schema["default"], value
        for name, child in (schema.get("properties") or {}).items():
            if isinstance(value, dict) and value.get(name) is not None:
                yield from leaves(child, value[name], path + "." + name)

    checked = 0
    for path, default, value in leaves(root, validated, "spec"):
        assert value == default, path
        checked += 1
    assert checked > 30


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
