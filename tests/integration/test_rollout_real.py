"""Slurm-aware rolling upgrade (NodeSet spec.updateStrategy slurmAware) against the real API server (the StatefulSet
controller computes the revisions, kwok runs the pods) and real Slurm daemons (a local cluster reached with
slurm_transport=local, its slurmd named like the worker pods; pod_slurmd.PodSlurmd restarts a node's slurmd when its
pod is replaced, as a new pod would start a new slurmd).

A running cluster of 3 workers with a job on cpu-0 gets a new worker image: check mode lists the batches and changes
nothing; site.yml replaces cpu-1, then cpu-2 (maxUnavailable 1: never more than one node out of service, as sampled),
drains cpu-0 with "soperator: upgrade" and, at its short rollout_timeout, leaves it drained and reported; the job runs
on, and the remediation pass (remediate.yml) leaves it too. Once the job has ended, the remediation pass replaces,
re-checks and resumes cpu-0. Every node idle, every pod on the update revision, the job completed (its own output),
and a re-run of site.yml changes nothing and writes nothing.
"""
import json
import os

import yaml

import ansible_run
from pod_slurmd import PodSlurmd
from slurm_kube import BOUND, until
from slurm_specs import admin_user, module
from slurm_specs import SMALL_CLAIMS as CLAIMS

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api, local_cluster

NODES = ["cpu-0", "cpu-1", "cpu-2"]
NEW_IMAGE = "ghcr.io/soperator-slurm/worker:rollout-test"


def _nodes(cluster):
    return dict((n["name"], n) for n in cluster.sinfo_nodes() if n["name"] in NODES)


def _job_state(cluster, job):
    out = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w).get("JobState")


def _revisions(api, ns):
    pods = api.pods(ns)
    return dict((n, pods[n].metadata.labels.get("controller-revision-hash")) for n in NODES if n in pods)


def _steps(result):
    return [(r["node"], r["batch"], r["step"]) for r in result["rollout"]]


def _play(playbook, spec, slurm, *tasks, **extra):
    """playbooks/<playbook> on the spec file (Slurm reached locally): the results of the named tasks."""
    variables = dict(spec_file=spec, kubeconfig=slurm["kubeconfig"], slurm_transport="local",
                     slurm_conf=slurm["slurm_conf"], health_check_program=slurm["health_check_program"], **extra)
    done = ansible_run.playbook(playbook, "-e", json.dumps(variables))
    results = []
    for task in tasks:
        found = [r for name, r in done.tasks().items() if name.endswith(task)]
        assert len(found) == 1, "%s: %s" % (task, done.output())
        results.append(found[0])
    return results


def _site(spec, slurm, **extra):
    """site.yml: the result of its slurm_cluster task."""
    return _play("site.yml", spec, slurm, "Converge the Slurm cluster on Kubernetes", wait_timeout=BOUND,
                 **extra)[0]


def _remediate(spec, slurm, **extra):
    """remediate.yml (the CronJob's pass): the results of its reconcile (None when skipped) and of slurm_remediate."""
    reconcile, remediate = _play("remediate.yml", spec, slurm, "Reconcile the cluster on Kubernetes",
                                 "Replace, re-check and resume the nodes we drained", **extra)
    return (None if reconcile.get("skipped") else reconcile), remediate


