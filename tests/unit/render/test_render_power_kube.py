"""The Kubernetes objects of ephemeral NodeSets (render/power_kube.py): the power programs' ServiceAccount, its Role
(pods create; get and delete of the CLOUD node names only), the ConfigMap of pod templates, the controller pod that
uses them, and nothing of it for a cluster without an ephemeral NodeSet."""
import copy
import json

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.node import power_kube as program
from ansible_collections.soperator.slurm.plugins.module_utils.node import power_program
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
from ansible_collections.soperator.slurm.plugins.module_utils.render import power_kube as pk
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import RESUME_FAILED_REASON
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec

from specs import documents

GPU = ("gpu", {"maxReplicas": 6, "ephemeral": {"enabled": True, "minReplicas": 1, "suspendTime": 60}})
BIG = ("big-mem", {"maxReplicas": 2, "ephemeral": {"enabled": True, "suspendTime": 60}})
CPU = ("cpu", {"replicas": 2})


def render(documents):
    model = spec.build_model(documents)
    return model, rk.render_manifests(model, render_slurm_configs(model), rk.placeholder_secret_material(model))


def by_kind(objects, kind):
    return dict((o["metadata"]["name"], o) for o in objects if o["kind"] == kind)


def controller_pod(objects):
    return by_kind(objects, "StatefulSet")["c-controller"]["spec"]["template"]["spec"]


def test_a_cluster_without_ephemeral_nodesets_gets_none_of_it():
    _model, objects = render(documents(CPU, ("gpu", {"maxReplicas": 6, "ephemeral": {"enabled": False}})))
    assert not [o for o in objects if o["metadata"]["labels"].get(c.LABEL_COMPONENT) == pk.POWER]
    assert "c-power" not in by_kind(objects, "ServiceAccount")
    pod = controller_pod(objects)
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("c-controller", False)
    assert "power" not in json.dumps(pod)


def test_the_power_objects_are_a_service_account_role_binding_and_config_map():
    _model, objects = render(documents(CPU, GPU, BIG))
    power = sorted((o["kind"], o["metadata"]["name"]) for o in objects
                   if o["metadata"]["labels"].get(c.LABEL_COMPONENT) == pk.POWER)
    assert power == [("ConfigMap", "c-power"), ("Role", "c-power"), ("RoleBinding", "c-power"),
                     ("ServiceAccount", "c-power")]
    binding = by_kind(objects, "RoleBinding")["c-power"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "c-power", "namespace": "slurm"}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "c-power"}
    # No token for any other pod that might name it; the controller pod asks for one itself.
    assert by_kind(objects, "ServiceAccount")["c-power"]["automountServiceAccountToken"] is False


