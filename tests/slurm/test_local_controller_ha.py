"""spec.controller.replicas 2 on the local backend, against the host's real slurmctld 22.05 and slurmd: two
slurmctld processes share the state directory (local/controllers.py); killing the primary (by its pid: ours) while a
job runs, the backup takes control within the configured SlurmctldTimeout, the job completes, sbatch works again and
no node is lost. The primary started again takes control back (22.05: a starting primary asks the backups to
relinquish control, src/slurmctld/controller.c) and the backup stands by again.

Times are printed (`pytest -s`), not asserted: the waits are bounded by the configured timeout plus slack for this
shared machine."""
import json
import os
import signal
import time

from local_helpers import job_state, wait_job
from waiting import wait_for

from ansible_collections.soperator.slurm.plugins.module_utils.local import controllers

CTLD_TIMEOUT = 15       # SlurmctldTimeout: the backup pings every 5 s and takes control after 15 s without answers
SLACK = 60
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: ha, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  controller:
    replicas: 2
    spool: {accessModes: [ReadWriteMany]}
  slurmConfig: {SlurmctldTimeout: %d}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec:
  clusterName: ha
  replicas: 2
  resources: {cpu: "1", memory: 1Gi}
""" % CTLD_TIMEOUT


def ping(cluster):
    return controllers.ping_states(cluster.run(["scontrol", "ping"], timeout=60, check=False).stdout)


def nodes(cluster):
    out = json.loads(cluster.run(["sinfo", "--json"], timeout=60).stdout)["nodes"]
    return dict((n["name"], n["state"].lower()) for n in out)


def sbatch(cluster, *args):
    return cluster.run(["sbatch", "--parsable"] + list(args), timeout=CTLD_TIMEOUT * 4 + SLACK
                       ).stdout.strip().split(";")[0]


def log(cluster):
    with open(os.path.join(cluster.state_dir, "log", "slurmctld.log")) as f:
        return f.read()


def test_backup_controller_takes_over_and_gives_back(local_cluster, tmp_path):
    cluster = local_cluster(SPEC)
    with open(os.path.join(cluster.state_dir, "etc", "slurm.conf")) as f:
        hosts = [line.split("=", 1)[1] for line in f.read().splitlines() if line.startswith("SlurmctldHost=")]
    assert hosts == ["ha-controller-0(127.0.0.1)", "ha-controller-1(127.0.0.2)"]
    procs = cluster.status()["processes"]
    assert procs["slurmctld"]["running"] and procs["slurmctld-1"]["running"], procs
    assert ping(cluster) == {"ha-controller-0": "UP", "ha-controller-1": "UP"}
    assert log(cluster).count("slurmctld running in background mode") == 1      # the backup stands by
    before = nodes(cluster)
    assert sorted(before) == ["cpu-0", "cpu-1"] and set(before.values()) == {"idle"}, before

    out = tmp_path / "long.out"
    job = sbatch(cluster, "-N1", "-o", str(out), "--wrap", "sleep %d; echo done" % (CTLD_TIMEOUT + 20))
    wait_for(lambda: job_state(cluster, job) == "RUNNING", "job %s running" % job, SLACK, poll=0.5)

    killed = time.monotonic()
    # What deleting the primary's pod does: SIGTERM (slurmctld saves its state and exits). A SIGKILL within seconds
    # of the job's start loses the state not saved yet: the backup then recovers the job as PENDING, starts it again,
    # finds it on the node and drains the node (22.05: "Duplicate jobid on nodes").
    os.kill(procs["slurmctld"]["pid"], signal.SIGTERM)
    wait_for(lambda: ping(cluster).get("ha-controller-0") == "DOWN", "the primary down", SLACK, poll=0.5)
    second = sbatch(cluster, "-N1", "-o", "/dev/null", "--wrap", "true")     # blocks until the backup is in control
    failover = time.monotonic() - killed
    print("\nprimary slurmctld stopped -> successful sbatch: %.1f s (SlurmctldTimeout %d)"
          % (failover, CTLD_TIMEOUT))
    assert "BackupController1 ha-controller-1 taking over" in log(cluster)
    assert ping(cluster) == {"ha-controller-0": "DOWN", "ha-controller-1": "UP"}
    assert wait_job(cluster, job, timeout=CTLD_TIMEOUT + 20 + SLACK) == "COMPLETED"
    assert out.read_text().strip() == "done"
    assert wait_job(cluster, second, timeout=SLACK) == "COMPLETED"
    after = nodes(cluster)
    assert sorted(after) == ["cpu-0", "cpu-1"] and set(after.values()) == {"idle"}, after

    # The primary again (a re-run of ensure_started starts what is missing): it takes control back.
    result = cluster.ensure_started()
    assert "started slurmctld" in result["changes"], result
    assert ping(cluster) == {"ha-controller-0": "UP", "ha-controller-1": "UP"}
    wait_for(lambda: log(cluster).count("slurmctld running in background mode") == 2,
             "the backup standing by again", SLACK, poll=0.5)
    third = sbatch(cluster, "-N2", "-o", "/dev/null", "--wrap", "srun true")
    assert wait_job(cluster, third, timeout=SLACK) == "COMPLETED"
    assert set(nodes(cluster).values()) == {"idle"}
