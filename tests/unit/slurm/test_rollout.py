"""slurm/rollout.py: the planner of Slurm-aware rolling upgrades (pure), and the executor against the fake slurmctld
of test_slurm_removal (squeue honours --states) with an injected clock and a replacer that restarts the fake node."""
import pytest

from test_slurm_nodes import Clock
from test_slurm_removal import FakeSlurmWithJobs

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import rollout
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import Remediator, Replacer
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmRunner

PREFIX = "soperator:"
UPGRADE = "soperator: upgrade"
NEW, OLD = "cpu-new", "cpu-old"


def nodes(n):
    return ["cpu-%d" % i for i in range(n)]


def rec(name, state="IDLE", flags=(), reason=""):
    return NodeRecord(name=name, base_state=state, flags=tuple(flags), reason=reason)


def plan(revisions, records=None, jobs=None, max_unavailable=1, names=None):
    names = names or sorted(revisions)
    records = records if records is not None else {}
    for name in names:
        records.setdefault(name, rec(name))
    return rollout.plan(names, revisions, NEW, records, jobs or {}, max_unavailable, PREFIX)


def summary(the_plan):
    return [(s.node, s.batch, s.step) for s in the_plan.steps]


def test_nothing_outdated_plans_nothing():
    p = plan({"cpu-0": NEW, "cpu-1": NEW})
    assert p.steps == [] and not p.acts and p.batches == []


def test_idle_nodes_first_one_batch_each_within_max_unavailable():
    # cpu-0 runs a job: the idle ones go first, one at a time; cpu-0 is drained last and waited for.
    p = plan({"cpu-0": OLD, "cpu-1": OLD, "cpu-2": OLD}, records={"cpu-0": rec("cpu-0", "ALLOCATED")},
             jobs={"cpu-0": 1})
    assert summary(p) == [("cpu-1", 1, "replace"), ("cpu-2", 2, "replace"), ("cpu-0", 3, "drain")]
    assert "1 job(s) run on it" in p.steps[2].reason and UPGRADE in p.steps[2].reason
    assert "revision cpu-old, not cpu-new" in p.steps[0].reason


def test_batches_hold_max_unavailable_nodes():
    p = plan({n: OLD for n in nodes(5)}, records={"cpu-1": rec("cpu-1", "MIXED")}, jobs={"cpu-1": 2},
             max_unavailable=2)
    assert summary(p) == [("cpu-0", 1, "replace"), ("cpu-2", 1, "replace"), ("cpu-3", 2, "replace"),
                          ("cpu-4", 2, "replace"), ("cpu-1", 3, "drain")]


def test_nodes_already_down_count_against_max_unavailable():
    records = {"cpu-3": rec("cpu-3", "IDLE", ["DRAIN"], "admin: bad dimm")}
    p = plan({n: OLD for n in nodes(4)}, records=records, max_unavailable=2)
    # one slot left: batches of one; cpu-3 (someone else's drain) is left alone and counted
    assert summary(p) == [("cpu-0", 1, "replace"), ("cpu-1", 2, "replace"), ("cpu-2", 3, "replace"),
                          ("cpu-3", 0, "skipped")]
    assert "held by someone else" in p.steps[-1].reason
    assert p.unavailable == ["cpu-3"]


def test_a_current_node_that_is_down_counts_too():
    # cpu-0 is on the new revision but not responding: out of service, so with maxUnavailable 1 nothing may start.
    records = {"cpu-0": rec("cpu-0", "IDLE", ["NOT_RESPONDING"])}
    p = plan({"cpu-0": NEW, "cpu-1": OLD, "cpu-2": OLD}, records=records)
    assert summary(p) == [("cpu-1", 0, "skipped"), ("cpu-2", 0, "skipped")]
    assert "maxUnavailable 1 reached: 1 worker(s) out of service (cpu-0)" in p.steps[0].reason
    assert not p.acts


