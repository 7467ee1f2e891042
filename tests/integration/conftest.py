"""The real-cluster suite: against the cluster of KUBECONFIG when it is set, else against a control plane of its own.

- KUBECONFIG set: that cluster (any real one). The audit-log tests run only when SOPERATOR_K8S_AUDIT_LOG names its
  audit log, or when an audit.log lies beside the kubeconfig (what `make k8s-up` writes: build/k8s/).
- KUBECONFIG not set, and `make k8s-build` has put the binaries in the cache: one control plane for the session
  (tools/k8s/cluster.py: etcd, kube-apiserver, controller-manager, scheduler, kwok nodes) in a temporary directory,
  stopped at the end of the session (by pid), whatever happened.
- Neither: every test here is skipped, loudly (an environmental skip, which CI accepts).
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from ci_skips import environmental

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
# By file: tools/k8s is no package, and a module named `cluster` would shadow others.
_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster",
                                               os.path.join(ROOT, "tools", "k8s", "cluster.py"))
k8s_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s_cluster)

_BIN = None if os.environ.get("KUBECONFIG") else k8s_cluster.cached_bin()
REASON = environmental(
    "KUBECONFIG is not set and no control plane is built (`make k8s-build`): the real-cluster integration suite "
    "(tests/integration) is SKIPPED")


class Cluster:
    """The cluster under test: its kubeconfig and, when known, its audit log (one JSON event per request)."""

    def __init__(self, kubeconfig, audit_log=None, state=None):
        self.kubeconfig, self.audit_log, self.state = kubeconfig, audit_log, state  # state: ours (cluster.py)

    def kubectl(self, *args, input=None, check=True):
        """The kubectl we built (else the one on PATH) against this cluster; the finished process."""
        bin_dir = _BIN or k8s_cluster.cached_bin()
        path = os.path.join(bin_dir, "kubectl") if bin_dir else shutil.which("kubectl")
        if not path:
            pytest.skip(environmental("no kubectl: neither built (`make k8s-build`) nor on PATH"))
        proc = subprocess.run([path, "--kubeconfig", self.kubeconfig] + list(args), input=input,
                              capture_output=True, text=True, timeout=120, check=False)
        if check:
            assert proc.returncode == 0, "kubectl %s: rc %d\n%s%s" % (
                " ".join(args), proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        return proc


def pytest_report_header(config):
    if os.environ.get("KUBECONFIG"):
        return "integration: against the cluster of KUBECONFIG=%s" % os.environ["KUBECONFIG"]
    if _BIN:
        return "integration: against a control plane started from %s" % _BIN
    return "integration: " + REASON


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KUBECONFIG") or _BIN:
        return
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=REASON))


def pytest_terminal_summary(terminalreporter):
    if not (os.environ.get("KUBECONFIG") or _BIN):
        terminalreporter.write_line("SKIPPED the real-cluster integration suite: " + REASON, yellow=True, bold=True)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory):
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        kubeconfig = os.path.abspath(kubeconfig)  # the modules run in the checkout, not in our directory
        audit = os.environ.get("SOPERATOR_K8S_AUDIT_LOG") or os.path.join(os.path.dirname(kubeconfig), "audit.log")
        state = os.path.dirname(kubeconfig)  # `make k8s-up`'s, when cluster.py's records are there
        yield Cluster(kubeconfig, audit if os.path.isfile(audit) else None,
                      state if os.path.isfile(os.path.join(state, "processes.json")) else None)
        return
    state = str(tmp_path_factory.mktemp("k8s"))
    try:
        info = k8s_cluster.up(state, _BIN, nodes=3, timeout=180)
        yield Cluster(info["kubeconfig"], info["audit_log"], state=state)
    finally:
        k8s_cluster.down(state)


@pytest.fixture(scope="session")
def kubeconfig(real_cluster):
    return real_cluster.kubeconfig


@pytest.fixture
def volumes(real_cluster):
    """provide(namespace, claims, storage_class=None, capacity="1Ti"): a PersistentVolume bound ahead (claimRef) to
    each named claim, as a provisioner would make it (none runs here; the controller-manager completes the binding).
    Pre-bound, so no claim of another test takes it; of the claims' storage class (the binder matches it) and at
    least their size. A hostPath never mounted: kwok runs no pod. Deleted after the test."""
    from kubernetes import client, config
    api = config.new_client_from_config(config_file=real_cluster.kubeconfig)
    core = client.CoreV1Api(api)
    made = []

    def provide(namespace, claims, storage_class=None, capacity="1Ti"):
        for claim in claims:
            name = "soperator-it-%s" % uuid.uuid4().hex[:8]
            spec = {"capacity": {"storage": capacity}, "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/nonexistent/" + name},
                    "claimRef": {"namespace": namespace, "name": claim}}
            if storage_class:
                spec["storageClassName"] = storage_class
            core.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume",
                                           "metadata": {"name": name}, "spec": spec})
            made.append(name)
    try:
        yield provide
    finally:
        for name in made:
            try:
                core.delete_persistent_volume(name)
            except client.exceptions.ApiException as e:
                if e.status != 404:
                    raise
        api.close()


@pytest.fixture
def audit(real_cluster):
    """An AuditLog of this cluster (skips, environmentally, on a cluster whose audit log we cannot read)."""
    if not real_cluster.audit_log:
        pytest.skip(environmental("the audit log of the cluster of KUBECONFIG is unknown (SOPERATOR_K8S_AUDIT_LOG)"))
    from k8s_audit import AuditLog
    return AuditLog(real_cluster.audit_log)


@pytest.fixture
def namespaced_spec(kubeconfig):
    """make(path=examples/small-cpu.yml): the spec's documents moved to a namespace of their own, soperator-it-<hex>.
    At the end, for each: slurm_cluster state=absent with purge_volumes (our objects, cluster-scoped RBAC included)
    as the documents then are, and the namespace deleted."""
    from slurm_specs import SMALL, module, new_namespace, spec_docs
    made = []

    def make(path=SMALL):
        docs = spec_docs(path, new_namespace())
        made.append(docs)
        return docs
    try:
        yield make
    finally:
        from kubernetes import client, config
        for docs in made:
            module("slurm_cluster", expect_failed=None, state="absent", target="kubernetes", definition=docs,
                   kubeconfig=kubeconfig, purge_volumes=True)
            with config.new_client_from_config(config_file=kubeconfig) as api:
                try:
                    client.CoreV1Api(api).delete_namespace(docs[0]["metadata"]["namespace"])
                except client.exceptions.ApiException as e:
                    if e.status != 404:
                        raise


@pytest.fixture
def faults(real_cluster, tmp_path):
    """A FaultProxy (fault_proxy.py) in front of the cluster under test: clients given faults.kubeconfig reach the
    real API server through it, and meet the faults the test sets (fail_next, delay_next); faults.requests is what
    it saw. Stopped at the end (connections closed); a fault no request took fails the test."""
    from fault_proxy import FaultProxy
    proxy = FaultProxy(real_cluster.kubeconfig).start()
    proxy.write_kubeconfig(str(tmp_path / "fault-proxy-kubeconfig"))
    try:
        yield proxy
    finally:
        proxy.stop()
    assert not proxy.unconsumed(), "faults set up but taken by no request: %s" % proxy.unconsumed()
