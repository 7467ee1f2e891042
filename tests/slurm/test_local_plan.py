"""Check mode and the real run share one plan (local/plan.py): with 12 nodes, the order check mode reports is the
order the real run executes - starting, scaling down and stopping - against real slurmctld/slurmd."""
import dataclasses
import re

from local_helpers import load_model

from ansible_collections.soperator.slurm.plugins.module_utils.local import plan

SPEC = """\
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: twelve, namespace: slurm}
spec: {jail: {volume: {size: 1Gi}}}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec: {clusterName: twelve, replicas: 12, maxReplicas: 12, resources: {cpu: "1", memory: 256Mi}}
"""


def _names(actions, verb):
    """The daemon/node named by each action starting with `verb`, in order."""
    out = []
    for a in actions:
        m = re.match(r"%s (\S+)" % verb, a)
        if m:
            out.append(m.group(1).rstrip(","))
    return out


def _with_replicas(model, replicas):
    node_sets = [dataclasses.replace(ns, replicas=replicas) for ns in model.node_sets]
    return dataclasses.replace(model, node_sets=tuple(node_sets))


def test_stop_order_is_natural():
    names = ["slurmd-cpu-10", "munged", "slurmd-cpu-2", "slurmctld", "sshd", "slurmd-cpu-1"]
    assert plan.stop_order(names) == ["sshd", "slurmd-cpu-1", "slurmd-cpu-2", "slurmd-cpu-10", "slurmctld",
                                      "munged"]


def test_twelve_nodes_check_mode_order_is_the_executed_order(local_cluster):
    model = load_model(SPEC)
    cluster = local_cluster(model=model, start=False)

    # A fresh start: what check mode says it would start is what starts, in that order.
    planned = _names(cluster.plan_present(model, cluster.status()), "would start")
    done = cluster.ensure_started(model)
    assert planned == _names(done["changes"], "started") == plan.start_order(model)
    assert planned.index("slurmd-cpu-2") < planned.index("slurmd-cpu-10")

    # Scale down 12 -> 2: the nodes check mode says it drains and removes are those the run stops, in its order.
    two = _with_replicas(model, 2)
    planned = _names(cluster.plan_present(two, cluster.status()), "would drain")
    done = cluster.ensure_started(two)
    stopped = list(_names(done["changes"], "stopped slurmd"))
    assert planned == stopped == ["cpu-%d" % i for i in range(2, 12)]

    # Back to 12, then stop: check mode's stop order is the order stop() stops them in.
    cluster.ensure_started(model)
    planned = _names(cluster.plan_absent(False, cluster.status()), "would stop")
    done = cluster.stop()
    assert planned == done["stopped"]
    assert planned.index("slurmd-cpu-2") < planned.index("slurmd-cpu-10") < planned.index("slurmctld")
