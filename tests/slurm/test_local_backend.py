"""The local backend against real daemons: examples/small-cpu.yml comes up, runs jobs, scales without restarting
slurmctld, and stops without leaving a process behind."""
import os
import socket

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.local import processes
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import _pid_alive, find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

from local_helpers import JOB_WAIT, job_state, wait_job
from waiting import wait_for

SMALL = "examples/small-cpu.yml"


def node_states(cluster):
    return dict((n["name"], n) for n in cluster.sinfo_nodes())


def sbatch(cluster, *args):
    return cluster.run(["sbatch", "--parsable"] + list(args), timeout=30).stdout.strip().split(";")[0]


def test_small_cpu_runs_jobs_and_is_idempotent(local_cluster, tmp_path):
    cluster = local_cluster(SMALL)
    nodes = node_states(cluster)
    assert sorted(nodes) == ["cpu-0", "cpu-1"]
    for node in nodes.values():
        assert node["state"] == "idle" and not node["state_flags"], node
        assert node["partitions"] == ["main"]

    out = cluster.run(["srun", "-N2", "hostname"], timeout=JOB_WAIT).stdout.split()
    assert out == [socket.gethostname()] * 2
    out = cluster.run(["srun", "-N2", "-l", "printenv", "SLURMD_NODENAME"], timeout=JOB_WAIT).stdout.splitlines()
    assert sorted(line.split(": ", 1)[1] for line in out) == ["cpu-0", "cpu-1"]

    job = sbatch(cluster, "-o", str(tmp_path / "out-%j.txt"), "--wrap", "echo hello from $SLURMD_NODENAME")
    assert wait_job(cluster, job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")) == "COMPLETED"
    text = (tmp_path / ("out-%s.txt" % job)).read_text()
    assert text.strip() in ("hello from cpu-0", "hello from cpu-1")

    ctld = cluster.pid("slurmctld")
    again = cluster.ensure_started()
    assert again == {"changed": False, "changes": []}
    assert cluster.pid("slurmctld") == ctld

    # Loopback only: every listening socket of our daemons is on 127.0.0.1.
    pids = set(p["pid"] for p in cluster.status()["processes"].values())
    assert _listening_addresses(pids) <= {"127.0.0.1"}


def _listening_addresses(pids):
    """Local addresses of TCP listening sockets (IPv4 and IPv6) owned by these pids."""
    inodes = set()
    for pid in pids:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    addresses = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:          # 0A: LISTEN
                    hex_addr = cols[1].split(":")[0]
                    if width == 8:
                        addresses.add(socket.inet_ntoa(bytes.fromhex(hex_addr)[::-1]))
                    else:
                        addresses.add("ipv6:" + hex_addr)
    return addresses


def test_scale_up_and_down_keeps_running_job_and_slurmctld(local_cluster, tmp_path):
    cluster = local_cluster(SMALL)
    ctld = cluster.pid("slurmctld")
    flag = tmp_path / "release"
    out = tmp_path / "long.txt"
    job = sbatch(cluster, "-w", "cpu-0", "-o", str(out), "--time=5",
                 "--wrap", "while [ ! -e %s ]; do sleep 0.2; done; echo survived on $SLURMD_NODENAME" % flag)
    wait_job(cluster, job, ("RUNNING",))

    up = cluster.scale({"cpu": 4})
    assert up["changed"]
    nodes = node_states(cluster)
    assert sorted(nodes) == ["cpu-0", "cpu-1", "cpu-2", "cpu-3"]
    assert all(nodes[n]["state"] == "idle" for n in ("cpu-1", "cpu-2", "cpu-3")), nodes
    assert cluster.run(["srun", "-N3", "-x", "cpu-0", "true"], timeout=JOB_WAIT).returncode == 0

    down = cluster.scale({"cpu": 2})
    assert down["changed"]
    assert any(c.startswith("drained cpu-[2-3]") for c in down["changes"]), down
    assert sorted(node_states(cluster)) == ["cpu-0", "cpu-1"]       # no stale entries
    assert cluster.pid("slurmd-cpu-2") is None and cluster.pid("slurmd-cpu-3") is None
    assert cluster.pid("slurmctld") == ctld                           # never restarted
    assert job_state(cluster, job) == "RUNNING"                       # the job on cpu-0 was not touched

    flag.write_text("go")
    assert wait_job(cluster, job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")) == "COMPLETED"
    assert out.read_text().strip() == "survived on cpu-0"
    assert cluster.ensure_started()["changed"] is False


def test_scale_down_waits_for_jobs_on_removed_nodes(local_cluster, tmp_path):
    cluster = local_cluster(SMALL, drain_timeout=3)
    cluster.scale({"cpu": 3})
    flag = tmp_path / "release"
    job = sbatch(cluster, "-w", "cpu-2", "-o", str(tmp_path / "busy.txt"), "--time=5",
                 "--wrap", "while [ ! -e %s ]; do sleep 0.2; done; echo done" % flag)
    wait_job(cluster, job, ("RUNNING",))

    with pytest.raises(LocalClusterError, match="still run jobs"):
        cluster.scale({"cpu": 2})
    node = node_states(cluster)["cpu-2"]
    assert "DRAIN" in node["state_flags"] and node["reason"] == "soperator: scale-down", node
    assert job_state(cluster, job) == "RUNNING"
    assert cluster.pid("slurmd-cpu-2") is not None                    # not stopped while busy

    flag.write_text("go")
    assert wait_job(cluster, job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")) == "COMPLETED"
    cluster.scale({"cpu": 2})
    assert sorted(node_states(cluster)) == ["cpu-0", "cpu-1"]

    # Scaling back up brings cpu-2 back clean (FUTURE cleared the drain).
    cluster.scale({"cpu": 3})
    node = node_states(cluster)["cpu-2"]
    assert node["state"] == "idle" and not node["state_flags"], node


def test_stop_leaves_no_process_and_restart_keeps_state(local_cluster):
    cluster = local_cluster(SMALL)
    key = open(os.path.join(cluster.state_dir, "secrets", "munge.key"), "rb").read()
    # A job left running when the cluster stops is cancelled, its slurmstepd does not outlive the cluster.
    cluster.run(["sbatch", "-w", "cpu-1", "-o", "/dev/null", "--wrap", "sleep 300"], timeout=30)
    pids = [p["pid"] for p in cluster.status()["processes"].values()]
    assert len(pids) == 4                      # munged, slurmctld, 2 slurmd
    stopped = cluster.stop()
    assert stopped["changed"]
    assert not any(os.path.exists("/proc/%d" % pid) and _pid_alive(pid) for pid in pids)
    assert cluster.leftover_processes() == []
    assert cluster.status()["running"] is False
    assert cluster.stop()["changed"] is False

    # State is kept: the same key, and the cluster comes back.
    again = cluster.ensure_started()
    assert "generated munge key" not in again["changes"]
    assert open(os.path.join(cluster.state_dir, "secrets", "munge.key"), "rb").read() == key
    assert sorted(node_states(cluster)) == ["cpu-0", "cpu-1"]
    state_dir = cluster.state_dir
    cluster.stop(purge=True)
    assert not os.path.exists(state_dir)


TWO_PARTITIONS = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: routes, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  partitions:
    - {name: all, nodeSets: [small, big], default: true}
    - {name: big, nodeSets: [big]}
    - {name: small, nodeSets: [small]}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: small, namespace: slurm}
spec: {clusterName: routes, replicas: 1, maxReplicas: 2, resources: {cpu: "1", memory: 512Mi}, features: [small]}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: big, namespace: slurm}
spec: {clusterName: routes, replicas: 2, maxReplicas: 2, resources: {cpu: "2", memory: 1Gi}, features: [big]}
"""


def test_partitions_route_jobs_to_their_nodesets(local_cluster):
    cluster = local_cluster(TWO_PARTITIONS)
    nodes = node_states(cluster)
    assert sorted(nodes) == ["big-0", "big-1", "small-0"]
    assert sorted(nodes["big-0"]["partitions"]) == ["all", "big"]
    assert sorted(nodes["small-0"]["partitions"]) == ["all", "small"]

    def where(*args):
        out = cluster.run(["srun"] + list(args) + ["printenv", "SLURMD_NODENAME"], timeout=JOB_WAIT).stdout
        return sorted(out.split())

    assert where("-p", "big", "-N2") == ["big-0", "big-1"]
    assert where("-p", "small") == ["small-0"]
    assert where("-p", "all", "-N3") == ["big-0", "big-1", "small-0"]
    assert where("-C", "big", "-N1")[0].startswith("big-")


ACCOUNTING = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: acct, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  accounting: {enabled: true, database: {inCluster: {storage: 1Gi}}}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec: {clusterName: acct, replicas: 2, maxReplicas: 2, resources: {cpu: "1", memory: 512Mi}}
"""


def _sacct(cluster, job_id, want, timeout=JOB_WAIT):
    """Wait (bounded) until sacct shows `want` (JobID, State, NodeList) for a job: slurmctld sends job records to
    slurmdbd asynchronously, and the record of a finished job is completed in steps."""
    def shown():
        return cluster.run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobID,State,NodeList"],
                           timeout=30).stdout.split()
    wait_for(shown, "sacct to show %r for job %s" % (want, job_id), timeout, poll=1,
             done=lambda out: bool(out) and out[0].split("|") == want)


