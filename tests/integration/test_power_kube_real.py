"""Ephemeral NodeSets on the real API server (RBAC authorizer, StatefulSet controller): the power ServiceAccount's
Role judged by SubjectAccessReviews, and the power program (plugins/module_utils/node/power_kube.py) run on this
machine with that ServiceAccount's own token (a TokenRequest) and the ConfigMap the cluster was given, expanding its
hostlist with the host's `scontrol show hostnames`. No kubelet: kwok's nodes run no container (the pods stay Pending
on an unbound jail claim), which is all the power program and the StatefulSet controller need."""
import base64
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
import yaml

import ansible_run
from waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(ROOT, "plugins", "module_utils", "node", "power_kube.py")
EPHEMERAL_LABEL = "slurm.soperator.dev/ephemeral-nodeset"
CLOUD = ["gpu-%d" % i for i in range(6)]          # maxReplicas 6, minReplicas 0: every gpu node is CLOUD
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: small, namespace: NS}
spec:
  jail: {volume: {size: 1Gi}}
  remediation: {drainReasonPrefix: "it:"}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: NS}
spec: {clusterName: small, replicas: 1, resources: {cpu: "1", memory: 1Gi}}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: gpu, namespace: NS}
spec:
  clusterName: small
  maxReplicas: 6
  resources: {cpu: "1", memory: 1Gi}
  ephemeral: {enabled: true, minReplicas: 0, suspendTime: 60}
"""


def _apply(kubeconfig, docs, check=False):
    args = dict(state="present", target="kubernetes", definition=docs, kubeconfig=kubeconfig)
    return ansible_run.module("slurm_cluster", args, check=check)


@pytest.fixture(scope="module")
def deployed(real_cluster):
    namespace = "soperator-it-%s" % uuid.uuid4().hex[:8]
    docs = list(yaml.safe_load_all(SPEC.replace("NS", namespace)))
    first = _apply(real_cluster.kubeconfig, docs)
    assert first["changed"], first
    yield namespace, docs
    ansible_run.module("slurm_cluster", dict(state="absent", target="kubernetes", definition=docs,
                                             kubeconfig=real_cluster.kubeconfig, purge_volumes=True),
                       expect_failed=None)
    real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _core(real_cluster):
    from kubernetes import client, config
    return client.CoreV1Api(config.new_client_from_config(config_file=real_cluster.kubeconfig))


def allowed(real_cluster, user, namespace, verb, resource, name="", group="", subresource=""):
    """The RBAC authorizer's answer to a SubjectAccessReview, exactly as given."""
    from kubernetes import client, config
    with config.new_client_from_config(config_file=real_cluster.kubeconfig) as api:
        review = client.AuthorizationV1Api(api).create_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated",
                                              "system:serviceaccounts:%s" % namespace],
                     "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group,
                                            "resource": resource, "subresource": subresource, "name": name}}})
        return review.status.allowed


def test_the_power_service_account_creates_pods_and_gets_and_deletes_only_cloud_nodes(real_cluster, deployed):
    namespace, _docs = deployed
    user = "system:serviceaccount:%s:small-power" % namespace
    assert allowed(real_cluster, user, namespace, "create", "pods")
    for node in CLOUD:
        for verb in ("get", "delete"):
            assert allowed(real_cluster, user, namespace, verb, "pods", node), (verb, node)
        for verb in ("update", "patch", "list", "watch", "deletecollection"):
            assert not allowed(real_cluster, user, namespace, verb, "pods", node), (verb, node)
        assert not allowed(real_cluster, user, namespace, "create", "pods", node, subresource="exec")
        assert not allowed(real_cluster, user, namespace, "get", "pods", node, subresource="log")
        assert not allowed(real_cluster, user, namespace, "patch", "pods", node, subresource="status")
    # Other pods: the fixed NodeSet's, the controller's, a name past maxReplicas, any pod at all.
    for node in ("cpu-0", "small-controller-0", "small-login-0", "gpu-6", ""):
        for verb in ("get", "delete", "update", "patch"):
            assert not allowed(real_cluster, user, namespace, verb, "pods", node), (verb, node)
    for verb in ("list", "watch", "deletecollection"):
        assert not allowed(real_cluster, user, namespace, verb, "pods")
    for resource, group in (("secrets", ""), ("configmaps", ""), ("services", ""), ("serviceaccounts", ""),
                            ("statefulsets", "apps"), ("roles", "rbac.authorization.k8s.io"),
                            ("nodesets", "slurm.soperator.dev")):
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            assert not allowed(real_cluster, user, namespace, verb, resource, group=group), (verb, resource)
    assert not allowed(real_cluster, user, namespace, "get", "secrets", "small-munge")
    assert not allowed(real_cluster, user, namespace, "patch", "statefulsets", "gpu", group="apps")
    # Nowhere else.
    assert not allowed(real_cluster, user, "default", "create", "pods")
    assert not allowed(real_cluster, user, "default", "get", "pods", "gpu-3")
    assert not allowed(real_cluster, user, "", "list", "nodes")