def test_not_registered_and_podless_nodes_count_as_out_of_service():
    # cpu-1 has no pod (the StatefulSet makes it new), cpu-2's slurmd never registered (absent from sinfo).
    records = {"cpu-0": rec("cpu-0"), "cpu-3": rec("cpu-3")}
    p = rollout.plan(nodes(4), {"cpu-0": OLD, "cpu-1": None, "cpu-2": OLD, "cpu-3": OLD}, NEW, records, {}, 3,
                     PREFIX)
    assert summary(p) == [("cpu-0", 1, "replace"), ("cpu-3", 2, "replace"), ("cpu-1", 0, "skipped"),
                          ("cpu-2", 0, "skipped")]
    assert sorted(p.unavailable) == ["cpu-1", "cpu-2"]


def test_a_node_drained_by_the_roll_keeps_its_slot_and_is_replaced_once_idle():
    busy = {"cpu-0": rec("cpu-0", "ALLOCATED", ["DRAIN"], UPGRADE)}
    p = plan({"cpu-0": OLD, "cpu-1": OLD}, records=busy, jobs={"cpu-0": 1})
    # the drained, busy node holds the only slot: it is waited for; cpu-1 comes after it
    assert summary(p) == [("cpu-0", 1, "wait"), ("cpu-1", 2, "replace")]
    assert p.steps[0].drain is False and p.steps[1].drain is True
    idle = {"cpu-0": rec("cpu-0", "IDLE", ["DRAIN"], UPGRADE)}
    p = plan({"cpu-0": OLD, "cpu-1": OLD}, records=idle)
    assert summary(p) == [("cpu-0", 1, "replace"), ("cpu-1", 2, "replace")]
    # replaced already (new revision) but not resumed: only re-checked and resumed
    p = plan({"cpu-0": NEW, "cpu-1": OLD}, records=idle)
    assert summary(p) == [("cpu-0", 1, "recheck"), ("cpu-1", 2, "replace")]


def test_foreign_scale_down_and_health_drains_are_left_alone():
    records = {"cpu-0": rec("cpu-0", "DOWN", (), "Not responding"),
               "cpu-1": rec("cpu-1", "IDLE", ["DRAIN"], "soperator: scale-down"),
               "cpu-2": rec("cpu-2", "IDLE", ["DRAIN"], "soperator: health:munge unmunge failed"),
               "cpu-3": rec("cpu-3")}
    p = plan({n: OLD for n in nodes(4)}, records=records, max_unavailable=4)
    steps = dict((s.node, s) for s in p.steps)
    assert summary(p)[0] == ("cpu-3", 1, "replace")
    assert [steps[n].step for n in ("cpu-0", "cpu-1", "cpu-2")] == ["skipped"] * 3
    assert "held by someone else" in steps["cpu-0"].reason
    assert "scale-down" in steps["cpu-1"].reason
    assert "the remediation replaces it" in steps["cpu-2"].reason


def test_a_completing_node_is_busy():
    records = {"cpu-0": rec("cpu-0", "IDLE", ["COMPLETING"])}
    p = plan({"cpu-0": OLD, "cpu-1": OLD}, records=records)
    assert summary(p) == [("cpu-1", 1, "replace"), ("cpu-0", 2, "drain")]


def test_max_unavailable_must_be_positive():
    with pytest.raises(ValueError):
        plan({"cpu-0": OLD}, max_unavailable=0)


# --- the executor ----------------------------------------------------------------------------------------------

class Checker(object):
    def __init__(self, unhealthy=()):
        self.unhealthy = set(unhealthy)
        self.checked = []

    def check(self, node):
        self.checked.append(node)
        healthy = node not in self.unhealthy
        return healthy, {"healthy": healthy, "failed": [] if healthy else [{"check": "munge", "detail": "x"}]}


class Pods(Replacer):
    """The Kubernetes side: each node's pod revision; replacing a node gives its pod the update revision and
    restarts its (fake) slurmd, so it registers again with a newer start time."""

    def __init__(self, slurm, revisions):
        self.slurm = slurm
        self.revisions = dict(revisions)
        self.replaced = []

    def inputs(self):
        return sorted(self.revisions), dict(self.revisions), NEW

    def replace(self, node, check_mode=False):
        assert not check_mode
        assert not self.slurm.busy(node), "%s replaced while a job runs on it" % node
        self.replaced.append(node)
        self.revisions[node] = NEW
        self.slurm.restart(node)
        return {"pod": node}


