"""Safe scale-down against the real API server (the StatefulSet controller, the scheduler, kwok's pods) and real
Slurm daemons (a local cluster, reached with slurm_transport=local: the drained nodes are real slurmd nodes).

slurm_nodeset drains the highest ordinals, waits while one of them runs a job - the StatefulSet keeps its pods all
that time - then sets them FUTURE in Slurm and only then shrinks the StatefulSet, whose controller removes the pods.
Removing a NodeSet from the spec (slurm_cluster) drains it and prunes its objects, never the volume claims.
A scale-up is staggered (spec.workers.maxStartingPods): a watch of the pods sees never more than the bound of
workers not Ready at once (the first test's deploy, bound 1).
"""
import copy
import json
import subprocess
import time

import yaml

import ansible_run
from pod_watch import NotReadyWatch
from slurm_kube import BOUND, until
from slurm_specs import ROOT, actions, admin_user, module
from slurm_specs import SMALL_CLAIMS as CLAIMS

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api, local_cluster


def _state(cluster, node):
    for n in cluster.sinfo_nodes():
        if n["name"] == node:
            return n
    return None


def _job_state(cluster, job):
    return cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()


def _deploy(namespaced, api, volumes, local_cluster, docs):
    """The spec's local Slurm cluster (its nodes: what the pods would run) and its objects on the real server,
    applied and waited for (Ready: the controllers and kwok have caught up)."""
    volumes(namespaced.name, CLAIMS)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    slurm = dict(kubeconfig=namespaced.kubeconfig, slurm_transport="local", slurm_conf=cluster.env()["SLURM_CONF"])
    first = module("slurm_cluster", state="present", target="kubernetes", definition=namespaced.applied(docs),
                   wait=True, wait_timeout=BOUND, **slurm)
    assert first["status"]["phase"] == "Ready", first["status"]
    return cluster, slurm, first


def _worker_pods(api, namespace, nodeset="cpu"):
    return sorted(name for name in api.pods(namespace) if name.startswith(nodeset + "-"))


