"""Small helpers shared by the emulator tests (tests/kube)."""
import json
import os
import shutil
import tempfile

import pytest
from kubernetes.client.exceptions import ApiException


def ns_body(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def make_ns(kube, name="t"):
    return kube.call("POST", "/api/v1/namespaces", ns_body(name))


def cm(name, data=None, labels=None, namespace=None):
    meta = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    if namespace is not None:
        meta["namespace"] = namespace
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        obj["data"] = data
    return obj


def cm_path(ns="t", name=None):
    return "/api/v1/namespaces/%s/configmaps%s" % (ns, "/" + name if name else "")


def sts_path(ns="t", name=None, sub=None):
    return "/apis/apps/v1/namespaces/%s/statefulsets%s%s" % (ns, "/" + name if name else "", "/" + sub if sub else "")


def sts(name="web", replicas=None, image="nginx:1.25", labels=None, containers=None):
    labels = labels or {"app": name}
    spec = {"serviceName": name, "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)},
                         "spec": {"containers": containers or [{"name": "main", "image": image}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name}, "spec": spec}


def failure(call, *args, **kwargs):
    """Run a call that must fail; -> (ApiException, Status body as a dict)."""
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    e = info.value
    return e, json.loads(e.body)


def managers(obj):
    """{(manager, operation, subresource): fieldsV1} of an object."""
    return dict(((m["manager"], m["operation"], m.get("subresource", "")), m["fieldsV1"])
                for m in obj["metadata"].get("managedFields") or [])


def entry(obj, manager, operation="Apply", subresource=""):
    for m in obj["metadata"].get("managedFields") or []:
        if (m["manager"], m["operation"], m.get("subresource", "")) == (manager, operation, subresource):
            return m
    return None


class KubeClient(object):
    """Raw API calls through kubernetes.client.ApiClient (real HTTP, real client serialisation and errors)."""

    def __init__(self, kubeconfig):
        import kubernetes
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.configuration = cfg
        self.api = kubernetes.client.ApiClient(cfg)
        self._cache_dir = tempfile.mkdtemp(prefix="emu-discovery-")

    def dynamic(self):
        """A DynamicClient with its own discovery cache. The default cache is a file in /tmp keyed by host and port,
        so a later emulator on a reused port would read an earlier emulator's resources from it."""
        import kubernetes
        return kubernetes.dynamic.DynamicClient(
            self.api, cache_file=os.path.join(self._cache_dir, "discovery-%d.json" % len(os.listdir(self._cache_dir))))

    def request(self, method, path, body=None, query=None, content_type=None, timeout=None):
        """-> ApiResponse (status_code, data, headers); raises kubernetes.client.exceptions.ApiException."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        m, url, h, b, unused = self.api.param_serialize(method, path, query_params=params, header_params=headers,
                                                        body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(m, url, h, b, _request_timeout=timeout)
        resp.read()
        return self.api.response_deserialize(resp, {"2XX": "object"})

    def call(self, method, path, body=None, query=None, content_type=None, timeout=None):
        return self.request(method, path, body, query, content_type, timeout).data

    def apply(self, path, body, manager="test", force=False, dry_run=False, **query):
        q = dict(query, fieldManager=manager)
        if force:
            q["force"] = "true"
        if dry_run:
            q["dryRun"] = "All"
        return self.call("PATCH", path, body, q, "application/apply-patch+yaml")

    def close(self):
        self.api.close()
        shutil.rmtree(self._cache_dir, ignore_errors=True)
