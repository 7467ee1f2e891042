"""jail_populate with target=kubernetes against the real API server, through `ansible localhost -m`: the real Job
controller runs the populate Job, the real server keeps .status.jail under jail_populate's own field manager, and
its audit log tells which writes each run sent.

What the populate Job's pod prints (jail.py's sentinel line, or why it failed) is read through the pods/log API,
which the API server serves from the node's kubelet. The session's kwok nodes have none, so these tests bring a node
of their own: a second kwok that manages just that node and serves the kubelet API (HTTPS, a certificate of the
cluster's CA) with the pod log this test writes in the container runtime's log format - the file a kubelet reads.
The jail's PersistentVolume is pinned to that node (node affinity, as a local volume is), so the scheduler places
the Job's pod there, and the login and worker pods that mount the jail too. A failed pod is kwok's stage as well:
this node's pod-complete stage ends Job pods with phase Failed, exit code 1, as a kubelet reports a container that
exited 1. What is not run here: the populate program itself (node/jail.py), which tests/slurm runs on local jails
and the populate image runs in tests/realnode's site.yml (there slurm_cluster waits for the Job; no test runs
jail_populate against a real kubelet).

The cluster is applied in-process first without its populate Job, so the module is the one that creates it.
"""
import datetime
import json
import os
import signal
import socket
import subprocess

import pytest
import yaml

from ci_skips import environmental
from slurm_kube import BOUND, until
from slurm_specs import admin_user, module

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api

JOB, SPOOL = "small-populate-jail", "spool-small-controller-0"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def sentinel_line(action="populated", source="example/populate-jail:1"):
    return json.dumps({"action": action, "changed": action != "unchanged", "sentinel": {
        "format": 1, "source": source, "source_type": "tar", "digest": "sha256:" + "ab" * 32, "overwrite": "never",
        "populated_at": "2025-01-31T10:00:00Z", "populated_by": "root@populate-pod",
        "program": "soperator.slurm jail.py"}})


def _cert(pki, directory):
    """A serving certificate for 127.0.0.1 signed by the cluster's CA: what the kubelet serves its API with."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    import ipaddress
    with open(os.path.join(pki, "ca.crt"), "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(os.path.join(pki, "ca.key"), "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kwok-logs")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .sign(ca_key, hashes.SHA256()))
    paths = os.path.join(directory, "kubelet.crt"), os.path.join(directory, "kubelet.key")
    with open(paths[0], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return paths


def _failing(stages_text):
    """kwok's stages with pod-complete ending a pod as a kubelet reports a container that exited 1."""
    docs = [d for d in yaml.safe_load_all(stages_text) if d]
    complete = [d for d in docs if d["kind"] == "Stage" and d["metadata"]["name"] == "pod-complete"]
    assert len(complete) == 1, [d["metadata"]["name"] for d in docs]
    template = complete[0]["spec"]["next"]["statusTemplate"]
    for old, new in (("phase: Succeeded", "phase: Failed"), ("exitCode: 0", "exitCode: 1"),
                     ("reason: Completed", "reason: Error")):
        assert template.count(old) == 1, (old, template)
        template = template.replace(old, new)
    complete[0]["spec"]["next"]["statusTemplate"] = template
    return yaml.safe_dump_all(docs)


