"""The emulated API server through real HTTP and the real `kubernetes` client: discovery, CRUD and error shapes,
patches, dry-run, subresources, selectors, defaulting, validation, controllers, fault injection and request counts.

Server-side apply: test_emulator_ssa.py. CRDs: test_emulator_crd.py. Rendered objects: test_emulator_rendered.py.
"""
import json
import time

import kubernetes
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from emu_helpers import cm, cm_path, entry, failure, make_ns, sts, sts_path
from emulator import KubeEmulator
from emulator import quantity


# -- connection, discovery -------------------------------------------------------------------------------------
def test_version_and_bearer_token(emulator, kube, tmp_path):
    assert kube.call("GET", "/version")["minor"] == "32"
    bad = KubeEmulator.__new__(KubeEmulator)
    bad.port, bad.token = emulator.port, "wrong"
    path = KubeEmulator.write_kubeconfig(bad, str(tmp_path / "bad"))
    from emu_helpers import KubeClient
    client = KubeClient(path)
    try:
        e, body = failure(client.call, "GET", "/api/v1/namespaces")
    finally:
        client.close()
    assert e.status == 401
    assert body["reason"] == "Unauthorized" and body["kind"] == "Status"


def test_discovery_for_dynamic_client(kube):
    dyn = kube.dynamic()
    res = dyn.resources.get(api_version="apps/v1", kind="StatefulSet")
    assert res.name == "statefulsets" and res.namespaced
    assert "patch" in res.verbs and "sts" in res.short_names
    assert set(res.subresources) == {"status", "scale"}
    cm_res = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert cm_res.path(name="x", namespace="n") == "/api/v1/namespaces/n/configmaps/x"
    crb = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRoleBinding")
    assert not crb.namespaced
    groups = kube.call("GET", "/apis")
    names = [g["name"] for g in groups["groups"]]
    assert {"apps", "batch", "policy", "rbac.authorization.k8s.io", "apiextensions.k8s.io"} <= set(names)
    scale = [r for r in kube.call("GET", "/apis/apps/v1")["resources"] if r["name"] == "statefulsets/scale"][0]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    e, unused = failure(kube.call, "GET", "/openapi/v2")
    assert e.status == 404


def test_core_v1_api_and_dynamic_client_sanity(emulator, kube):
    core = kubernetes.client.CoreV1Api(kube.api)
    names = [n.metadata.name for n in core.list_namespace().items]
    assert "default" in names and "kube-system" in names
    core.create_namespace(kubernetes.client.V1Namespace(metadata=kubernetes.client.V1ObjectMeta(name="t")))
    core.create_namespaced_config_map("t", kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(name="c"), data={"a": "1"}))
    assert core.read_namespaced_config_map("c", "t").data == {"a": "1"}
    dyn = kube.dynamic()
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert cms.get(name="c", namespace="t").data.a == "1"
    applied = cms.server_side_apply(body=cm("d", {"b": "2"}), namespace="t", field_manager="dyn")
    assert applied.metadata.managedFields[0].manager == "dyn"
    assert emulator.get("v1", "ConfigMap", "d", "t")["data"] == {"b": "2"}


