"""playbooks/site.yml of examples/small-cpu.yml against a real API server, judged by its audit log: the first run
creates, the second changes nothing and writes nothing, check mode writes only dry runs."""
import os
import uuid

import pytest
import yaml

import ansible_run
from k8s_audit import reads_per_resource

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
APPLY = "soperator.slurm.cluster : Converge the Slurm cluster on Kubernetes"


def admin_user(kubeconfig):
    """The user our runs act as: the subject of the kubeconfig's client certificate, as the audit log names it."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        return review.status.user_info.username
    finally:
        api.close()


@pytest.fixture
def small_spec(kubeconfig, tmp_path):
    """examples/small-cpu.yml in a namespace of its own; deleted (volumes too) at the end."""
    namespace = "soperator-it-%s" % uuid.uuid4().hex[:8]
    with open(SMALL) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    path = tmp_path / "small.yml"
    path.write_text(yaml.safe_dump_all(docs))
    yield str(path), namespace, docs
    ansible_run.playbook("teardown.yml", "-e", "spec_file=%s" % path, "-e", "kubeconfig=%s" % kubeconfig,
                         "-e", "purge_volumes=true", expect_rc=None)
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        client.CoreV1Api(api).delete_namespace(namespace)
    except client.exceptions.ApiException as e:
        if e.status != 404:
            raise
    finally:
        api.close()


def site(spec, kubeconfig, *extra, **kw):
    return ansible_run.playbook("site.yml", "-e", "spec_file=%s" % spec, "-e", "kubeconfig=%s" % kubeconfig,
                                "-e", "wait=false", *extra, **kw)


def test_site_creates_then_a_rerun_writes_nothing(kubeconfig, audit, small_spec):
    spec, namespace, docs = small_spec
    user = admin_user(kubeconfig)

    mark = audit.mark()
    plan = site(spec, kubeconfig, "--check")
    ours = audit.requests(mark, user=user)
    writes = [r for r in ours if r.write]
    assert writes, "check mode sent no dry-run write at all"
    assert [r for r in writes if not r.dry_run] == [], "check mode wrote for real"
    assert plan.tasks()[APPLY]["changed"]

    mark = audit.mark()
    first = site(spec, kubeconfig)
    assert first.tasks()[APPLY]["changed"]
    created = [r for r in audit.requests(mark, user=user) if r.write and not r.dry_run and r.code in (200, 201)]
    kinds = {r.resource for r in created}
    assert {"customresourcedefinitions", "slurmclusters", "nodesets", "statefulsets", "configmaps", "secrets",
            "services", "jobs", "cronjobs", "roles", "rolebindings", "serviceaccounts"} <= kinds, kinds

    mark = audit.mark()
    second = site(spec, kubeconfig)
    assert second.stats()["changed"] == 0, second.output()
    ours = audit.requests(mark, user=user)
    assert [r for r in ours if r.write] == []
    reads = reads_per_resource(ours)
    assert reads and max(reads.values()) == 1, reads