class LogNode:
    """A Node played by a kwok of this test's own, serving the kubelet API: pods/log returns `log` (write())."""

    def __init__(self, real_cluster, namespace, directory):
        records_path = os.path.join(real_cluster.state, "processes.json")
        with open(records_path) as f:
            session_kwok = json.load(f)["kwok"]["argv"]
        self.binary = session_kwok[0]
        flags = dict(a[2:].split("=", 1) for a in session_kwok[1:] if a.startswith("--") and "=" in a)
        with open(flags["config"]) as f:
            self.stages = f.read()
        self.kwok_kubeconfig = flags["kubeconfig"]
        self.real_cluster, self.namespace, self.directory = real_cluster, namespace, directory
        self.name = "%s-logs" % namespace
        self.log_file = os.path.join(directory, "pod.log")
        self.write("")
        self.cert, self.key = _cert(os.path.join(real_cluster.state, "pki"), directory)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = None

    def write(self, text):
        """The pod's log as the kubelet reads it from the container runtime: CRI lines (time, stream, tag F)."""
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with open(self.log_file, "w") as f:
            f.write("".join("%s stdout F %s\n" % (now, line) for line in text.splitlines()))

    def start(self, fail_jobs=False):
        config = os.path.join(self.directory, "kwok-%s.yaml" % ("fail" if fail_jobs else "complete"))
        logs = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": self.name},
                "spec": {"selector": {"matchNamespaces": [self.namespace]},
                         "logs": [{"containers": [], "logsFile": self.log_file}]}}
        with open(config, "w") as f:
            f.write((_failing(self.stages) if fail_jobs else self.stages) + "\n---\n" + yaml.safe_dump(logs))
        log = open(os.path.join(self.directory, "kwok.log"), "ab")
        self.proc = subprocess.Popen([
            self.binary, "--config=" + config, "--kubeconfig=" + self.kwok_kubeconfig,
            "--manage-single-node=" + self.name, "--node-ip=127.0.0.1", "--node-port=%d" % self.port,
            "--server-address=127.0.0.1:%d" % self.port, "--tls-cert-file=" + self.cert,
            "--tls-private-key-file=" + self.key, "--cidr=10.245.0.0/16", "--node-lease-duration-seconds=40"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

        def ready():
            assert self.proc.poll() is None, "kwok exited: see %s" % os.path.join(self.directory, "kwok.log")
            # its own Lease (stop() deleted the one before): the node is this instance's, it plays its pods
            if self.real_cluster.kubectl("get", "lease", self.name, "-n", "kube-node-lease", "-o", "name",
                                         check=False).returncode != 0:
                return False
            node = json.loads(self.real_cluster.kubectl("get", "node", self.name, "-o", "json").stdout)
            port = (((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {})
            return port.get("Port") == self.port and any(
                c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
        until("node %s Ready with its kubelet port" % self.name, ready, timeout=60)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        # A kwok started next waits for the Lease of this one to expire before it manages the node, and misses the
        # pods made meanwhile: the Lease goes with its holder.
        self.real_cluster.kubectl("delete", "lease", self.name, "-n", "kube-node-lease", "--ignore-not-found")

    def create(self):
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "110"}
        self.real_cluster.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "annotations": {KWOK_NODE_ANNOTATION: "soperator-it-logs"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux"}},
            "status": {"capacity": capacity, "allocatable": capacity}}))

    def delete(self):
        self.real_cluster.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def log_node(real_cluster, namespaced, tmp_path):
    if not real_cluster.state:
        pytest.skip(environmental("a node that serves pod logs is a kwok of ours: the cluster of KUBECONFIG was not "
                                  "started by tools/k8s/cluster.py"))
    node = LogNode(real_cluster, namespaced.name, str(tmp_path))
    node.create()
    try:
        node.start()
        yield node
        # The namespace first, while this node's kwok still deletes its pods (else they stay Terminating); they run
        # nothing: no need to wait their grace period out (kwok deletes a pod when it ends).
        namespaced.teardown()
        real_cluster.kubectl("delete", "pods", "--all", "-n", namespaced.name, "--force", "--grace-period=0",
                             "--wait=false", check=False)

        def no_pods():
            out = real_cluster.kubectl("get", "pods", "-A", "--field-selector=spec.nodeName=" + node.name,
                                       "-o", "name").stdout
            return not out.strip()
        until("the pods on %s to go" % node.name, no_pods, timeout=120)
    finally:
        node.stop()
        node.delete()


@pytest.fixture
def cluster(namespaced, log_node, kubeconfig, real_cluster, volumes):
    """The small example (populate Job: no retry) in the test's namespace, applied without its populate Job; the
    jail's volume on the log node. -> (namespace, documents)."""
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
    ns = namespaced.name
    docs = namespaced.applied(namespaced.docs())
    docs[0]["spec"]["jail"]["populate"] = {"backoffLimit": 0}
    volumes(ns, [SPOOL])
    jail_pv = "%s-jail" % ns
    real_cluster.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": jail_pv},
        "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/nonexistent/" + jail_pv},
                 "claimRef": {"namespace": ns, "name": "small-jail"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [log_node.name]}]}]}}}}))
    try:
        client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm")
        kube = KubeCluster(client, build_model(docs), KubeOptions(wait=True, wait_timeout=BOUND, poll=0.5))
        kube.present(desired_filter=lambda o: o["kind"] != "Job")
        yield ns, docs
    finally:
        real_cluster.kubectl("delete", "pv", jail_pv, "--ignore-not-found", "--wait=false")


