"""kube/readiness.py workload_state: when a workload of ours counts as ready."""
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import workload_state


def deployment(want=1, generation=2, **status):
    return {"kind": "Deployment", "metadata": {"name": "c-rest", "generation": generation},
            "spec": {"replicas": want}, "status": dict({"observedGeneration": generation}, **status)}


def test_a_deployment_is_ready_once_its_current_template_runs_every_replica():
    ready, text = workload_state(deployment(want=2, readyReplicas=2, updatedReplicas=2, replicas=2))
    assert ready, text


def test_a_deployment_whose_new_pod_cannot_start_is_not_ready_while_its_old_pod_serves():
    # slurmrestd's new template crash-loops; the old pod stays ready (maxUnavailable 0 of 1 replica)
    ready, text = workload_state(deployment(readyReplicas=1, updatedReplicas=1, replicas=2, unavailableReplicas=1))
    assert not ready and text == "1/1 ready, 1 updated, 1 unavailable", text


def test_a_deployment_not_yet_seen_by_its_controller_or_without_ready_pods_is_not_ready():
    assert not workload_state(deployment(readyReplicas=1, updatedReplicas=1, observedGeneration=1))[0]
    assert not workload_state(deployment(readyReplicas=0, updatedReplicas=1, unavailableReplicas=1))[0]
