"""The staggered scale-up of worker StatefulSets (kube/stagger.py, spec.workers.maxStartingPods): the step plan as a
pure function, and KubeCluster's run against the in-memory API server of test_kube_backend.py whose StatefulSet
controller makes pods Ready a few per read, as a kubelet would, instead of at once."""
import copy

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import object_key
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.stagger import next_step, plan_steps
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from test_kube_backend import EXAMPLE, FakeApi, no_slurm


# --- the plan ------------------------------------------------------------------------------------------------

def test_a_step_fills_the_room_the_not_ready_pods_of_every_nodeset_leave_in_nodeset_order():
    sets = {"cpu": (10, 10), "gpu": (4, 1), "old": (3, 3)}          # gpu: 3 asked for and not Ready
    assert next_step(sets, [("cpu", 100), ("gpu", 50)], 10) == {"cpu": 17}
    assert next_step(sets, [("gpu", 50), ("cpu", 100)], 10) == {"gpu": 11}
    assert next_step(sets, [("cpu", 12), ("gpu", 50)], 10) == {"cpu": 12, "gpu": 9}
    assert next_step({"cpu": (10, 2)}, [("cpu", 100)], 8) == {}, "no room: 8 not Ready already"
    assert next_step({"cpu": (100, 90)}, [("cpu", 100)], 8) == {}, "reached"
    assert next_step({}, [("new", 30)], 0) == {"new": 30}, "0: no bound"
    # a NodeSet shrinking leaves more Ready than asked for: that is no room for others
    assert next_step({"cpu": (2, 5), "gpu": (0, 0)}, [("gpu", 9)], 4) == {"gpu": 4}


def test_the_plan_steps_by_the_bound_and_continues_from_live_replicas():
    assert plan_steps({}, [("cpu", 12)], 4) == [{"cpu": 4}, {"cpu": 8}, {"cpu": 12}]
    # an interrupted run left 6 asked for, 5 Ready: room for 3, then steps of 4
    assert plan_steps({"cpu": (6, 5)}, [("cpu", 12)], 4) == [{"cpu": 9}, {"cpu": 12}]
    assert plan_steps({"cpu": (0, 0)}, [("cpu", 5), ("gpu", 3)], 4) == [{"cpu": 4}, {"cpu": 5, "gpu": 3}]
    # others' pods not Ready and no room: the run waits for them, then steps
    assert plan_steps({"gpu": (6, 0)}, [("cpu", 5)], 4) == [{"cpu": 4}, {"cpu": 5}]
    assert plan_steps({}, [("cpu", 12)], 0) == [{"cpu": 12}]


# --- the backend -------------------------------------------------------------------------------------------

class SlowKubelet(FakeApi):
    """FakeApi whose StatefulSets' pods become Ready `per_read` at a time, on each list of StatefulSets (a poll);
    Jobs complete at once. `most_not_ready`: the most worker pods asked for and not Ready at any time."""

    def __init__(self, per_read):
        super().__init__()
        self.per_read = per_read
        self.most_not_ready = 0
        self.sts_lists = 0

    def _not_ready(self):
        return sum(o["spec"]["replicas"] - o["status"]["readyReplicas"] for (k, _ns, _n), o in self.objects.items()
                   if k == "StatefulSet" and o["metadata"]["labels"].get("app.kubernetes.io/component") == "worker")

    def apply(self, obj, dry_run=False, force=True, subresource=None, field_manager=None):
        key = object_key(obj)
        before = copy.deepcopy(self.objects.get(key))
        stored, created = super().apply(obj, dry_run, force, subresource, field_manager)
        if not dry_run and key[0] == "StatefulSet" and subresource is None:
            ready = ((before or {}).get("status") or {}).get("readyReplicas", 0)
            self.objects[key]["status"]["readyReplicas"] = min(ready, stored["spec"]["replicas"])
            stored = copy.deepcopy(self.objects[key])
        if not dry_run and key[0] == "Job":
            self.objects[key]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        self.most_not_ready = max(self.most_not_ready, self._not_ready())
        return stored, created

    def list(self, kind, namespace=None, label_selector=None):
        if kind == "StatefulSet":
            self.sts_lists += 1
            for (k, _ns, _n), o in self.objects.items():
                if k == "StatefulSet":
                    o["status"]["readyReplicas"] = min(o["spec"]["replicas"],
                                                       o["status"]["readyReplicas"] + self.per_read)
        return super().list(kind, namespace, label_selector)


class Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds):
        self.now += seconds

    def __call__(self):
        return self.now


def docs_with(replicas, bound=None):
    docs = documents_from(EXAMPLE, None)
    docs[1]["spec"]["replicas"] = replicas
    docs[1]["spec"]["maxReplicas"] = 30         # slurm.conf the same whatever the replicas: no Slurm reload
    if bound is not None:
        docs[0]["spec"]["workers"] = {"maxStartingPods": bound}
    return docs


def run(api, docs, check_mode=False, **options):
    clock = Clock()
    options.setdefault("wait", True)
    return KubeCluster(api, build_model(docs), KubeOptions(check_mode=check_mode, poll=1.0, **options),
                       runner_factory=no_slurm, checker_factory=no_slurm, sleep=clock.sleep, clock=clock).present()


def worker_replicas(api, name="cpu"):
    return [o for (k, _ns, n), o in api.objects.items() if k == "StatefulSet" and n == name][0]["spec"]["replicas"]