def populate(namespace, kubeconfig, check=False, diff=False, expect_failed=False, **kw):
    args = dict(target="kubernetes", name="small", namespace=namespace, kubeconfig=kubeconfig, wait_timeout=BOUND)
    args.update(kw)
    args = dict((k, v) for k, v in args.items() if v is not None)
    return module("jail_populate", check=check, diff=diff, expect_failed=expect_failed, **args)


class Ours:
    """The requests our runs sent after a mark, by the audit log (the admin's user; not the controllers' or kwok's)."""

    def __init__(self, audit, kubeconfig):
        self.audit, self.user = audit, admin_user(kubeconfig)

    def mark(self):
        return self.audit.mark()

    def writes(self, mark, dry_run=False):
        return [r for r in self.audit.requests(mark, user=self.user) if r.write and r.dry_run == dry_run]

    def job_writes(self, mark):
        return [r for r in self.writes(mark) if r.resource == "jobs"]


@pytest.fixture
def ours(audit, kubeconfig):
    return Ours(audit, kubeconfig)


def jail_record(api, namespace):
    return (api.slurm_cluster("small", namespace).get("status") or {}).get("jail")


def job_uid(api, namespace):
    job = api.job(JOB, namespace)
    return job.metadata.uid if job else None


def overwrite_arg(api, namespace):
    args = api.job(JOB, namespace).spec.template.spec.containers[0].args
    return args[args.index("--overwrite") + 1]


def test_the_job_is_created_once_waited_for_and_not_created_again(cluster, log_node, api, ours, kubeconfig):
    ns, docs = cluster
    assert api.job(JOB, ns) is None
    log_node.write("unpacking\n" + sentinel_line())
    first = populate(ns, kubeconfig, diff=True)
    assert first["changed"] and first["outcome"] == "populated", first
    assert first["objects"] == [{"kind": "Job", "name": JOB, "namespace": ns, "action": "created"}]
    assert first["waited"][0]["for"] == "the jail to be populated"
    # the sentinel is the one the pod printed (read through pods/log)
    assert first["sentinel"]["digest"] == "sha256:" + "ab" * 32 and first["sentinel"]["job"] == JOB
    assert first["diff"]["before"]["sentinel"] is None and first["diff"]["after"]["sentinel"] == first["sentinel"]
    job = api.job(JOB, ns)
    assert job.status.succeeded == 1
    assert overwrite_arg(api, ns) == "never"
    record = jail_record(api, ns)
    assert record["populatedAt"] == "2025-01-31T10:00:00Z" and record["source"] == "example/populate-jail:1"
    assert first["status_updated"]

    mark = ours.mark()
    second = populate(ns, kubeconfig)
    assert not second["changed"] and second["outcome"] == "unchanged" and second["objects"] == []
    assert ours.writes(mark) + ours.writes(mark, dry_run=True) == [] and not second["status_updated"]
    # Without the Job (deleted, or cleaned up by a TTL) the recorded sentinel still says the jail is populated.
    api.batch.delete_namespaced_job(JOB, ns, propagation_policy="Background")
    until("the Job to go", lambda: api.job(JOB, ns) is None)
    mark = ours.mark()
    third = populate(ns, kubeconfig, overwrite="if_empty")
    assert third["outcome"] == "unchanged" and api.job(JOB, ns) is None
    assert ours.job_writes(mark) == []

    # slurm_cluster's own status write (it runs the missing Job again) keeps the record: it is jail_populate's field.
    module("slurm_cluster", state="present", target="kubernetes", definition=docs, kubeconfig=kubeconfig, wait=True,
           wait_timeout=BOUND)
    assert jail_record(api, ns) == record
    live = api.slurm_cluster("small", ns)
    managers = dict((m["manager"], m.get("subresource")) for m in live["metadata"]["managedFields"]
                    if "f:jail" in (m.get("fieldsV1") or {}).get("f:status", {}))
    assert managers == {"soperator.slurm-jail": "status"}, live["metadata"]["managedFields"]


