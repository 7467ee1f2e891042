"""render_kube: every Kubernetes object of a cluster, labelled, named, ordered and deterministic."""
import base64
import copy
import hashlib
import json

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import KIND_ORDER
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (
    accounting_db_secret_name, munge_secret_name, ssh_host_keys_secret_name)

CLUSTER = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: demo, namespace: hpc}
spec:
  clusterDomain: example.org
  images: {pullPolicy: Always, pullSecrets: [regcred]}
  jail: {volume: {size: 1Ti, storageClassName: nfs}, populate: {backoffLimit: 5, overwrite: if_empty}}
  controller: {resources: {cpu: "2", memory: 4Gi}, spool: {size: 5Gi, storageClassName: ssd}}
  login:
    replicas: 3
    service:
      type: LoadBalancer
      nodePort: 30022
      sourceRanges: [10.0.0.0/8, 192.168.0.0/16]
      annotations: {lb.example/internal: "true"}
    sshRootPublicKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMJ3bYQKZ8y6a4m4Jt8fOm4mX0y8pXu1hH5mbpV8qF7N a@b"]
  accounting: {enabled: true}
  remediation: {schedule: "*/7 * * * *", successfulJobsHistoryLimit: 2, failedJobsHistoryLimit: 4}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: gpu, namespace: hpc}
spec:
  clusterName: demo
  replicas: 4
  maxReplicas: 8
  resources: {cpu: "64", memory: 512Gi}
  gres: ["gpu:h100:8"]
  sharedMemory: 64Gi
  maxUnavailable: 2
  nodeSelector: {pool: gpu}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  priorityClassName: hpc-high
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
    {matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: hpc}
spec:
  clusterName: demo
  replicas: 2
  resources: {cpu: "8", memory: 16Gi}
