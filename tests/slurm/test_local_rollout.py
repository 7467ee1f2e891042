"""A changed configuration rolls a local cluster's slurmds (local/rollout.py over slurm/rollout.py) against real
daemons: three workers, a job on cpu-0 that ends when the test says so, a slurmConfig change. The run restarts cpu-1
then cpu-2 (never more than maxUnavailable out of service, from the run's own steps and from sinfo sampled while
it rolls), leaves cpu-0 drained and waiting with its job and its slurmd untouched; once the job has ended the next
run restarts, re-checks and resumes cpu-0; a third run changes nothing."""
import threading

import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import rollout as slurm_rollout

from local_helpers import ROOT, job_state, load_model, wait_job
from test_local_backend import SMALL, node_states, sbatch

NODES = ("cpu-0", "cpu-1", "cpu-2")
UPGRADE = "soperator: upgrade"
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


def spec(slurmd_timeout):
    with open("%s/%s" % (ROOT, SMALL)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    docs[0]["spec"]["slurmConfig"]["SlurmdTimeout"] = slurmd_timeout
    docs[1]["spec"].update(replicas=3, maxReplicas=3, updateStrategy={"type": "slurmAware", "maxUnavailable": 1})
    return yaml.safe_dump_all(docs)


def out_of_service(node):
    flags = set(node["state_flags"])
    return node["state"] in ("down", "drained", "draining", "future", "unknown") or \
        bool(flags & {"DRAIN", "NOT_RESPONDING"})


class Sampler(object):
    """Samples sinfo while the cluster's roll runs (the slurmctld restart before it takes every node out by itself:
    slurmctld 22.05 forgets them until they register again)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.rolling = threading.Event()
        self.done = threading.Event()
        self.samples = []
        roll = cluster.rollout.roll

        def rolling_then(*args, **kwargs):
            self.rolling.set()
            try:
                return roll(*args, **kwargs)
            finally:
                self.rolling.clear()
        cluster.rollout.roll = rolling_then
        self.thread = threading.Thread(target=self._loop)
        self.thread.start()

    def _loop(self):
        while not self.done.wait(0.2):
            if not self.rolling.is_set():
                continue
            try:
                nodes = node_states(self.cluster)
            except Exception:       # a read that fails is no sample
                continue
            self.samples.append(sorted(n for n in NODES if n not in nodes or out_of_service(nodes[n])))

    def stop(self):
        self.done.set()
        self.thread.join(30)


def by_node(steps):
    return dict((s["node"], s) for s in steps)


def test_a_config_change_rolls_the_slurmds_and_keeps_the_running_job(local_cluster, tmp_path):
    cluster = local_cluster(spec(120), rollout_timeout=3)
    flag, out = tmp_path / "release", tmp_path / "long.txt"
    job = sbatch(cluster, "-w", "cpu-0", "-o", str(out), "--time=10",
                 "--wrap", "while [ ! -e %s ]; do sleep 0.2; done; echo survived on $SLURMD_NODENAME" % flag)
    wait_job(cluster, job, ("RUNNING",))
    pids = dict((n, cluster.pid("slurmd-%s" % n)) for n in NODES)
    changed = load_model(spec(121))

    # Check mode: the batches from the same plan, nothing done.
    actions = cluster.plan_present(changed, cluster.status())
    planned = [(s["node"], s["batch"], s["step"]) for s in cluster.rollout_steps]
    assert planned == [("cpu-1", 1, "replace"), ("cpu-2", 2, "replace"), ("cpu-0", 3, "drain")], planned
    assert "would restart slurmctld (configuration changed)" in actions, actions
    assert sum(a.startswith("would roll slurmd-") for a in actions) == 3, actions
    assert dict((n, cluster.pid("slurmd-%s" % n)) for n in NODES) == pids
    assert not any(out_of_service(n) for n in node_states(cluster).values())

    sampler = Sampler(cluster)
    try:
        done = cluster.ensure_started(changed)
    finally:
        sampler.stop()
    steps = by_node(cluster.rollout_steps)
    assert [(s["node"], s["batch"]) for s in cluster.rollout_steps] == [("cpu-1", 1), ("cpu-2", 2), ("cpu-0", 3)]
    for node in ("cpu-1", "cpu-2"):
        assert steps[node]["step"] == "resumed", steps[node]
        assert steps[node]["steps"] == ["drained", "replaced", "rechecked", "resumed"], steps[node]
        assert cluster.pid("slurmd-%s" % node) != pids[node]
    assert steps["cpu-0"]["step"] == "waiting" and steps["cpu-0"]["steps"] == ["drained"], steps["cpu-0"]
    assert "restarted slurmctld (configuration changed)" in done["changes"], done
    assert sum(c.startswith("rolled slurmd-") for c in done["changes"]) == 3, done
    # one batch at a time, as the run saw it and as sinfo showed it
    assert sampler.samples and max(len(s) for s in sampler.samples) <= 1, sampler.samples
    assert ["cpu-0"] in sampler.samples and ["cpu-1"] in sampler.samples, sampler.samples

    nodes = node_states(cluster)
    assert "DRAIN" in nodes["cpu-0"]["state_flags"] and nodes["cpu-0"]["reason"] == UPGRADE, nodes["cpu-0"]
    assert nodes["cpu-1"]["state"] == nodes["cpu-2"]["state"] == "idle", nodes
    assert job_state(cluster, job) == "RUNNING"
    assert cluster.pid("slurmd-cpu-0") == pids["cpu-0"]          # never restarted while busy

    flag.write_text("go")
    assert wait_job(cluster, job, FINISHED) == "COMPLETED"
    assert out.read_text().strip() == "survived on cpu-0"

    again = cluster.ensure_started(changed)
    assert [(s["node"], s["step"]) for s in cluster.rollout_steps] == [("cpu-0", "resumed")], cluster.rollout_steps
    assert cluster.rollout_steps[0]["steps"] == ["replaced", "rechecked", "resumed"]
    assert again["changed"] and cluster.pid("slurmd-cpu-0") != pids["cpu-0"]
    nodes = node_states(cluster)
    assert all(nodes[n]["state"] == "idle" and not nodes[n]["state_flags"] for n in NODES), nodes

    assert cluster.ensure_started(changed) == {"changed": False, "changes": []}
    assert cluster.rollout_steps == []
    assert cluster.plan_present(changed, cluster.status()) == [] and cluster.rollout_steps == []


def test_on_delete_restarts_no_outdated_slurmd_and_reports_it(local_cluster):
    text = spec(120).replace("type: slurmAware", "type: onDelete")
    cluster = local_cluster(text)
    pids = dict((n, cluster.pid("slurmd-%s" % n)) for n in NODES)
    changed = load_model(text.replace("SlurmdTimeout: 120", "SlurmdTimeout: 121"))
    done = cluster.ensure_started(changed)
    assert [(s["node"], s["step"]) for s in cluster.rollout_steps] == [(n, slurm_rollout.SKIP) for n in NODES]
    assert all("updateStrategy onDelete" in s["reason"] for s in cluster.rollout_steps), cluster.rollout_steps
    assert not any(c.startswith("rolled ") for c in done["changes"]), done
    # the slurmctld restart made them register again (SIGHUP), not restart
    assert dict((n, cluster.pid("slurmd-%s" % n)) for n in NODES) == pids
    assert all(nodes["state"] == "idle" for nodes in node_states(cluster).values())
    again = cluster.ensure_started(changed)
    assert again == {"changed": False, "changes": []} and len(cluster.rollout_steps) == 3