def test_the_role_creates_pods_and_gets_and_deletes_only_the_cloud_nodes():
    _model, objects = render(documents(CPU, GPU, BIG))
    cloud = ["big-mem-0", "big-mem-1", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"]
    assert by_kind(objects, "Role")["c-power"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": cloud, "verbs": ["get", "delete"]}]


def test_the_controller_pod_runs_as_the_power_service_account_with_its_config():
    _model, objects = render(documents(CPU, GPU))
    pod = controller_pod(objects)
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("c-power", True)
    assert {"name": "power", "configMap": {"name": "c-power"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "power", "mountPath": pk.POWER_CONFIG_DIR, "readOnly": True} in mounts
    # The program reads the file the ConfigMap holds, where it is mounted.
    assert program.CONFIG_FILE == "%s/%s" % (pk.POWER_CONFIG_DIR, pk.POWER_CONFIG_FILE)


def config(objects):
    return json.loads(by_kind(objects, "ConfigMap")["c-power"]["data"][pk.POWER_CONFIG_FILE])


def test_the_config_map_holds_each_ephemeral_nodeset_and_the_reason_prefix():
    _model, objects = render(documents(CPU, GPU, BIG, remediation={"drainReasonPrefix": "ops:"}))
    got = config(objects)
    assert got["reasonPrefix"] == "ops:"
    assert sorted(got["nodeSets"]) == ["big-mem", "gpu"]
    assert (got["nodeSets"]["gpu"]["firstOrdinal"], got["nodeSets"]["gpu"]["endOrdinal"]) == (1, 6)
    assert (got["nodeSets"]["big-mem"]["firstOrdinal"], got["nodeSets"]["big-mem"]["endOrdinal"]) == (0, 2)
    # The reason the program sets is the one slurm/nodes.py (exporter, alert) recognises.
    assert power_program.RESUME_FAILED == RESUME_FAILED_REASON


def test_the_pod_template_is_the_statefulsets_with_slurmd_b_and_the_workers_subdomain():
    _model, objects = render(documents(CPU, GPU))
    template = by_kind(objects, "StatefulSet")["gpu"]["spec"]["template"]
    pod = config(objects)["nodeSets"]["gpu"]["pod"]
    assert (pod["apiVersion"], pod["kind"], pod["metadata"]["namespace"]) == ("v1", "Pod", "slurm")
    expected = copy.deepcopy(template["spec"])
    expected["subdomain"] = "c-workers"
    expected["containers"][0]["args"] = ["slurmd", "-b", "-D", "-N", "$(POD_NAME)"]
    assert pod["spec"] == expected
    assert template["spec"]["containers"][0]["args"] == ["slurmd", "-D", "-N", "$(POD_NAME)"]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_pods_labels_are_ours_the_services_and_not_the_statefulsets():
    """The worker Service selects the pod (its DNS name); the StatefulSet's selector must not, or the StatefulSet
    would adopt `gpu-3` (a name of its own) and delete it as an ordinal above its replicas."""
    _model, objects = render(documents(CPU, GPU))
    labels = config(objects)["nodeSets"]["gpu"]["pod"]["metadata"]["labels"]
    assert labels == {c.LABEL_NAME: "slurm", c.LABEL_INSTANCE: "c", c.LABEL_COMPONENT: "worker",
                      c.LABEL_MANAGED_BY: "soperator.slurm", pk.EPHEMERAL_LABEL: "gpu"}
    assert matches(by_kind(objects, "Service")["c-workers"]["spec"]["selector"], labels)
    for name, sts in by_kind(objects, "StatefulSet").items():
        assert not matches(sts["spec"]["selector"]["matchLabels"], labels), name
    for name, pdb in by_kind(objects, "PodDisruptionBudget").items():
        assert not matches(pdb["spec"]["selector"]["matchLabels"], labels), name


def test_the_program_makes_each_nodes_pod_from_its_template_and_refuses_other_names():
    _model, objects = render(documents(CPU, GPU, BIG))
    power = program.KubePower(api=None, namespace="slurm", config=config(objects))
    pod = power.template("gpu-5")
    assert (pod["metadata"]["name"], pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("gpu-5", "gpu-5",
                                                                                            "c-workers")
    assert power.template("big-mem-0")["metadata"]["labels"][pk.EPHEMERAL_LABEL] == "big-mem"
    for name in ("gpu-0", "gpu-6", "gpu-05", "cpu-1", "big-mem-2", "gpu", "gpu-x", "c-controller-0"):
        try:
            power.template(name)
        except program.PowerError:
            continue
        raise AssertionError("%s was accepted" % name)


def test_manage_rbac_false_leaves_the_power_rbac_and_service_account_alone():
    """Like remediation's: whoever deploys the cluster grants rights; the in-cluster reconcile (manage_rbac=false)
    neither applies nor prunes them, but still applies the ConfigMap and the controller that uses them."""
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
    model, objects = render(documents(CPU, GPU))
    left = [(o["kind"], o["metadata"]["name"]) for o in objects
            if not KubeCluster(None, model, KubeOptions(manage_rbac=False)).manages(o)]
    assert ("ServiceAccount", "c-power") in left and ("Role", "c-power") in left
    assert ("RoleBinding", "c-power") in left and ("ConfigMap", "c-power") not in left
    assert all(KubeCluster(None, model, KubeOptions()).manages(o) for o in objects)