class Slurm(FakeSlurmWithJobs):
    """The fake slurmctld with slurmd start times (a restart registers anew) and jobs that end when told."""

    def __init__(self, names):
        super(Slurm, self).__init__(dict((n, "idle") for n in names))
        self.starts = dict((n, 1000) for n in names)

    def busy(self, node):
        return any(node in where for _state, where in self.job_list)

    def restart(self, node):
        self.starts[node] += 100

    def exec(self, argv, timeout):
        if argv[:2] == ["sinfo", "--json"]:
            for node in self.nodes.values():     # a resumed node's slurmd answers the next ping
                node["state_flags"] = [f for f in node["state_flags"] if f != "NOT_RESPONDING"]
        rc, out, err = super(Slurm, self).exec(argv, timeout)
        if argv[:2] == ["sinfo", "--json"]:
            import json
            data = json.loads(out)
            for node in data["nodes"]:
                node["slurmd_start_time"] = self.starts[node["name"]]
            out = json.dumps(data)
        return rc, out, err


def make(names, revisions, unhealthy=(), max_unavailable=1, timeout=30):
    slurm = Slurm(names)
    clock = Clock(slurm)
    runner = SlurmRunner(slurm, retries=1, timeout=5, sleep=clock.sleep)
    pods = Pods(slurm, revisions)
    checker = Checker(unhealthy)
    remediator = Remediator(runner, PREFIX, checker, replacer=pods, register_timeout=30, poll=5,
                            sleep=clock.sleep, clock=clock)
    roll = rollout.Rollout(runner, PREFIX, pods.inputs, remediator, max_unavailable, timeout, "cpu", poll=5,
                           sleep=clock.sleep, clock=clock)
    return slurm, pods, roll, clock


def test_rollout_replaces_idle_nodes_and_leaves_the_busy_one_drained_waiting():
    slurm, pods, roll, clock = make(nodes(3), {n: OLD for n in nodes(3)})
    slurm.nodes["cpu-0"]["state"] = "allocated"
    slurm.job_list = [("RUNNING", "cpu-0")]
    done = roll.run()
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [
        ("cpu-1", 1, "resumed"), ("cpu-2", 2, "resumed"), ("cpu-0", 3, "waiting")]
    assert done[0]["steps"] == ["drained", "replaced", "rechecked", "resumed"]
    assert pods.replaced == ["cpu-1", "cpu-2"]
    assert "DRAIN" in slurm.nodes["cpu-0"]["state_flags"] and slurm.nodes["cpu-0"]["reason"] == UPGRADE
    assert "DRAIN" not in slurm.nodes["cpu-1"]["state_flags"] and "DRAIN" not in slurm.nodes["cpu-2"]["state_flags"]
    assert clock.now >= 30      # the bounded wait for cpu-0 ran out (injected clock)
    assert roll.errors == []
    # the job ends: the next run replaces, re-checks and resumes cpu-0; the one after does nothing
    slurm.job_list = []
    slurm.nodes["cpu-0"]["state"] = "idle"
    done = roll.run()
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [("cpu-0", 1, "resumed")]
    assert done[0]["steps"] == ["replaced", "rechecked", "resumed"]
    assert pods.replaced == ["cpu-1", "cpu-2", "cpu-0"]
    calls = len(slurm.calls)
    assert roll.run() == []
    assert len(slurm.calls) == calls        # nothing outdated: not even a Slurm read


class Topology(object):
    """The topology's follow-up (kube/topology.py TopologyFollower): records what Slurm showed of the node when it
    was called; `fail` raises as a write or reconfigure that failed would."""

    def __init__(self, slurm, fail=()):
        self.slurm, self.fail, self.seen = slurm, set(fail), []

    def follow(self, node):
        from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError
        self.seen.append((node, list(self.slurm.nodes[node]["state_flags"])))
        if node in self.fail:
            raise RemediationError("its place in the topology could not be updated: reconfigure failed")
        return {"switch": "leaf-2", "changed": True, "actions": ["ran scontrol reconfigure"]}


