"""CustomResourceDefinitions in the emulator, with the collection's own CRDs (crds/*.yaml): registration and
discovery, schema validation (types, required, enum, bounds, patterns, CEL rules), defaulting, pruning of unknown
fields, status and scale subresources, and unregistration."""
import copy
import glob
import os

import kubernetes
import pytest
import yaml

from emu_helpers import entry, failure, make_ns

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRDS = dict((os.path.basename(p).split(".")[0], yaml.safe_load(open(p)))
            for p in sorted(glob.glob(os.path.join(ROOT, "crds", "*.yaml"))))
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODESETS = "/apis/slurm.soperator.dev/v1alpha1/namespaces/t/nodesets"
CLUSTERS = "/apis/slurm.soperator.dev/v1alpha1/namespaces/t/slurmclusters"


def nodeset(name="gpu", **spec):
    body = {"clusterName": "demo", "resources": {"cpu": "8", "memory": "32Gi"}}
    body.update(spec)
    return {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet", "metadata": {"name": name},
            "spec": body}


@pytest.fixture
def crds(kube):
    for crd in CRDS.values():
        kube.apply(CRD_PATH + "/" + crd["metadata"]["name"], crd, manager="installer")
    make_ns(kube)
    return kube


def test_crds_are_established_and_discoverable(emulator, kube):
    assert set(CRDS) == {"nodesets", "slurmclusters"}
    dyn = kube.dynamic()
    with pytest.raises(kubernetes.dynamic.exceptions.ResourceNotFoundError):
        dyn.resources.get(api_version="slurm.soperator.dev/v1alpha1", kind="NodeSet")
    created = kube.apply(CRD_PATH + "/nodesets.slurm.soperator.dev", CRDS["nodesets"], manager="installer")
    assert created["metadata"]["generation"] == 1
    crd = kube.call("GET", CRD_PATH + "/nodesets.slurm.soperator.dev")
    conditions = dict((c["type"], c) for c in crd["status"]["conditions"])
    assert conditions["Established"]["status"] == "True" and conditions["NamesAccepted"]["status"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "NodeSet" and crd["status"]["storedVersions"] == ["v1alpha1"]
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    assert entry(crd, "kube-apiserver", "Update", "status") is not None
    # Re-applying the CRD changes nothing.
    again = kube.apply(CRD_PATH + "/nodesets.slurm.soperator.dev", CRDS["nodesets"], manager="installer")
    assert again["metadata"]["resourceVersion"] == crd["metadata"]["resourceVersion"]
    dyn = kube.dynamic()
    res = dyn.resources.get(api_version="slurm.soperator.dev/v1alpha1", kind="NodeSet")
    assert res.namespaced and res.name == "nodesets" and set(res.subresources) == {"status", "scale"}
    assert "slurmnodeset" in res.short_names
    group = kube.call("GET", "/apis/slurm.soperator.dev")
    assert group["preferredVersion"]["groupVersion"] == "slurm.soperator.dev/v1alpha1"
    listing = kube.call("GET", "/apis/slurm.soperator.dev/v1alpha1")
    scale = [r for r in listing["resources"] if r["name"] == "nodesets/scale"][0]
    assert scale["kind"] == "Scale" and scale["group"] == "autoscaling"


def test_custom_objects_get_schema_defaults(emulator, crds):
    obj = crds.apply(NODESETS + "/gpu", nodeset())
    spec = obj["spec"]
    assert spec["replicas"] == 1 and spec["maxUnavailable"] == 1
    assert spec["slurmNode"] == {"weight": 1} and spec["gres"] == [] and spec["features"] == []
    assert spec["nodeSelector"] == {} and spec["tolerations"] == []
    assert obj["metadata"]["generation"] == 1 and obj["apiVersion"] == "slurm.soperator.dev/v1alpha1"
    # Defaults added after an apply belong to nobody.
    assert set(entry(obj, "test")["fieldsV1"]["f:spec"]) == {"f:clusterName", "f:resources"}
    tol = crds.apply(NODESETS + "/tol", nodeset("tol", tolerations=[{"key": "k"}]))
    assert tol["spec"]["tolerations"] == [{"key": "k", "operator": "Equal"}]
    cluster = crds.apply(CLUSTERS + "/demo", {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster",
                                              "metadata": {"name": "demo"},
                                              "spec": {"jail": {"volume": {"size": "20Gi"}}}})
    assert cluster["spec"]["clusterDomain"] == "cluster.local"
    assert cluster["spec"]["jail"]["volume"]["accessModes"] == ["ReadWriteMany"]
    assert cluster["spec"]["images"]["pullPolicy"] == "IfNotPresent"
    # A stored custom object is listed with its kind (unstructured lists carry it).
    items = crds.call("GET", NODESETS)["items"]
    assert [i["kind"] for i in items] == ["NodeSet", "NodeSet"]
    assert crds.call("GET", NODESETS)["kind"] == "NodeSetList"


def test_custom_objects_are_validated(emulator, crds):
    def invalid(body):
        e, status = failure(crds.apply, NODESETS + "/" + body["metadata"]["name"], body)
        assert (e.status, status["reason"]) == (422, "Invalid"), status
        return status

    status = invalid(nodeset(replicas=-1))
    assert status["message"] == ('NodeSet.slurm.soperator.dev "gpu" is invalid: spec.replicas: Invalid value: -1: '
                                 'spec.replicas in body should be greater than or equal to 0')
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                            "message": "Invalid value: -1: spec.replicas in body should be greater "
                                                       "than or equal to 0"}]
    assert status["details"]["group"] == "slurm.soperator.dev" and status["details"]["kind"] == "NodeSet"
    body = nodeset()
    del body["spec"]["clusterName"]
    assert "spec.clusterName: Required value" in invalid(body)["message"]
    assert "spec.clusterName in body should match" in invalid(nodeset(clusterName="Bad_Name"))["message"]
    status = invalid(nodeset(tolerations=[{"operator": "Sometimes"}]))
    assert 'spec.tolerations[0].operator: Unsupported value: "Sometimes": supported values: "Exists", "Equal"' \
        in status["message"]
    # CEL rule of the NodeSet schema.
    status = invalid(nodeset(replicas=5, maxReplicas=4))
    assert 'spec: Invalid value: "object": maxReplicas must be >= replicas' in status["message"]
    assert crds.apply(NODESETS + "/gpu", nodeset(replicas=4, maxReplicas=4))["spec"]["maxReplicas"] == 4
    # Several errors at once, in brackets.
    status = invalid(nodeset("two", replicas=-1, gres=["bad gres"]))
    assert status["message"].startswith('NodeSet.slurm.soperator.dev "two" is invalid: [')
    assert len(status["details"]["causes"]) == 2
    cluster = {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "demo"},
               "spec": {"jail": {"volume": {"size": "20Gi", "existingClaim": "jail"}}}}
    e, status = failure(crds.apply, CLUSTERS + "/demo", cluster)
    assert "set exactly one of existingClaim or size" in status["message"]
    # Through POST, a wrong type is a validation error of the custom object (422), not a decode error.
    e, status = failure(crds.call, "POST", NODESETS, nodeset("typed", replicas="two"))
    assert e.status == 422 and 'spec.replicas: Invalid value: "string": spec.replicas in body must be of type ' \
                               'integer: "string"' in status["message"]
    e, status = failure(crds.call, "POST", NODESETS, {"apiVersion": "slurm.soperator.dev/v1alpha1",
                                                      "kind": "NodeSet", "metadata": {"name": "Bad"},
                                                      "spec": nodeset()["spec"]})
    assert e.status == 422 and "metadata.name" in status["message"]


