"""kube/upgrade.py without a server: which StatefulSets of a run change their Slurm version, the spec field each error
names, and that a refused change is refused from what the run read alone (a recording client: no write, and the pods
are listed only when some version changes). The order of the writes and the Jobs are judged on the real API server:
tests/integration/test_upgrade_real.py."""
import copy
import os

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube import upgrade as ku
from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import object_key
from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from repo_root import ROOT


def docs(tag, **images):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    documents[0]["spec"]["images"] = dict(images, tag=tag)
    documents[0]["spec"]["accounting"] = {"enabled": True, "database": {"inCluster": {"storage": "1Gi"}}}
    return documents


def statefulsets(model):
    return dict((object_key(o), o) for o in render_cluster(model).manifests if o["kind"] == "StatefulSet")


class Recorder:
    """Answers list() from `objects`; any write fails the test."""

    def __init__(self, objects=()):
        self.objects = list(objects)
        self.calls = []

    def list(self, kind, namespace=None, label_selector=None):
        self.calls.append(("list", kind))
        return [copy.deepcopy(o) for o in self.objects if o["kind"] == kind]

    def apply(self, *args, **kw):
        raise AssertionError("a write: %r" % (args,))

    create = delete = apply


class Backend:
    def __init__(self, model, client):
        self.model, self.client, self.options = model, client, KubeOptions()


def run_plan(old_docs, new_docs, pods=(), options=None):
    old, new = build_model(old_docs), build_model(new_docs)
    live = statefulsets(old)
    desired = [o for o in render_cluster(new).manifests if o["kind"] == "StatefulSet"]
    changes = ka.plan(desired, live)
    client = Recorder(pods)
    upgrade = ku.ClusterUpgrade.plan_for(Backend(new, client), changes, live, options or ku.UpgradeOptions())
    return upgrade, client


def test_no_version_change_reads_nothing_more():
    upgrade, client = run_plan(docs("24.11.3-0.1.0"), docs("24.11.3-0.2.0"))
    assert upgrade is None and client.calls == []


def test_a_version_change_lists_the_pods_once_and_plans_in_slurms_order():
    upgrade, client = run_plan(docs("24.11.3-0.1.0"), docs("26.05.5-0.1.0"))
    assert client.calls == [("list", "Pod")]
    assert [c.name for c in upgrade.plan.moving] == ["slurmdbd", "slurmctld", "slurmd", "login"]
    assert upgrade.plan.versions == {
        "slurmdbd/small-accounting": "24.11.3 -> 26.05.5", "slurmctld/small-controller": "24.11.3 -> 26.05.5",
        "slurmd/cpu": "24.11.3 -> 26.05.5", "login/small-login": "24.11.3 -> 26.05.5"}


def test_errors_name_the_field_that_sets_the_image():
    # an explicit spec.images.accounting is named; the others come from spec.images.tag
    new = docs("24.11.3-0.1.0", accounting="registry.example/accounting:26.05.5-0.1.0",
               controller="registry.example/controller:26.05.5-0.1.0")
    with pytest.raises(BackendError) as e:
        run_plan(docs("24.05.1-0.1.0"), new)
    message = str(e.value)
    assert "SlurmCluster/small spec.images.accounting, SlurmCluster/small spec.images.controller: Slurm 26.05 " \
           "accepts only 25.11, 25.05, 24.11" in message, message
    # an unversioned controller image, set explicitly
    new = docs("24.05.1-0.1.0", controller="registry.example/controller:latest")
    with pytest.raises(BackendError) as e:
        run_plan(docs("24.05.1-0.1.0"), new)
    assert str(e.value).startswith(
        "refused Slurm version change, nothing was changed: SlurmCluster/small spec.images.controller: the Slurm "
        "version of slurmctld small-controller cannot be told from its image"), str(e.value)
    allowed, _client = run_plan(docs("24.05.1-0.1.0"), new, options=ku.UpgradeOptions(allow_unversioned_images=True))
    assert allowed.plan.unverified and [c.name for c in allowed.plan.moving] == ["slurmctld"]
    # a NodeSet's own image is named by its NodeSet
    new = docs("24.05.1-0.1.0")
    new[1]["spec"]["image"] = "registry.example/worker:26.05.5-0.1.0"
    with pytest.raises(BackendError) as e:
        run_plan(docs("24.05.1-0.1.0"), new)
    assert "NodeSet/cpu spec.image: slurmd cpu would run Slurm 26.05.5, newer than slurmctld small-controller " \
           "(24.05.1)" in str(e.value), str(e.value)
    # an unversioned worker image is no Slurm version change (the roll of test_rollout_real.py)
    new[1]["spec"]["image"] = "registry.example/worker:cuda-custom"
    assert run_plan(docs("24.05.1-0.1.0"), new)[0] is None


def test_a_pod_left_on_an_older_version_is_judged():
    # the StatefulSet was applied at 25.05 by an earlier run, a worker pod still runs 24.05: 26.05 would strand it
    pod = {"kind": "Pod", "metadata": {"name": "cpu-0", "labels": {
        "app.kubernetes.io/component": "worker", "slurm.soperator.dev/nodeset": "cpu"}},
        "spec": {"containers": [{"name": "slurmd", "image": "docker.io/soperator/worker:24.05.1-0.1.0"}]}}
    with pytest.raises(BackendError) as e:
        run_plan(docs("25.05.1-0.1.0"), docs("26.05.5-0.1.0"), pods=[pod])
    assert "slurmd cpu runs 24.05.1" in str(e.value), str(e.value)


@pytest.mark.parametrize("replicas, claim", [(1, "spool-small-controller-0"), (2, "small-controller-spool")])
def test_slurmctlds_state_is_copied_from_the_claim_the_controllers_mount(replicas, claim):
    def with_controllers(tag):
        documents = docs(tag)
        documents[0]["spec"]["controller"] = {"replicas": replicas, "spool": {
            "size": "1Gi", "accessModes": ["ReadWriteMany"]}}
        return documents
    upgrade, unused = run_plan(with_controllers("24.11.3-0.1.0"), with_controllers("26.05.5-0.1.0"))
    job = upgrade._state_job("job", "/backup/x")
    volumes = dict((v["name"], v["persistentVolumeClaim"]["claimName"]) for v in job["spec"]["template"]["spec"][
        "volumes"])
    assert volumes["spool"] == claim
    controller = [o for o in render_cluster(upgrade.model).manifests if o["kind"] == "StatefulSet" and
                  o["metadata"]["name"] == "small-controller"][0]["spec"]
    mounted = [v["persistentVolumeClaim"]["claimName"] for v in controller["template"]["spec"].get("volumes", [])
               if v["name"] == "spool"] or ["%s-small-controller-0" % t["metadata"]["name"]
                                            for t in controller.get("volumeClaimTemplates", [])]
    assert mounted == [claim]