def test_a_replaced_node_is_put_in_its_place_while_drained_before_its_resume():
    slurm, pods, roll, clock = make(nodes(2), {n: OLD for n in nodes(2)}, max_unavailable=2)
    topology = roll.remediator.topology = Topology(slurm, fail=["cpu-1"])
    done = dict((d["node"], d) for d in roll.run())
    assert done["cpu-0"]["steps"] == ["drained", "replaced", "placed", "rechecked", "resumed"]
    assert done["cpu-0"]["topology"]["switch"] == "leaf-2"
    # called after the replacement, on a node still drained: no job could land on it by the old tree
    assert [(node, "DRAIN" in flags) for node, flags in topology.seen] == [("cpu-0", True), ("cpu-1", True)]
    # a place that cannot be made true in Slurm: the node stays drained, said why, never resumed
    assert done["cpu-1"]["step"] == "left-drained" and "topology could not be updated" in done["cpu-1"]["reason"]
    assert "DRAIN" in slurm.nodes["cpu-1"]["state_flags"] and "DRAIN" not in slurm.nodes["cpu-0"]["state_flags"]
    assert roll.errors == ["cpu-1: its place in the topology could not be updated: reconfigure failed"]


def test_a_health_drained_node_is_held_so_its_own_health_check_cannot_resume_it_before_its_place():
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import read_nodes
    slurm, pods, roll, clock = make(nodes(1), {"cpu-0": NEW})
    slurm.nodes["cpu-0"].update(state_flags=["DRAIN"], reason="soperator: health:munge unmunge failed")
    restart = slurm.restart

    def restart_and_check(node):
        # the new slurmd runs the HealthCheckProgram as it starts: it resumes a node drained "<prefix> health:..."
        restart(node)
        if slurm.nodes[node]["reason"].startswith("soperator: health:"):
            slurm.nodes[node].update(state_flags=[], reason="")
    slurm.restart = restart_and_check
    remediator = roll.remediator
    topology = remediator.topology = Topology(slurm)
    entry = {"name": "cpu-0", "state": "DRAINED", "reason": slurm.nodes["cpu-0"]["reason"], "steps": []}
    remediator.restore(read_nodes(roll.runner, ["cpu-0"])["cpu-0"], entry)
    assert entry["steps"] == ["replaced", "placed", "rechecked", "resumed"], entry
    assert entry["held"] == "soperator: replacing (health:munge unmunge failed)"
    assert topology.seen == [("cpu-0", ["DRAIN"])]          # still drained when its place was made true
    assert "DRAIN" not in slurm.nodes["cpu-0"]["state_flags"]
    # without a topology that follows the pods nothing is held: the health check's own resume is enough
    slurm.nodes["cpu-0"].update(state_flags=["DRAIN"], reason="soperator: health:munge unmunge failed")
    remediator.topology = None
    entry = {"name": "cpu-0", "state": "DRAINED", "reason": slurm.nodes["cpu-0"]["reason"], "steps": []}
    remediator.restore(read_nodes(roll.runner, ["cpu-0"])["cpu-0"], entry)
    assert "held" not in entry and entry["steps"] == ["replaced", "rechecked", "resumed"]


def test_check_mode_reports_the_plan_and_changes_nothing():
    slurm, pods, roll, clock = make(nodes(3), {n: OLD for n in nodes(3)})
    slurm.job_list = [("RUNNING", "cpu-0")]
    roll.check_mode = True
    roll.remediator.check_mode = True
    done = roll.run()
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [
        ("cpu-1", 1, "replace"), ("cpu-2", 2, "replace"), ("cpu-0", 3, "drain")]
    assert slurm.updates() == [] and pods.replaced == []