def test_unknown_fields_are_pruned_or_rejected(emulator, crds):
    body = nodeset()
    body["spec"]["colour"] = "blue"
    body["spec"]["slurmNode"] = {"weight": 2, "shape": "round"}
    response = crds.request("POST", NODESETS, body)
    assert "colour" not in response.data["spec"] and response.data["spec"]["slurmNode"] == {"weight": 2}
    # One Warning header per dropped field, as the real server sends them (the client's dict keeps the last).
    assert response.headers["Warning"] == '299 - "unknown field \\"spec.slurmNode.shape\\""'
    body["metadata"]["name"] = "strict"
    e, status = failure(crds.call, "POST", NODESETS, body, query={"fieldValidation": "Strict"})
    assert (e.status, status["reason"]) == (400, "BadRequest")
    assert 'strict decoding error: unknown field "spec.colour"' in status["message"]
    # Fields under x-kubernetes-preserve-unknown-fields are kept.
    kept = crds.apply(NODESETS + "/aff", nodeset("aff", affinity={"anything": {"goes": [1, 2]}}))
    assert kept["spec"]["affinity"] == {"anything": {"goes": [1, 2]}}
    # An apply with an undeclared field fails like the real server's typed conversion.
    e, status = failure(crds.apply, NODESETS + "/gpu", dict(nodeset(), extra=1))
    assert e.status == 500 and ".extra: field not declared in schema" in status["message"]
    e, status = failure(crds.apply, NODESETS + "/gpu", nodeset(replicas="two"))
    assert e.status == 500 and "expected numeric (int or float), got string" in status["message"]


