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
import time

import yaml

import ansible_run
from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import DEFAULT_TAG
from pod_slurmd import PodSlurmd
from slurm_kube import BOUND, until
from slurm_specs import admin_user, module
from slurm_specs import SMALL_CLAIMS as CLAIMS

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api, local_cluster

NODES = ["cpu-0", "cpu-1", "cpu-2"]
# Same Slurm as the default images (a tag starts with its Slurm version): a new worker image, no Slurm upgrade.
NEW_IMAGE = "ghcr.io/soperator-slurm/worker:%s-rollout-test" % DEFAULT_TAG.split("-", 1)[0]


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


def _running(namespaced, api, volumes, local_cluster):
    """3 workers (kwok pods) on the real API server and as local slurmd, converged, nothing to roll. -> (namespace,
    docs, the LocalCluster, the modules' Slurm arguments, the StatefulSet's revision)."""
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
    assert first["rollout"] == [] and first["reservations"] == [], first
    until("3 worker pods", lambda: sorted(_revisions(api, ns)) == NODES)
    old_revision = api.statefulset("cpu", ns).status.update_revision
    assert set(_revisions(api, ns).values()) == {old_revision}
    return ns, docs, cluster, slurm, old_revision


def test_new_worker_image_rolls_in_batches_and_waits_for_the_busy_node(namespaced, api, volumes, audit,
                                                                       local_cluster, tmp_path):
    ns, docs, cluster, slurm, old_revision = _running(namespaced, api, volumes, local_cluster)
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


RESERVATION = "soperator-upgrade-cpu"


def _reservation(cluster):
    """Our reservation as slurmctld shows it (times in UTC), None without one."""
    out = cluster.run(["env", "TZ=UTC0", "scontrol", "--oneliner", "show", "reservation"]).stdout
    for line in out.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if fields.get("ReservationName") == RESERVATION:
            return fields
    return None