# -- CRUD and error shapes -------------------------------------------------------------------------------------
def test_create_get_replace_delete_and_error_shapes(emulator, kube):
    make_ns(kube)
    created = kube.request("POST", cm_path(), cm("c", {"a": "1"}))
    assert created.status_code == 201
    obj = created.data
    meta = obj["metadata"]
    assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1"
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["resourceVersion"].isdigit()
    assert "generation" not in meta  # ConfigMaps have none on the real server
    assert entry(obj, "OpenAPI-Generator", "Update")["fieldsV1"] == {"f:data": {".": {}, "f:a": {}}}

    e, body = failure(kube.call, "POST", cm_path(), cm("c"))
    assert (e.status, body["reason"], body["message"]) == (409, "AlreadyExists", 'configmaps "c" already exists')
    assert body["details"] == {"name": "c", "group": "", "kind": "configmaps"}

    obj["data"] = {"a": "2"}
    replaced = kube.call("PUT", cm_path(name="c"), obj)
    assert int(replaced["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    e, body = failure(kube.call, "PUT", cm_path(name="c"), obj)  # obj still carries the old resourceVersion
    assert (e.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "c": the object has been modified; '
                               'please apply your changes to the latest version and try again')
    e, body = failure(kube.call, "PUT", cm_path(name="missing"), cm("missing"))
    assert (e.status, body["message"]) == (404, 'configmaps "missing" not found')
    e, body = failure(kube.call, "PUT", cm_path(name="other"), cm("c"))
    assert e.status == 400 and "does not match the name on the URL" in body["message"]

    deleted = kube.call("DELETE", cm_path(name="c"))
    assert deleted["kind"] == "Status" and deleted["status"] == "Success"
    assert deleted["details"]["uid"] == meta["uid"]
    e, body = failure(kube.call, "GET", cm_path(name="c"))
    assert (e.status, body["reason"], body["message"]) == (404, "NotFound", 'configmaps "c" not found')
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == 404
    e, unused = failure(kube.call, "DELETE", cm_path(name="c"))
    assert e.status == 404


def test_group_resources_in_messages(kube):
    make_ns(kube)
    e, body = failure(kube.call, "GET", sts_path(name="nope"))
    assert body["message"] == 'statefulsets.apps "nope" not found'
    assert body["details"] == {"name": "nope", "group": "apps", "kind": "statefulsets"}


def test_namespaced_object_needs_its_namespace(kube):
    e, body = failure(kube.call, "POST", cm_path("nope"), cm("c"))
    assert (e.status, body["reason"], body["message"]) == (404, "NotFound", 'namespaces "nope" not found')
    e, body = failure(kube.apply, cm_path("nope", "c"), cm("c"))
    assert (e.status, body["message"]) == (404, 'namespaces "nope" not found')


def test_names_are_validated(kube):
    make_ns(kube)
    e, body = failure(kube.call, "POST", cm_path(), cm("Bad_Name"))
    assert (e.status, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
                                      'a lowercase RFC 1123 subdomain')
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert body["details"]["causes"][0]["reason"] == "FieldValueInvalid"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc"},
           "spec": {"ports": [{"port": 80}]}}
    e, body = failure(kube.call, "POST", "/api/v1/namespaces/t/services", svc)
    assert e.status == 422 and "DNS-1035 label" in body["message"]
    e, body = failure(kube.call, "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": "a" * 64}})
    assert e.status == 422 and "must be no more than 63 characters" in body["message"]
    e, body = failure(kube.call, "POST", cm_path(), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert e.status == 422 and "metadata.name: Required value" in body["message"]
    e, body = failure(kube.call, "POST", cm_path(), cm("c", labels={"bad key": "v"}))
    assert e.status == 422 and body["details"]["causes"][0]["field"] == "metadata.labels"
    e, body = failure(kube.call, "POST", cm_path(), cm("c", labels={"k": "bad value!"}))
    assert e.status == 422 and "a valid label must be an empty string" in body["message"]


def test_generate_name(kube):
    make_ns(kube)
    obj = kube.call("POST", cm_path(), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}})
    assert obj["metadata"]["name"].startswith("x-") and len(obj["metadata"]["name"]) == 7