def test_status_and_scale_subresources(emulator, crds):
    body = nodeset(replicas=2)
    body["status"] = {"phase": "Ready"}
    obj = crds.apply(NODESETS + "/gpu", body)
    assert "status" not in obj  # status of a main-resource write is ignored
    status = {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet", "metadata": {"name": "gpu"},
              "status": {"phase": "Provisioning", "replicas": 2, "readyReplicas": 1, "selector": "app=gpu",
                         "conditions": [{"type": "Ready", "status": "False", "reason": "Starting"}]}}
    obj = crds.apply(NODESETS + "/gpu/status", status, manager="operator")
    assert obj["status"]["phase"] == "Provisioning" and obj["metadata"]["generation"] == 1
    assert entry(obj, "operator", "Apply", "status")["fieldsV1"]["f:status"]["f:conditions"] == {
        'k:{"type":"Ready"}': {".": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}
    # Conditions are a map list keyed by type: another manager adds its own condition beside it.
    other = copy.deepcopy(status)
    other["status"] = {"conditions": [{"type": "Healthy", "status": "True"}]}
    obj = crds.apply(NODESETS + "/gpu/status", other, manager="prober")
    assert [c["type"] for c in obj["status"]["conditions"]] == ["Ready", "Healthy"]
    bad = copy.deepcopy(status)
    bad["status"]["phase"] = "Exploded"
    e, body = failure(crds.apply, NODESETS + "/gpu/status", bad, manager="operator")
    assert e.status == 422 and "status.phase: Unsupported value" in body["message"]

    scale = crds.call("GET", NODESETS + "/gpu/scale")
    assert scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 2, "selector": "app=gpu"}
    scale["spec"]["replicas"] = 6
    crds.call("PUT", NODESETS + "/gpu/scale", scale)
    obj = emulator.get("slurm.soperator.dev/v1alpha1", "NodeSet", "gpu", "t")
    assert obj["spec"]["replicas"] == 6 and obj["metadata"]["generation"] == 2
    # The CEL rule holds on the scale subresource too.
    scale = crds.call("GET", NODESETS + "/gpu/scale")
    crds.call("PATCH", NODESETS + "/gpu", {"spec": {"maxReplicas": 8}}, content_type="application/merge-patch+json")
    e, body = failure(crds.call, "PATCH", NODESETS + "/gpu/scale", {"spec": {"replicas": 9}},
                      content_type="application/merge-patch+json")
    assert e.status == 422 and "maxReplicas must be >= replicas" in body["message"]


