"""Safe scale-down: slurm_nodeset against the API emulator (the Kubernetes side) and a real local Slurm cluster (the
drained nodes are real slurmd nodes). A busy node is not removed - and its StatefulSet not shrunk - before its job
ends or the drain timeout."""
import copy
import importlib.util
import os
import subprocess
import json
import time

import yaml

from kube_module import SMALL, module, spec_docs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("slurm_fixtures", os.path.join(ROOT, "tests", "slurm", "conftest.py"))
_slurm_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_slurm_fixtures)
local_cluster = _slurm_fixtures.local_cluster   # the real-daemons fixture, shared with tests/slurm
BOUND = 120   # seconds: the longest any wait below may take before the test fails


def _docs(replicas):
    docs = spec_docs(SMALL)
    docs[1]["spec"]["replicas"] = replicas
    return docs


def _until(what, probe):
    deadline = time.monotonic() + BOUND
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, "gave up waiting for " + what
        time.sleep(0.5)


def _state(cluster, node):
    for n in cluster.sinfo_nodes():
        if n["name"] == node:
            return n
    return None


def _replicas(emulator, name="cpu"):
    return emulator.get("apps/v1", "StatefulSet", name, "slurm")["spec"]["replicas"]


def test_scale_down_drains_waits_for_the_busy_node_then_shrinks(emulator, kubeconfig, local_cluster):
    docs = _docs(3)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    slurm = dict(kubeconfig=str(kubeconfig), slurm_transport="local", slurm_conf=cluster.env()["SLURM_CONF"])
    module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True, wait_timeout=30,
           **slurm)
    assert _replicas(emulator) == 3
    job = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-w", "cpu-2", "--wrap", "sleep 600"]).stdout.strip()
    _until("the job to run", lambda: cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING")
    nodeset = dict(name="cpu", namespace="slurm", cluster_name="small", replicas=1, **slurm)

    # check mode names the nodes it would drain and changes nothing
    planned = module("slurm_nodeset", check=True, **nodeset)
    assert any("would drain cpu-[1-2]" in a for a in planned["actions"]), planned["actions"]
    assert ("StatefulSet", "cpu", "updated") in [(o["kind"], o["name"], o["action"]) for o in planned["objects"]]
    assert _replicas(emulator) == 3
    assert "DRAIN" not in _state(cluster, "cpu-2")["state_flags"]

    # a bounded wait that runs out: the task fails, the nodes stay drained and in the cluster, nothing shrinks
    timed_out = module("slurm_nodeset", expect_failed=True, drain_timeout=2, **nodeset)
    assert "cpu-2 still run jobs" in timed_out["msg"], timed_out["msg"]
    assert _replicas(emulator) == 3
    assert "DRAIN" in _state(cluster, "cpu-2")["state_flags"]
    assert _state(cluster, "cpu-2")["reason"].startswith("soperator")

    # the real run waits for the job; while it runs the StatefulSet keeps its 3 pods
    argv = ["ansible", "localhost", "-m", "soperator.slurm.slurm_nodeset", "-a",
            json.dumps(dict(nodeset, drain_timeout=BOUND))]
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the module is waiting once it has read the job queue a few times
        _until("the module to wait for the job", lambda: sum(1 for r in emulator.requests if "nodesets" in r.path)
               >= 1 and proc.poll() is None)
        time.sleep(3)
        assert proc.poll() is None, "the module ended while cpu-2 still ran a job"
        assert _replicas(emulator) == 3
        assert cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING"
        cluster.run(["scancel", job])
        out, err = proc.communicate(timeout=BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert not result.get("failed"), result
    assert result["changed"]
    assert any(a.startswith("waited") for a in result["actions"]), result["actions"]
    assert "removed cpu-[1-2] from Slurm (state FUTURE)" in result["actions"]
    assert _replicas(emulator) == 1
    assert emulator.get("slurm.soperator.dev/v1alpha1", "NodeSet", "cpu", "slurm")["spec"]["replicas"] == 1
    names = [n["name"] for n in cluster.sinfo_nodes()]
    assert "cpu-0" in names and "cpu-1" not in names and "cpu-2" not in names
    # slurm.conf did not change: FUTURE nodes up to maxReplicas stay defined
    assert ("ConfigMap", "small-slurm-configs", "unchanged") in [
        (o["kind"], o["name"], o["action"]) for o in result["objects"]]
    # a second run changes nothing
    assert not module("slurm_nodeset", **nodeset)["changed"]


def test_removing_a_nodeset_drains_it_and_prunes_its_objects_but_not_volumes(emulator, kubeconfig, local_cluster):
    docs = _docs(2)
    extra = copy.deepcopy(docs[1])
    extra["metadata"]["name"] = "big"
    extra["spec"].update(replicas=1, maxReplicas=2, features=["big"])
    docs.append(extra)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    slurm = dict(kubeconfig=str(kubeconfig), slurm_transport="local", slurm_conf=cluster.env()["SLURM_CONF"])
    module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True, wait_timeout=30,
           **slurm)
    assert emulator.get("apps/v1", "StatefulSet", "big", "slurm") is not None
    # the whole spec without "big": slurm_cluster drains big-0, removes it from Slurm, prunes its objects
    done = module("slurm_cluster", state="present", target="kubernetes", definition=docs[:2], wait=True,
                  wait_timeout=30, reconfigure=False, **slurm)
    objects = [(o["kind"], o["name"], o["action"]) for o in done["objects"]]
    assert ("StatefulSet", "big", "pruned") in objects and ("NodeSet", "big", "pruned") in objects
    assert ("PodDisruptionBudget", "big", "pruned") in objects
    assert "removed big-0 from Slurm (state FUTURE)" in done["actions"]
    assert emulator.get("apps/v1", "StatefulSet", "big", "slurm") is None
    assert emulator.get("v1", "PersistentVolumeClaim", "small-jail", "slurm") is not None
    # node definitions changed: the controller rolls (its pod template carries their digest)
    assert ("StatefulSet", "small-controller", "updated") in objects
