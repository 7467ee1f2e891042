"""What the tests against real Slurm daemons (the local backend) share besides fixtures: their bounded waits (on
tests/waiting.py's), a job's state, loading a spec, and checking slurmctld's view of a cluster's nodes (the binaries
they need: tests/requires.py). A module of its own, not conftest.py: test files import it by name, and under one
pytest session several folders have a conftest.
"""
import json
import os

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

from waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
# Bounded waits: daemon start/stop, and jobs on a node being removed.
TIMEOUT = float(os.environ.get("SOPERATOR_TEST_TIMEOUT", "60"))
DRAIN_TIMEOUT = float(os.environ.get("SOPERATOR_TEST_DRAIN_TIMEOUT", "60"))
# A job to start or to end.
JOB_WAIT = 60
# The states a job ends in.
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def job_state(cluster, job_id):
    """A job's JobState, as slurmctld says it."""
    out = cluster.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=30).stdout
    for word in out.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    raise AssertionError("no JobState in %r" % out)


def wait_job(cluster, job_id, states=ENDED, timeout=JOB_WAIT):
    """The job's state once it is one of `states` (by default: ended); the test fails after `timeout` seconds."""
    return wait_for(lambda: job_state(cluster, job_id), "job %s to be %s" % (job_id, " or ".join(states)), timeout,
                    poll=0.3, done=lambda state: state in states)


def load_model(spec_or_path):
    text = spec_or_path
    if "\n" not in spec_or_path:
        path = spec_or_path if os.path.isabs(spec_or_path) else os.path.join(ROOT, spec_or_path)
        with open(path) as f:
            text = f.read()
    return spec.build_model(load_documents(text))


def _gres(text):
    """sinfo's gres field ("gpu:h100:8(S:0-1)" or "") as sorted name:type:count strings."""
    out = []
    for item in (text or "").split(","):
        item = item.split("(")[0].strip()
        if item:
            out.append(item)
    return sorted(out)


def assert_nodes_as_specified(cluster, model, reason):
    """Every node of every NodeSet (all max_replicas of them, revealed from FUTURE with `state=down`) is listed by
    slurmctld with the spec's partitions, CPUs, memory, topology, GRES and features, and nothing else is; every
    partition holds exactly its NodeSets' nodes. -> sinfo's nodes by name."""
    defined = [ns for ns in model.node_sets if ns.max_replicas > 0]
    for ns in defined:
        cluster.run(["scontrol", "update", "nodename=%s" % ns.node_range, "state=down", "reason=%s" % reason])
    # slurmctld's own view, every field: `sinfo --json` as it prints it (the backend's sinfo_nodes keeps a few)
    nodes = dict((n["name"], n) for n in json.loads(cluster.run(["sinfo", "--json"], timeout=30).stdout)["nodes"])

    expected_names = set()
    for ns in defined:
        names = hostlist.expand(ns.node_range)
        assert len(names) == ns.max_replicas
        expected_names.update(names)
        partitions = sorted(p.name for p in model.partitions if ns.name in p.node_sets)
        if model.health_checks.active:          # the hidden partition of active checks holds every node
            partitions = sorted(partitions + [c.CHECKS_PARTITION])
        for name in names:
            node = nodes.get(name)
            assert node is not None, "%s (NodeSet %s) is not listed by sinfo" % (name, ns.name)
            assert sorted(node["partitions"]) == partitions, name
            assert node["cpus"] == ns.cpus, name
            assert node["real_memory"] == ns.real_memory_mib, name
            if ns.sockets:
                assert node["sockets"] == ns.sockets, name
            if ns.cores_per_socket:
                assert node["cores"] == ns.cores_per_socket, name
            if ns.threads_per_core:
                assert node["threads"] == ns.threads_per_core, name
            assert _gres(node["gres"]) == sorted(str(g) for g in ns.gres if g.count > 0), name
            assert sorted(f for f in node["features"].split(",") if f) == sorted(ns.features), name
    assert set(nodes) == expected_names                     # nothing else

    # Every partition of the spec exists, with exactly its NodeSets' nodes.
    for p in model.partitions:
        want = sorted(n for ns in defined if ns.name in p.node_sets for n in hostlist.expand(ns.node_range))
        got = sorted(n for n, node in nodes.items() if p.name in node["partitions"])
        assert got == want, p.name
    return nodes
