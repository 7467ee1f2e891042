"""jail_populate with target=kubernetes against the API emulator, through `ansible localhost -m`. The cluster is
applied in-process first, without its populate Job, so the module is the one that creates it. The emulator's Job
controller completes (or fails) a Job at once and creates no pods: the test puts the Job's pod and its log there."""
import json

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model, load_documents
from kube_module import CR, SMALL, module

NS, JOB = "slurm", "small-populate-jail"


def _sentinel_line(action="populated", source="example/populate-jail:1"):
    return json.dumps({"action": action, "changed": action != "unchanged", "sentinel": {
        "format": 1, "source": source, "source_type": "tar", "digest": "sha256:" + "ab" * 32, "overwrite": "never",
        "populated_at": "2025-01-31T10:00:00Z", "populated_by": "root@populate-pod", "program": "soperator.slurm jail.py"}})


@pytest.fixture
def cluster(emulator, kubeconfig):
    """The small example applied without its populate Job."""
    with open(SMALL) as f:
        model = build_model(load_documents(f.read()))
    client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm")
    KubeCluster(client, model, wait=True, poll=0.1).present(desired_filter=lambda o: o["kind"] != "Job")
    assert emulator.get("batch/v1", "Job", JOB, NS) is None
    return model


def job_pod(emulator, log, name="small-populate-jail-x1"):
    emulator.put_object({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "labels": {"job-name": JOB}},
        "spec": {"containers": [{"name": "populate-jail", "image": "i"}]}})
    emulator.set_pod_log(NS, name, log)


def populate(kubeconfig, check=False, diff=False, expect_failed=False, **kw):
    args = dict(target="kubernetes", name="small", namespace=NS, kubeconfig=str(kubeconfig), wait_timeout=30,
                api_timeout=5)
    args.update(kw)
    args = dict((k, v) for k, v in args.items() if v is not None)
    return module("jail_populate", check=check, diff=diff, expect_failed=expect_failed, **args)


def job_writes(emulator):
    return [(r.method, r.path) for r in emulator.requests
            if r.kind == "Job" and r.verb in ("create", "delete", "patch", "update") and not r.dry_run]


def test_the_job_is_created_once_waited_for_and_not_created_again(emulator, kubeconfig, cluster):
    job_pod(emulator, "unpacking\n" + _sentinel_line() + "\n")
    first = populate(kubeconfig, diff=True)
    assert first["changed"] and first["outcome"] == "populated"
    assert first["objects"] == [{"kind": "Job", "name": JOB, "namespace": NS, "action": "created"}]
    assert first["waited"][0]["for"] == "the jail to be populated"
    assert first["sentinel"]["digest"] == "sha256:" + "ab" * 32 and first["sentinel"]["job"] == JOB
    assert first["diff"]["before"]["sentinel"] is None and first["diff"]["after"]["sentinel"] == first["sentinel"]
    job = emulator.get("batch/v1", "Job", JOB, NS)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--overwrite") + 1] == "never"
    record = emulator.get(CR, "SlurmCluster", "small", NS)["status"]["jail"]
    assert record["populatedAt"] == "2025-01-31T10:00:00Z" and record["source"] == "example/populate-jail:1"
    assert first["status_updated"]

    emulator.reset_counts()
    second = populate(kubeconfig)
    assert not second["changed"] and second["outcome"] == "unchanged" and second["objects"] == []
    assert emulator.counts()["writes"] == 0 and not second["status_updated"]
    # without the Job (deleted, or cleaned up by a TTL) the recorded sentinel still says the jail is populated
    emulator.delete_object("batch/v1", "Job", JOB, NS)
    third = populate(kubeconfig, overwrite="if_empty")
    assert third["outcome"] == "unchanged" and emulator.get("batch/v1", "Job", JOB, NS) is None
    assert job_writes(emulator) == []

    # slurm_cluster's own status write keeps the record (it is jail_populate's field)
    module("slurm_cluster", state="present", target="kubernetes", src=SMALL, kubeconfig=str(kubeconfig),
           api_timeout=5)
    assert emulator.get(CR, "SlurmCluster", "small", NS)["status"]["jail"] == record