"""

CONFIGS = {name: "# fake %s\n" % name for name in c.SLURM_CONFIG_FILES + (c.SLURMDBD_CONF,)}
CONFIGS[c.SLURMDBD_CONF] = "StorageHost=demo-accounting-db\nStorageUser=acct\nStorageLoc=acct_db\n"   # not read back


def docs(edit=None):
    documents = load_documents(CLUSTER)
    if edit:
        edit(documents[0]["spec"])
    return documents


def make_model(edit=None):
    return build_model(docs(edit))


def fake_material(model):
    """Distinctive fake values, so a leak outside the Secrets is easy to spot."""
    material = {
        munge_secret_name(model): {s.MUNGE_KEY: b"MUNGE-VALUE-" + b"m" * 1012},
        ssh_host_keys_secret_name(model): dict(
            (k, ("HOSTKEY-%s-VALUE" % k).encode()) for k in s.SSH_HOST_KEY_FILES),
    }
    if model.accounting.enabled and model.accounting.in_cluster is not None:
        material[accounting_db_secret_name(model)] = {s.DB_PASSWORD: b"DB-PASSWORD-VALUE-0123456789abcd",
                                                      s.DB_ROOT_PASSWORD: b"DB-ROOT-VALUE-0123456789abcdefgh"}
    return material


def render(model=None, configs=None, material=None):
    model = model or make_model()
    return rk.render_manifests(model, dict(configs or CONFIGS), material or fake_material(model))


def find(objects, kind, name):
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, "%s/%s: %d found" % (kind, name, len(hits))
    return hits[0]


def names(objects, kind):
    return [o["metadata"]["name"] for o in objects if o["kind"] == kind]


def pod_spec(obj):
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def pod_objects(objects):
    return [o for o in objects if o["kind"] in ("StatefulSet", "Job", "CronJob")]


def container(obj):
    (only,) = pod_spec(obj)["containers"]
    return only


@pytest.fixture(scope="module")
def objects():
    return render()


# --- labels and names --------------------------------------------------------------------------------------------

def test_every_object_is_labelled(objects):
    components = set()
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels[c.LABEL_MANAGED_BY] == "soperator.slurm", obj["metadata"]["name"]
        assert labels[c.LABEL_INSTANCE] == "demo"
        assert labels[c.LABEL_NAME] == "slurm"
        assert labels[c.LABEL_COMPONENT]
        components.add(labels[c.LABEL_COMPONENT])
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "hpc"
        else:
            assert "namespace" not in obj["metadata"]
    assert {"controller", "login", "worker", "accounting", "jail", "remediation"} <= components


def test_pod_templates_are_labelled_like_their_owner(objects):
    for obj in pod_objects(objects):
        template = (obj["spec"]["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob"
                    else obj["spec"]["template"])
        assert template["metadata"]["labels"] == obj["metadata"]["labels"], obj["metadata"]["name"]
        selector = obj["spec"].get("selector", {}).get("matchLabels", {})
        for key, value in selector.items():
            assert template["metadata"]["labels"][key] == value


def test_worker_objects_carry_the_nodeset_label(objects):
    for name in ("gpu", "cpu"):
        for kind in ("StatefulSet", "PodDisruptionBudget"):
            obj = find(objects, kind, name)
            assert obj["metadata"]["labels"][c.LABEL_NODESET] == name
            assert obj["metadata"]["labels"][c.LABEL_COMPONENT] == "worker"
            assert obj["spec"]["selector"]["matchLabels"][c.LABEL_NODESET] == name
        assert find(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["labels"][c.LABEL_NODESET] == name


def test_object_names(objects):
    assert names(objects, "StatefulSet") == ["demo-accounting-db", "demo-accounting", "demo-controller",
                                             "demo-login", "cpu", "gpu"]
    assert names(objects, "Service") == ["demo-controller", "demo-accounting-db", "demo-accounting", "demo-login",
                                         "demo-login-headless", "demo-workers"]
    assert names(objects, "Secret") == ["demo-munge", "demo-ssh-host-keys", "demo-accounting-db"]
    assert names(objects, "ConfigMap") == ["demo-slurm-configs", "demo-root-authorized-keys", "demo-sshd-config",
                                           "demo-slurmdbd", "demo-remediation-status"]
    assert names(objects, "PersistentVolumeClaim") == ["demo-jail"]
    assert names(objects, "Job") == ["demo-populate-jail"]
    assert names(objects, "PodDisruptionBudget") == ["demo-login", "cpu", "gpu"]
    assert names(objects, "CronJob") == ["demo-remediation"]
    assert names(objects, "ServiceAccount") == ["demo-controller", "demo-login", "demo-worker", "demo-jail",
                                                "demo-accounting", "demo-remediation"]
    pairs = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(pairs) == len(set(pairs))


# --- workers -----------------------------------------------------------------------------------------------------

def test_one_stateful_set_per_nodeset(objects):
    gpu, cpu = find(objects, "StatefulSet", "gpu"), find(objects, "StatefulSet", "cpu")
    assert gpu["spec"]["replicas"] == 4 and cpu["spec"]["replicas"] == 2
    for sts in (gpu, cpu):
        assert sts["spec"]["serviceName"] == "demo-workers"
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
        slurmd = container(sts)
        assert slurmd["args"] == ["slurmd", "-D", "-N", "$(POD_NAME)"]
        assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in slurmd["env"]
        assert slurmd["readinessProbe"]["tcpSocket"]["port"] == "slurmd"
        assert {"name": "slurmd", "containerPort": c.SLURMD_PORT, "protocol": "TCP"} in slurmd["ports"]
        assert "livenessProbe" not in slurmd
        assert slurmd["securityContext"] == {"privileged": True}
        mounts = dict((m["mountPath"], m) for m in slurmd["volumeMounts"])
        assert mounts[c.JAIL_MOUNT]["name"] == "jail"
        assert mounts[c.SLURM_CONF_DIR]["name"] == "slurm-configs"
        assert mounts[c.MUNGE_KEY_DIR]["name"] == "munge-key"
        assert mounts[c.SLURMD_SPOOL]["name"] == "spool"
    assert container(gpu)["resources"] == {
        "requests": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
        "limits": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}
    assert container(cpu)["resources"]["requests"] == container(cpu)["resources"]["limits"] == {
        "cpu": "8", "memory": "16Gi"}


def test_worker_scheduling_and_shared_memory(objects):
    gpu, cpu = pod_spec(find(objects, "StatefulSet", "gpu")), pod_spec(find(objects, "StatefulSet", "cpu"))
    assert gpu["nodeSelector"] == {"pool": "gpu"}
    assert gpu["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert gpu["priorityClassName"] == "hpc-high"
    assert gpu["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    shm = [v for v in gpu["volumes"] if v["name"] == "dev-shm"]
    assert shm == [{"name": "dev-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
    assert {"name": "dev-shm", "mountPath": "/dev/shm"} in container(find(objects, "StatefulSet", "gpu"))[
        "volumeMounts"]
    for key in ("nodeSelector", "tolerations", "priorityClassName", "affinity"):
        assert key not in cpu
    assert not [v for v in cpu["volumes"] if v["name"] == "dev-shm"]


def test_one_shared_headless_worker_service(objects):
    worker_services = [o for o in objects if o["kind"] == "Service"
                       and o["metadata"]["labels"][c.LABEL_COMPONENT] == "worker"]
    assert [o["metadata"]["name"] for o in worker_services] == ["demo-workers"]
    svc = worker_services[0]["spec"]
    assert svc["clusterIP"] == "None"
    assert svc["publishNotReadyAddresses"] is True
    assert svc["ports"] == [{"name": "slurmd", "port": c.SLURMD_PORT, "targetPort": "slurmd", "protocol": "TCP"}]
    for name in ("gpu", "cpu"):
        pod_labels = find(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["labels"]
        assert all(pod_labels.get(k) == v for k, v in svc["selector"].items())
    for name in ("demo-controller", "demo-login"):
        pod_labels = find(objects, "StatefulSet", name)["spec"]["template"]["metadata"]["labels"]
        assert not all(pod_labels.get(k) == v for k, v in svc["selector"].items())


def test_worker_pdbs(objects):
    assert find(objects, "PodDisruptionBudget", "gpu")["spec"]["maxUnavailable"] == 2
    assert find(objects, "PodDisruptionBudget", "cpu")["spec"]["maxUnavailable"] == 1
    login = find(objects, "PodDisruptionBudget", "demo-login")["spec"]
    assert login["maxUnavailable"] == 1
    assert login["selector"]["matchLabels"] == find(objects, "StatefulSet", "demo-login")["spec"]["selector"][
        "matchLabels"]


# --- every pod ---------------------------------------------------------------------------------------------------

def test_every_pod_searches_worker_and_controller_domains(objects):
    expected = ["demo-workers.hpc.svc.example.org", "demo-controller.hpc.svc.example.org"]
    pods = pod_objects(objects)
    assert len(pods) == 8
    for obj in pods:
        assert pod_spec(obj)["dnsConfig"]["searches"] == expected, obj["metadata"]["name"]


def test_images_pull_policy_and_secrets(objects):
    m = make_model()
    # a NodeSet with GRES gpu runs the GPU worker image, the others the worker image
    assert m.images.worker_gpu == m.images.worker.replace("/worker:", "/worker-gpu:")
    expected = {"demo-controller": m.images.controller, "demo-login": m.images.login, "gpu": m.images.worker_gpu,
                "cpu": m.images.worker,
                "demo-accounting": m.images.accounting, "demo-accounting-db": m.images.mariadb,
                "demo-populate-jail": m.jail.populate_image, "demo-remediation": m.images.remediation}
    for obj in pod_objects(objects):
        spec = pod_spec(obj)
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        for ctr in spec["containers"]:
            assert ctr["imagePullPolicy"] == "Always"
        if obj["metadata"]["name"] in expected:
            assert container(obj)["image"] == expected[obj["metadata"]["name"]]


def test_config_map_mounted_as_directory_without_checksum(objects):
    cm = find(objects, "ConfigMap", "demo-slurm-configs")
    assert sorted(cm["data"]) == sorted(c.SLURM_CONFIG_FILES)
    assert cm["data"]["slurm.conf"] == CONFIGS["slurm.conf"]
    users = 0
    for obj in pod_objects(objects):
        template = obj["spec"]["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob" \
            else obj["spec"]["template"]
        if obj["metadata"]["name"] == "demo-controller":
            # only the node definitions: a change of anything else in slurm.conf restarts no pod
            assert list(template["metadata"]["annotations"]) == [rk.NODE_DEFINITIONS_ANNOTATION]
        elif obj["metadata"]["name"] == "demo-login":
            # only its sshd_config (sshd reads it when it starts)
            assert list(template["metadata"]["annotations"]) == [rk.SSHD_CONFIG_ANNOTATION]
        else:
            assert "annotations" not in template["metadata"]
        config_maps = set(v["name"] for v in pod_spec(obj).get("volumes", []) if "configMap" in v)
        for ctr in pod_spec(obj)["containers"]:
            for mount in ctr.get("volumeMounts", []):
                assert mount["name"] not in config_maps or "subPath" not in mount
                if mount["name"] == "slurm-configs":
                    assert mount["mountPath"] == c.SLURM_CONF_DIR or (
                        obj["metadata"]["name"] == "demo-login" and mount["mountPath"] == "/mnt/jail/etc/slurm")
                    users += mount["mountPath"] == c.SLURM_CONF_DIR
    assert users == 4   # controller, login, gpu, cpu


def controller_digest(objects):
    return find(objects, "StatefulSet", "demo-controller")["spec"]["template"]["metadata"]["annotations"][
        rk.NODE_DEFINITIONS_ANNOTATION]


def test_controller_rolls_only_when_node_definitions_change():
    model = make_model()
    digest = controller_digest(render(model))
    lines = [line for line in render_slurm_configs(model)["slurm.conf"].splitlines() if line.startswith("NodeName=")]
    assert lines and digest == hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]

    def other_setting(spec):
        spec["slurmConfig"] = {"SchedulerParameters": "bf_continue"}
    changed = make_model(other_setting)
    assert render_slurm_configs(changed)["slurm.conf"] != render_slurm_configs(model)["slurm.conf"]
    assert controller_digest(render(changed)) == digest
    documents = docs()
    documents[1]["spec"]["maxReplicas"] = documents[1]["spec"].get("maxReplicas", 8) + 9
    assert controller_digest(render(build_model(documents))) != digest


def test_service_accounts_automount_only_for_remediation(objects):
    for sa in [o for o in objects if o["kind"] == "ServiceAccount"]:
        assert sa["automountServiceAccountToken"] is (sa["metadata"]["name"] == "demo-remediation")
    for obj in pod_objects(objects):
        spec = pod_spec(obj)
        assert spec["automountServiceAccountToken"] is (obj["kind"] == "CronJob")
        assert spec["serviceAccountName"] in names(objects, "ServiceAccount")


# --- controller, login, jail -------------------------------------------------------------------------------------

def test_controller(objects):
    sts = find(objects, "StatefulSet", "demo-controller")
    assert sts["spec"]["replicas"] == 1 and sts["spec"]["serviceName"] == "demo-controller"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "ssd"
    assert c.LABEL_MANAGED_BY not in claim["metadata"]["labels"]
    ctl = container(sts)
    assert {"name": claim["metadata"]["name"], "mountPath": c.CONTROLLER_SPOOL} in ctl["volumeMounts"]
    assert ctl["args"] == ["slurmctld", "-D"]
    assert ctl["readinessProbe"]["tcpSocket"]["port"] == "slurmctld"
    assert ctl["livenessProbe"]["tcpSocket"]["port"] == "slurmctld"
    assert ctl["ports"] == [{"name": "slurmctld", "containerPort": 6817, "protocol": "TCP"}]
    assert ctl["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    svc = find(objects, "Service", "demo-controller")["spec"]
    assert svc["clusterIP"] == "None"
    assert svc["ports"][0]["port"] == 6817


def test_login(objects):
    sts = find(objects, "StatefulSet", "demo-login")
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == "demo-login-headless"
    sshd = container(sts)
    assert sshd["securityContext"]["capabilities"]["add"] == ["SYS_CHROOT"]
    assert sshd["readinessProbe"]["tcpSocket"]["port"] == "ssh"
    mounts = dict((m["mountPath"], m["name"]) for m in sshd["volumeMounts"])
    assert mounts[c.SSH_HOST_KEY_DIR] == "ssh-host-keys" and mounts[c.JAIL_MOUNT] == "jail"
    volumes = dict((v["name"], v) for v in pod_spec(sts)["volumes"])
    assert volumes["ssh-host-keys"]["secret"]["secretName"] == "demo-ssh-host-keys"
    assert volumes["ssh-host-keys"]["secret"]["defaultMode"] == 0o600
    keys = find(objects, "ConfigMap", "demo-root-authorized-keys")["data"]["root"]
    assert keys.startswith("ssh-ed25519 AAAA") and keys.endswith("a@b\n")
    svc = find(objects, "Service", "demo-login")
    assert svc["metadata"]["annotations"] == {"lb.example/internal": "true"}
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8", "192.168.0.0/16"]
    assert svc["spec"]["ports"] == [{"name": "ssh", "port": 22, "targetPort": "ssh", "protocol": "TCP",
                                     "nodePort": 30022}]
    headless = find(objects, "Service", "demo-login-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["selector"] == svc["spec"]["selector"]


def test_login_sshd_chroots_into_the_jail_with_keys_only(objects):
    sts = find(objects, "StatefulSet", "demo-login")
    sshd = container(sts)
    config = find(objects, "ConfigMap", "demo-sshd-config")["data"]["sshd_config"]
    assert config == rk.login_sshd_config()
    settings = [line.split(None, 1) for line in config.splitlines() if line and not line.startswith("#")]
    assert ["ChrootDirectory", c.JAIL_MOUNT] in settings
    for key, value in (("PasswordAuthentication", "no"), ("KbdInteractiveAuthentication", "no"),
                       ("PubkeyAuthentication", "yes"), ("PermitRootLogin", "prohibit-password"),
                       ("X11Forwarding", "no"), ("AllowTcpForwarding", "local"), ("Port", "22")):
        assert [key, value] in settings
    # The cluster's keys through a command: the kubelet makes a ConfigMap volume's directory 0777, and StrictModes
    # refuses any AuthorizedKeysFile below it (seen on a real node). The user's own keys are in the jail.
    assert ["AuthorizedKeysFile", "/mnt/jail%h/.ssh/authorized_keys"] in settings
    assert ["AuthorizedKeysCommand", "/usr/bin/cat /etc/ssh/authorized-keys/%u"] in settings
    assert ["AuthorizedKeysCommandUser", "nobody"] in settings
    assert ["StrictModes", "yes"] in settings
    host_keys = [v for k, v in settings if k == "HostKey"]
    assert host_keys == ["%s/ssh_host_%s_key" % (c.SSH_HOST_KEY_DIR, t) for t in s.SSH_HOST_KEY_TYPES]
    # every private key sshd loads is an item of the mounted host keys Secret
    volumes = dict((v["name"], v) for v in pod_spec(sts)["volumes"])
    items = [i["path"] for i in volumes["ssh-host-keys"]["secret"]["items"]]
    assert all(k.rsplit("/", 1)[1] in items for k in host_keys)
    assert sshd["args"] == ["/usr/sbin/sshd", "-D", "-e", "-f", rk.SSHD_CONFIG_DIR + "/sshd_config"]
    assert volumes["sshd-config"]["configMap"]["name"] == "demo-sshd-config"
    mounts = dict((m["mountPath"], m) for m in sshd["volumeMounts"])
    assert mounts[rk.SSHD_CONFIG_DIR]["name"] == "sshd-config"
    # the jail's users: its /etc directory (not single files, so a new user shows at once), read-only
    assert mounts[rk.EXTRAUSERS_DIR] == {"name": "jail", "mountPath": rk.EXTRAUSERS_DIR, "readOnly": True,
                                         "subPath": "etc"}
    # Slurm clients in the jail: configs and munged's socket at their usual paths, below the jail mount
    assert mounts[c.JAIL_MOUNT + c.SLURM_CONF_DIR] == {
        "name": "slurm-configs", "readOnly": True, "mountPath": c.JAIL_MOUNT + c.SLURM_CONF_DIR}
    assert mounts[c.JAIL_MOUNT + c.MUNGE_SOCKET_DIR]["name"] == mounts[c.MUNGE_SOCKET_DIR]["name"] == "munge-socket"
    assert volumes["munge-socket"] == {"name": "munge-socket", "emptyDir": {}}
    # a changed sshd_config rolls the login pods; the digest is the config's
    annotation = sts["spec"]["template"]["metadata"]["annotations"][rk.SSHD_CONFIG_ANNOTATION]
    assert annotation == hashlib.sha256(config.encode()).hexdigest()[:16]


def test_login_service_cluster_ip_has_no_node_port_or_ranges():
    def edit(spec):
        spec["login"]["service"] = {"type": "ClusterIP", "sourceRanges": ["10.0.0.0/8"]}
    svc = find(render(make_model(edit)), "Service", "demo-login")["spec"]
    assert svc["type"] == "ClusterIP"
    assert "loadBalancerSourceRanges" not in svc and "nodePort" not in svc["ports"][0]


def test_jail_claim_and_populate_job(objects):
    pvc = find(objects, "PersistentVolumeClaim", "demo-jail")["spec"]
    assert pvc == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}},
                   "storageClassName": "nfs"}
    job = find(objects, "Job", "demo-populate-jail")
    assert job["spec"]["backoffLimit"] == 5
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert {"name": "jail", "persistentVolumeClaim": {"claimName": "demo-jail"}} in spec["volumes"]
    assert {"name": "jail", "mountPath": c.JAIL_MOUNT} in container(job)["volumeMounts"]
    assert container(job)["command"] == ["python3", c.POPULATE_JAIL_PROGRAM]
    args = container(job)["args"]
    assert args[0] == "populate" and args[args.index("--overwrite") + 1] == "if_empty"
    assert args[args.index("--jail") + 1] == c.JAIL_MOUNT
    assert args[args.index("--source") + 1] == c.POPULATE_JAIL_SOURCE
    assert "env" not in container(job)


def test_existing_claim_replaces_the_jail_pvc():
    def edit(spec):
        spec["jail"]["volume"] = {"existingClaim": "shared-jail"}
    objects = render(make_model(edit))
    assert names(objects, "PersistentVolumeClaim") == []
    mounting = 0
    for obj in pod_objects(objects):
        for volume in pod_spec(obj).get("volumes", []):
            if volume["name"] == "jail":
                assert volume["persistentVolumeClaim"]["claimName"] == "shared-jail"
                mounting += 1
    assert mounting == 4   # populate job, login, gpu, cpu


# --- accounting --------------------------------------------------------------------------------------------------

def test_accounting_in_cluster(objects):
    db = find(objects, "StatefulSet", "demo-accounting-db")
    (claim,) = db["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    env = dict((e["name"], e) for e in container(db)["env"])
    assert env["MARIADB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "demo-accounting-db", "key": "password"}
    assert env["MARIADB_ROOT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "demo-accounting-db",
                                                                         "key": "root-password"}
    # The user and database slurmdbd.conf names (test_with_real_slurm_configs), from the model, not read back.
    assert env["MARIADB_USER"]["value"] == c.ACCOUNTING_DB_USER
    assert env["MARIADB_DATABASE"]["value"] == c.ACCOUNTING_DB_NAME
    assert find(objects, "Service", "demo-accounting-db")["spec"]["ports"][0]["port"] == 3306
    dbd = find(objects, "StatefulSet", "demo-accounting")
    assert dbd["spec"]["serviceName"] == "demo-accounting"
    env = dict((e["name"], e) for e in container(dbd)["env"])
    expected = {"name": "demo-accounting-db", "key": "password"}
    assert env[rk.ENV_SLURMDBD_STORAGE_PASS]["valueFrom"]["secretKeyRef"] == expected
    assert env[rk.ENV_SLURMDBD_TEMPLATE]["value"] == rk.SLURMDBD_TEMPLATE_DIR + "/slurmdbd.conf"
    volumes = dict((v["name"], v) for v in pod_spec(dbd)["volumes"])
    assert volumes["slurmdbd-template"]["configMap"]["name"] == "demo-slurmdbd"
    assert find(objects, "ConfigMap", "demo-slurmdbd")["data"] == {"slurmdbd.conf": CONFIGS["slurmdbd.conf"]}
    assert "slurmdbd.conf" not in find(objects, "ConfigMap", "demo-slurm-configs")["data"]
    svc = find(objects, "Service", "demo-accounting")["spec"]
    assert svc["ports"][0]["port"] == 6819 and svc["clusterIP"] == "None"
    assert container(dbd)["readinessProbe"]["tcpSocket"]["port"] == "slurmdbd"


def test_accounting_external_database():
    def edit(spec):
        spec["accounting"] = {"enabled": True, "database": {"external": {
            "host": "db.example", "user": "slurm", "passwordSecret": {"name": "my-db", "key": "pw"}}}}
    model = make_model(edit)
    objects = render(model)
    assert "demo-accounting-db" not in names(objects, "StatefulSet") + names(objects, "Service") + names(
        objects, "Secret")
    env = dict((e["name"], e) for e in container(find(objects, "StatefulSet", "demo-accounting"))["env"])
    assert env[rk.ENV_SLURMDBD_STORAGE_PASS]["valueFrom"]["secretKeyRef"] == {"name": "my-db", "key": "pw"}


def test_accounting_off():
    def edit(spec):
        spec["accounting"] = {"enabled": False}
    model = make_model(edit)
    configs = dict(CONFIGS)
    del configs["slurmdbd.conf"]
    objects = render(model, configs)
    for obj in objects:
        assert obj["metadata"]["labels"][c.LABEL_COMPONENT] not in ("accounting", "accounting-db"), obj
        assert "accounting" not in obj["metadata"]["name"]


def test_accounting_on_needs_slurmdbd_conf():
    configs = dict(CONFIGS)
    del configs["slurmdbd.conf"]
    with pytest.raises(ValueError, match="slurmdbd.conf"):
        render(configs=configs)


# --- remediation -------------------------------------------------------------------------------------------------

def test_remediation(objects):
    cron = find(objects, "CronJob", "demo-remediation")["spec"]
    assert cron["schedule"] == "*/7 * * * *"
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["successfulJobsHistoryLimit"] == 2 and cron["failedJobsHistoryLimit"] == 4
    pod = cron["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "demo-remediation"
    assert pod["containers"][0]["command"] == ["ansible-playbook", "soperator.slurm.remediate",
                                               "-e", "cluster=demo", "-e", "slurm_namespace=hpc"]
    role = find(objects, "Role", "demo-remediation")
    assert role["rules"] == rk.remediation_rules()          # the demo has no exporter
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        # nothing cluster-scoped, no RBAC, no way to widen its own rights
        assert not set(rule["resources"]) & {"nodes", "namespaces", "customresourcedefinitions", "clusterroles",
                                             "clusterrolebindings", "roles", "rolebindings"}
        assert "rbac.authorization.k8s.io" not in rule["apiGroups"]
        assert not set(rule["verbs"]) & {"escalate", "bind", "impersonate", "watch", "deletecollection"}
    binding = find(objects, "RoleBinding", "demo-remediation")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "demo-remediation"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "demo-remediation", "namespace": "hpc"}]
    assert names(objects, "ClusterRole") == []


def test_remediation_cordon_adds_node_permissions():
    def edit(spec):
        spec["remediation"]["cordonKubernetesNode"] = True
    objects = render(make_model(edit))
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    binding = find(objects, "ClusterRoleBinding", role["metadata"]["name"])
    assert binding["subjects"][0]["namespace"] == "hpc"


def test_remediation_disabled():
    def edit(spec):
        spec["remediation"]["enabled"] = False
    objects = render(make_model(edit))
    assert [o for o in objects if o["metadata"]["labels"][c.LABEL_COMPONENT] == "remediation"] == []
    assert not [o for o in objects if o["kind"] in ("CronJob", "Role", "RoleBinding")]


# --- secrets -----------------------------------------------------------------------------------------------------

def test_secrets_hold_the_material(objects):
    material = fake_material(make_model())
    for name, values in material.items():
        secret = find(objects, "Secret", name)
        assert secret["type"] == "Opaque"
        assert dict((k, base64.b64decode(v)) for k, v in secret["data"].items()) == values
    assert find(objects, "Secret", "demo-munge")["metadata"]["labels"][c.LABEL_COMPONENT] == "munge"


def test_no_secret_value_outside_secrets(objects):
    material = fake_material(make_model())
    outside = json.dumps([o for o in objects if o["kind"] != "Secret"], sort_keys=True)
    inside = json.dumps([o for o in objects if o["kind"] == "Secret"], sort_keys=True)
    checked = 0
    for values in material.values():
        for value in values.values():
            for form in (value.decode("latin-1"), base64.b64encode(value).decode("ascii")):
                assert form not in outside
            assert base64.b64encode(value).decode("ascii") in inside
            checked += 1
    assert checked == 9


def test_no_generated_secret_value_outside_secrets():
    model = make_model()
    material, dummy = s.ensure_secret_material(model, {})
    objects = rk.render_manifests(model, CONFIGS, material)
    outside = json.dumps([o for o in objects if o["kind"] != "Secret"], sort_keys=True)
    for values in material.values():
        for value in values.values():
            assert base64.b64encode(value).decode("ascii") not in outside
            assert value.decode("latin-1")[:40] not in outside


def test_missing_material_is_an_error():
    model = make_model()
    material = fake_material(model)
    del material["demo-munge"]
    with pytest.raises(ValueError, match="demo-munge"):
        rk.render_manifests(model, CONFIGS, material)
    material = fake_material(model)
    del material["demo-ssh-host-keys"]["ssh_host_rsa_key"]
    with pytest.raises(ValueError, match="ssh_host_rsa_key"):
        rk.render_manifests(model, CONFIGS, material)
    material = fake_material(model)
    material["other-munge"] = {"munge.key": b"x"}
    with pytest.raises(ValueError, match="other-munge"):
        rk.render_manifests(model, CONFIGS, material)


def test_kept_db_secret_is_rendered_while_accounting_is_off():
    def edit(spec):
        spec["accounting"] = {"enabled": False}
    model = make_model(edit)
    material = fake_material(make_model())
    objects = rk.render_manifests(model, CONFIGS, material)
    assert "demo-accounting-db" in names(objects, "Secret")
    assert "demo-accounting-db" not in names(objects, "StatefulSet")


# --- order, determinism, errors ----------------------------------------------------------------------------------

def test_apply_order(objects):
    kinds = [o["kind"] for o in objects]
    ranks = [KIND_ORDER.index(k) for k in kinds]
    assert ranks == sorted(ranks)
    with_cordon = render(make_model(lambda spec: spec["remediation"].update(cordonKubernetesNode=True)))
    assert [o["kind"] for o in with_cordon][6:10] == ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]

    def index(kind, name):
        return [(o["kind"], o["metadata"]["name"]) for o in objects].index((kind, name))
    first_sts = min(i for i, k in enumerate(kinds) if k == "StatefulSet")
    before_workloads = ("Secret", "ConfigMap", "ServiceAccount", "PersistentVolumeClaim", "Service")
    assert max(i for i, k in enumerate(kinds) if k in before_workloads) < first_sts
    job = index("Job", "demo-populate-jail")
    for name in ("demo-login", "gpu", "cpu"):
        assert job < index("StatefulSet", name)
    assert index("StatefulSet", "demo-accounting-db") < index("StatefulSet", "demo-accounting")
    assert max(i for i, k in enumerate(kinds) if k == "StatefulSet") < min(
        i for i, k in enumerate(kinds) if k == "PodDisruptionBudget")
    assert kinds[-1] == "CronJob"


def test_deterministic():
    first = json.dumps(render(), sort_keys=False)
    second = json.dumps(render(make_model()), sort_keys=False)
    assert first == second
    shuffled = dict(reversed(list(CONFIGS.items())))
    assert json.dumps(render(configs=shuffled)) == first


def test_inputs_are_not_mutated():
    model = make_model()
    configs, material = dict(CONFIGS), fake_material(model)
    before = (copy.deepcopy(configs), copy.deepcopy(material), copy.deepcopy(model.node_sets[0].scheduling.affinity))
    objects = rk.render_manifests(model, configs, material)
    find(objects, "StatefulSet", "gpu")["spec"]["template"]["spec"]["affinity"]["x"] = 1
    assert (configs, material, model.node_sets[0].scheduling.affinity) == before


def test_missing_slurm_conf_is_an_error():
    configs = dict(CONFIGS)
    del configs["slurm.conf"]
    with pytest.raises(ValueError, match="slurm.conf"):
        render(configs=configs)


def test_nodeset_name_clash_is_an_error():
    documents = docs()
    documents[2]["metadata"]["name"] = "demo-login"
    documents[0]["spec"]["partitions"] = [{"name": "main", "nodeSets": ["gpu", "demo-login"]}]
    # The spec refuses it before anything is rendered (SpecError is a ValueError).
    with pytest.raises(ValueError, match="demo-login"):
        build_model(documents)


def test_with_real_slurm_configs():
    model = make_model()
    configs = render_slurm_configs(model)
    objects = rk.render_manifests(model, configs, fake_material(model))
    data = find(objects, "ConfigMap", "demo-slurm-configs")["data"]
    assert data["slurm.conf"] == configs["slurm.conf"]
    assert set(data) == set(configs) - {"slurmdbd.conf"}
    assert find(objects, "ConfigMap", "demo-slurmdbd")["data"]["slurmdbd.conf"] == configs["slurmdbd.conf"]
    assert "SlurmctldHost=demo-controller-0(" in configs["slurm.conf"]
    db = dict((e["name"], e.get("value")) for e in container(find(objects, "StatefulSet", "demo-accounting-db"))[
        "env"])
    assert "StorageUser=%s" % db["MARIADB_USER"] in configs["slurmdbd.conf"]
    assert "StorageLoc=%s" % db["MARIADB_DATABASE"] in configs["slurmdbd.conf"]
    assert "StorageHost=demo-accounting-db" in configs["slurmdbd.conf"]


# --- active health checks ----------------------------------------------------------------------------------------

def test_one_cron_job_per_active_check():
    assert not [o for o in render() if o["metadata"]["name"].startswith("demo-check-")]    # none in the spec

    def edit(spec):
        spec["healthChecks"] = {"active": [
            {"name": "nccl", "type": "ncclAllReduce", "schedule": "0 */6 * * *", "minBusBandwidthGBs": 400},
            {"name": "disk", "type": "storage", "schedule": "@daily", "timeoutSeconds": 120}]}
    objects = render(make_model(edit))
    assert names(objects, "CronJob") == ["demo-remediation", "demo-check-nccl", "demo-check-disk"]
    sa = find(objects, "ServiceAccount", "demo-checks")
    assert sa["automountServiceAccountToken"] is False and sa["metadata"]["labels"][c.LABEL_COMPONENT] == "checks"
    cron = find(objects, "CronJob", "demo-check-disk")
    assert cron["metadata"]["labels"][c.LABEL_COMPONENT] == "checks"
    assert cron["spec"]["schedule"] == "@daily" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["successfulJobsHistoryLimit"] == cron["spec"]["failedJobsHistoryLimit"] == 3
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] == rk.CHECK_PENDING_SECONDS + 120 + 300
    spec = pod_spec(cron)
    assert spec["serviceAccountName"] == "demo-checks" and spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    ctr = container(cron)
    model = make_model(edit)
    assert ctr["image"] == model.images.login
    # args, not command: the image's entrypoint starts munged first
    assert "command" not in ctr and ctr["args"][:3] == [c.ACTIVE_CHECK_PROGRAM, "--check", "disk"]
    mounts = dict((m["name"], m["mountPath"]) for m in ctr["volumeMounts"])
    assert mounts == {"slurm-configs": c.SLURM_CONF_DIR, "munge-key": c.MUNGE_KEY_DIR, "jail": c.JAIL_MOUNT}