def test_a_job_slurm_cluster_ran_is_recorded_without_a_new_one(cluster, log_node, api, ours, kubeconfig):
    ns, docs = cluster
    log_node.write(sentinel_line())
    module("slurm_cluster", state="present", target="kubernetes", definition=docs, kubeconfig=kubeconfig, wait=True,
           wait_timeout=BOUND)
    uid = job_uid(api, ns)
    assert uid and api.job(JOB, ns).status.succeeded == 1
    mark = ours.mark()
    result = populate(ns, kubeconfig)
    assert result["outcome"] == "unchanged" and not result["changed"] and result["status_updated"]
    assert ours.job_writes(mark) == [] and job_uid(api, ns) == uid
    assert jail_record(api, ns)["digest"] == "sha256:" + "ab" * 32


def test_check_mode_writes_nothing(cluster, api, ours, kubeconfig):
    ns, dummy = cluster
    mark = ours.mark()
    planned = populate(ns, kubeconfig, check=True)
    assert planned["changed"] and planned["outcome"] == "populated"
    writes = ours.writes(mark) + ours.writes(mark, dry_run=True)
    assert [(r.verb, r.resource, r.dry_run) for r in writes] == [("create", "jobs", True)], writes
    assert api.job(JOB, ns) is None
    assert jail_record(api, ns) is None


def test_always_is_refused_while_login_or_worker_pods_run_unless_forced(cluster, log_node, api, ours, kubeconfig):
    ns, dummy = cluster
    log_node.write(sentinel_line())
    populate(ns, kubeconfig)
    uid = job_uid(api, ns)
    # the login and worker pods the StatefulSets made run (kwok), with the jail mounted
    running = sorted(name for name, pod in api.pods(ns).items() if pod.status.phase == "Running")
    assert running == ["cpu-0", "cpu-1", "small-controller-0", "small-login-0"], running

    mark = ours.mark()
    refused = populate(ns, kubeconfig, overwrite="always", expect_failed=True)
    assert refused["outcome"] == "refused" and "force" in refused["msg"], refused
    assert "small-login-0" in refused["msg"] and "cpu-0" in refused["msg"] and "cpu-1" in refused["msg"]
    assert "small-controller-0" not in refused["msg"]
    assert job_uid(api, ns) == uid and ours.job_writes(mark) == []
    planned = populate(ns, kubeconfig, overwrite="always", force=True, check=True)
    assert planned["outcome"] == "replaced"
    assert ours.writes(mark) == []

    log_node.write(sentinel_line("replaced", "example/populate-jail:2"))
    replaced = populate(ns, kubeconfig, overwrite="always", force=True)
    assert replaced["changed"] and replaced["outcome"] == "replaced"
    assert [o["action"] for o in replaced["objects"]] == ["deleted", "created"]
    assert job_uid(api, ns) not in (None, uid)
    assert overwrite_arg(api, ns) == "always"
    assert jail_record(api, ns)["source"] == "example/populate-jail:2"


def test_a_failed_job_returns_its_log_tail_and_a_rerun_runs_it_again(cluster, log_node, api, kubeconfig):
    ns, dummy = cluster
    log_node.stop()
    log_node.start(fail_jobs=True)
    log_node.write("jail populate failed: the jail /mnt/jail is not empty (home) and has no .soperator-jail.json")
    failed = populate(ns, kubeconfig, expect_failed=True)
    assert "Job %s/%s failed" % (ns, JOB) in failed["msg"], failed["msg"]
    assert "last lines of pod %s-" % JOB in failed["msg"] and "is not empty (home)" in failed["msg"], failed["msg"]
    assert jail_record(api, ns) is None
    uid = job_uid(api, ns)
    pods = api.pods(ns, "job-name=%s" % JOB)
    assert [p.status.phase for p in pods.values()] == ["Failed"], pods

    log_node.stop()
    log_node.start()
    log_node.write(sentinel_line())
    again = populate(ns, kubeconfig)
    assert again["outcome"] == "populated" and [o["action"] for o in again["objects"]] == ["deleted", "created"]
    assert job_uid(api, ns) not in (None, uid)
    assert jail_record(api, ns)["digest"] == "sha256:" + "ab" * 32


def test_a_cluster_that_was_never_applied_is_a_clear_error(namespaced, kubeconfig, tmp_path):
    spec = tmp_path / "small.yml"
    spec.write_text(yaml.safe_dump_all(namespaced.docs()))
    result = populate(namespaced.name, kubeconfig, expect_failed=True, name=None, src=str(spec))
    assert "does not exist: apply the cluster first" in result["msg"], result["msg"]
