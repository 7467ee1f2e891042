"""spec.controller.replicas 2 on Kubernetes (render/kube_objects.py _controllers): two controller pods on one shared
spool claim, kept apart where they can be, probed so that a standby is never killed; replicas 1 keeps its claim
template."""
import copy

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import (
    placeholder_secret_material, render_manifests)
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from specs import documents

RWX = {"size": "3Gi", "accessModes": ["ReadWriteMany"], "storageClassName": "nfs"}


def objects(controller):
    model = build_model(documents(("cpu", {}), controller=controller))
    return model, render_manifests(model, render_slurm_configs(model), placeholder_secret_material(model))


def find(objs, kind, name):
    (hit,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return hit


def test_two_controllers_share_one_claim():
    model, objs = objects({"replicas": 2, "spool": RWX})
    sts = find(objs, "StatefulSet", "%s-controller" % model.name)
    assert sts["spec"]["replicas"] == 2
    assert "volumeClaimTemplates" not in sts["spec"]
    # a not-ready pod 0 (a standby) must not keep a deleted pod 1 from coming back
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    pod = sts["spec"]["template"]["spec"]
    spool = [v for v in pod["volumes"] if v["name"] == "spool"]
    claim = find(objs, "PersistentVolumeClaim", "%s-controller-spool" % model.name)
    assert spool == [{"name": "spool", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}]
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "3Gi"}},
                             "storageClassName": "nfs"}
    assert claim["metadata"]["labels"][c.LABEL_COMPONENT] == "controller"
    (ctl,) = pod["containers"]
    assert {"name": "spool", "mountPath": c.CONTROLLER_SPOOL} in ctl["volumeMounts"]
    # the claim comes before the pods that mount it
    assert objs.index(claim) < objs.index(sts)


def test_a_standby_is_alive_and_counted_ready():
    model, objs = objects({"replicas": 2, "spool": RWX})
    (ctl,) = find(objs, "StatefulSet", "%s-controller" % model.name)["spec"]["template"]["spec"]["containers"]
    assert c.IMAGES_SLURM_VERSION >= c.SLURMCTLD_HTTP_PROBES_SINCE
    for key in ("livenessProbe", "readinessProbe"):
        assert ctl[key]["httpGet"] == {"path": "/livez", "port": "slurmctld"}
        assert "tcpSocket" not in ctl[key]
    assert ctl["livenessProbe"]["failureThreshold"] * ctl["livenessProbe"]["periodSeconds"] >= 60


def test_controllers_prefer_different_nodes_and_keep_the_users_affinity():
    users = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ctl"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}}]}}
    model, objs = objects({"replicas": 2, "spool": RWX, "affinity": copy.deepcopy(users)})
    sts = find(objs, "StatefulSet", "%s-controller" % model.name)
    affinity = sts["spec"]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"] == users["nodeAffinity"]
    terms = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0] == users["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert terms[1] == {"weight": 100, "podAffinityTerm": {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": sts["spec"]["selector"]["matchLabels"]}}}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity["podAntiAffinity"]
    # the model's affinity is not changed by the render
    assert model.controller.scheduling.affinity == users


def test_a_drain_takes_one_controller_at_a_time():
    model, objs = objects({"replicas": 2, "spool": RWX})
    pdb = find(objs, "PodDisruptionBudget", "%s-controller" % model.name)
    assert pdb["spec"]["maxUnavailable"] == 1


def test_one_controller_keeps_its_claim_template():
    model, objs = objects({})
    sts = find(objs, "StatefulSet", "%s-controller" % model.name)
    assert sts["spec"]["replicas"] == 1 and "podManagementPolicy" not in sts["spec"]
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["spool"]
    (ctl,) = sts["spec"]["template"]["spec"]["containers"]
    assert ctl["livenessProbe"]["tcpSocket"] == {"port": "slurmctld"}
    assert not [o for o in objs if o["kind"] == "PersistentVolumeClaim" and "spool" in o["metadata"]["name"]]
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"].endswith("controller")]


def test_changing_replicas_on_a_running_cluster_is_an_immutable_change_the_plan_refuses():
    """1 <-> 2 changes the StatefulSet's claim templates and pod management: kube/apply.py's plan refuses it before
    any write unless recreate_statefulsets (and then the new shared claim starts empty: README says so)."""
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply
    model, one = objects({"replicas": 1, "spool": RWX})
    two = objects({"replicas": 2, "spool": RWX})[1]
    name = "%s-controller" % model.name
    sts_one, sts_two = find(one, "StatefulSet", name), find(two, "StatefulSet", name)
    fields = ["spec.podManagementPolicy", "spec.volumeClaimTemplates"]
    assert apply.immutable_changes(desired=sts_two, live=sts_one) == fields     # 1 -> 2
    assert apply.immutable_changes(desired=sts_one, live=sts_two) == fields     # 2 -> 1
    assert apply.immutable_changes(desired=sts_two, live=copy.deepcopy(sts_two)) == []
