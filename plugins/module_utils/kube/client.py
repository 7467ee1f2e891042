# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small REST client for the Kubernetes API: the calls the kube backend makes, each retried a bounded number of
times, each failure naming the object and the reason.

Why our calls do not go through the dynamic client's resources: we know the path of every kind we manage, so a run
costs one list per kind, not a lookup of each kind in the discovered API groups. The connection is kubernetes.core's
public get_api_client (kubeconfig, context, in-cluster, token, client certificates, impersonation), so the modules
take the same options and environment variables as kubernetes.core.k8s.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.retry import (
    KUBE_CONFLICT_STATUS, KUBE_RETRIES, KUBE_RETRY_DELAY, KUBE_RETRY_STATUSES, Retry)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import API_GROUP

# Only looked up here: the kubernetes package is imported where a request is made (_kubernetes_errors, and
# kubernetes.core's get_api_client). Importing it costs about 0.6 s of CPU, which every module run paid, though the
# runs that reach no API server (the local target, state=rendered, a spec refused) never use it.
HAS_KUBERNETES = importlib.util.find_spec("kubernetes") is not None


def _kubernetes_errors():
    """(kubernetes' ApiException, urllib3's HTTPError): what a request through the client raises. Imported once a
    client exists (it is made by the kubernetes package), so this costs a lookup in sys.modules."""
    from kubernetes.client.exceptions import ApiException
    import urllib3
    return ApiException, urllib3.exceptions.HTTPError


# A Kubernetes object as the API sends and takes it (decoded JSON).
KubeObject = Dict[str, Any]

CR_VERSION = "v1alpha1"
CR_API_VERSION = "%s/%s" % (API_GROUP, CR_VERSION)

