"""The exporter's parsing and metric families (pure): sdiag text, squeue lines, GRES strings, drain reasons."""
import os

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.soperator.slurm.plugins.module_utils.observe import exporter, metrics
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmCommandError

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PREFIX = "soperator:"


def test_sdiag_of_slurm_22_05():
    with open(os.path.join(FIXTURES, "sdiag-22.05.txt")) as f:
        parsed = metrics.parse_sdiag(f.read())
    assert parsed["server"]["Server thread count"] >= 1
    assert "Agent queue size" in parsed["server"] and "DBD Agent queue size" in parsed["server"]
    assert "Jobs submitted" in parsed["server"]
    assert set(["Last cycle", "Mean cycle", "Total cycles"]) <= set(parsed["main"])
    assert "Total backfilled jobs (since last slurm start)" in parsed["backfill"]
    assert parsed["rpc"]["REQUEST_PARTITION_INFO"][0] >= 1
    # the per-user table is not read: users are not a bounded label
    assert all(k.startswith(("REQUEST_", "MESSAGE_", "RESPONSE_")) for k in parsed["rpc"])


def test_sdiag_sections_keep_their_own_last_cycle():
    text = ("Server thread count:  7\nMain schedule statistics (microseconds):\n\tLast cycle:   1500\n"
            "Backfilling stats\n\tLast cycle: 250000\n\tTotal backfilled jobs (since last slurm start): 12\n"
            "Remote Procedure Call statistics by message type\n"
            "\tREQUEST_PING                            ( 1008) count:5      ave_time:100    total_time:500\n"
            "Remote Procedure Call statistics by user\n\troot            (       0) count:21     ave_time:196    "
            "total_time:4122\n")
    parsed = metrics.parse_sdiag(text)
    assert parsed["main"]["Last cycle"] == 1500 and parsed["backfill"]["Last cycle"] == 250000
    assert parsed["rpc"] == {"REQUEST_PING": (5, 500)}
    fams = dict((f.name, f) for f in metrics.scheduler_families(parsed))
    assert fams["soperator_slurm_scheduler_last_cycle_seconds"].samples[0].value == 0.0015
    assert fams["soperator_slurm_backfill_last_cycle_seconds"].samples[0].value == 0.25
    backfilled = fams["soperator_slurm_backfill_jobs"]
    assert backfilled.type == "counter" and backfilled.samples[0].value == 12
    rpc = fams["soperator_slurm_rpc_duration_seconds"]
    assert [(s.labels, s.value) for s in rpc.samples] == [({"type": "REQUEST_PING"}, 0.0005)]


def test_squeue_lines_count_each_partition_a_job_may_run_in():
    jobs = metrics.parse_squeue_jobs("main|PENDING|Resources\nmain,gpu|PENDING|Priority\nmain|RUNNING|None\n")
    assert jobs == [("main", "pending", "Resources"), ("main", "pending", "Priority"), ("gpu", "pending", "Priority"),
                    ("main", "running", "None")]
    fams = dict((f.name, f) for f in metrics.job_families(jobs))
    assert sorted((s.labels["partition"], s.labels["reason"], s.value)
                  for s in fams["soperator_slurm_partition_jobs_pending"].samples) == [
        ("gpu", "Priority", 1), ("main", "Priority", 1), ("main", "Resources", 1)]


def test_pending_reasons_lose_their_node_lists():
    assert metrics.pending_reason("ReqNodeNotAvail, UnavailableNodes:cpu-[1-3]") == "ReqNodeNotAvail"
    assert metrics.pending_reason("(Resources)") == "Other"
    assert metrics.pending_reason("QOSMaxGRESPerUser") == "QOSMaxGRESPerUser"


def test_gpu_counts_of_gres_strings():
    assert metrics.gpu_count("gpu:h100:8(S:0-1)") == 8
    assert metrics.gpu_count("gpu:h100:2(IDX:0-1),gpu:a100:1(IDX:2)") == 3
    assert metrics.gpu_count("gpu:4,nic:2") == 4
    assert metrics.gpu_count("gpu:a100:0(IDX:N/A)") == 0
    assert metrics.gpu_count("") == 0 and metrics.gpu_count("nic:2") == 0