def test_scale_down_drains_waits_for_the_busy_node_then_shrinks(namespaced, api, volumes, audit, local_cluster):
    ns = namespaced.name
    docs = namespaced.docs()
    docs[1]["spec"]["replicas"] = 3
    # The 3 workers start one at a time (spec.workers.maxStartingPods 1): the run raises the StatefulSet's replicas
    # in 3 steps, each once the one before is Ready, as a watch of the pods sees.
    docs[0]["spec"]["workers"] = {"maxStartingPods": 1}
    user = admin_user(namespaced.kubeconfig)
    mark = audit.mark()
    with NotReadyWatch(api.core, ns, "cpu") as watched:
        cluster, slurm, first = _deploy(namespaced, api, volumes, local_cluster, docs)
    assert first["scale_up"]["steps"] == [{"cpu": 1}, {"cpu": 2}, {"cpu": 3}], first["scale_up"]
    assert watched.most == 1, watched.most
    assert len([r for r in audit.requests(mark, user=user) if r.write and r.resource == "statefulsets"
                and r.name == "cpu" and not r.dry_run]) == 3
    assert api.statefulset("cpu", ns).spec.replicas == 3
    until("3 worker pods", lambda: _worker_pods(api, ns) == ["cpu-0", "cpu-1", "cpu-2"])

    job = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-w", "cpu-2", "--wrap", "sleep 600"]).stdout.strip()
    until("the job to run", lambda: _job_state(cluster, job) == "RUNNING")
    nodeset = dict(name="cpu", namespace=ns, cluster_name="small", replicas=1, **slurm)

    # Check mode names the nodes it would drain; the server answers its writes as dry runs only.
    mark = audit.mark()
    planned = module("slurm_nodeset", check=True, **nodeset)
    assert any("would drain cpu-[1-2]" in a for a in planned["actions"]), planned["actions"]
    assert ("StatefulSet", "cpu", "updated") in actions(planned)
    assert [r for r in audit.requests(mark, user=user) if r.write and not r.dry_run] == []
    assert api.statefulset("cpu", ns).spec.replicas == 3
    assert "DRAIN" not in _state(cluster, "cpu-2")["state_flags"]

    # A bounded wait that runs out: the task fails, the nodes stay drained and in Slurm, nothing is shrunk.
    mark = audit.mark()
    timed_out = module("slurm_nodeset", expect_failed=True, drain_timeout=2, **nodeset)
    assert "cpu-2 still run jobs" in timed_out["msg"], timed_out["msg"]
    assert [r for r in audit.requests(mark, user=user) if r.write and r.resource in ("statefulsets", "nodesets")
            and not r.dry_run] == []
    assert api.statefulset("cpu", ns).spec.replicas == 3
    assert "DRAIN" in _state(cluster, "cpu-2")["state_flags"]
    assert _state(cluster, "cpu-2")["reason"].startswith("soperator")

    # The real run waits for the job; all the while the StatefulSet keeps its 3 replicas and pods.
    argv = [ansible_run.tool("ansible"), "localhost", "-m", "soperator.slurm.slurm_nodeset", "-a",
            json.dumps(dict(nodeset, drain_timeout=BOUND))]
    mark = audit.mark()
    proc = subprocess.Popen(argv, cwd=ROOT, env=ansible_run.ansible_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # it has read the NodeSet (and then goes to Slurm): give it a few seconds in which it must not shrink
        until("the module to read the NodeSet", lambda: proc.poll() is not None or any(
            r.resource == "nodesets" for r in audit.requests(mark, user=user)))
        time.sleep(3)
        assert proc.poll() is None, "the module ended while cpu-2 still ran a job: %s" % (proc.communicate(),)
        assert api.statefulset("cpu", ns).spec.replicas == 3
        assert _worker_pods(api, ns) == ["cpu-0", "cpu-1", "cpu-2"]
        assert [r for r in audit.requests(mark, user=user) if r.write] == []
        assert _job_state(cluster, job) == "RUNNING"
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
    assert api.statefulset("cpu", ns).spec.replicas == 1
    assert api.nodeset("cpu", ns)["spec"]["replicas"] == 1
    names = [n["name"] for n in cluster.sinfo_nodes()]
    assert "cpu-0" in names and "cpu-1" not in names and "cpu-2" not in names
    # slurm.conf did not change: FUTURE nodes up to maxReplicas stay defined
    assert ("ConfigMap", "small-slurm-configs", "unchanged") in actions(result)
    # The StatefulSet controller removes the pods of the highest ordinals.
    until("only cpu-0 left", lambda: _worker_pods(api, ns) == ["cpu-0"])
    until("the StatefulSet's status to count 1 replica", lambda: api.statefulset("cpu", ns).status.replicas == 1)
    # A second run changes nothing. The NodeSet's status, written when the StatefulSet was shrunk (ready at once:
    # it still had its surplus pods), is brought up to date - its only write; a third run writes nothing.
    mark = audit.mark()
    assert not module("slurm_nodeset", **nodeset)["changed"]
    writes = [r for r in audit.requests(mark, user=user) if r.write]
    assert set((r.resource, r.subresource) for r in writes) <= {("nodesets", "status")}, writes
    status = api.nodeset("cpu", ns)["status"]
    assert (status["phase"], status["replicas"], status["readyReplicas"]) == ("Ready", 1, 1), status
    mark = audit.mark()
    assert not module("slurm_nodeset", **nodeset)["changed"]
    assert [r for r in audit.requests(mark, user=user) if r.write] == []


def test_removing_a_nodeset_drains_it_and_prunes_its_objects_but_not_volumes(
        namespaced, api, volumes, local_cluster):
    ns = namespaced.name
    docs = namespaced.docs()
    extra = copy.deepcopy(docs[1])
    extra["metadata"]["name"] = "big"
    extra["spec"].update(replicas=1, maxReplicas=2, features=["big"])
    docs.append(extra)
    cluster, slurm, _first = _deploy(namespaced, api, volumes, local_cluster, docs)
    assert api.statefulset("big", ns) is not None
    until("the pod big-0", lambda: _worker_pods(api, ns, "big") == ["big-0"])
    claims = sorted(c.metadata.name for c in api.core.list_namespaced_persistent_volume_claim(ns).items)

    # The whole spec without "big": slurm_cluster drains big-0, removes it from Slurm, prunes its objects.
    done = module("slurm_cluster", state="present", target="kubernetes", definition=docs[:2], wait=True,
                  wait_timeout=BOUND, reconfigure=False, **slurm)
    objects = actions(done)
    assert ("StatefulSet", "big", "pruned") in objects and ("NodeSet", "big", "pruned") in objects
    assert ("PodDisruptionBudget", "big", "pruned") in objects
    assert "removed big-0 from Slurm (state FUTURE)" in done["actions"]
    assert "big-0" not in [n["name"] for n in cluster.sinfo_nodes()]
    assert api.statefulset("big", ns) is None and api.nodeset("big", ns) is None
    # the garbage collector takes the pruned StatefulSet's pod; every volume claim stays
    until("big-0's pod to go", lambda: _worker_pods(api, ns, "big") == [])
    assert sorted(c.metadata.name for c in api.core.list_namespaced_persistent_volume_claim(ns).items) == claims
    assert "small-jail" in claims
    # node definitions changed: the controller rolls (its pod template carries their digest)
    assert ("StatefulSet", "small-controller", "updated") in objects