def test_new_worker_image_rolls_in_batches_and_waits_for_the_busy_node(namespaced, api, volumes, audit,
                                                                       local_cluster, tmp_path):
    ns = namespaced.name
    docs = namespaced.docs()
    docs[1]["spec"]["replicas"] = 3
    volumes(ns, CLAIMS)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    slurm = dict(kubeconfig=namespaced.kubeconfig, slurm_transport="local", slurm_conf=cluster.env()["SLURM_CONF"],
                 health_check_program=os.path.join(cluster.state_dir, "bin", "health-check"))
    first = module("slurm_cluster", state="present", target="kubernetes", definition=namespaced.applied(docs),
                   wait=True, wait_timeout=BOUND, **slurm)
    assert first["status"]["phase"] == "Ready", first["status"]
    assert first["rollout"] == []
    until("3 worker pods", lambda: sorted(_revisions(api, ns)) == NODES)
    old_revision = api.statefulset("cpu", ns).status.update_revision
    assert set(_revisions(api, ns).values()) == {old_revision}
    user = admin_user(namespaced.kubeconfig)

    # A job on cpu-0 that ends only when the test says so (no timing), and says so in its own output.
    release, output = str(tmp_path / "release"), os.path.join(cluster.state_dir, "job.out")
    job = cluster.run(["sbatch", "--parsable", "-w", "cpu-0", "-o", output, "--wrap",
                       "echo started; while [ ! -e %s ]; do sleep 0.2; done; echo finished" % release]
                      ).stdout.strip()
    until("the job to run", lambda: _job_state(cluster, job) == "RUNNING")

    docs[0]["spec"].setdefault("images", {})["worker"] = NEW_IMAGE
    args = dict(state="present", target="kubernetes", definition=namespaced.applied(docs), wait=True,
                wait_timeout=BOUND, rollout_timeout=3, **slurm)
    spec = str(tmp_path / "spec.yml")
    with open(spec, "w") as f:
        yaml.safe_dump_all(docs, f)

    # Check mode: the batches, idle nodes first, cpu-0 drained last; nothing written, no node drained.
    mark = audit.mark()
    planned = module("slurm_cluster", check=True, **args)
    assert _steps(planned) == [("cpu-1", 1, "replace"), ("cpu-2", 2, "replace"), ("cpu-0", 3, "drain")], \
        planned["rollout"]
    assert "1 job(s) run on it" in planned["rollout"][2]["reason"]
    assert "soperator: upgrade" in planned["rollout"][2]["reason"]
    assert planned["changed"]
    assert [r for r in audit.requests(mark, user=user) if r.write and not r.dry_run] == []
    assert all("DRAIN" not in n["state_flags"] for n in _nodes(cluster).values())
    assert set(_revisions(api, ns).values()) == {old_revision}

    # site.yml: cpu-1 and cpu-2 replaced one at a time, cpu-0 drained and left, reported, its job running.
    with PodSlurmd(api, ns, cluster, NODES) as watch:
        done = _site(spec, slurm, rollout_timeout=3)
    assert watch.max_out == 1, "at most maxUnavailable (1) node out of service at once; saw %d" % watch.max_out
    assert _steps(done) == [("cpu-1", 1, "resumed"), ("cpu-2", 2, "resumed"), ("cpu-0", 3, "waiting")], \
        done["rollout"]
    assert done["rollout"][0]["steps"] == ["drained", "replaced", "rechecked", "resumed"]
    assert done["rollout"][2]["steps"] == ["drained"]
    assert ("StatefulSet", "cpu", "updated") in [(o["kind"], o["name"], o["action"]) for o in done["objects"]]
    assert watch.restarted == ["cpu-1", "cpu-2"]
    new_revision = api.statefulset("cpu", ns).status.update_revision
    assert new_revision != old_revision
    revisions = _revisions(api, ns)
    assert (revisions["cpu-0"], revisions["cpu-1"], revisions["cpu-2"]) == (old_revision, new_revision, new_revision)
    nodes = _nodes(cluster)
    assert "DRAIN" in nodes["cpu-0"]["state_flags"] and nodes["cpu-0"]["reason"] == "soperator: upgrade"
    assert all("DRAIN" not in nodes[n]["state_flags"] for n in ("cpu-1", "cpu-2"))
    assert _job_state(cluster, job) == "RUNNING"
    assert all(p.spec.containers[0].image == NEW_IMAGE for n, p in api.pods(ns).items() if n in ("cpu-1", "cpu-2"))

    # The remediation pass (remediate.yml) leaves cpu-0 while its job runs: its reconcile carries the roll on
    # without waiting (cpu-0 waiting), slurm_remediate skips the busy node.
    mark = audit.mark()
    reconciled, busy = _remediate(spec, slurm)
    assert _steps(reconciled) == [("cpu-0", 1, "waiting")] and not reconciled["changed"], reconciled["rollout"]
    assert [(n["name"], n["action"]) for n in busy["nodes"]] == [("cpu-0", "skipped-busy")], busy["nodes"]
    assert not busy["changed"]
    assert [r for r in audit.requests(mark, user=user) if r.write and r.resource == "pods"] == []

    # The job ends on its own; the remediation pass replaces, re-checks and resumes cpu-0.
    with open(release, "w"):
        pass
    until("the job to complete", lambda: _job_state(cluster, job) == "COMPLETED")
    with PodSlurmd(api, ns, cluster, NODES) as watch:
        skipped, remediated = _remediate(spec, slurm, reconcile=False)
    assert skipped is None
    assert [(n["name"], n["action"]) for n in remediated["nodes"]] == [("cpu-0", "resumed")], remediated["nodes"]
    assert remediated["nodes"][0]["steps"] == ["replaced", "rechecked", "resumed"]
    assert watch.restarted == ["cpu-0"]
    with open(output) as f:
        assert f.read().split() == ["started", "finished"]      # never killed: it ran to its end

    # Every node idle, every pod on the update revision; a re-run changes nothing and writes nothing.
    until("every node idle", lambda: all(n["state"] == "idle" and not n["state_flags"]
                                         for n in _nodes(cluster).values()))
    assert set(_revisions(api, ns).values()) == {new_revision}
    mark = audit.mark()
    again = _site(spec, slurm, rollout_timeout=3)
    assert not again["changed"] and again["rollout"] == [], again["rollout"]
    assert [r for r in audit.requests(mark, user=user) if r.write] == []
