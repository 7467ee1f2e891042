"""The kubernetes transport end to end: Slurm commands and the health-check program exec'd into emulated pods
(tests/kube/emulator, pods/exec), whose exec handler runs them against a real local Slurm cluster (SLURM_CONF of
tests/slurm's local_cluster). Nothing is faked on the client side: the real kubernetes.stream client, the
collection's SlurmRunner/KubernetesTransport built from module parameters, and the modules through `ansible`."""
import importlib.util
import os

import yaml

from ansible_collections.soperator.slurm.plugins.module_utils import args as module_args
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import KubeChecker
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import read_nodes
from kube_module import SMALL, module, spec_docs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("slurm_fixtures", os.path.join(ROOT, "tests", "slurm", "conftest.py"))
_slurm_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_slurm_fixtures)
local_cluster = _slurm_fixtures.local_cluster   # the real-daemons fixture, shared with tests/slurm
NS = "slurm"
PROGRAM = "/opt/soperator/bin/health-check"   # constants.HEALTH_CHECK_PROGRAM, as the worker image installs it


def _pod(name, container):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"nodeName": "n1", "containers": [{"name": container, "image": "soperator:test"}]}}


def _setup(emulator, local_cluster, fault):
    docs = spec_docs(SMALL)
    # one health check the test controls: it fails while the fault file exists; slurmd never runs it on its own
    docs[0]["spec"]["healthChecks"] = {"passive": {
        "interval": 0, "gpu": False, "memory": False, "munge": False, "minFreeDiskPercent": 0,
        "custom": [{"name": "fault", "command": "test ! -e %s" % fault}]}}
    cluster = local_cluster(yaml.safe_dump_all(docs))
    emulator.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name, container in (("small-controller-0", "slurmctld"), ("cpu-0", "slurmd")):
        emulator.put_object(_pod(name, container))
        emulator.set_status("v1", "Pod", name, NS, {"phase": "Running"}, manager="kubelet")
    # the pods' environment points the Slurm commands at the real cluster; the image's program path at the local
    # backend's copy of the health-check program
    handler = emulator.exec_locally(env=dict(os.environ, **cluster.env()),
                                    programs={PROGRAM: cluster.layout.health_check})
    return cluster, handler


def _params(kubeconfig, **extra):
    return dict(dict(transport="kubernetes", namespace=NS, cluster_name="small", kubeconfig=str(kubeconfig),
                     retries=1, retry_delay=0.5, command_timeout=30), **extra)


def _node(cluster, name):
    return dict((n["name"], n) for n in cluster.sinfo_nodes())[name]


def test_runner_reads_and_updates_slurm_through_the_controller_pod(emulator, kubeconfig, local_cluster, tmp_path):
    cluster, handler = _setup(emulator, local_cluster, tmp_path / "fault")
    runner = module_args.runner_from_params(_params(kubeconfig))
    assert runner.describe()["pod"] == "small-controller-0"
    nodes = read_nodes(runner)
    assert sorted(nodes) == sorted(n["name"] for n in cluster.sinfo_nodes())
    runner.run(["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=exec test: a b 'c'"])
    assert _node(cluster, "cpu-0")["reason"] == "exec test: a b 'c'"
    # a Slurm error comes back as the command's exit code and stderr, not as a transport failure
    result, unused = runner.run(["scontrol", "show", "node", "no-such-node"], check=False)
    assert result.rc == 1 and "no-such-node" in result.stdout + result.stderr, (result.stdout, result.stderr)
    runner.run(["scontrol", "update", "NodeName=cpu-0", "State=RESUME"])
    assert "DRAIN" not in _node(cluster, "cpu-0")["state_flags"]
    # every command ran in the controller pod's slurmctld container, one argument per argv item
    assert set((ns, pod, c) for ns, pod, c, unused in handler.calls) == {(NS, "small-controller-0", "slurmctld")}
    assert ["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=exec test: a b 'c'"] in \
        [argv for unused, unused2, unused3, argv in handler.calls]


def test_slurm_drain_module_over_the_kubernetes_transport(emulator, kubeconfig, local_cluster, tmp_path):
    cluster, handler = _setup(emulator, local_cluster, tmp_path / "fault")
    params = _params(kubeconfig, nodes="cpu-0")
    drained = module("slurm_drain", state="drained", reason="maintenance", **params)
    assert drained["changed"] and drained["transport"]["pod"] == "small-controller-0"
    node = _node(cluster, "cpu-0")
    assert "DRAIN" in node["state_flags"] and node["reason"].endswith("maintenance")
    assert not module("slurm_drain", state="drained", reason="maintenance", **params)["changed"]
    resumed = module("slurm_drain", state="resumed", **params)
    assert resumed["changed"]
    assert "DRAIN" not in _node(cluster, "cpu-0")["state_flags"]
    assert {pod for unused, pod, unused2, unused3 in handler.calls} == {"small-controller-0"}
    execs = [r for r in emulator.requests if r.subresource == "exec"]
    assert execs and all(r.status == 101 for r in execs)


def test_kube_checker_runs_the_health_check_in_the_worker_pod(emulator, kubeconfig, local_cluster, tmp_path):
    fault = tmp_path / "fault"
    cluster, handler = _setup(emulator, local_cluster, fault)
    checker = KubeChecker(NS, module_args._core_v1_factory(_params(kubeconfig)), timeout=30)
    healthy, report = checker.check("cpu-0")
    assert healthy is True, report
    assert report["node"] == "cpu-0" and "fault" in report["passed"]
    fault.write_text("bad\n")
    healthy, report = checker.check("cpu-0")
    assert healthy is False and [f["check"] for f in report["failed"]] == ["fault"]
    # --check-only changes nothing in Slurm
    assert "DRAIN" not in _node(cluster, "cpu-0")["state_flags"]
    assert handler.calls[-1] == (NS, "cpu-0", "slurmd", [PROGRAM, "--check-only", "--node", "cpu-0"])
    # a worker pod that is gone: the check could not run, never a verdict
    emulator.delete_object("v1", "Pod", "cpu-0", NS)
    healthy, detail = checker.check("cpu-0")
    assert healthy is None and "404" in detail["error"], detail