def test_a_job_slurm_cluster_ran_is_recorded_without_a_new_one(emulator, kubeconfig, cluster):
    job_pod(emulator, _sentinel_line() + "\n")
    module("slurm_cluster", state="present", target="kubernetes", src=SMALL, kubeconfig=str(kubeconfig),
           api_timeout=5, wait=True)
    uid = emulator.get("batch/v1", "Job", JOB, NS)["metadata"]["uid"]
    emulator.reset_counts()
    result = populate(kubeconfig)
    assert result["outcome"] == "unchanged" and not result["changed"] and result["status_updated"]
    assert job_writes(emulator) == [] and emulator.get("batch/v1", "Job", JOB, NS)["metadata"]["uid"] == uid
    assert emulator.get(CR, "SlurmCluster", "small", NS)["status"]["jail"]["digest"] == "sha256:" + "ab" * 32


def test_check_mode_writes_nothing(emulator, kubeconfig, cluster):
    emulator.reset_counts()
    planned = populate(kubeconfig, check=True)
    assert planned["changed"] and planned["outcome"] == "populated"
    assert emulator.counts()["writes"] == 0 and emulator.counts()["dry_run_writes"] == 1
    assert emulator.get("batch/v1", "Job", JOB, NS) is None
    assert "jail" not in (emulator.get(CR, "SlurmCluster", "small", NS).get("status") or {})


def test_always_is_refused_while_login_or_worker_pods_run_unless_forced(emulator, kubeconfig, cluster):
    job_pod(emulator, _sentinel_line() + "\n")
    populate(kubeconfig)
    uid = emulator.get("batch/v1", "Job", JOB, NS)["metadata"]["uid"]
    emulator.put_object({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "small-login-0", "namespace": NS, "labels": {
            "app.kubernetes.io/managed-by": "soperator.slurm", "app.kubernetes.io/instance": "small",
            "app.kubernetes.io/component": "login"}},
        "spec": {"containers": [{"name": "sshd", "image": "i"}]}})
    emulator.set_status("v1", "Pod", "small-login-0", NS, {"phase": "Running"})

    emulator.reset_counts()
    refused = populate(kubeconfig, overwrite="always", expect_failed=True)
    assert refused["outcome"] == "refused" and "small-login-0" in refused["msg"] and "force" in refused["msg"]
    assert emulator.get("batch/v1", "Job", JOB, NS)["metadata"]["uid"] == uid and job_writes(emulator) == []
    planned = populate(kubeconfig, overwrite="always", force=True, check=True)
    assert planned["outcome"] == "replaced" and emulator.counts()["writes"] == 0

    emulator.set_pod_log(NS, "small-populate-jail-x1", _sentinel_line("replaced", "example/populate-jail:2") + "\n")
    replaced = populate(kubeconfig, overwrite="always", force=True)
    assert replaced["changed"] and replaced["outcome"] == "replaced"
    assert [o["action"] for o in replaced["objects"]] == ["deleted", "created"]
    job = emulator.get("batch/v1", "Job", JOB, NS)
    assert job["metadata"]["uid"] != uid
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--overwrite") + 1] == "always"
    assert emulator.get(CR, "SlurmCluster", "small", NS)["status"]["jail"]["source"] == "example/populate-jail:2"


def test_a_failed_job_returns_its_log_tail_and_a_rerun_runs_it_again(emulator, kubeconfig, cluster):
    emulator.set_job_outcome(NS, JOB, "Failed")
    job_pod(emulator, "jail populate failed: the jail /mnt/jail is not empty (home) and has no .soperator-jail.json\n")
    failed = populate(kubeconfig, expect_failed=True)
    assert "Job slurm/small-populate-jail failed" in failed["msg"]
    assert "is not empty (home)" in failed["msg"]
    assert "jail" not in (emulator.get(CR, "SlurmCluster", "small", NS).get("status") or {})
    uid = emulator.get("batch/v1", "Job", JOB, NS)["metadata"]["uid"]

    emulator.set_job_outcome(NS, JOB, "Complete")
    emulator.set_pod_log(NS, "small-populate-jail-x1", _sentinel_line() + "\n")
    again = populate(kubeconfig)
    assert again["outcome"] == "populated" and [o["action"] for o in again["objects"]] == ["deleted", "created"]
    assert emulator.get("batch/v1", "Job", JOB, NS)["metadata"]["uid"] != uid


def test_a_cluster_that_was_never_applied_is_a_clear_error(emulator, kubeconfig):
    result = populate(kubeconfig, expect_failed=True, name=None, src=SMALL)
    assert "does not exist: apply the cluster first" in result["msg"]