def test_accounting_records_finished_jobs(local_cluster, tmp_path):
    cluster = local_cluster(ACCOUNTING)
    assert {"mariadbd", "slurmdbd"} <= set(cluster.status()["processes"])
    clusters = cluster.run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], timeout=30).stdout.split()
    assert "acct" in clusters
    job = sbatch(cluster, "-N2", "-o", str(tmp_path / "acct-%j.out"), "--wrap", "srun true")
    assert wait_job(cluster, job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")) == "COMPLETED"
    _sacct(cluster, job, [job, "COMPLETED", "cpu-[0-1]"])
    assert cluster.ensure_started()["changed"] is False

    # The database survives a stop: after a restart the job is still there.
    cluster.stop()
    assert cluster.leftover_processes() == []
    again = cluster.ensure_started()
    assert "initialized the accounting database" not in again["changes"]
    _sacct(cluster, job, [job, "COMPLETED", "cpu-[0-1]"])


def test_missing_binary_names_the_debian_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(processes, "_SBIN_DIRS", ("/nonexistent",))
    for binary, package in (("slurmctld", "slurmctld"), ("slurmd", "slurmd"), ("munged", "munge"),
                            ("slurmdbd", "slurmdbd"), ("mariadbd", "mariadb-server")):
        with pytest.raises(LocalClusterError, match="install the Debian package '%s'" % package):
            find_binary(binary)


def test_state_dir_too_long_for_sockets_is_refused(tmp_path):
    from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
    with open(os.path.join(os.path.dirname(__file__), "..", "..", SMALL)) as f:
        model = spec.build_model(load_documents(f.read()))
    cluster = lb.LocalCluster(str(tmp_path / ("x" * 90)), model)
    with pytest.raises(LocalClusterError, match="too long"):
        cluster.directory.check_path_lengths(model)


def test_a_cluster_without_nodes_is_refused_before_any_write(tmp_path):
    """slurmctld 22.05 exits with 'no nodes configured': say so before a file or a process exists."""
    from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
    with open(os.path.join(os.path.dirname(__file__), "..", "..", SMALL)) as f:
        docs = load_documents(f.read())
    for doc in docs:
        if doc["kind"] == "NodeSet":
            doc["spec"].update(replicas=0, maxReplicas=0)
    model = spec.build_model(docs)
    state = tmp_path / "state"
    with pytest.raises(LocalClusterError, match="needs at least one node"):
        lb.LocalCluster(str(state), model).ensure_started()
    assert not state.exists()
