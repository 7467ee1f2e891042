"""The remediation ServiceAccount's Role, judged by the real RBAC authorizer: what remediate.yml calls is allowed in
its namespace, nothing else is (other namespaces, the namespace itself, cluster-scoped objects); its own token
(TokenRequest) authenticates as that ServiceAccount."""
import os
import uuid

import pytest
import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")


@pytest.fixture(scope="module")
def deployed(real_cluster):
    """examples/small-cpu.yml applied (no wait) in a namespace of its own; deleted at the end."""
    namespace = "soperator-it-%s" % uuid.uuid4().hex[:8]
    with open(SMALL) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    args = dict(state="present", target="kubernetes", definition=docs, kubeconfig=real_cluster.kubeconfig)
    ansible_run.module("slurm_cluster", args, cli=True)   # the suite's module run through the `ansible` CLI
    yield namespace, "system:serviceaccount:%s:small-remediation" % namespace
    ansible_run.module("slurm_cluster", dict(args, state="absent", purge_volumes=True), expect_failed=None)
    real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def can_i(cluster, user, *args):
    proc = cluster.kubectl("auth", "can-i", "--as=" + user, *args, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), (proc.stdout, proc.stderr)
    return answer == "yes"


def allowed(cluster, user, namespace, verb, group, resource):
    """The RBAC authorizer's answer (a SubjectAccessReview, exactly as given: kubectl's can-i answers "no" for a
    resource type the server does not serve, e.g. ServiceMonitors without prometheus-operator)."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=cluster.kubeconfig)
    resource, dummy, sub = resource.partition("/")
    try:
        review = client.AuthorizationV1Api(api).create_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                     "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group,
                                            "resource": resource, "subresource": sub}}})
        return review.status.allowed
    finally:
        api.close()


def test_the_role_allows_what_remediation_calls_and_only_there(real_cluster, deployed):
    from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import remediation_rules
    namespace, user = deployed
    for rule in remediation_rules():
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert allowed(real_cluster, user, namespace, verb, group, resource), (verb, group, resource)
                    assert not allowed(real_cluster, user, "default", verb, group, resource), (verb, resource)


def test_kubectl_auth_can_i_agrees(real_cluster, deployed):
    namespace, user = deployed
    assert can_i(real_cluster, user, "patch", "statefulsets.apps", "-n", namespace)
    assert can_i(real_cluster, user, "create", "pods", "--subresource=exec", "-n", namespace)
    assert not can_i(real_cluster, user, "patch", "statefulsets.apps", "-n", "default")


@pytest.mark.parametrize("request_args", [
    ("delete", "namespaces"), ("get", "namespaces"), ("get", "secrets"), ("update", "secrets"),
    ("create", "roles.rbac.authorization.k8s.io"), ("patch", "rolebindings.rbac.authorization.k8s.io"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"), ("list", "nodes"), ("patch", "nodes"),
    ("create", "pods"), ("watch", "statefulsets.apps"), ("create", "clusterroles.rbac.authorization.k8s.io")])
def test_the_role_denies_the_rest(real_cluster, deployed, request_args):
    namespace, user = deployed
    assert not can_i(real_cluster, user, *request_args, "-n", namespace)


def test_its_own_token_authenticates_as_the_service_account(real_cluster, deployed):
    from kubernetes import client
    namespace, user = deployed
    token = real_cluster.kubectl("create", "token", "small-remediation", "-n", namespace,
                                 "--duration=10m").stdout.strip()
    admin = client.Configuration()
    from kubernetes import config
    config.load_kube_config(config_file=real_cluster.kubeconfig, client_configuration=admin)
    conf = client.Configuration()
    conf.host, conf.ssl_ca_cert = admin.host, admin.ssl_ca_cert
    conf.api_key = {"authorization": "Bearer " + token}
    api = client.ApiClient(conf)
    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert review.status.user_info.username == user
        # Allowed: the same list the admin sees.
        names = sorted(s.metadata.name for s in client.AppsV1Api(api).list_namespaced_stateful_set(namespace).items)
        seen = real_cluster.kubectl("get", "statefulsets", "-n", namespace, "-o", "name").stdout.split()
        assert names and names == sorted(n.split("/")[1] for n in seen)
        with pytest.raises(client.exceptions.ApiException) as denied:
            client.CoreV1Api(api).delete_namespace(namespace)
        assert denied.value.status == 403
    finally:
        api.close()
