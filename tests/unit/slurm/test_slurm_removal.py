"""slurm/removal.py, the one node-removal path of both backends, against the fake slurmctld of test_slurm_nodes with
an squeue that honours --states as 22.05 does, and an injected clock (no real waiting)."""
import pytest

from test_slurm_nodes import Clock, FakeSlurm

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import removal
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmRunner

PREFIX = "soperator:"


class FakeSlurmWithJobs(FakeSlurm):
    """self.job_list: [(state, hostlist)]; squeue prints the node list of each job whose state it was asked for."""

    def __init__(self, nodes):
        super(FakeSlurmWithJobs, self).__init__(nodes)
        self.job_list = []

    def exec(self, argv, timeout):
        if argv and argv[0] == "squeue":
            self.calls.append(list(argv))
            states = [a.split("=", 1)[1].split(",") for a in argv if a.startswith("--states=")]
            wanted = states[0] if states else ["PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING"]
            return 0, "".join("%s\n" % where for state, where in self.job_list if state in wanted), ""
        return super(FakeSlurmWithJobs, self).exec(argv, timeout)


def make(nodes):
    slurm = FakeSlurmWithJobs(nodes)
    clock = Clock(slurm)
    return slurm, SlurmRunner(slurm, retries=1, timeout=5, sleep=clock.sleep), clock


def remove(runner, clock, nodes, timeout=30, **kw):
    return removal.remove_nodes(runner, nodes, PREFIX, timeout, sleep=clock.sleep, clock=clock, poll=5, **kw)


def test_removed_nodes_are_the_highest_ordinals():
    assert removal.removed_nodes("gpu", 6, 4) == ["gpu-5", "gpu-4"]
    assert removal.removed_nodes("gpu", 2, 0) == ["gpu-1", "gpu-0"]
    assert removal.removed_nodes("gpu", 2, 3) == []


def test_a_configuring_job_keeps_the_node_in_the_cluster():
    # A job whose nodes are still booting holds them: removing the node under it would kill it at its start.
    slurm, runner, clock = make({"w-0": "idle", "w-1": "allocated"})
    slurm.job_list = [("CONFIGURING", "w-1")]
    with pytest.raises(removal.ScaleDownError) as e:
        remove(runner, clock, ["w-1"])
    assert "w-1 still run jobs after 30s" in str(e.value)
    assert e.value.actions == ["drained w-1"]
    assert clock.now == 30          # bounded by the injected clock, not by the wall clock
    assert slurm.nodes["w-1"]["state"] != "future" and "DRAIN" in slurm.nodes["w-1"]["state_flags"]
    assert [c for c in slurm.updates() if "State=FUTURE" in c] == []


def test_removal_waits_until_the_jobs_end_then_stops_and_removes():
    slurm, runner, clock = make({"w-%d" % i: "idle" for i in range(4)})
    slurm.job_list = [("RUNNING", "w-[2-3]"), ("PENDING", "w-0")]
    stopped = []

    def stop_nodes(nodes):
        stopped.append(list(nodes))
        return ["stopped slurmd %s" % n for n in nodes]

    def sleep(seconds):
        Clock.sleep(clock, seconds)
        if clock.now >= 10:
            slurm.job_list = [("PENDING", "w-0")]   # a pending job holds no node
    clock.sleep = sleep
    actions = remove(runner, clock, ["w-3", "w-2"], stop_nodes=stop_nodes)
    assert actions == ["drained w-[2-3]", "waited 10s until w-[2-3] ran no job", "stopped slurmd w-3",
                       "stopped slurmd w-2", "removed w-[2-3] from Slurm (state FUTURE)"]
    assert slurm.updates() == [
        ["scontrol", "update", "NodeName=w-[2-3]", "State=DRAIN", "Reason=soperator: scale-down"],
        ["scontrol", "update", "NodeName=w-[2-3]", "State=FUTURE"]]
    assert stopped == [["w-3", "w-2"]]
    assert [slurm.nodes[n]["state"] for n in ("w-0", "w-1")] == ["idle", "idle"]


def test_check_mode_changes_nothing():
    slurm, runner, clock = make({"w-0": "idle", "w-1": "allocated"})
    slurm.job_list = [("RUNNING", "w-1")]
    actions = remove(runner, clock, ["w-1", "w-0"], check_mode=True)
    assert actions[0] == "would drain %s (reason 'soperator: scale-down')" % hostlist.compress(["w-0", "w-1"])
    assert "wait up to 30s for the jobs on w-1" in actions[1]
    assert slurm.updates() == [] and clock.sleeps == []


def test_a_node_slurm_cannot_show_fails_closed():
    slurm, runner, clock = make({"w-0": "idle"})
    with pytest.raises(removal.ScaleDownError) as e:
        remove(runner, clock, ["w-0", "w-9"])
    assert "cannot read the state of" in str(e.value) and slurm.updates() == []