def test_a_new_cluster_and_a_scale_up_start_at_most_the_bound_of_workers_at_once_check_mode_plans_the_same_steps():
    api = SlowKubelet(per_read=1)
    planned = run(api, docs_with(12, bound=4), check_mode=True)
    assert api.objects == {}
    first = run(api, docs_with(12, bound=4))
    assert api.most_not_ready == 4
    assert worker_replicas(api) == 12
    assert first["scale_up"]["steps"] == planned["scale_up"]["steps"] == [{"cpu": 4}, {"cpu": 8}, {"cpu": 12}]
    assert first["scale_up"]["step_count"] == 3
    assert any(w["for"] == "the workers' scale-up in 3 steps" for w in first["waited"])
    again = run(api, docs_with(12, bound=4))
    assert not again["changed"] and again["scale_up"] is None, "the last step applied the planned object"
    # a scale-up from 12 to 30 with 4 Ready per poll: steps of at most 4 not Ready, one StatefulSet list per poll
    api.most_not_ready, api.sts_lists = 0, 0
    grown = run(api, docs_with(30, bound=4))
    assert worker_replicas(api) == 30 and api.most_not_ready == 4
    assert [s["cpu"] for s in grown["scale_up"]["steps"]] == [16, 20, 24, 28, 30]
    polls = sum(w["seconds"] for w in grown["waited"] if "scale-up" in w["for"])
    assert api.sts_lists <= polls + len(grown["scale_up"]["steps"]) + 3, "one list per poll, no per-pod read"


def test_within_the_bound_unbounded_and_without_wait_the_replicas_are_applied_at_once():
    for docs, options in ((docs_with(4, bound=4), {}), (docs_with(12, bound=0), {}),
                          (docs_with(12, bound=4), {"wait": False})):
        api = SlowKubelet(per_read=100)
        result = run(api, docs, **options)
        assert result["scale_up"] is None and worker_replicas(api) == docs[1]["spec"]["replicas"]
    api = SlowKubelet(per_read=100)
    run(api, docs_with(12, bound=4))
    shrunk = docs_with(12, bound=4)
    shrunk[1]["spec"]["replicas"] = 2
    api.writes = []
    with pytest.raises(AssertionError, match="no Slurm access"):
        run(api, shrunk)                      # scale-down stays Slurm-aware: it drains first
    assert worker_replicas(api) == 12


def test_a_step_that_never_becomes_ready_times_out_and_a_re_run_continues_from_the_live_replicas():
    api = SlowKubelet(per_read=100)
    run(api, docs_with(1, bound=4))
    api.per_read = 0
    with pytest.raises(BackendError, match=r"timed out after 30s waiting for the workers' scale-up.*step\(s\).*"
                                           r"cpu 1/5 ready.*re-run continues"):
        run(api, docs_with(12, bound=4), wait_timeout=30)
    assert worker_replicas(api) == 5
    api.per_read = 2        # the re-run's first read finds 3 of the 5 Ready: room for 2 more
    again = run(api, docs_with(12, bound=4))
    assert [s["cpu"] for s in again["scale_up"]["steps"]] == [7, 11, 12] and worker_replicas(api) == 12
    assert api.most_not_ready == 4


def test_the_bound_is_validated_with_its_field_path():
    with pytest.raises(SpecError, match=r"spec\.workers\.maxStartingPods: must be >= 0"):
        build_model(docs_with(2, bound=-1))
    assert build_model(documents_from(EXAMPLE, None)).workers.max_starting_pods == 100


def test_check_mode_diff_shows_the_final_replicas_and_the_steps():
    api = SlowKubelet(per_read=100)
    run(api, docs_with(2, bound=4))
    clock = Clock()
    planned = KubeCluster(api, build_model(docs_with(12, bound=4)), KubeOptions(check_mode=True, wait=True),
                          runner_factory=no_slurm, checker_factory=no_slurm, sleep=clock.sleep, clock=clock)
    result = planned.present()
    assert worker_replicas(api) == 2
    assert result["scale_up"]["steps"] == [{"cpu": 6}, {"cpu": 10}, {"cpu": 12}]
    diffs = planned.diff()
    sts = [d for d in diffs if d["before_header"].startswith("StatefulSet") and "/cpu " in d["before_header"]]
    assert sts and "replicas: 12" in sts[0]["after"] and "replicas: 2" in sts[0]["before"]
    assert diffs[-1]["before_header"] == "worker StatefulSets scaled up in 3 steps (spec.workers.maxStartingPods 4)"
    assert diffs[-1]["after"] == "step 1: cpu replicas 6\nstep 2: cpu replicas 10\nstep 3: cpu replicas 12\n"


def test_another_nodesets_pods_not_ready_hold_even_a_small_scale_up_until_there_is_room():
    api = SlowKubelet(per_read=100)
    docs = docs_with(2, bound=4)
    other = copy.deepcopy(docs[1])
    other["metadata"]["name"] = "big"
    other["spec"]["replicas"] = 6
    docs.append(other)
    docs[0]["spec"]["workers"]["maxStartingPods"] = 0
    run(api, docs)
    docs[0]["spec"]["workers"]["maxStartingPods"] = 4
    run(api, docs)          # the bound changed: the SlurmCluster only
    big = [o for (k, _ns, n), o in api.objects.items() if k == "StatefulSet" and n == "big"][0]
    big["status"]["readyReplicas"] = 1      # 5 of big's pods not Ready (their node went away, say)
    api.per_read, api.most_not_ready = 1, 0
    docs[1]["spec"]["replicas"] = 3
    result = run(api, docs)
    assert result["scale_up"]["steps"] == [{"cpu": 3}], "no room at first: the step waited for big's pods"
    assert worker_replicas(api) == 3 and api.most_not_ready <= 5