@pytest.fixture(scope="module")
def power(real_cluster, deployed, tmp_path_factory):
    """run(action, hostlist) -> the finished power program, run as slurmctld would (by its three names), with the
    power ServiceAccount's token, the cluster's CA and the ConfigMap's file."""
    namespace, _docs = deployed
    tmp = tmp_path_factory.mktemp("power")
    with open(real_cluster.kubeconfig) as f:
        kubeconfig = yaml.safe_load(f)
    cluster = kubeconfig["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        (tmp / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    else:
        shutil.copy(os.path.join(os.path.dirname(real_cluster.kubeconfig), cluster["certificate-authority"]),
                    str(tmp / "ca.crt"))
    token = real_cluster.kubectl("create", "token", "small-power", "-n", namespace, "--duration=1h").stdout
    (tmp / "token").write_text(token.strip())
    config = json.loads(real_cluster.kubectl("get", "configmap", "small-power", "-n", namespace,
                                             "-o", "json").stdout)["data"]["power.json"]
    (tmp / "power.json").write_text(config)
    # scontrol show hostnames reads a slurm.conf first; any valid one will do. No slurmctld answers there: the
    # request times a resume records fail at once (MessageTimeout 1) and are only logged.
    (tmp / "slurm.conf").write_text("ClusterName=it\nSlurmctldHost=localhost\nMessageTimeout=1\n")
    (tmp / "bin").mkdir()
    for name in ("power-resume", "power-suspend", "power-resume-fail"):
        os.symlink(PROGRAM, str(tmp / "bin" / name))
    env = dict(os.environ, SLURM_CONF=str(tmp / "slurm.conf"), SOPERATOR_KUBE_API=cluster["server"],
               SOPERATOR_KUBE_TOKEN_FILE=str(tmp / "token"), SOPERATOR_KUBE_CA_FILE=str(tmp / "ca.crt"),
               SOPERATOR_KUBE_NAMESPACE=namespace, SOPERATOR_POWER_CONFIG=str(tmp / "power.json"),
               SOPERATOR_POWER_LOG=str(tmp / "power.log"))

    def run(action, hostlist, slurm_conf=None):
        proc = subprocess.run([sys.executable, str(tmp / "bin" / ("power-" + action)), hostlist],
                              env=dict(env, SLURM_CONF=slurm_conf) if slurm_conf else env,
                              capture_output=True, text=True, timeout=300, check=False)
        proc.log = power_log(run)
        return proc
    run.log_file = str(tmp / "power.log")
    return run


def power_log(power):
    with open(power.log_file) as f:
        return f.read()


def pod_or_none(core, namespace, name):
    from kubernetes import client
    try:
        return core.read_namespaced_pod(name, namespace)
    except client.exceptions.ApiException as e:
        if e.status == 404:
            return None
        raise


def gpu_pods(core, namespace):
    return sorted(n for n in CLOUD if pod_or_none(core, namespace, n) is not None)


def test_resume_and_suspend_create_and_delete_exactly_the_pods_slurm_names(real_cluster, deployed, power):
    namespace, docs = deployed
    core = _core(real_cluster)
    config = json.loads(real_cluster.kubectl("get", "configmap", "small-power", "-n", namespace,
                                             "-o", "json").stdout)["data"]["power.json"]
    template = json.loads(config)["nodeSets"]["gpu"]["pod"]

    done = power("resume", "gpu-[3,5]")
    assert done.returncode == 0, (done.stderr, done.log)
    assert gpu_pods(core, namespace) == ["gpu-3", "gpu-5"]
    uids = {}
    for name in ("gpu-3", "gpu-5"):
        pod = pod_or_none(core, namespace, name)
        uids[name] = pod.metadata.uid
        assert (pod.spec.hostname, pod.spec.subdomain) == (name, "small-workers")
        assert pod.metadata.labels == template["metadata"]["labels"]
        assert pod.metadata.labels[EPHEMERAL_LABEL] == "gpu" and not pod.metadata.owner_references
        slurmd = pod.spec.containers[0]
        assert (slurmd.name, slurmd.image, slurmd.args) == ("slurmd", template["spec"]["containers"][0]["image"],
                                                            ["slurmd", "-b", "-D", "-N", "$(POD_NAME)"])
        assert (pod.spec.service_account_name, pod.spec.automount_service_account_token) == ("small-worker", False)
        assert [v.name for v in pod.spec.volumes] == [v["name"] for v in template["spec"]["volumes"]]

    # Again: nothing to do, the same pods (Slurm may ask twice).
    again = power("resume", "gpu-3")
    assert again.returncode == 0 and "exists already" in again.log, again.log
    assert pod_or_none(core, namespace, "gpu-3").metadata.uid == uids["gpu-3"]

    # The site.yml apply of the unchanged cluster changes nothing, and leaves the powered-up pods alone.
    for check in (True, False):
        result = _apply(real_cluster.kubeconfig, docs, check=check)
        assert not result["changed"], [o for o in result.get("objects") or [] if o.get("action") != "unchanged"]
    assert dict((n, pod_or_none(core, namespace, n).metadata.uid) for n in ("gpu-3", "gpu-5")) == uids

    done = power("suspend", "gpu-[3,5]")
    assert done.returncode == 0, (done.stderr, done.log)
    wait_for(lambda: gpu_pods(core, namespace) == [], "gpu-3 and gpu-5 deleted", timeout=120)
    # Nothing left to remove: still a success.
    assert power("suspend", "gpu-[3,5]").returncode == 0


def test_a_pod_not_ours_with_a_cloud_nodes_name_is_refused_and_kept(real_cluster, deployed, power):
    namespace, _docs = deployed
    core = _core(real_cluster)
    foreign = core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-1", "labels": {"app": "someone-else"}},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/other:1"}]}})
    try:
        for action in ("suspend", "resume", "resume-fail"):
            done = power(action, "gpu-1")
            assert done.returncode == 1, (action, done.log)
            assert "not one of ours" in done.log.splitlines()[-1], done.log
            pod = pod_or_none(core, namespace, "gpu-1")
            assert pod.metadata.uid == foreign.metadata.uid and pod.metadata.deletion_timestamp is None
        # A name that is no CLOUD node is refused before any request: no pod made, the fixed NodeSet's left.
        for action, node in (("resume", "gpu-6"), ("suspend", "cpu-0"), ("resume-fail", "small-controller-0")):
            before = pod_or_none(core, namespace, node)
            done = power(action, node)
            assert done.returncode == 1 and "not a node Slurm powers up" in done.log.splitlines()[-1], done.log
            after = pod_or_none(core, namespace, node)
            assert (before and before.metadata.uid) == (after and after.metadata.uid), node
            assert after is None or after.metadata.deletion_timestamp is None
    finally:
        core.delete_namespaced_pod("gpu-1", namespace, grace_period_seconds=0)


