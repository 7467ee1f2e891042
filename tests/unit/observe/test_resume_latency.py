"""Resume latency of ephemeral NodeSets (pure): the request time our ResumeProgram leaves in a node's Comment, and the
start of the slurmd that registered, as soperator_slurm_node_resume_seconds per NodeSet and node."""
import json

from ansible_collections.soperator.slurm.plugins.module_utils.node import power_program
from ansible_collections.soperator.slurm.plugins.module_utils.observe import metrics
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord, parse_sinfo_json
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import RESUME_REQUESTED

PREFIX = "soperator:"
ASKED = 1795000000


def node(name, flags=("CLOUD",), comment="%s resume-requested %d" % (PREFIX, ASKED), started=ASKED + 17,
         state="IDLE"):
    return NodeRecord(name, state, tuple(flags), comment=comment, slurmd_start_time=started)


def latencies(nodes, prefix=PREFIX):
    (family,) = metrics.resume_families(nodes, prefix)
    return dict(((s.labels["nodeset"], s.labels["node"]), s.value) for s in family.samples)


def test_the_program_and_the_exporter_agree_on_the_comment():
    assert power_program.RESUME_REQUESTED == RESUME_REQUESTED


def test_an_up_node_reports_request_to_slurmd_start():
    assert latencies([node("gpu-3"), node("burst-0", started=ASKED + 4, state="ALLOCATED")]) == {
        ("gpu", "gpu-3"): 17, ("burst", "burst-0"): 4}


def test_no_latency_where_there_is_nothing_true_to_report():
    assert latencies([
        node("gpu-0", flags=()),                                        # not a CLOUD node
        node("gpu-1", flags=("CLOUD", "POWERING_UP")),                  # still coming up
        node("gpu-2", flags=("CLOUD", "POWERED_DOWN")),                 # down again
        node("gpu-3", started=ASKED - 30, state="DOWN"),                # its resume failed: the slurmd is an old one
        node("gpu-4", started=None),                                    # never registered
        node("gpu-5", comment="maintenance: resume-requested %d" % ASKED),   # not our prefix
        node("gpu-6", comment="soperator: resume-requested soon"),      # not a time
        node("gpu-7", comment="an admin's note"),
    ]) == {}
    # without a prefix nothing is ours
    assert latencies([node("gpu-3")], prefix="") == {}


def test_sinfo_json_comment_is_read():
    doc = {"nodes": [{"name": "burst-1", "state": "idle", "state_flags": ["CLOUD"], "comment": "%s %s %d" % (
        PREFIX, RESUME_REQUESTED, ASKED), "slurmd_start_time": ASKED + 9, "partitions": ["burst"]}]}
    (record,) = parse_sinfo_json(json.dumps(doc))
    assert record.comment == "soperator: resume-requested %d" % ASKED
    assert metrics.resume_requested_at(record, PREFIX) == ASKED
    assert latencies([record]) == {("burst", "burst-1"): 9}