def test_custom_object_update_rules(emulator, crds):
    obj = crds.apply(NODESETS + "/gpu", nodeset())
    e, body = failure(crds.call, "PATCH", NODESETS + "/gpu", {"spec": {"replicas": 2}},
                      content_type="application/strategic-merge-patch+json")
    assert (e.status, body["reason"]) == (415, "UnsupportedMediaType")
    crds.call("PATCH", NODESETS + "/gpu", [{"op": "replace", "path": "/spec/replicas", "value": 2}],
              content_type="application/json-patch+json")
    unconditional = copy.deepcopy(obj)
    del unconditional["metadata"]["resourceVersion"]
    e, body = failure(crds.call, "PUT", NODESETS + "/gpu", unconditional)
    assert e.status == 422 and "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" \
        in body["message"]
    e, body = failure(crds.call, "PUT", NODESETS + "/gpu", obj)
    assert e.status == 409
    current = crds.call("GET", NODESETS + "/gpu")
    current["spec"]["replicas"] = 3
    assert crds.call("PUT", NODESETS + "/gpu", current)["metadata"]["generation"] == 3
    gone = crds.call("DELETE", NODESETS + "/gpu")
    assert gone["kind"] == "NodeSet"  # custom resources return the deleted object


def test_crd_rules_and_unregistration(emulator, crds):
    bad = copy.deepcopy(CRDS["nodesets"])
    bad["metadata"]["name"] = "other.slurm.soperator.dev"
    e, body = failure(crds.call, "POST", CRD_PATH, bad)
    assert e.status == 422 and 'must be spec.names.plural+"."+spec.group' in body["message"]
    scoped = copy.deepcopy(CRDS["nodesets"])
    scoped["spec"]["scope"] = "Cluster"
    e, body = failure(crds.apply, CRD_PATH + "/nodesets.slurm.soperator.dev", scoped, manager="installer")
    assert e.status == 422 and "spec.scope" in body["message"] and "field is immutable" in body["message"]
    untyped = copy.deepcopy(CRDS["nodesets"])
    untyped["metadata"]["name"] = "widgets.example.com"
    untyped["spec"]["group"] = "example.com"
    untyped["spec"]["names"] = {"kind": "Widget", "plural": "widgets"}
    untyped["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["x"] = {}
    e, body = failure(crds.call, "POST", CRD_PATH, untyped)
    assert e.status == 422 and "properties[x].type: Required value" in body["message"]

    crds.apply(NODESETS + "/gpu", nodeset())
    crds.call("DELETE", CRD_PATH + "/nodesets.slurm.soperator.dev")
    e, body = failure(crds.call, "GET", NODESETS + "/gpu")
    assert e.status == 404
    listing = crds.call("GET", "/apis/slurm.soperator.dev/v1alpha1")
    assert [r["name"] for r in listing["resources"]] == ["slurmclusters", "slurmclusters/status"]
    # Recreated, the old objects are gone.
    crds.apply(CRD_PATH + "/nodesets.slurm.soperator.dev", CRDS["nodesets"], manager="installer")
    assert crds.call("GET", NODESETS)["items"] == []


def test_versions_share_storage(emulator, kube):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"kind": "Widget", "plural": "widgets"},
                    "versions": [{"name": v, "served": True, "storage": v == "v1", "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"spec": {"type": "object", "properties": {
                            "size": {"type": "integer", "default": 1}}}}}}} for v in ("v1beta1", "v1")]}}
    created = kube.call("POST", CRD_PATH, crd)
    assert created["spec"]["names"]["singular"] == "widget" and created["spec"]["names"]["listKind"] == "WidgetList"
    make_ns(kube)
    kube.apply("/apis/example.com/v1beta1/namespaces/t/widgets/w", {
        "apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}})
    got = kube.call("GET", "/apis/example.com/v1/namespaces/t/widgets/w")
    assert got["apiVersion"] == "example.com/v1" and got["spec"] == {"size": 1}
    group = kube.call("GET", "/apis/example.com")
    assert group["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    assert "example.com" in [g["name"] for g in kube.call("GET", "/apis")["groups"]]