def test_list_shape_selectors_and_pages(emulator, kube):
    make_ns(kube)
    make_ns(kube, "u")
    kube.call("POST", cm_path(), cm("a", labels={"app": "x", "tier": "db"}))
    kube.call("POST", cm_path(), cm("b", labels={"app": "y"}))
    kube.call("POST", cm_path(), cm("c"))
    kube.call("POST", cm_path("u"), cm("d", labels={"app": "x"}))
    listed = kube.call("GET", cm_path(), query={"labelSelector": "app"})
    assert listed["kind"] == "ConfigMapList" and listed["apiVersion"] == "v1"
    assert listed["metadata"]["resourceVersion"] == str(emulator.resource_version)
    assert "kind" not in listed["items"][0]  # items of built-in lists carry no kind, as on the real server

    def names(selector=None, ns="t", fields=None):
        query = {"labelSelector": selector, "fieldSelector": fields}
        listed = kube.call("GET", cm_path(ns) if ns else "/api/v1/configmaps", query=query)
        return sorted(i["metadata"]["name"] for i in listed["items"])

    assert names("app=x") == names("app==x") == ["a"]
    assert names("app!=x") == ["b", "c", "kube-root-ca.crt"]  # != also matches objects without the label
    assert names("app in (x, y)") == ["a", "b"]
    assert names("app notin (x)") == ["b", "c", "kube-root-ca.crt"]
    assert names("!app") == ["c", "kube-root-ca.crt"]
    assert names("app=x,tier=db") == ["a"] and names("app=x,tier=web") == []
    assert names("app=x", ns=None) == ["a", "d"]  # all namespaces
    assert names(fields="metadata.name=b") == ["b"]
    assert names(fields="metadata.namespace=u", ns=None) == ["d", "kube-root-ca.crt"]
    e, body = failure(kube.call, "GET", cm_path(), query={"labelSelector": "app in x"})
    assert e.status == 400 and body["reason"] == "BadRequest"
    e, body = failure(kube.call, "GET", cm_path(), query={"fieldSelector": "data.a=1"})
    assert e.status == 400 and body["message"] == "field label not supported: data.a"

    page = kube.call("GET", cm_path(), query={"limit": 2})
    assert len(page["items"]) == 2 and page["metadata"]["remainingItemCount"] == 2
    rest = kube.call("GET", cm_path(), query={"limit": 2, "continue": page["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in page["items"] + rest["items"]] == ["a", "b", "c", "kube-root-ca.crt"]
    assert "continue" not in rest["metadata"]


# -- patches -----------------------------------------------------------------------------------------------------
def test_merge_strategic_and_json_patches(emulator, kube):
    make_ns(kube)
    kube.call("POST", sts_path(), sts(containers=[{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                                                  {"name": "b", "image": "b:1"}]))
    kube.call("PATCH", sts_path(name="web"), {"spec": {"template": {"spec": {"containers": [
        {"name": "b", "image": "b:2"}]}}}}, content_type="application/strategic-merge-patch+json")
    containers = emulator.get("apps/v1", "StatefulSet", "web", "t")["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("a", "a:1"), ("b", "b:2")]
    assert containers[0]["env"] == [{"name": "X", "value": "1"}]

    kube.call("PATCH", sts_path(name="web"), {"metadata": {"labels": {"l": "1"}}, "spec": {"replicas": 3}},
              content_type="application/merge-patch+json")
    kube.call("PATCH", sts_path(name="web"), {"metadata": {"labels": {"l": None}}},
              content_type="application/merge-patch+json")
    obj = emulator.get("apps/v1", "StatefulSet", "web", "t")
    assert obj["spec"]["replicas"] == 3 and "l" not in (obj["metadata"].get("labels") or {})

    kube.call("PATCH", sts_path(name="web"), [{"op": "replace", "path": "/spec/replicas", "value": 5},
                                              {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}],
              content_type="application/json-patch+json")
    obj = emulator.get("apps/v1", "StatefulSet", "web", "t")
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["annotations"] == {"a": "b"}
    test_op = [{"op": "test", "path": "/spec/replicas", "value": 1}]
    e, body = failure(kube.call, "PATCH", sts_path(name="web"), test_op, content_type="application/json-patch+json")
    assert (e.status, body["reason"]) == (422, "Invalid")
    e, body = failure(kube.call, "PATCH", sts_path(name="web"), '{"spec": {}}',
                      content_type="application/xml")
    assert (e.status, body["reason"]) == (415, "UnsupportedMediaType")
    e, body = failure(kube.call, "PATCH", sts_path(name="nope"), {"spec": {}},
                      content_type="application/merge-patch+json")
    assert e.status == 404
    e, body = failure(kube.call, "PATCH", sts_path(name="web"), {"spec": {}}, query={"force": "true"},
                      content_type="application/merge-patch+json")
    assert e.status == 422 and "force" in body["message"]


# -- dry run -----------------------------------------------------------------------------------------------------
def test_dry_run_stores_nothing(emulator, kube):
    make_ns(kube)
    rv = emulator.resource_version
    would = kube.call("POST", sts_path(), sts(), query={"dryRun": "All"})
    assert would["spec"]["podManagementPolicy"] == "OrderedReady"  # defaults are in the would-be object
    assert would["metadata"]["uid"] and "resourceVersion" not in would["metadata"]
    assert emulator.get("apps/v1", "StatefulSet", "web", "t") is None
    assert emulator.resource_version == rv
    applied = kube.apply(sts_path(name="web"), sts(), dry_run=True)
    assert applied["spec"]["revisionHistoryLimit"] == 10 and emulator.get("apps/v1", "StatefulSet", "web", "t") is None

    kube.call("POST", sts_path(), sts())
    rv = emulator.resource_version
    before = emulator.get("apps/v1", "StatefulSet", "web", "t")
    patched = kube.call("PATCH", sts_path(name="web"), {"spec": {"replicas": 4}}, query={"dryRun": "All"},
                        content_type="application/merge-patch+json")
    assert patched["spec"]["replicas"] == 4 and patched["metadata"]["generation"] == 2
    # The creator (an Update by OpenAPI-Generator) owns the defaulted replicas: apply must force.
    applied = kube.apply(sts_path(name="web"), sts(replicas=6), dry_run=True, force=True)
    assert applied["spec"]["replicas"] == 6
    kube.call("DELETE", sts_path(name="web"), query={"dryRun": "All"})
    assert emulator.get("apps/v1", "StatefulSet", "web", "t") == before and emulator.resource_version == rv
    e, body = failure(kube.call, "DELETE", sts_path(name="web"), query={"dryRun": "Server"})
    assert e.status == 422 and 'dryRun: Unsupported value: "Server"' in body["message"]
    # A dry run still validates everything.
    e, unused = failure(kube.call, "PATCH", sts_path(name="web"), {"spec": {"replicas": -1}},
                        query={"dryRun": "All"}, content_type="application/merge-patch+json")
    assert e.status == 422
    assert emulator.counts()["dry_run_writes"] == 7  # rejected requests count too


# -- subresources ----------------------------------------------------------------------------------------------
def test_status_subresource(kube):
    make_ns(kube)
    body = sts()
    body["status"] = {"replicas": 9}
    obj = kube.call("POST", sts_path(), body)
    assert obj["status"] == {"replicas": 0, "availableReplicas": 0}  # create resets status
    obj = kube.call("GET", sts_path(name="web", sub="status"))
    obj["status"]["readyReplicas"] = 7
    obj["spec"]["replicas"] = 3  # ignored on /status
    kube.call("PUT", sts_path(name="web", sub="status"), obj)
    stored = kube.call("GET", sts_path(name="web"))
    assert stored["status"]["readyReplicas"] == 7 and stored["spec"]["replicas"] == 1
    stored["status"]["readyReplicas"] = 1
    stored["spec"]["replicas"] = 2  # on the main resource the status change is ignored
    kube.call("PUT", sts_path(name="web"), stored)
    stored = kube.call("GET", sts_path(name="web"))
    assert stored["spec"]["replicas"] == 2
    kube.call("PATCH", sts_path(name="web", sub="status"), {"status": {"currentRevision": "r"}},
              content_type="application/merge-patch+json")
    assert kube.call("GET", sts_path(name="web"))["status"]["currentRevision"] == "r"


def test_scale_subresource(emulator, kube):
    make_ns(kube)
    kube.call("POST", sts_path(), sts(replicas=2))
    scale = kube.call("GET", sts_path(name="web", sub="scale"))
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2} and scale["status"]["selector"] == "app=web"
    scale["spec"]["replicas"] = 5
    out = kube.call("PUT", sts_path(name="web", sub="scale"), scale)
    assert out["spec"]["replicas"] == 5
    obj = emulator.get("apps/v1", "StatefulSet", "web", "t")
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["generation"] == 2
    assert entry(obj, "OpenAPI-Generator", "Update", "scale")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    kube.call("PATCH", sts_path(name="web", sub="scale"), {"spec": {"replicas": 1}},
              content_type="application/merge-patch+json")
    assert emulator.get("apps/v1", "StatefulSet", "web", "t")["spec"]["replicas"] == 1
    e, body = failure(kube.call, "PUT", sts_path(name="web", sub="scale"), scale)  # stale resourceVersion
    assert e.status == 409
    e, body = failure(kube.call, "PATCH", sts_path(name="web", sub="scale"), {"spec": {"replicas": -1}},
                      content_type="application/merge-patch+json")
    assert e.status == 422


# -- delete ----------------------------------------------------------------------------------------------------
def test_delete_options_and_namespace_cascade(emulator, kube):
    make_ns(kube)
    kube.call("POST", cm_path(), cm("c"))
    kube.call("POST", sts_path(), sts())
    gone = kube.call("DELETE", cm_path(name="c"), {"kind": "DeleteOptions", "apiVersion": "v1",
                                                   "propagationPolicy": "Foreground"})
    assert gone["status"] == "Success"
    e, unused = failure(kube.call, "DELETE", sts_path(name="web"), query={"propagationPolicy": "Sometimes"})
    assert e.status == 422
    e, body = failure(kube.call, "DELETE", sts_path(name="web"), {"preconditions": {"uid": "other"}})
    assert e.status == 409 and "Precondition failed" in body["message"]
    ns = kube.call("DELETE", "/api/v1/namespaces/t")
    assert ns["kind"] == "Namespace" and ns["status"]["phase"] == "Terminating"
    assert emulator.get("apps/v1", "StatefulSet", "web", "t") is None
    assert emulator.list("v1", "ConfigMap", "t") == []
    e, body = failure(kube.call, "POST", cm_path(), cm("c"))
    assert body["message"] == 'namespaces "t" not found'


def test_finalizers_hold_deletion(emulator, kube):
    make_ns(kube)
    kube.call("POST", cm_path(), cm("c", {}) | {"metadata": {"name": "c", "finalizers": ["example.com/hold"]}})
    held = kube.call("DELETE", cm_path(name="c"))
    assert held["kind"] == "ConfigMap" and held["metadata"]["deletionTimestamp"]
    assert emulator.get("v1", "ConfigMap", "c", "t") is not None
    kube.call("PATCH", cm_path(name="c"), {"metadata": {"finalizers": None}},
              content_type="application/merge-patch+json")
    assert emulator.get("v1", "ConfigMap", "c", "t") is None
    e, body = failure(kube.call, "POST", cm_path(), {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "d", "finalizers": ["nodomain"]}})
    assert e.status == 422


def test_pvc_protection_and_binding(emulator, kube):
    make_ns(kube)
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1024Mi"}}}}
    created = kube.call("POST", "/api/v1/namespaces/t/persistentvolumeclaims", pvc)
    assert created["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert created["spec"]["volumeMode"] == "Filesystem" and created["status"] == {"phase": "Pending"}
    assert created["spec"]["resources"]["requests"]["storage"] == "1Gi"
    bound = emulator.get("v1", "PersistentVolumeClaim", "data", "t")
    assert bound["status"]["phase"] == "Bound" and bound["spec"]["volumeName"] == "pvc-" + created["metadata"]["uid"]
    kube.call("PATCH", "/api/v1/namespaces/t/persistentvolumeclaims/data",
              {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}, content_type="application/merge-patch+json")
    e, body = failure(kube.call, "PATCH", "/api/v1/namespaces/t/persistentvolumeclaims/data",
                      {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                      content_type="application/merge-patch+json")
    assert e.status == 422 and "can not be less than previous value" in body["message"]
    e, body = failure(kube.call, "PATCH", "/api/v1/namespaces/t/persistentvolumeclaims/data",
                      {"spec": {"accessModes": ["ReadWriteMany"]}}, content_type="application/merge-patch+json")
    assert e.status == 422 and "spec is immutable after creation" in body["message"]
    kube.call("DELETE", "/api/v1/namespaces/t/persistentvolumeclaims/data")
    assert emulator.get("v1", "PersistentVolumeClaim", "data", "t") is None


# -- defaulting ------------------------------------------------------------------------------------------------
def test_statefulset_and_pod_template_defaults(kube):
    make_ns(kube)
    body = sts(containers=[{"name": "a", "image": "repo/a", "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "1000m", "memory": "1024Mi"},
                                          "requests": {"cpu": "0.5", "memory": "0.75Gi"}}},
                           {"name": "b", "image": "b:latest"}, {"name": "c", "image": "c:1@sha256:abc"}])
    body["spec"]["updateStrategy"] = {"type": "RollingUpdate"}
    obj = kube.call("POST", sts_path(), body)
    spec = obj["spec"]
    assert spec["replicas"] == 1 and spec["podManagementPolicy"] == "OrderedReady"
    assert spec["revisionHistoryLimit"] == 10
    assert spec["updateStrategy"] == {"type": "RollingUpdate"}  # partition only when rollingUpdate was defaulted
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    pod = spec["template"]["spec"]
    assert (pod["restartPolicy"], pod["dnsPolicy"], pod["schedulerName"]) == ("Always", "ClusterFirst",
                                                                              "default-scheduler")
    assert pod["securityContext"] == {} and pod["terminationGracePeriodSeconds"] == 30
    a, b, c = pod["containers"]
    assert [x["imagePullPolicy"] for x in (a, b, c)] == ["Always", "Always", "IfNotPresent"]
    assert a["terminationMessagePath"] == "/dev/termination-log" and a["terminationMessagePolicy"] == "File"
    assert a["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert a["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"},
                              "requests": {"cpu": "500m", "memory": "768Mi"}}
    assert b["resources"] == {}
    assert spec["template"]["metadata"]["creationTimestamp"] is None
    plain = kube.call("POST", sts_path(), sts("other"))
    assert plain["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}


def test_service_job_cronjob_secret_defaults(emulator, kube):
    make_ns(kube)
    svc = kube.call("POST", "/api/v1/namespaces/t/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}})["spec"]
    assert svc["type"] == "ClusterIP" and svc["sessionAffinity"] == "None"
    assert svc["clusterIP"] and svc["clusterIPs"] == [svc["clusterIP"]]
    assert svc["ipFamilies"] == ["IPv4"] and svc["ipFamilyPolicy"] == "SingleStack"
    assert svc["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    headless = kube.call("POST", "/api/v1/namespaces/t/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "h"}, "spec": {"clusterIP": "None"}})["spec"]
    assert headless["clusterIPs"] == ["None"]
    nodeport = kube.call("POST", "/api/v1/namespaces/t/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "np"},
        "spec": {"type": "NodePort", "ports": [{"port": 22}]}})["spec"]
    assert 30000 <= nodeport["ports"][0]["nodePort"] <= 32767 and nodeport["externalTrafficPolicy"] == "Cluster"

    job = kube.call("POST", "/apis/batch/v1/namespaces/t/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"metadata": {"labels": {"app": "j"}}, "spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}})
    uid = job["metadata"]["uid"]
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["completions"], spec["parallelism"]) == (6, 1, 1)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "app": "j", "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "j",
        "controller-uid": uid, "job-name": "j"}
    assert job["metadata"]["labels"] == {"app": "j"}

    cron = kube.call("POST", "/apis/batch/v1/namespaces/t/cronjobs", {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
        "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox:1"}]}}}}}})["spec"]
    assert (cron["concurrencyPolicy"], cron["suspend"], cron["successfulJobsHistoryLimit"],
            cron["failedJobsHistoryLimit"]) == ("Allow", False, 3, 1)
    assert "backoffLimit" not in cron["jobTemplate"]["spec"]

    secret = kube.call("POST", "/api/v1/namespaces/t/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert secret["type"] == "Opaque" and secret["data"] == {"k": "dg=="} and "stringData" not in secret
    e, body = failure(kube.call, "POST", "/api/v1/namespaces/t/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"k": "not base64!"}})
    assert e.status == 400 and "illegal base64 data" in body["message"]


@pytest.mark.parametrize("given,canonical", [
    ("1000m", "1"), ("1024Mi", "1Gi"), ("0.5", "500m"), ("1.5", "1500m"), ("1000", "1k"), ("1500", "1500"),
    ("2048Ki", "2Mi"), ("1536Mi", "1536Mi"), ("0.5Gi", "512Mi"), ("100m", "100m"), ("1e3", "1e3"),
    ("0", "0"), ("10Gi", "10Gi"), ("1.5Ki", "1536"), (1, "1"), (0.25, "250m"), ("1000000", "1M"),
])
def test_quantity_canonical_form(given, canonical):
    assert quantity.canonical(given) == canonical


def test_bad_quantity_is_rejected(kube):
    make_ns(kube)
    e, body = failure(kube.call, "POST", sts_path(), sts(containers=[
        {"name": "a", "image": "a:1", "resources": {"requests": {"cpu": "one"}}}]))
    assert e.status == 400 and "quantities must match the regular expression" in body["message"]


# -- validation ------------------------------------------------------------------------------------------------
def test_kind_validation(kube):
    make_ns(kube)
    bad = sts()
    bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    e, body = failure(kube.call, "POST", sts_path(), bad)
    assert e.status == 422 and "`selector` does not match template `labels`" in body["message"]
    assert body["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    bad = sts()
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    e, body = failure(kube.call, "POST", sts_path(), bad)
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"' \
        in body["message"]
    bad = sts()
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "nope", "mountPath": "/x"}]
    e, body = failure(kube.call, "POST", sts_path(), bad)
    assert 'spec.template.spec.containers[0].volumeMounts[0].name: Not found: "nope"' in body["message"]
    bad = sts()
    del bad["spec"]["template"]["spec"]["containers"][0]["name"]
    e, body = failure(kube.call, "POST", sts_path(), bad)
    assert e.status == 422 and "spec.template.spec.containers[0].name: Required value" in body["message"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}
    e, body = failure(kube.call, "POST", "/apis/batch/v1/namespaces/t/jobs", job)
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always"' in body["message"]
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"ports": [{"port": 80}, {"port": 81}]}}
    e, body = failure(kube.call, "POST", "/api/v1/namespaces/t/services", svc)
    assert "spec.ports[0].name: Required value" in body["message"]
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "every minute", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1"}]}}}}}}
    e, body = failure(kube.call, "POST", "/apis/batch/v1/namespaces/t/cronjobs", cron)
    assert 'spec.schedule: Invalid value: "every minute"' in body["message"]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["pods"]}]}
    e, body = failure(kube.call, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/t/roles", role)
    assert "rules[0].verbs: Required value" in body["message"]


def test_wrong_types_and_unknown_fields(emulator, kube):
    make_ns(kube)
    bad = sts()
    bad["spec"]["replicas"] = "three"
    e, body = failure(kube.call, "POST", sts_path(), bad)
    assert (e.status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == ('StatefulSet in version "v1" cannot be handled as a StatefulSet: json: cannot '
                               'unmarshal string into Go struct field StatefulSetSpec.spec.replicas of type int32')
    extra = sts()
    extra["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    e, body = failure(kube.call, "POST", sts_path(), extra, query={"fieldValidation": "Strict"})
    assert e.status == 400
    assert 'strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolicyy"' \
        in body["message"]
    # Default fieldValidation (Warn): the fields are dropped and a Warning header says so for each.
    extra["spec"]["colour"] = "blue"
    raw = urllib3.PoolManager().request("POST", kube.configuration.host + sts_path(), body=json.dumps(extra),
                                        headers={"Content-Type": "application/json",
                                                 "Authorization": "Bearer " + emulator.token})
    assert raw.status == 201 and "imagePullPolicyy" not in raw.data.decode() and "colour" not in raw.data.decode()
    assert raw.headers.getlist("Warning") == [
        '299 - "unknown field \\"spec.template.spec.containers[0].imagePullPolicyy\\""',
        '299 - "unknown field \\"spec.colour\\""']


def test_immutable_fields(emulator, kube):
    make_ns(kube)
    kube.call("POST", sts_path(), sts())
    e, body = failure(kube.call, "PATCH", sts_path(name="web"), {"spec": {"serviceName": "other"}},
                      content_type="application/merge-patch+json")
    assert e.status == 422
    assert body["message"] == (
        'StatefulSet.apps "web" is invalid: spec: Forbidden: updates to statefulset spec for fields other than '
        "'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and "
        "'minReadySeconds' are forbidden")
    kube.call("PATCH", sts_path(name="web"), {"spec": {"replicas": 2, "minReadySeconds": 5}},
              content_type="application/merge-patch+json")

    kube.call("POST", "/apis/batch/v1/namespaces/t/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1"}]}}}})
    e, body = failure(kube.call, "PATCH", "/apis/batch/v1/namespaces/t/jobs/j",
                      {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:2"}]}}}},
                      content_type="application/strategic-merge-patch+json")
    assert e.status == 422 and "spec.template: Invalid value" in body["message"] and "field is immutable" \
        in body["message"]
    e, body = failure(kube.call, "PATCH", "/apis/batch/v1/namespaces/t/jobs/j", {"spec": {"completions": 2}},
                      content_type="application/merge-patch+json")
    assert "spec.completions: Invalid value: 2: field is immutable" in body["message"]

    svc = kube.call("POST", "/api/v1/namespaces/t/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    e, body = failure(kube.call, "PATCH", "/api/v1/namespaces/t/services/s", {"spec": {"clusterIP": "10.96.9.9"}},
                      content_type="application/merge-patch+json")
    assert e.status == 422 and "spec.clusterIP" in body["message"] and "field is immutable" in body["message"]
    svc["spec"].pop("clusterIP")
    svc["spec"].pop("clusterIPs")
    kept = kube.call("PUT", "/api/v1/namespaces/t/services/s", svc)  # an omitted clusterIP keeps the allocated one
    assert kept["spec"]["clusterIP"] == emulator.get("v1", "Service", "s", "t")["spec"]["clusterIP"]

    kube.call("POST", cm_path(), dict(cm("frozen", {"a": "1"}), immutable=True))
    e, body = failure(kube.call, "PATCH", cm_path(name="frozen"), {"data": {"a": "2"}},
                      content_type="application/merge-patch+json")
    assert e.status == 422 and "data: Forbidden: field is immutable when `immutable` is set" in body["message"]
    kube.call("POST", "/api/v1/namespaces/t/secrets", {"apiVersion": "v1", "kind": "Secret",
                                                       "metadata": {"name": "s"}, "data": {}})
    e, body = failure(kube.call, "PATCH", "/api/v1/namespaces/t/secrets/s", {"type": "kubernetes.io/basic-auth"},
                      content_type="application/merge-patch+json")
    assert e.status == 422 and "field is immutable" in body["message"]


# -- controllers -----------------------------------------------------------------------------------------------
def test_controllers_fill_status(emulator, kube):
    make_ns(kube)
    created = kube.call("POST", sts_path(), sts(replicas=3))
    assert created["status"] == {"replicas": 0, "availableReplicas": 0}  # the response precedes the controller
    status = kube.call("GET", sts_path(name="web"))["status"]
    assert status["replicas"] == status["readyReplicas"] == status["availableReplicas"] == 3
    assert status["updatedReplicas"] == status["currentReplicas"] == 3 and status["observedGeneration"] == 1
    assert status["currentRevision"] == status["updateRevision"] and status["collisionCount"] == 0
    obj = emulator.get("apps/v1", "StatefulSet", "web", "t")
    assert entry(obj, "kube-controller-manager", "Update", "status") is not None
    assert all(r.verb != "update" or r.subresource != "status" for r in emulator.requests)

    kube.call("POST", "/apis/policy/v1/namespaces/t/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    pdb = emulator.get("policy/v1", "PodDisruptionBudget", "web", "t")["status"]
    assert (pdb["expectedPods"], pdb["currentHealthy"], pdb["desiredHealthy"], pdb["disruptionsAllowed"]) == \
        (3, 3, 2, 1)

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1"}]}}}}
    kube.call("POST", "/apis/batch/v1/namespaces/t/jobs", job)
    status = emulator.get("batch/v1", "Job", "j", "t")["status"]
    assert status["succeeded"] == 1 and status["startTime"] and status["completionTime"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Complete": "True",
                                                                      "SuccessCriteriaMet": "True"}
    emulator.set_job_outcome("t", "k", "Failed")
    kube.call("POST", "/apis/batch/v1/namespaces/t/jobs", dict(job, metadata={"name": "k"}))
    status = emulator.get("batch/v1", "Job", "k", "t")["status"]
    assert [c["type"] for c in status["conditions"]] == ["FailureTarget", "Failed"]
    assert emulator.list("v1", "Pod", "t") == []  # no pods unless simulate_pods

    # A namespace gets its default ServiceAccount and root CA ConfigMap.
    assert emulator.get("v1", "ServiceAccount", "default", "t") is not None
    assert emulator.get("v1", "ConfigMap", "kube-root-ca.crt", "t") is not None


def test_set_status_drives_readiness_without_controllers(tmp_path):
    from emu_helpers import KubeClient
    with KubeEmulator(simulate_controllers=False) as emu:
        kube = KubeClient(emu.write_kubeconfig(str(tmp_path / "k")))
        try:
            make_ns(kube)
            kube.call("POST", sts_path(), sts(replicas=2))
            rv = emu.get("apps/v1", "StatefulSet", "web", "t")["metadata"]["resourceVersion"]
            assert kube.call("GET", sts_path(name="web"))["status"] == {"replicas": 0, "availableReplicas": 0}
            emu.set_status("apps/v1", "StatefulSet", "web", "t", {"replicas": 2, "readyReplicas": 1})
            obj = kube.call("GET", sts_path(name="web"))
            assert obj["status"] == {"replicas": 2, "readyReplicas": 1}
            assert int(obj["metadata"]["resourceVersion"]) > int(rv)
            assert emu.get("v1", "ServiceAccount", "default", "t") is None
        finally:
            kube.close()
        assert emu.internal_errors == []


def test_simulated_pods_and_logs(tmp_path):
    from emu_helpers import KubeClient
    with KubeEmulator(simulate_pods=True) as emu:
        kube = KubeClient(emu.write_kubeconfig(str(tmp_path / "k")))
        try:
            make_ns(kube)
            kube.call("POST", sts_path(), sts(replicas=2))
            pods = kube.call("GET", "/api/v1/namespaces/t/pods", query={"labelSelector": "app=web"})["items"]
            assert [p["metadata"]["name"] for p in pods] == ["web-0", "web-1"]
            assert all(p["status"]["phase"] == "Running" for p in pods)
            ready = [c for c in pods[0]["status"]["conditions"] if c["type"] == "Ready"][0]
            assert ready["status"] == "True"
            kube.call("PATCH", sts_path(name="web", sub="scale"), {"spec": {"replicas": 1}},
                      content_type="application/merge-patch+json")
            assert [p["metadata"]["name"] for p in emu.list("v1", "Pod", "t")] == ["web-0"]
            emu.set_pod_log("t", "web-0", "one\ntwo\n")
            raw = kube.api.call_api("GET", emu.url + "/api/v1/namespaces/t/pods/web-0/log?tailLines=1",
                                    {"Authorization": "Bearer " + emu.token})
            raw.read()
            assert raw.data == b"two\n"
            kube.call("DELETE", sts_path(name="web"))
            assert emu.list("v1", "Pod", "t") == []  # garbage collected with their owner
        finally:
            kube.close()
        assert emu.internal_errors == []


# -- fault injection, delays, counts ----------------------------------------------------------------------------
def test_fail_next(emulator, kube):
    make_ns(kube)
    emulator.fail_next(500, method="POST")
    e, body = failure(kube.call, "POST", cm_path(), cm("c"))
    assert (e.status, body["reason"]) == (500, "InternalError")
    assert emulator.get("v1", "ConfigMap", "c", "t") is None
    kube.call("POST", cm_path(), cm("c"))  # count=1: the next one goes through
    emulator.fail_next(409, path_contains="/configmaps/c", count=2, message="try again")
    for unused in range(2):
        e, body = failure(kube.call, "GET", cm_path(name="c"))
        assert (e.status, body["reason"], body["message"]) == (409, "Conflict", "try again")
    kube.call("GET", cm_path(name="c"))
    emulator.fail_next(429, method="POST", retry_after=3)
    e, body = failure(kube.call, "POST", cm_path(), cm("d"))
    assert e.status == 429 and e.headers["Retry-After"] == "3" and body["reason"] == "TooManyRequests"
    assert [r.status for r in emulator.requests[-4:]] == [409, 409, 200, 429]


def test_delay_next_provokes_client_timeouts(emulator, kube):
    make_ns(kube)
    emulator.delay_next(1.0, method="POST")
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        kube.call("POST", cm_path(), cm("late"), timeout=0.2)
    # The server still handles the request after the client gave up, as a real one would.
    deadline = time.monotonic() + 30
    while emulator.get("v1", "ConfigMap", "late", "t") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emulator.get("v1", "ConfigMap", "late", "t") is not None
    kube.call("POST", cm_path(), cm("fast"), timeout=5)


def test_request_records_and_counts(emulator, kube):
    make_ns(kube)
    emulator.reset_counts()
    assert emulator.counts() == {"reads": 0, "writes": 0, "dry_run_writes": 0, "discovery": 0}
    kube.call("GET", "/apis/apps/v1")
    kube.apply(cm_path(name="c"), cm("c"))
    kube.apply(cm_path(name="c"), cm("c"), dry_run=True)
    kube.call("GET", cm_path(name="c"))
    kube.call("GET", cm_path())
    assert emulator.counts() == {"reads": 2, "writes": 1, "dry_run_writes": 1, "discovery": 1}
    rec = emulator.requests[1]
    assert (rec.method, rec.verb, rec.kind, rec.dry_run, rec.status) == ("PATCH", "patch", "ConfigMap", False, 201)
    assert rec.path == cm_path(name="c") and rec.query["fieldManager"] == "test"
    assert (rec.namespace, rec.name, rec.field_manager) == ("t", "c", "test")
    assert emulator.requests[2].dry_run is True
    assert [r.verb for r in emulator.requests] == ["discovery", "patch", "patch", "get", "list"]


def test_watch_streams_events(emulator, kube):
    make_ns(kube)
    kube.call("POST", cm_path(), cm("a", labels={"w": "1"}))
    rv = kube.call("GET", cm_path())["metadata"]["resourceVersion"]
    kube.call("POST", cm_path(), cm("b", labels={"w": "1"}))
    kube.call("DELETE", cm_path(name="a"))
    core = kubernetes.client.CoreV1Api(kube.api)
    events = [(ev["type"], ev["object"].metadata.name) for ev in kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, "t", label_selector="w=1", resource_version=rv, timeout_seconds=1)]
    assert events == [("ADDED", "b"), ("DELETED", "a")]


def test_unknown_paths_and_methods(kube):
    e, body = failure(kube.call, "GET", "/apis/example.com/v1/things")
    assert (e.status, body["message"]) == (404, "the server could not find the requested resource")
    e, body = failure(kube.call, "POST", "/api/v1/namespaces/default/configmaps/x", cm("x"))
    assert (e.status, body["reason"]) == (405, "MethodNotAllowed")
    make_ns(kube)
    e, body = failure(kube.call, "POST", cm_path(), {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "c", "resourceVersion": "5"}})
    assert e.status == 500 and body["message"] == "resourceVersion should not be set on objects to be created"
    with pytest.raises(ApiException):
        kube.call("POST", cm_path(), {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert kube.call("GET", cm_path(name="kube-root-ca.crt"))["data"]["ca.crt"].startswith("-----BEGIN")