def test_drain_labels_name_our_mechanism_never_the_free_text():
    assert metrics.drain_labels("soperator: health:munge munged does not answer", PREFIX) == (
        "soperator", "health_check", "munge")
    assert metrics.drain_labels("soperator: check:nccl-bw 120 GB/s < 400", PREFIX) == (
        "soperator", "active_check", "nccl-bw")
    assert metrics.drain_labels("soperator: scale-down", PREFIX) == ("soperator", "scale-down", "")
    assert metrics.drain_labels("soperator: upgrade", PREFIX) == ("soperator", "upgrade", "")
    assert metrics.drain_labels("soperator: replacing the PSU of rack 12", PREFIX) == ("soperator", "manual", "")
    assert metrics.drain_labels("Kill task failed", PREFIX) == ("other", "other", "")
    assert metrics.drain_labels("soperator: health:" + "x" * 200, PREFIX) == ("soperator", "health_check", "other")


def _node(name, state="IDLE", flags=(), reason="", **kw):
    return NodeRecord(name=name, base_state=state, flags=tuple(flags), reason=reason, partitions=("main",), **kw)


def test_node_and_partition_families():
    nodes = [_node("gpu-0", "MIXED", cpus=8, alloc_cpus=2, real_memory=1024, alloc_memory=512,
                   gres="gpu:h100:4(S:0)", gres_used="gpu:h100:1(IDX:0)"),
             _node("gpu-1", "IDLE", ("DRAIN",), "soperator: health:gpu 3 of 4 GPUs", cpus=8, alloc_cpus=0,
                   gres="gpu:h100:4"),
             _node("gpu-2", "IDLE", ("NOT_RESPONDING",), cpus=8, alloc_cpus=0)]
    fams = dict((f.name, f) for f in metrics.node_families(nodes, PREFIX) + metrics.partition_families(nodes))

    def samples(name):
        return sorted((tuple(sorted(s.labels.items())), s.value) for s in fams[name].samples)
    assert samples("soperator_slurm_node_state") == [((("node", "gpu-0"), ("state", "mixed")), 1),
                                                     ((("node", "gpu-1"), ("state", "drained")), 1),
                                                     ((("node", "gpu-2"), ("state", "idle")), 1)]
    assert samples("soperator_slurm_node_drain") == [
        ((("check", "gpu"), ("kind", "health_check"), ("node", "gpu-1"), ("owner", "soperator")), 1)]
    assert [v for _l, v in samples("soperator_slurm_node_responding")] == [1, 1, 0]
    assert samples("soperator_slurm_node_memory_allocated_bytes") == [((("node", "gpu-0"),), 512 * 1024 * 1024)]
    assert samples("soperator_slurm_partition_gpus") == [((("partition", "main"),), 8)]
    assert samples("soperator_slurm_partition_gpus_allocated") == [((("partition", "main"),), 1)]
    assert samples("soperator_slurm_partition_cpus_allocated") == [((("partition", "main"),), 2)]
    assert samples("soperator_slurm_partition_memory_bytes") == [((("partition", "main"),), 1024 * 1024 * 1024)]
    assert samples("soperator_slurm_partition_memory_allocated_bytes") == [((("partition", "main"),),
                                                                            512 * 1024 * 1024)]


class _Runner(object):
    """Answers scontrol/squeue/sdiag as a runner does, or fails the commands it is told to."""
    nodes_by_scontrol = False  # sinfo --json lists nodes, as 22.05's does

    def __init__(self, fail=()):
        self.fail = fail

    def run(self, argv, parse=None, check=True):
        if argv[0] in self.fail:
            raise SlurmCommandError("%s failed (rc=1): Unable to contact slurm controller" % argv[0])
        raise AssertionError("not reached in these tests: %r" % (argv,))


def test_a_failed_scrape_says_slurm_up_0_and_reports_no_empty_cluster():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter.SlurmCollector(lambda deadline: _Runner(fail=("scontrol", "squeue", "sdiag"))))
    text = generate_latest(registry).decode()
    names = set(f.name for f in text_string_to_metric_families(text))
    assert "soperator_slurm_up" in names and "soperator_slurm_exporter_command_failed" in names
    assert not names & {"soperator_slurm_node_state", "soperator_slurm_partition_jobs", "soperator_slurm_partition_nodes", "soperator_slurm_rpc_calls"}
    values = dict((s.name, s.value) for f in text_string_to_metric_families(text) for s in f.samples if not s.labels)
    assert values["soperator_slurm_up"] == 0