def test_a_node_whose_checks_fail_stays_drained_and_keeps_its_slot():
    slurm, pods, roll, clock = make(nodes(3), {n: OLD for n in nodes(3)}, unhealthy=["cpu-0"])
    done = roll.run()
    # cpu-0 was replaced but its checks fail: it stays drained, holding the only slot, so nothing else starts
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [
        ("cpu-0", 1, "left-drained"), ("cpu-1", 0, "pending"), ("cpu-2", 0, "pending")]
    assert "an earlier batch is not back in service" in done[1]["reason"]
    # the next run re-checks cpu-0 only (it is on the new revision) and still starts nothing else
    done = roll.run()
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [
        ("cpu-0", 1, "left-drained"), ("cpu-1", 0, "pending"), ("cpu-2", 0, "pending")]
    assert done[0]["steps"] == ["rechecked", "left-drained"]
    assert pods.replaced == ["cpu-0"]
    assert slurm.nodes["cpu-0"]["reason"] == UPGRADE


def test_a_job_that_lands_on_an_idle_node_is_never_killed():
    # cpu-1 is idle when planned; a job starts on it before the drain lands: it is waited for, not replaced.
    slurm, pods, roll, clock = make(nodes(2), {n: OLD for n in nodes(2)}, max_unavailable=2)
    real_exec = slurm.exec

    def exec_with_a_job_arriving(argv, timeout):
        if argv[:2] == ["scontrol", "update"] and not slurm.job_list:
            slurm.job_list = [("RUNNING", "cpu-1")]
        return real_exec(argv, timeout)
    slurm.exec = exec_with_a_job_arriving
    done = roll.run()
    assert [(d["node"], d["step"]) for d in done] == [("cpu-0", "resumed"), ("cpu-1", "waiting")]
    assert pods.replaced == ["cpu-0"]


def test_a_node_someone_else_drains_meanwhile_is_left_alone():
    # cpu-1 is idle when planned; an admin drains it right after (before our drain): theirs stays, it is not replaced.
    slurm, pods, roll, clock = make(nodes(2), {n: OLD for n in nodes(2)}, max_unavailable=2)
    real_exec = slurm.exec

    def exec_with_an_admin(argv, timeout):
        if argv[0] == "squeue" and not slurm.nodes["cpu-1"]["reason"]:
            slurm.nodes["cpu-1"]["state_flags"].append("DRAIN")
            slurm.nodes["cpu-1"]["reason"] = "admin: dimm"
        return real_exec(argv, timeout)
    slurm.exec = exec_with_an_admin
    done = roll.run()
    assert [(d["node"], d["step"]) for d in done] == [("cpu-0", "resumed"), ("cpu-1", "skipped")]
    assert "admin: dimm" in done[1]["reason"]
    assert pods.replaced == ["cpu-0"]
    assert slurm.nodes["cpu-1"]["reason"] == "admin: dimm" and "DRAIN" in slurm.nodes["cpu-1"]["state_flags"]


def test_no_slot_no_change():
    # an admin's drain holds the only slot: the outdated nodes are reported, nothing is drained or replaced
    slurm, pods, roll, clock = make(nodes(3), {"cpu-0": NEW, "cpu-1": OLD, "cpu-2": OLD})
    slurm.nodes["cpu-0"]["state_flags"].append("DRAIN")
    slurm.nodes["cpu-0"]["reason"] = "admin: dimm"
    done = roll.run()
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [("cpu-1", 0, "skipped"), ("cpu-2", 0, "skipped")]
    assert slurm.updates() == [] and pods.replaced == []
    assert not any(rollout.acted(d) for d in done)


# --- issue 32: a batch is replaced at once and waited for at once ---------------------------------------------------

def _recording(pods, checker):
    """One list of what happened, in order: ('replace', node) and ('check', node)."""
    events = []
    replace, check = pods.replace, checker.check
    pods.replace = lambda node, check_mode=False: events.append(("replace", node)) or replace(node, check_mode)
    checker.check = lambda node: events.append(("check", node)) or check(node)
    return events


def test_a_batch_is_replaced_together_and_waited_for_together():
    slurm, pods, roll, clock = make(nodes(3), {n: OLD for n in nodes(3)}, max_unavailable=3)
    events = _recording(pods, roll.remediator.checker)
    done = roll.run()
    assert [(d["node"], d["batch"], d["step"]) for d in done] == [
        ("cpu-0", 1, "resumed"), ("cpu-1", 1, "resumed"), ("cpu-2", 1, "resumed")]
    # before: replace cpu-0, wait for it, check it, then cpu-1 ... (one registration wait per node)
    assert events == [("replace", n) for n in nodes(3)] + [("check", n) for n in nodes(3)]