# kind -> (apiVersion, plural, namespaced) for every kind the backend reads or writes.
RESOURCES = {
    "Namespace": ("v1", "namespaces", False),
    "Node": ("v1", "nodes", False),                  # remediation cordons the node of a replaced pod
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "Secret": ("v1", "secrets", True),
    "ConfigMap": ("v1", "configmaps", True),
    "PersistentVolumeClaim": ("v1", "persistentvolumeclaims", True),
    "Service": ("v1", "services", True),
    "Pod": ("v1", "pods", True),
    "Event": ("v1", "events", True),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Job": ("batch/v1", "jobs", True),
    "CronJob": ("batch/v1", "cronjobs", True),
    "StatefulSet": ("apps/v1", "statefulsets", True),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets", True),
    "Deployment": ("apps/v1", "deployments", True),
    "ServiceMonitor": ("monitoring.coreos.com/v1", "servicemonitors", True),
    "PrometheusRule": ("monitoring.coreos.com/v1", "prometheusrules", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "SlurmCluster": (CR_API_VERSION, "slurmclusters", True),
    "NodeSet": (CR_API_VERSION, "nodesets", True),
}

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"


class KubeError(SoperatorError):
    """A failed API call. `status` is the HTTP status (None for a connection error or timeout)."""

    def __init__(self, msg: str, status: Optional[int] = None, reason: Optional[str] = None, attempts: int = 1) -> None:
        super(KubeError, self).__init__(msg)
        self.status = status
        self.reason = reason
        self.attempts = attempts


class NotFound(KubeError):
    pass


def describe(kind: str, name: str, namespace: Optional[str] = None) -> str:
    return "%s %s/%s" % (kind, namespace, name) if namespace else "%s %s" % (kind, name)


def object_key(obj: Mapping[str, Any]) -> Tuple[Any, Any, Any]:
    """(kind, namespace, name) as the object states them (None where it does not)."""
    meta = obj.get("metadata") or {}
    return (obj.get("kind"), meta.get("namespace"), meta.get("name"))


def resource_path(kind: str, namespace: Optional[str] = None, name: Optional[str] = None,
                  subresource: Optional[str] = None) -> str:
    try:
        api_version, plural, namespaced = RESOURCES[kind]
    except KeyError:
        raise KubeError("kind %s is not one the backend manages" % kind)
    path = "/api/%s" % api_version if "/" not in api_version else "/apis/%s" % api_version
    if namespaced and namespace:
        path += "/namespaces/%s" % namespace
    path += "/" + plural
    if name:
        path += "/" + name
    if subresource:
        path += "/" + subresource
    return path


def _status_message(e):
    """The server's own message from a Status body, else the HTTP reason."""
    try:
        body = json.loads(e.body)
        if isinstance(body, dict) and body.get("message"):
            return body["message"], body.get("reason")
    except (TypeError, ValueError):
        pass
    return (e.reason or "HTTP %s" % e.status), None


def api_client_from_params(params: Mapping[str, Any]) -> Any:
    """The kubernetes ApiClient of kubernetes.core's public get_api_client for its auth options (module params, else
    K8S_AUTH_* environment): the one place both the backend's client and the Slurm exec transport get theirs."""
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    try:
        k8s = get_api_client(**dict((k, v) for k, v in params.items() if v is not None))
    except Exception as e:  # pylint: disable=broad-except
        # CoreException (a bad kubeconfig), or its discovery of the API groups failing (unreachable, unauthorized)
        raise KubeError("cannot configure the Kubernetes client: %s" % e)
    # K8SClient.client is the dynamic client (used for nothing else); its .client is the ApiClient.
    return k8s.client.client


class KubeClient(object):
    """Every call the backend makes. Writes take dry_run (the server's dryRun=All). `calls` counts reads/writes."""

    def __init__(self, api_client: Any, field_manager: str, retries: int = KUBE_RETRIES,
                 retry_delay: float = KUBE_RETRY_DELAY, timeout: float = 30,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.api = api_client
        self.field_manager = field_manager
        self.retries = retries
        self.retry_delay = retry_delay
        self.timeout = timeout
        self.sleep = sleep
        self.calls = {"reads": 0, "writes": 0, "dry_run_writes": 0}

    # --- transport -------------------------------------------------------------------------------------------

    def _call(self, method, path, what, query=None, body=None, content_type=None, retry_conflict=False):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        query = list((query or {}).items())
        dry = ("dryRun", "All") in query
        error = None
        api_error, http_error = _kubernetes_errors()
        for attempt in Retry(max(self.retries, 0), self.retry_delay, self.sleep):
            self.calls["reads" if method == "GET" else "dry_run_writes" if dry else "writes"] += 1
            try:
                return self._send(method, path, query, headers, body)
            except api_error as e:
                message, reason = _status_message(e)
                retriable = e.status in KUBE_RETRY_STATUSES or (retry_conflict and e.status == KUBE_CONFLICT_STATUS)
                error = KubeError("%s: %s %s: %s" % (what, e.status, reason or e.reason, message), status=e.status,
                                  reason=reason, attempts=attempt)
                if e.status == 404:
                    raise NotFound(str(error), status=404, reason=reason, attempts=attempt)
            except (http_error, OSError) as e:
                # connection refused/reset, read timeout: the request may not have reached the server
                retriable = True
                error = KubeError("%s: %s" % (what, _connection_message(e)), attempts=attempt)
            if not retriable:
                break
        if error.attempts > 1:
            error.args = ("%s (gave up after %d attempts)" % (error.args[0], error.attempts),)
        raise error

    def _send(self, method, path, query, headers, body):
        """One request -> (decoded JSON body, HTTP status). Raises ApiException for a non-2xx answer."""
        if hasattr(self.api, "param_serialize"):
            # kubernetes >= 35: the generated client serializes and sends in two steps
            request = self.api.param_serialize(method, path, query_params=query, header_params=headers, body=body,
                                               auth_settings=["BearerToken"])
            response = self.api.call_api(*request, _request_timeout=self.timeout)
            response.read()
            if not 200 <= response.status <= 299:
                self.api.response_deserialize(response, {})   # raises ApiException with the Status body
            text = response.data
            status = response.status
        else:
            response = self.api.call_api(
                path, method, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"],
                _return_http_data_only=True, _preload_content=False, _request_timeout=self.timeout)
            text, status = response.data, response.status
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return (json.loads(text) if text else {}), status

    # --- reads -----------------------------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: Optional[str] = None,
            subresource: Optional[str] = None) -> Optional[KubeObject]:
        """The object, or None when it does not exist."""
        try:
            data, _status = self._call("GET", resource_path(kind, namespace, name, subresource),
                                       "read %s" % describe(kind, name, namespace))
            return data
        except NotFound:
            return None

    def list(self, kind: str, namespace: Optional[str] = None,
             label_selector: Optional[str] = None) -> List[KubeObject]:
        """Every object of a kind (in `namespace`, or cluster-wide) matching the selector; one request."""
        query = {"labelSelector": label_selector} if label_selector else {}
        what = "list %s%s" % (RESOURCES.get(kind, (None, kind))[1], " in %s" % namespace if namespace else "")
        try:
            data, _status = self._call("GET", resource_path(kind, namespace), what, query=query)
        except NotFound:
            # a CRD not installed yet: nothing of that kind exists
            return []
        api_version = RESOURCES[kind][0]
        items = data.get("items") or []
        for item in items:
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        return items

    def pod_log(self, namespace: str, name: str, tail_lines: int = 50) -> str:
        """The last lines of a pod's log, or why it could not be read (it only adds detail to an error)."""
        path = resource_path("Pod", namespace, name, "log")
        # The API server negotiates the log's media type against its serializers (JSON, YAML, protobuf): a bare
        # text/plain is refused (406), though what it sends is the log as text/plain. kubectl asks for anything too.
        accept = "text/plain, */*"
        api_error, http_error = _kubernetes_errors()
        try:
            self.calls["reads"] += 1
            if hasattr(self.api, "param_serialize"):
                request = self.api.param_serialize("GET", path, query_params=[("tailLines", tail_lines)],
                                                   header_params={"Accept": accept},
                                                   auth_settings=["BearerToken"])
                response = self.api.call_api(*request, _request_timeout=self.timeout)
                response.read()
            else:
                response = self.api.call_api(path, "GET", query_params=[("tailLines", tail_lines)],
                                             header_params={"Accept": accept}, auth_settings=["BearerToken"],
                                             _return_http_data_only=True, _preload_content=False,
                                             _request_timeout=self.timeout)
            text = response.data.decode("utf-8", "replace") if isinstance(response.data, bytes) else response.data
            if not 200 <= response.status <= 299:
                # with the server's reason (its Status message): e.g. the node's kubelet could not be reached
                try:
                    reason = json.loads(text).get("message")
                except (TypeError, ValueError, AttributeError):
                    reason = None
                return "(log unavailable: HTTP %s%s)" % (response.status, ": %s" % reason if reason else "")
            return text
        except (api_error, http_error, OSError) as e:
            return "(log unavailable: %s)" % e

    # --- writes ----------------------------------------------------------------------------------------------

    def apply(self, obj: KubeObject, dry_run: bool = False, force: bool = True, subresource: Optional[str] = None,
              field_manager: Optional[str] = None) -> Tuple[KubeObject, bool]:
        """Server-side apply under our field manager (or `field_manager`). Returns (object, created)."""
        kind, namespace, name = object_key(obj)
        query = {"fieldManager": field_manager or self.field_manager}
        if force:
            query["force"] = "true"
        if dry_run:
            query["dryRun"] = "All"
        what = "%s %s" % ("apply status of" if subresource else "apply", describe(kind, name, namespace))
        data, status = self._call("PATCH", resource_path(kind, namespace, name, subresource), what, query=query,
                                  body=json.dumps(obj), content_type=APPLY_CONTENT_TYPE, retry_conflict=True)
        return data, status == 201

    def create(self, obj: KubeObject, dry_run: bool = False) -> KubeObject:
        kind, namespace, name = object_key(obj)
        query = {"fieldManager": self.field_manager}
        if dry_run:
            query["dryRun"] = "All"
        what = "create %s" % describe(kind, name, namespace)
        try:
            data, _status = self._call("POST", resource_path(kind, namespace), what, query=query, body=obj)
        except KubeError as e:
            # An earlier attempt timed out (or failed) after the server had made the object: the retry meets it.
            if e.status == 409 and e.reason == "AlreadyExists" and e.attempts > 1 and name and not dry_run:
                live = self.get(kind, name, namespace)
                if live is not None:
                    return live
            raise
        return data

    def delete(self, kind: str, name: str, namespace: Optional[str] = None, dry_run: bool = False,
               propagation: str = "Background", uid: Optional[str] = None) -> bool:
        """Delete one object (with `uid`: only if it is still that one, else 409); False when it was already gone.
        propagation="Orphan" keeps its dependents (a StatefulSet's pods) and removes their owner reference."""
        query = {"propagationPolicy": propagation}
        if dry_run:
            query["dryRun"] = "All"
        body: Optional[KubeObject] = None
        if uid:
            # The API server reads a DELETE's options from its body when there is one, and then ignores the query:
            # every option goes in the body (the query keeps them too, for the audit log's requestURI). Without
            # this, a dry run with a uid deleted for real, and Orphan was lost (the pods went with their owner).
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid},
                    "propagationPolicy": propagation}
            if dry_run:
                body["dryRun"] = ["All"]
        try:
            self._call("DELETE", resource_path(kind, namespace, name), "delete %s" % describe(kind, name, namespace),
                       query=query, body=body)
            return True
        except NotFound:
            return False


def _connection_message(e):
    text = str(e)
    if "timed out" in text.lower() or "timeout" in type(e).__name__.lower():
        return "no answer from the API server (timeout): %s" % text
    return "cannot reach the API server: %s" % text