def _utc(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def _job(cluster, job):
    out = cluster.run(["scontrol", "-o", "show", "job", job]).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def test_scheduled_window_reserves_ahead_rolls_inside_and_removes_the_reservation(namespaced, api, volumes, audit,
                                                                                  local_cluster, tmp_path):
    """updateStrategy scheduled: before the window a MAINT reservation on the outdated workers (the scheduler keeps
    a job that would still run at its start off them, and runs one that ends in time), nothing replaced; inside it the
    roll (maxUnavailable 2), the reservation following the workers still outdated (IGNORE_JOBS over the busy one),
    removed by the remediation pass once the last is replaced. Moving the window (its start set back to now) stands
    in for waiting until it opens."""
    ns, docs, cluster, slurm, old_revision = _running(namespaced, api, volumes, local_cluster)
    user = admin_user(namespaced.kubeconfig)

    # A new image, rolled in a window an hour from now.
    start = int(time.time()) + 3600
    docs[0]["spec"].setdefault("images", {})["worker"] = NEW_IMAGE
    docs[1]["spec"]["updateStrategy"] = {"type": "scheduled", "maxUnavailable": 2,
                                         "window": {"start": _utc(start) + "Z", "durationMinutes": 60}}
    spec = str(tmp_path / "spec.yml")
    with open(spec, "w") as f:
        yaml.safe_dump_all(docs, f)

    # Check mode: the reservation it would make, the workers waiting for the window; nothing written in Slurm or
    # Kubernetes.
    mark = audit.mark()
    planned = module("slurm_cluster", check=True, state="present", target="kubernetes",
                     definition=namespaced.applied(docs), wait=True, wait_timeout=BOUND, **slurm)
    assert _steps(planned) == [(n, 0, "scheduled") for n in NODES], planned["rollout"]
    [would] = planned["reservations"]
    assert would["action"] == "created" and would["nodes"] == "cpu-[0-2]", would
    assert would["commands"] == ["scontrol create reservation ReservationName=%s StartTime=%s EndTime=%s "
                                 "Nodes=cpu-[0-2] Flags=MAINT Users=root" % (RESERVATION, _utc(start),
                                                                             _utc(start + 3600))]
    assert planned["changed"]
    assert _reservation(cluster) is None
    assert [r for r in audit.requests(mark, user=user) if r.write and not r.dry_run] == []

    # site.yml before the window: the reservation, for the window; no worker replaced or drained.
    done = _site(spec, slurm, rollout_timeout=3)
    assert _steps(done) == [(n, 0, "scheduled") for n in NODES], done["rollout"]
    assert [r["action"] for r in done["reservations"]] == ["created"] and done["changed"]
    held = _reservation(cluster)
    assert (held["StartTime"], held["EndTime"], held["Nodes"], held["Users"], held["State"]) == (
        _utc(start), _utc(start + 3600), "cpu-[0-2]", "root", "INACTIVE"), held
    assert "MAINT" in held["Flags"].split(",") and "IGNORE_JOBS" not in held["Flags"].split(",")
    assert set(_revisions(api, ns).values()) == {old_revision}
    assert all("DRAIN" not in n["state_flags"] for n in _nodes(cluster).values())

    # The scheduler drains them by itself: a job that would still run at the window's start waits, though it was
    # first in the queue; one that ends in time runs on the same node; the job on cpu-0 (ends when the test says).
    late = cluster.run(["sbatch", "--parsable", "-w", "cpu-1", "-t", "120", "-o", "/dev/null", "--wrap", "true"]
                       ).stdout.strip()
    early = cluster.run(["sbatch", "--parsable", "-w", "cpu-1", "-t", "10", "-o", "/dev/null", "--wrap", "true"]
                        ).stdout.strip()
    until("the job that ends in time to run", lambda: _job_state(cluster, early) == "COMPLETED")
    waiting = _job(cluster, late)
    # (22.05: ReqNodeNotAvail,_May_be_reserved_for_other_job)
    assert waiting["JobState"] == "PENDING" and "reserved" in waiting["Reason"].lower(), waiting
    cluster.run(["scancel", late])
    release, output = str(tmp_path / "release"), os.path.join(cluster.state_dir, "job.out")
    job = cluster.run(["sbatch", "--parsable", "-w", "cpu-0", "-t", "10", "-o", output, "--wrap",
                       "echo started; while [ ! -e %s ]; do sleep 0.2; done; echo finished" % release]
                      ).stdout.strip()
    until("the job to run", lambda: _job_state(cluster, job) == "RUNNING")

    # The window opens (moved to now): the reservation starts now, IGNORE_JOBS first (cpu-0 runs a job); the idle
    # workers in one batch of 2; cpu-0 drained and waiting; the reservation shrinks to it.
    opened = int(time.time()) - 60
    docs[1]["spec"]["updateStrategy"]["window"]["start"] = _utc(opened) + "Z"
    with open(spec, "w") as f:
        yaml.safe_dump_all(docs, f)
    with PodSlurmd(api, ns, cluster, NODES) as watch:
        done = _site(spec, slurm, rollout_timeout=3)
    assert watch.max_out <= 2, "at most maxUnavailable (2) nodes out of service at once; saw %d" % watch.max_out
    assert _steps(done) == [("cpu-1", 1, "resumed"), ("cpu-2", 1, "resumed"), ("cpu-0", 2, "waiting")], \
        done["rollout"]
    [moved] = done["reservations"]
    update = "scontrol update reservation ReservationName=%s " % RESERVATION
    assert moved["action"] == "updated" and moved["nodes"] == "cpu-0", moved
    assert moved["commands"] == [update + "Flags+=IGNORE_JOBS",
                                 update + "StartTime=now EndTime=%s" % _utc(opened + 3600),
                                 update + "Nodes=cpu-0"], moved["commands"]
    held = _reservation(cluster)
    assert (held["Nodes"], held["State"], held["EndTime"]) == ("cpu-0", "ACTIVE", _utc(opened + 3600)), held
    assert "IGNORE_JOBS" in held["Flags"].split(",")
    assert sorted(watch.restarted) == ["cpu-1", "cpu-2"]   # one batch: replaced together, in no order
    nodes = _nodes(cluster)
    assert "DRAIN" in nodes["cpu-0"]["state_flags"] and nodes["cpu-0"]["reason"] == "soperator: upgrade"
    assert _job_state(cluster, job) == "RUNNING"

    # The job ends; the remediation pass (its reconcile) replaces, re-checks and resumes cpu-0 inside the window,
    # and removes the reservation.
    with open(release, "w"):
        pass
    until("the job to complete", lambda: _job_state(cluster, job) == "COMPLETED")
    with PodSlurmd(api, ns, cluster, NODES) as watch:
        reconciled, _remediated = _remediate(spec, slurm)
    assert _steps(reconciled) == [("cpu-0", 1, "resumed")], reconciled["rollout"]
    assert [(r["action"], r["commands"]) for r in reconciled["reservations"]] == [
        ("removed", ["scontrol delete reservation %s" % RESERVATION])], reconciled["reservations"]
    assert watch.restarted == ["cpu-0"]
    assert _reservation(cluster) is None
    with open(output) as f:
        assert f.read().split() == ["started", "finished"]      # never killed

    # Every node idle (no maintenance flag left), every pod new; a re-run changes and writes nothing.
    until("every node idle", lambda: all(n["state"] == "idle" and not n["state_flags"]
                                         for n in _nodes(cluster).values()))
    new_revision = api.statefulset("cpu", ns).status.update_revision
    assert set(_revisions(api, ns).values()) == {new_revision} != {old_revision}
    mark = audit.mark()
    again = _site(spec, slurm, rollout_timeout=3)
    assert not again["changed"] and again["rollout"] == [] and again["reservations"] == [], again
    assert [r for r in audit.requests(mark, user=user) if r.write] == []