def test_the_remediation_pass_waits_for_all_replacements_at_once_and_fails_only_the_late_one():
    slurm, pods, roll, clock = make(nodes(3), {n: NEW for n in nodes(3)})
    for name in nodes(3):
        slurm.nodes[name]["state_flags"] = ["DRAIN"]
        slurm.nodes[name]["reason"] = "soperator: health:munge failed"
    restart = slurm.restart
    slurm.restart = lambda node: None if node == "cpu-1" else restart(node)     # cpu-1's new slurmd never comes
    remediator = roll.remediator
    events = _recording(pods, remediator.checker)
    result = remediator.run()
    by_name = dict((n["name"], n) for n in result["nodes"])
    assert [by_name[n]["action"] for n in nodes(3)] == ["resumed", "left-drained", "resumed"]
    assert "did not register within 30s" in by_name["cpu-1"]["why"]
    assert events == [("replace", n) for n in nodes(3)] + [("check", "cpu-0"), ("check", "cpu-2")]
    assert clock.now <= 30 + 5        # one bounded wait (injected clock) for the three, not one after the other


def test_a_pass_with_nothing_to_restore_reads_slurm_twice_whatever_the_node_count():
    names = nodes(300)
    slurm, pods, roll, clock = make(names, {n: NEW for n in names})
    for i, name in enumerate(names[:200]):          # held, but not ours to restore: no per-node command
        slurm.nodes[name]["state_flags"] = ["DRAIN"]
        slurm.nodes[name]["reason"] = "hw: bad dimm" if i % 2 else "soperator: scale-down"
    calls = len(slurm.calls)
    result = roll.remediator.run()
    assert not result["changed"] and len(result["nodes"]) == 200
    assert [c[0] for c in slurm.calls[calls:]] == ["sinfo", "squeue"]     # the node list and the job list
    assert pods.replaced == [] and roll.remediator.checker.checked == []


def _drained_by_us(slurm, names):
    for name in names:
        slurm.nodes[name]["state_flags"] = ["DRAIN"]
        slurm.nodes[name]["reason"] = "soperator: health:munge failed"


def test_the_nodes_a_pass_restores_are_resumed_by_one_command():
    slurm, pods, roll, clock = make(nodes(3), {n: NEW for n in nodes(3)})
    _drained_by_us(slurm, nodes(3))
    result = roll.remediator.run()
    assert [n["action"] for n in result["nodes"]] == ["resumed"] * 3
    assert [u[2:] for u in slurm.updates()] == [["NodeName=cpu-[0-2]", "State=RESUME"]]   # before: one per node


def test_a_node_the_batch_resume_refuses_keeps_no_other_drained():
    slurm, pods, roll, clock = make(nodes(3), {n: NEW for n in nodes(3)})
    _drained_by_us(slurm, nodes(3))
    check = roll.remediator.checker.check

    def cpu_1_scaled_away_meanwhile(node):
        if node == "cpu-1":
            slurm.nodes["cpu-1"]["state"] = "future"        # set_state refuses a batch holding a FUTURE node
        return check(node)
    roll.remediator.checker.check = cpu_1_scaled_away_meanwhile
    result = roll.remediator.run()
    by_name = dict((n["name"], n) for n in result["nodes"])
    assert [by_name[n]["action"] for n in nodes(3)] == ["resumed", "left-drained", "resumed"]
    assert "resume failed" in by_name["cpu-1"]["why"] and "FUTURE" in by_name["cpu-1"]["why"]
    assert "DRAIN" not in slurm.nodes["cpu-0"]["state_flags"] + slurm.nodes["cpu-2"]["state_flags"]
    # the batch was refused before any command; then node by node
    assert [u[2] for u in slurm.updates()] == ["NodeName=cpu-0", "NodeName=cpu-2"]
