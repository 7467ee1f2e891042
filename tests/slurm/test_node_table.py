"""The exporter's node table (slurm/nodes.py read_node_table: one `scontrol --oneliner show node`, issue 32: 22.05's
`sinfo --json` took seconds at 5,000 nodes) says of every node what `sinfo --json` says, on a real slurmctld +
slurmd (22.05): a running job's allocation, a drain whose reason holds ' Comment=', a node's Comment, a node down."""
from waiting import wait_for

from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import read_node_table, read_sinfo

SMALL = "examples/small-cpu.yml"          # cpu-0, cpu-1 running; cpu-[2-3] FUTURE
# What the exporter reports of a node (observe/metrics.py).
FIELDS = ("name", "state", "flags", "reason", "reason_set_by_user", "reason_changed_at", "partitions", "gres",
          "gres_used", "features", "cpus", "alloc_cpus", "real_memory", "alloc_memory", "slurmd_start_time",
          "comment")


def _table(records):
    return dict((name, dict((f, getattr(r, f)) for f in FIELDS)) for name, r in records.items())


def test_the_node_table_says_what_sinfo_says(local_cluster):
    cluster = local_cluster(SMALL)
    runner = cluster.slurm()
    job = cluster.run(["sbatch", "--parsable", "-w", "cpu-0", "-o", "/dev/null", "--wrap", "sleep 120"],
                      timeout=30).stdout.strip()
    cluster.run(["scontrol", "update", "NodeName=cpu-1", "State=DRAIN", "Reason=admin: cabling Comment=x [y]"],
                timeout=30)
    cluster.run(["scontrol", "update", "NodeName=cpu-0", "Comment=soperator: resume-requested 1700000000"],
                timeout=30)
    cluster.run(["scontrol", "update", "NodeName=cpu-2", "State=DOWN", "Reason=soperator: not started"], timeout=30)
    wait_for(lambda: read_sinfo(runner)["cpu-0"].alloc_cpus, "job %s to run on cpu-0" % job, 60)
    by_sinfo, by_scontrol = _table(read_sinfo(runner)), _table(read_node_table(runner))
    assert sorted(by_scontrol) == ["cpu-0", "cpu-1", "cpu-2"]         # cpu-3 is FUTURE: hidden by both
    assert by_scontrol == by_sinfo
    assert by_scontrol["cpu-1"]["reason"] == "admin: cabling Comment=x [y]" and by_scontrol["cpu-1"]["reason_changed_at"]
    assert by_scontrol["cpu-0"]["comment"] == "soperator: resume-requested 1700000000"
    assert by_scontrol["cpu-0"]["slurmd_start_time"] and by_scontrol["cpu-0"]["alloc_cpus"] > 0
    cluster.run(["scancel", job], timeout=30)
