"""playbooks/site.yml of examples/small-cpu.yml against a real API server, judged by its audit log: the first run
creates, the second changes nothing and writes nothing, check mode writes only dry runs."""
import json
import re
import uuid

import pytest
import yaml

import ansible_run
from k8s_audit import reads_per_resource
from slurm_specs import SMALL, admin_user
from slurm_specs import SMALL_CLAIMS as CLAIMS

APPLY = "soperator.slurm.cluster : Converge the Slurm cluster on Kubernetes"


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
                                "-e", "wait_timeout=120", *extra, **kw)


def test_site_creates_then_a_rerun_writes_nothing(kubeconfig, real_cluster, audit, small_spec, volumes):
    spec, namespace, docs = small_spec
    volumes(namespace, CLAIMS)
    user = admin_user(kubeconfig)

    mark = audit.mark()
    plan = site(spec, kubeconfig, "--check")
    assert plan.tasks()[APPLY]["changed"]
    ours = audit.requests(mark, user=user)
    assert ours and [r for r in ours if r.write and not r.dry_run] == [], ours

    # The first run waits (site.yml's default) until the scheduler has placed the pods on kwok's nodes, kwok has
    # made them Ready and completed the populate Job: the cluster is Ready, its status final.
    mark = audit.mark()
    first = site(spec, kubeconfig)
    applied = first.tasks()[APPLY]
    assert applied["changed"] and applied["status"]["phase"] == "Ready", applied.get("status")
    written = {r.resource for r in audit.requests(mark, user=user) if r.write and r.code in (200, 201)}
    assert {"slurmclusters", "nodesets", "statefulsets", "configmaps", "secrets", "services", "jobs", "cronjobs",
            "roles", "rolebindings", "serviceaccounts", "persistentvolumeclaims"} <= written, written

    # kwok completed the populate Job's pod: the Job succeeded once, the cluster records it; the remediation
    # CronJob runs the playbook every spec.remediation.schedule as its own ServiceAccount.
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        batch = client.BatchV1Api(api)
        job = batch.read_namespaced_job("small-populate-jail", namespace)
        assert job.status.succeeded == 1 and not job.status.failed, job.status
        cron = batch.read_namespaced_cron_job("small-remediation", namespace)
        assert cron.spec.schedule == "*/5 * * * *" and cron.spec.concurrency_policy == "Forbid"
        assert cron.spec.job_template.spec.template.spec.service_account_name == "small-remediation"
        live = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "slurm.soperator.dev", "v1alpha1", namespace, "slurmclusters", "small")
    finally:
        api.close()
    conditions = {c["type"]: c["status"] for c in live["status"]["conditions"]}
    assert conditions["JailPopulated"] == "True" and live["status"]["phase"] == "Ready", live["status"]

    mark = audit.mark()
    second = site(spec, kubeconfig)
    again = second.tasks()[APPLY]
    assert second.stats()["changed"] == 0, (
        [(o["kind"], o["name"], o["action"]) for o in again.get("objects", []) if o["action"] != "unchanged"],
        again.get("actions"), again.get("slurm"), {k: v for k, v in again.items() if k not in ("objects", "diff")})
    ours = audit.requests(mark, user=user)
    assert [r for r in ours if r.write] == []
    reads = reads_per_resource(ours)
    assert reads and max(reads.values()) == 1, reads

    # A Job the remediation CronJob starts (as its schedule would; by hand here) has our labels but is the
    # CronJob's: a run leaves it alone (it used to prune it, killing a remediation in progress).
    real_cluster.kubectl("create", "job", "--from=cronjob/small-remediation", "remediation-now", "-n", namespace)
    rerun = site(spec, kubeconfig)
    assert rerun.stats()["changed"] == 0, [(o["kind"], o["name"], o["action"]) for o in rerun.tasks()[APPLY][
        "objects"] if o["action"] != "unchanged"]
    real_cluster.kubectl("get", "job", "remediation-now", "-n", namespace)

    # Someone else's field manager (kubectl) changes a field we own and adds one we do not: the next run takes back
    # ours, reports that one object, and leaves theirs.
    real_cluster.kubectl("scale", "statefulset", "small-login", "-n", namespace, "--replicas=3")
    real_cluster.kubectl("annotate", "statefulset", "small-login", "-n", namespace, "example.com/owner=someone")
    third = site(spec, kubeconfig).tasks()[APPLY]
    assert [(o["kind"], o["name"], o["action"]) for o in third["objects"] if o["action"] != "unchanged"] == [
        ("StatefulSet", "small-login", "updated")]
    sts = json.loads(real_cluster.kubectl("get", "statefulset", "small-login", "-n", namespace, "-o", "json").stdout)
    assert sts["spec"]["replicas"] == 1 and sts["metadata"]["annotations"]["example.com/owner"] == "someone", sts

    # A change in check mode with --diff: the API server's dry run answers, the slurm.conf change is shown, nothing
    # is written for real.
    docs[0]["spec"]["slurmConfig"]["SlurmdTimeout"] = 150
    changed_spec = spec + ".changed.yml"
    with open(changed_spec, "w") as f:
        yaml.safe_dump_all(docs, f)
    mark = audit.mark()
    plan = ansible_run.playbook("site.yml", "-e", "spec_file=%s" % changed_spec, "-e", "kubeconfig=%s" % kubeconfig,
                                "--check", "--diff", env=ansible_run.ansible_env(json_output=False))
    ours = audit.requests(mark, user=user)
    assert [r for r in ours if r.write and not r.dry_run] == [], ours
    assert [r for r in ours if r.write and r.dry_run], ours
    # slurm.conf as a line of the slurm-configs ConfigMap's diff
    assert re.search(r"^-\s+SlurmdTimeout=120$", plan.stdout, re.M), plan.output()
    assert re.search(r"^\+\s+SlurmdTimeout=150$", plan.stdout, re.M), plan.output()

    # Teardown without purge: our objects go, the CRDs and the volume claims stay.
    ansible_run.playbook("teardown.yml", "-e", "spec_file=%s" % spec, "-e", "kubeconfig=%s" % kubeconfig)
    left = real_cluster.kubectl("get", "statefulsets,jobs,cronjobs,configmaps,secrets,services,pvc", "-n", namespace,
                                "-l", "app.kubernetes.io/managed-by=soperator.slurm", "-o", "name").stdout.split()
    assert left == ["persistentvolumeclaim/small-jail"]
    # the controller's spool, made by the StatefulSet controller from its claim template, outlives it as well
    claims = real_cluster.kubectl("get", "pvc", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(claims) == ["persistentvolumeclaim/small-jail", "persistentvolumeclaim/spool-small-controller-0"]
    real_cluster.kubectl("get", "crd", "slurmclusters.slurm.soperator.dev", "nodesets.slurm.soperator.dev")