def test_the_statefulset_adopts_a_pod_with_its_selector_but_not_ours(real_cluster, deployed, power):
    """Why the ephemeral pods lack the NodeSet label: a pod named like the StatefulSet's ordinals and matching its
    selector is adopted by the StatefulSet controller and deleted (ordinal above replicas). Ours, created before
    that pod, is left alone by the same controller."""
    namespace, _docs = deployed
    core = _core(real_cluster)
    assert power("resume", "gpu-2").returncode == 0
    ours = pod_or_none(core, namespace, "gpu-2")
    labels = dict(ours.metadata.labels, **{"slurm.soperator.dev/nodeset": "gpu"})
    labels.pop(EPHEMERAL_LABEL)
    matching = core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-4", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/other:1"}]}})

    def gone():
        pod = pod_or_none(core, namespace, "gpu-4")
        return pod is None or pod.metadata.uid != matching.metadata.uid
    wait_for(gone, "the StatefulSet controller to delete gpu-4 (adopted, above replicas)", timeout=120)
    kept = pod_or_none(core, namespace, "gpu-2")
    assert kept.metadata.uid == ours.metadata.uid and not kept.metadata.owner_references
    assert kept.metadata.deletion_timestamp is None
    assert power("suspend", "gpu-2").returncode == 0


