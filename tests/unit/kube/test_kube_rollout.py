"""NodeSet spec.updateStrategy: its validation (field paths), and the Kubernetes side of a roll (kube/rollout.py,
KubeCluster.roll_workers) against a recording fake client: which NodeSets are rolled, what a run with every worker
current costs (nothing), how revisions are read, and what check mode predicts from the dry run's template."""
import copy
import os

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube import rollout as kr
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from repo_root import ROOT


def docs(**strategy):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    if strategy:
        documents[1]["spec"]["updateStrategy"] = strategy
    return documents


def test_update_strategy_defaults_and_validation():
    node_set = build_model(docs()).node_set("cpu")
    assert (node_set.update_strategy.type, node_set.update_strategy.max_unavailable) == ("slurmAware", 1)
    assert build_model(docs(type="onDelete", maxUnavailable=3)).node_set("cpu").update_strategy.max_unavailable == 3
    with pytest.raises(SpecError) as e:
        build_model(docs(type="rolling", maxUnavailable=0))
    problems = dict((i.path, i.message) for i in e.value.issues)
    assert "NodeSet/cpu spec.updateStrategy.type" in problems, problems
    assert "NodeSet/cpu spec.updateStrategy.maxUnavailable" in problems, problems
    assert ">= 1" in problems["NodeSet/cpu spec.updateStrategy.maxUnavailable"]


class Client(object):
    """Lists StatefulSets and Pods from dicts; records every call."""

    def __init__(self, statefulsets=(), pods=()):
        self.statefulsets, self.pods, self.calls = list(statefulsets), list(pods), []

    def list(self, kind, namespace=None, label_selector=None):
        self.calls.append(("list", kind, label_selector))
        wanted = dict(kv.split("=", 1) for kv in (label_selector or "").split(",") if kv)
        items = self.statefulsets if kind == "StatefulSet" else self.pods
        return [copy.deepcopy(o) for o in items
                if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]

    def get(self, *args, **kw):
        self.calls.append(("get",) + args)
        raise AssertionError("no get expected")


LABELS = {"app.kubernetes.io/managed-by": "soperator.slurm", "app.kubernetes.io/instance": "small"}


def sts(replicas=2, generation=2, observed=2, update="cpu-new", updated=2, template=None):
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "cpu", "namespace": "slurm", "labels": dict(LABELS), "generation": generation},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"slurm.soperator.dev/nodeset": "cpu"}},
                     "template": template or {"spec": {"containers": [{"name": "slurmd", "image": "w:1"}]}}},
            "status": {"observedGeneration": observed, "updateRevision": update, "updatedReplicas": updated}}


def pod(name, revision, deleting=False):
    meta = {"name": name, "namespace": "slurm",
            "labels": {"slurm.soperator.dev/nodeset": "cpu", kr.REVISION_LABEL: revision}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "Pod", "metadata": meta}


def test_worker_revisions_read_the_statefulset_then_its_pods():
    client = Client([sts(replicas=3)], [pod("cpu-0", "cpu-old"), pod("cpu-1", "cpu-new"),
                                        pod("cpu-2", "cpu-old", deleting=True)])
    inputs = kr.WorkerRevisions(client, "slurm", "cpu", lambda i: "cpu-%d" % i, 10, ka.owner_selector("small"))
    assert inputs() == (["cpu-0", "cpu-1", "cpu-2"], {"cpu-0": "cpu-old", "cpu-1": "cpu-new", "cpu-2": None},
                        "cpu-new")
    assert [c[:2] for c in client.calls] == [("list", "StatefulSet"), ("list", "Pod")]
    assert client.calls[1][2] == "slurm.soperator.dev/nodeset=cpu"


def test_worker_revisions_wait_until_the_controller_observed_the_generation():
    now = [0.0]
    client = Client([sts(generation=3, observed=2)])
    inputs = kr.WorkerRevisions(client, "slurm", "cpu", lambda i: "cpu-%d" % i, 10, ka.owner_selector("small"),
                                sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0], poll=1)
    with pytest.raises(BackendError) as e:
        inputs()
    assert "observedGeneration 2 < generation 3" in str(e.value)
    assert now[0] >= 10


def test_check_mode_predicts_every_pod_outdated_when_the_dry_run_changes_the_template():
    change = ka.Change(ka.UPDATE, desired=sts(), live=sts())
    change.after = sts(template={"spec": {"containers": [{"name": "slurmd", "image": "w:2"}]}})
    assert kr.template_changes(change)
    change.after = sts()
    assert not kr.template_changes(change)
    assert kr.all_updated(sts()) and not kr.all_updated(sts(updated=1)) and not kr.all_updated(sts(observed=1))


def cluster(strategy_type, client, check_mode=False):
    model = build_model(docs(type=strategy_type))

    def no_runner():
        raise AssertionError("no Slurm access expected")
    return KubeCluster(client, model, KubeOptions(check_mode=check_mode), runner_factory=no_runner,
                       checker_factory=lambda: None)


def test_on_delete_rolls_nothing_and_reads_nothing():
    client = Client([sts(updated=0)])
    change = ka.Change(ka.UPDATE, desired=sts(), live=sts(updated=0))
    change.after = sts(template={"spec": {"containers": [{"name": "slurmd", "image": "w:2"}]}})
    kc = cluster("onDelete", client)
    kc.roll_workers([change])
    assert kc.rollout_steps == [] and client.calls == []


def test_every_worker_current_costs_no_request():
    client = Client([sts()])
    kc = cluster("slurmAware", client)
    kc.roll_workers([ka.Change(ka.UNCHANGED, desired=sts(), live=sts())])
    assert kc.rollout_steps == [] and client.calls == []
    # check mode, a dry run that keeps the template: the same
    change = ka.Change(ka.UPDATE, desired=sts(), live=sts())
    change.after = sts()
    kc = cluster("slurmAware", client, check_mode=True)
    kc.roll_workers([change])
    assert kc.rollout_steps == [] and client.calls == []


def test_pods_on_the_update_revision_need_no_slurm():
    # updatedReplicas lags (status not final): the pods are read, all current - Slurm is never asked
    client = Client([sts(updated=1)], [pod("cpu-0", "cpu-new"), pod("cpu-1", "cpu-new")])
    kc = cluster("slurmAware", client)
    kc.roll_workers([ka.Change(ka.UNCHANGED, desired=sts(), live=sts(updated=1))])
    assert kc.rollout_steps == []
    assert [c[:2] for c in client.calls] == [("list", "StatefulSet"), ("list", "Pod")]