LOCAL_SLURM = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: it-local, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  login: {replicas: 0}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: gpu, namespace: slurm}
spec: {clusterName: it-local, replicas: 4, resources: {cpu: "1", memory: 256Mi}}
"""


@pytest.fixture
def slurm_with_gpu_nodes(tmp_path):
    """Real slurmctld and slurmds (the local backend) with nodes gpu-0..3, for the program's scontrol update: the
    resume-fail program only needs a slurmctld that knows the node."""
    import tempfile
    from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
    from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import ports_needed
    from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port
    from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
    from requires import SLURM, skip_without
    skip_without(SLURM)
    model = validate.build_model(load_documents(LOCAL_SLURM))
    state = tempfile.mkdtemp(prefix="sop-", dir="/tmp")     # short: slurmstepd's socket paths
    os.chmod(state, 0o755)
    cluster = lb.LocalCluster(state, model, timeout=120, drain_timeout=60, base_port=find_free_base_port(
        ports_needed(model), start=20000 + (os.getpid() % 100) * 100))
    try:
        cluster.ensure_started()
        yield cluster
    finally:
        cluster.stop(purge=True)


def test_resume_fail_removes_the_pod_and_sets_the_node_down_with_our_reason(
        real_cluster, deployed, power, slurm_with_gpu_nodes):
    from ansible_collections.soperator.slurm.plugins.module_utils.observe.metrics import power_word
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import read_nodes
    namespace, _docs = deployed
    core = _core(real_cluster)
    slurm_conf = slurm_with_gpu_nodes.env()["SLURM_CONF"]
    assert power("resume", "gpu-3").returncode == 0
    assert pod_or_none(core, namespace, "gpu-3") is not None

    done = power("resume-fail", "gpu-3", slurm_conf=slurm_conf)
    assert done.returncode == 0, done.log
    wait_for(lambda: pod_or_none(core, namespace, "gpu-3") is None, "gpu-3 deleted", timeout=120)
    records = read_nodes(slurm_with_gpu_nodes.slurm())
    assert records["gpu-3"].base_state == "DOWN"
    assert records["gpu-3"].reason == "it: resume-failed: not registered within ResumeTimeout"
    # What the exporter reports (and SlurmNodeResumeFailed alerts on), with the cluster's drain reason prefix.
    assert power_word(records["gpu-3"], "it:") == "resume_failed"
    assert records["gpu-2"].base_state != "DOWN" and not records["gpu-2"].reason


def test_resume_waits_for_a_terminating_pod_of_ours_then_makes_a_new_one(real_cluster, deployed, power):
    """Slurm may resume a node right after suspending it: the old pod is still terminating (here held by a
    finalizer), and the new one can only be made once it is gone."""
    import threading
    namespace, _docs = deployed
    core = _core(real_cluster)
    assert power("resume", "gpu-0").returncode == 0
    old = pod_or_none(core, namespace, "gpu-0")
    core.patch_namespaced_pod("gpu-0", namespace, {"metadata": {"finalizers": ["it.soperator.dev/hold"]}})
    core.delete_namespaced_pod("gpu-0", namespace)
    assert pod_or_none(core, namespace, "gpu-0").metadata.deletion_timestamp is not None
    result = {}
    resumer = threading.Thread(target=lambda: result.setdefault("done", power("resume", "gpu-0")))
    resumer.start()
    try:
        wait_for(lambda: "resume gpu-0: waiting for the old pod" in power_log(power),
                 "the program to wait for the old pod", timeout=120)
        assert pod_or_none(core, namespace, "gpu-0").metadata.uid == old.metadata.uid   # not replaced meanwhile
    finally:
        core.patch_namespaced_pod("gpu-0", namespace, {"metadata": {"finalizers": None}})
        resumer.join(timeout=300)
    done = result["done"]
    assert done.returncode == 0, done.log
    new = pod_or_none(core, namespace, "gpu-0")
    assert new.metadata.uid != old.metadata.uid and new.metadata.deletion_timestamp is None
    assert power("suspend", "gpu-0").returncode == 0


def test_resume_replaces_an_ended_pod_of_ours(real_cluster, deployed, power):
    """An evicted or failed pod keeps its name until deleted: resume removes it (ours) and makes a new one."""
    namespace, _docs = deployed
    core = _core(real_cluster)
    assert power("resume", "gpu-1").returncode == 0
    old = pod_or_none(core, namespace, "gpu-1")
    core.patch_namespaced_pod_status("gpu-1", namespace, {"status": {"phase": "Failed", "reason": "Evicted"}})
    done = power("resume", "gpu-1")
    assert done.returncode == 0, done.log
    new = pod_or_none(core, namespace, "gpu-1")
    assert new.metadata.uid != old.metadata.uid and new.status.phase != "Failed"
    assert power("suspend", "gpu-1").returncode == 0


def test_an_ephemeral_pod_made_from_an_older_template_is_found_outdated(real_cluster, deployed, power):
    """A NodeSet's template changes (a new image): the powered-up pod the program made from the old one is
    outdated (site.yml hands its node back to power saving, slurm/power_down.py); one made from the new template,
    a pod being deleted, and pods that are not ours are not."""
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import power_roll
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
    from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
    namespace, docs = deployed
    core = _core(real_cluster)
    client = KubeClient(api_client_from_params({"kubeconfig": real_cluster.kubeconfig}), "soperator.slurm")

    def digests(documents):
        model = build_model(load_documents(yaml.safe_dump_all(documents)))
        return model, power_roll.current_digests(model, render_cluster(model).manifests)
    model, now = digests(docs)
    newer = [dict(d, spec=dict(d["spec"], image="example.invalid/worker:new")) if d["metadata"]["name"] == "gpu"
             else d for d in docs]
    _model, then = digests(newer)
    assert now["gpu"] != then["gpu"]
    assert power("resume", "gpu-4").returncode == 0
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-5", "labels": {"app": "someone-else"}},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/other:1"}]}})
    try:
        assert power_roll.outdated_pods(client, model, now) == []
        assert power_roll.outdated_pods(client, model, then) == ["gpu-4"]
        # being deleted: on its way out already
        core.patch_namespaced_pod("gpu-4", namespace, {"metadata": {"finalizers": ["it.soperator.dev/hold"]}})
        core.delete_namespaced_pod("gpu-4", namespace)
        assert power_roll.outdated_pods(client, model, then) == []
    finally:
        core.patch_namespaced_pod("gpu-4", namespace, {"metadata": {"finalizers": None}})
        core.delete_namespaced_pod("gpu-5", namespace, grace_period_seconds=0)
    wait_for(lambda: pod_or_none(core, namespace, "gpu-4") is None, "gpu-4 deleted", timeout=120)
