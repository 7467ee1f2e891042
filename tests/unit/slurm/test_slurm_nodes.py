"""slurm_nodes / slurm_runner / args: parsing of real Slurm 22.05 output, drain planning, set_state against a fake
slurmctld (the real-daemon tests are in tests/slurm/test_slurm_drain.py)."""
import copy
import json
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import args as slurm_args
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import nodes as sn
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, LocalTransport, SlurmCommandError, SlurmOutputError, SlurmRunner, SlurmUnavailable,
    TransientError, format_command)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import (
    SinfoReportedErrors, parse_scontrol_nodes, parse_sinfo_json, parse_squeue_nodes)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "slurm_22.05")
PREFIX = "soperator:"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def by_name(records):
    return dict((r.name, r) for r in records)


# ---------------------------------------------------------------------------------------------------------------------
# Parsing real `sinfo --json` output (captured from slurmctld/slurmd 22.05.8)


def test_idle_nodes():
    nodes = by_name(parse_sinfo_json(fixture("sinfo_idle.json")))
    assert list(nodes) == ["w-0", "w-1"]
    w0 = nodes["w-0"]
    assert (w0.state, w0.base_state, w0.flags, w0.reason) == ("IDLE", "IDLE", (), "")
    assert w0.partitions == ("main", "other") and w0.cpus == 2 and w0.alloc_cpus == 0
    assert not w0.drain and not w0.busy and not w0.held and not w0.drained


def test_running_jobs_make_nodes_busy():
    nodes = by_name(parse_sinfo_json(fixture("sinfo_running.json")))
    assert nodes["w-0"].state == "MIXED" and nodes["w-0"].busy
    assert nodes["w-1"].state == "ALLOCATED" and nodes["w-1"].alloc_cpus == 2


def test_draining_then_drained():
    draining = by_name(parse_sinfo_json(fixture("sinfo_draining.json")))
    assert [draining[n].state for n in ("w-0", "w-1")] == ["DRAINING", "DRAINING"]
    assert draining["w-0"].reason == "soperator: test drain" and draining["w-0"].ours(PREFIX)
    assert not draining["w-0"].drained
    drained = by_name(parse_sinfo_json(fixture("sinfo_drained.json")))
    assert all(r.state == "DRAINED" and r.drained for r in drained.values())
    assert drained["w-0"].reason_set_by_user == "root" and drained["w-0"].reason_changed_at > 0


def test_foreign_drain_and_down_nodes():
    foreign = by_name(parse_sinfo_json(fixture("sinfo_foreign.json")))
    assert foreign["w-0"].state == "DRAINED" and not foreign["w-0"].ours(PREFIX) and foreign["w-0"].held
    assert foreign["w-1"].flags == ("NOT_RESPONDING",) and not foreign["w-1"].held
    down = by_name(parse_sinfo_json(fixture("sinfo_down.json")))
    # sinfo calls DOWN+DRAIN "drained"; a plain DOWN node is held by whoever set its reason.
    assert down["w-0"].state == "DRAINED" and down["w-0"].base_state == "DOWN"
    assert down["w-1"].state == "DOWN" and down["w-1"].held and not down["w-1"].ours(PREFIX)


def test_controller_down_is_an_error_not_an_empty_cluster():
    # sinfo --json exits 0 with an error entry and no nodes when slurmctld does not answer.
    with pytest.raises(SinfoReportedErrors, match="Unspecified error"):
        parse_sinfo_json(fixture("sinfo_controller_down.json"))


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"errors": []}', '{"nodes": [{"state": "idle"}]}',
                                  '{"nodes": [{"name": "a"}]}', '{"nodes": [{"name": "a", "state": 3}]}',
                                  '{"nodes": [{"name": "a", "state": "idle", "cpus": "x"}]}'])
def test_unparsable_output_fails(text):
    with pytest.raises(SlurmOutputError):
        parse_sinfo_json(text)


def test_newer_json_format_is_read_too():
    doc = {"errors": [], "nodes": [{"name": "a", "state": ["IDLE", "DRAIN"], "reason": "x", "partitions": ["p"],
                                    "cpus": 4, "alloc_cpus": 0, "reason_changed_at": {"set": True, "number": 5}}]}
    (node,) = parse_sinfo_json(json.dumps(doc))
    assert node.state == "DRAINED" and node.flags == ("DRAIN",) and node.reason_changed_at == 5


def test_scontrol_future_nodes():
    records, missing = parse_scontrol_nodes(fixture("scontrol_future.txt"))
    nodes = by_name(records)
    assert missing == ["nope"]
    assert nodes["f-0"].future and nodes["f-0"].flags == () and nodes["f-0"].partitions == ("other",)
    assert nodes["f-1"].state == "FUTURE" and nodes["f-1"].drain
    assert nodes["f-1"].reason == "soperator: pre-drained future" and nodes["f-1"].reason_set_by_user == "root"


def test_scontrol_reason_with_equals_signs():
    line = ("NodeName=a Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=p,q "
            "Reason=x = y [z] [slurm@2026-01-01T00:00:00]")
    (node,), missing = parse_scontrol_nodes(line)
    assert missing == []
    assert node.reason == "x = y [z]" and node.reason_set_by_user == "slurm" and node.partitions == ("p", "q")
    with pytest.raises(SlurmOutputError):
        parse_scontrol_nodes("garbage")


def test_squeue_job_counts():
    assert parse_squeue_nodes("w-[0-1]\nw-1\n\n") == {"w-0": 1, "w-1": 2}


def test_expand_nodes_keeps_order_and_drops_duplicates():
    assert sn.expand_nodes("w-[0-2]") == ["w-0", "w-1", "w-2"]
    assert sn.expand_nodes(["b-1", "a-[1-2]", "b-1"]) == ["b-1", "a-1", "a-2"]
    with pytest.raises(SlurmCommandError, match="nodes"):
        sn.expand_nodes("w-[0-")


def test_full_reason():
    assert sn.full_reason("soperator:", "bad dimm") == "soperator: bad dimm"
    assert sn.full_reason("soperator:", "soperator: x") == "soperator: x"
    assert sn.full_reason("ops ", "x") == "ops x"
    for prefix, reason in (("", "x"), ("soperator:", ""), ("soperator:", "  ")):
        with pytest.raises(SlurmCommandError):
            sn.full_reason(prefix, reason)


# ---------------------------------------------------------------------------------------------------------------------
# A fake slurmctld: answers sinfo --json, scontrol --future show node and scontrol update the way 22.05 does.


class FakeSlurm(object):
    """Transport that emulates the Slurm commands we run (state kept as sinfo-json node dicts)."""

    name = "local"

    def __init__(self, nodes):
        template = json.loads(fixture("sinfo_idle.json"))
        self.meta = template["meta"]
        self.template = template["nodes"][0]
        self.nodes = {}
        for name, state in nodes.items():
            self.add(name, *state) if isinstance(state, tuple) else self.add(name, state)
        self.calls = []
        self.down = False
        self.quirk_unknown_rc = True   # 22.05: RESUME/UNDRAIN of an UNKNOWN node exits 1 yet clears the drain
        self.ignore_updates = False
        self.jobs = {}

    def add(self, name, state="idle", flags=(), reason=""):
        node = copy.deepcopy(self.template)
        node.update(name=name, state=state, state_flags=list(flags), reason=reason)
        self.nodes[name] = node

    def describe(self):
        return {"transport": "local", "slurm_conf": "/fake"}

    def finish_jobs(self):
        for node in self.nodes.values():
            if node["state"] in ("allocated", "mixed"):
                node["state"] = "idle"
            # ... and slurmd answered the ping that follows a RESUME.
            node["state_flags"] = [f for f in node["state_flags"] if f != "NOT_RESPONDING"]

    def exec(self, argv, timeout):
        self.calls.append(list(argv))
        if self.down:
            if argv[:2] == ["sinfo", "--json"]:
                return 0, fixture("sinfo_controller_down.json"), ""
            return 1, "", "slurm_update error: Unable to contact slurm controller (connect failure)\n"
        if argv == ["sinfo", "--json"]:
            visible = [n for n in self.nodes.values() if n["state"] != "future"]
            return 0, json.dumps({"meta": self.meta, "errors": [], "nodes": visible}), ""
        if argv[:4] == list(sn.SCONTROL_FUTURE)[:4]:
            wanted = hostlist.expand(argv[5]) if len(argv) > 5 else list(self.nodes)
            lines, rc = [], 0
            for name in wanted:
                node = self.nodes.get(name)
                if node is None:
                    lines.append("Node %s not found" % name)
                    rc = 1
                    continue
                state = "+".join([node["state"].upper()] + node["state_flags"])
                line = "NodeName=%s CPUTot=1 State=%s Partitions=%s" % (name, state, ",".join(node["partitions"]))
                if node["reason"]:
                    line += " Reason=%s [root@2026-01-01T00:00:00]" % node["reason"]
                lines.append(line)
            return rc, "\n".join(lines) + "\n", ""
        if argv[:2] == ["scontrol", "update"]:
            return self._update(argv[2:])
        raise AssertionError("unexpected command %r" % (argv,))

    def _update(self, words):
        fields = dict(w.split("=", 1) for w in words)
        names = hostlist.expand(fields["NodeName"])
        if any(n not in self.nodes for n in names):
            return 1, "", "slurm_update error: Invalid node name specified\n"
        if self.ignore_updates:
            return 0, "", ""
        state = fields["State"]
        rc = 0
        for name in names:
            node = self.nodes[name]
            flags = node["state_flags"]
            if state == "DRAIN":
                if "DRAIN" not in flags:
                    flags.append("DRAIN")
                node["reason"] = fields["Reason"]
            elif state in ("RESUME", "UNDRAIN"):
                if state == "RESUME" and not ("DRAIN" in flags or node["state"] == "down"):
                    return 1, "", "slurm_update error: Invalid node state specified\n"
                node["state_flags"] = [f for f in flags if f != "DRAIN"]
                if state == "RESUME" and node["state"] == "down":
                    node["state"] = "idle"
                if state == "RESUME" and node["state"] != "future":
                    node["state_flags"].append("NOT_RESPONDING")   # 22.05: until the next ping
                if state == "RESUME" and node["state"] == "future":
                    node["state"] = "idle"
                    node["state_flags"].append("NOT_RESPONDING")
                node["reason"] = ""
                if node["state"] == "unknown" and self.quirk_unknown_rc:
                    rc = 1
        if rc:
            return 1, "", "slurm_update error: Invalid node state specified\n"
        return 0, "", ""

    def updates(self):
        return [c for c in self.calls if c[:2] == ["scontrol", "update"]]


class Clock(object):
    def __init__(self, slurm=None, finish_after=None):
        self.now = 0.0
        self.sleeps = []
        self.slurm = slurm
        self.finish_after = finish_after

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        if self.slurm is not None and self.finish_after is not None and self.now >= self.finish_after:
            self.slurm.finish_jobs()


def make(nodes, retries=2):
    slurm = FakeSlurm(nodes)
    clock = Clock(slurm)
    runner = SlurmRunner(slurm, retries=retries, retry_delay=1.0, timeout=5, sleep=clock.sleep)
    return slurm, runner, clock


def run(runner, clock, nodes, state, **kw):
    kw.setdefault("reason", "maintenance" if state == "drained" else None)
    return sn.set_state(runner, nodes, state, sleep=clock.sleep, clock=clock, **kw)


def test_drain_idle_nodes_with_one_update():
    slurm, runner, clock = make({"w-%d" % i: "idle" for i in range(4)})
    result = run(runner, clock, "w-[0-3]", "drained")
    assert result["changed"]
    assert slurm.updates() == [["scontrol", "update", "NodeName=w-[0-3]", "State=DRAIN",
                                "Reason=soperator: maintenance"]]
    assert result["commands"] == ["scontrol update 'NodeName=w-[0-3]' State=DRAIN 'Reason=soperator: maintenance'"]
    assert result["queries"] == ["sinfo --json", "scontrol --oneliner --future show node 'w-[0-3]'"]
    assert [n["after"]["state"] for n in result["nodes"]] == ["DRAINED"] * 4
    assert result["nodes"][0]["before"] == {"state": "IDLE", "flags": [], "reason": ""}
    assert "w-0: DRAINED (soperator: maintenance)" in result["diff"]["after"]
    # Second run: one read, nothing to do.
    slurm.calls = []
    again = run(runner, clock, ["w-0", "w-[1-3]"], "drained")
    assert not again["changed"] and again["commands"] == [] and slurm.calls == [["sinfo", "--json"]]
    assert again["diff"]["before"] == again["diff"]["after"] == ""


def test_check_mode_lists_commands_and_changes_nothing():
    slurm, runner, clock = make({"w-0": "idle", "w-1": "mixed"})
    result = run(runner, clock, "w-[0-1]", "drained", check_mode=True, wait=True)
    assert result["changed"] and slurm.updates() == []
    assert result["commands"] == ["scontrol update 'NodeName=w-[0-1]' State=DRAIN 'Reason=soperator: maintenance'"]
    assert [n["after"]["state"] for n in result["nodes"]] == ["DRAINED", "DRAINING"]
    assert slurm.nodes["w-0"]["state_flags"] == []


def test_wait_returns_only_once_drained():
    slurm, runner, clock = make({"w-0": "mixed", "w-1": "idle"})
    clock.finish_after = 7
    result = run(runner, clock, "w-[0-1]", "drained", wait=True, timeout=60, wait_sleep=2)
    assert clock.now >= 7
    assert [n["after"]["state"] for n in result["nodes"]] == ["DRAINED", "DRAINED"]
    assert len(slurm.updates()) == 1


def test_wait_times_out_with_a_clear_message():
    slurm, runner, clock = make({"w-0": "allocated"})
    with pytest.raises(SlurmCommandError, match=r"timed out after 10s .* to be DRAINED; still DRAINING .*: w-0") as err:
        run(runner, clock, "w-0", "drained", wait=True, timeout=10, wait_sleep=3)
    assert err.value.details["result"]["nodes"][0]["after"]["state"] == "DRAINING"
    assert clock.now == 10


def test_resume_wait_until_slurmd_answers():
    slurm, runner, clock = make({})
    slurm.add("a", "idle", ["DRAIN"], "soperator: x")
    clock.finish_after = 3
    result = run(runner, clock, "a", "resumed", wait=True, timeout=30, wait_sleep=1)
    assert clock.now >= 3 and result["nodes"][0]["after"] == {"state": "IDLE", "flags": [], "reason": ""}
    slurm.add("b", "idle", ["DRAIN"], "soperator: x")
    clock.finish_after = None
    with pytest.raises(SlurmCommandError, match="to be in service; slurmd not responding: b"):
        run(runner, clock, "b", "resumed", wait=True, timeout=5, wait_sleep=1)


def test_resume_and_undrain_only_our_drains():
    slurm, runner, clock = make({})
    slurm.add("a", "idle", ["DRAIN"], "soperator: x")
    slurm.add("b", "idle", ["DRAIN"], "hw: bad dimm")
    slurm.add("c", "down", [], "Not responding")
    slurm.add("d", "idle")
    slurm.add("e", "down", [], "soperator: down")
    result = run(runner, clock, "a,b,c,d,e", "resumed")
    assert slurm.updates() == [["scontrol", "update", "NodeName=a,e", "State=RESUME"]]
    assert {s["name"]: s["reason"] for s in result["skipped_nodes"]} == {"b": "hw: bad dimm", "c": "Not responding"}
    assert [n["action"] for n in result["nodes"]] == ["resume", "skipped", "skipped", "none", "resume"]
    assert slurm.nodes["b"]["state_flags"] == ["DRAIN"]
    forced = run(runner, clock, "a,b,c,d,e", "resumed", force=True)
    assert forced["changed"] and slurm.updates()[-1] == ["scontrol", "update", "NodeName=b,c", "State=RESUME"]
    assert forced["skipped_nodes"] == []


def test_foreign_drain_is_not_overwritten_unless_forced():
    slurm, runner, clock = make({})
    slurm.add("a", "idle", ["DRAIN"], "hw: bad dimm")
    slurm.add("b", "idle")
    result = run(runner, clock, "a,b", "drained")
    assert slurm.updates() == [["scontrol", "update", "NodeName=b", "State=DRAIN", "Reason=soperator: maintenance"]]
    assert result["skipped_nodes"][0]["name"] == "a" and "lacks 'soperator:'" in result["skipped_nodes"][0]["why"]
    assert slurm.nodes["a"]["reason"] == "hw: bad dimm"
    run(runner, clock, "a,b", "drained", force=True)
    assert slurm.nodes["a"]["reason"] == "soperator: maintenance"


def test_our_drain_with_another_reason_is_updated():
    slurm, runner, clock = make({})
    slurm.add("a", "idle", ["DRAIN"], "soperator: old")
    result = run(runner, clock, "a", "drained", reason="new")
    assert result["changed"] and slurm.nodes["a"]["reason"] == "soperator: new"


def test_undrain_leaves_down_nodes_down():
    slurm, runner, clock = make({})
    slurm.add("a", "down", ["DRAIN"], "soperator: x")
    slurm.add("b", "down", [], "Not responding")
    result = run(runner, clock, "a,b", "undrained")
    assert slurm.updates() == [["scontrol", "update", "NodeName=a", "State=UNDRAIN"]]
    assert [n["action"] for n in result["nodes"]] == ["undrain", "none"]
    assert result["nodes"][0]["after"]["state"] == "DOWN"


def test_unknown_node_fails_before_any_change():
    slurm, runner, clock = make({"w-0": "idle"})
    with pytest.raises(SlurmCommandError, match=r"1 node\(s\) do not exist in Slurm: nope"):
        run(runner, clock, "w-0,nope", "drained")
    assert slurm.updates() == []


def test_future_nodes_are_an_error_unless_forced():
    slurm, runner, clock = make({"w-0": "idle", "f-0": "future", "f-1": "future"})
    with pytest.raises(SlurmCommandError, match=r"2 node\(s\) are FUTURE .*: f-\[0-1\]; force=true"):
        run(runner, clock, "w-0,f-[0-1]", "drained")
    assert slurm.updates() == []
    result = run(runner, clock, "w-0,f-[0-1]", "drained", force=True)
    assert slurm.nodes["f-0"]["state"] == "future" and slurm.nodes["f-0"]["state_flags"] == ["DRAIN"]
    assert result["nodes"][1]["after"] == {"state": "FUTURE", "flags": ["DRAIN"], "reason": "soperator: maintenance"}
    # Resuming a FUTURE node uses UNDRAIN: RESUME would make it IDLE+NOT_RESPONDING.
    result = run(runner, clock, "w-0,f-[0-1]", "resumed", force=True)
    assert slurm.updates()[-2:] == [["scontrol", "update", "NodeName=f-[0-1]", "State=UNDRAIN"],
                                    ["scontrol", "update", "NodeName=w-0", "State=RESUME"]]
    assert slurm.nodes["f-0"]["state"] == "future" and slurm.nodes["f-0"]["state_flags"] == []


def test_controller_down_fails_after_bounded_retries():
    slurm, runner, clock = make({"w-0": "idle"}, retries=2)
    slurm.down = True
    with pytest.raises(SlurmUnavailable, match=r"did not answer sinfo --json after 3 attempt\(s\)"):
        run(runner, clock, "w-0", "drained")
    assert len(slurm.calls) == 3 and clock.sleeps == [1.0, 2.0]


def test_controller_lost_during_update_reports_what_ran():
    slurm, runner, clock = make({"a": "idle", "b": "idle"})
    slurm.add("c", "idle", ["DRAIN"], "soperator: x")
    real_exec = slurm.exec

    def exec_then_die(argv, timeout):
        if argv[:2] == ["scontrol", "update"]:
            slurm.down = True
        return real_exec(argv, timeout)
    slurm.exec = exec_then_die
    with pytest.raises(SlurmUnavailable, match="commands already run: none") as err:
        run(runner, clock, "a,b,c", "resumed", force=True)
    assert "changed" in err.value.details["result"]


def test_unverified_update_is_a_failure():
    slurm, runner, clock = make({"w-0": "idle"})
    slurm.ignore_updates = True
    with pytest.raises(SlurmCommandError, match="not in the requested state: w-0 is IDLE"):
        run(runner, clock, "w-0", "drained")


def test_resume_of_never_registered_nodes_is_verified_not_trusted():
    slurm, runner, clock = make({"n-%d" % i: ("unknown", ["DRAIN"], "soperator: x") for i in range(3)})
    result = run(runner, clock, "n-[0-2]", "resumed")
    assert result["changed"] and "every node reached the requested state" in result["warnings"][0]
    assert all("DRAIN" not in n["after"]["flags"] for n in result["nodes"])


def test_thousand_nodes_one_update_each_way():
    slurm, runner, clock = make({"n-%d" % i: "idle" for i in range(1000)})
    run(runner, clock, "n-[0-999]", "drained")
    run(runner, clock, ["n-[0-499]", "n-[500-999]"], "resumed")
    assert [c[2:4] for c in slurm.updates()] == [
        ["NodeName=n-[0-999]", "State=DRAIN"], ["NodeName=n-[0-999]", "State=RESUME"]]
    assert len(slurm.calls) == 6


def test_node_info_reports_jobs_and_ownership():
    slurm, runner, clock = make({"w-0": "mixed", "f-0": "future"})
    slurm.add("w-1", "idle", ["DRAIN"], "hw")
    real_exec = slurm.exec

    def exec_with_squeue(argv, timeout):
        if argv[0] == "squeue":
            return 0, "w-0\nw-[0-1]\n", ""
        return real_exec(argv, timeout)
    slurm.exec = exec_with_squeue
    info = sn.node_info(runner, include_future=True)
    nodes = dict((n["name"], n) for n in info)
    assert nodes["w-0"]["jobs"] == 2 and nodes["w-1"]["jobs"] == 1 and nodes["f-0"]["state"] == "FUTURE"
    assert nodes["w-1"]["ours"] is False and nodes["w-1"]["state"] == "DRAINED"
    (only,) = sn.node_info(runner, nodes="f-0", jobs=False)
    assert only["jobs"] is None and only["name"] == "f-0"


# ---------------------------------------------------------------------------------------------------------------------
# Runner and transports


class Scripted(object):
    name = "local"

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def describe(self):
        return {"transport": "local"}

    def exec(self, argv, timeout):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_runner_retries_only_unavailable_controller():
    sleeps = []
    t = Scripted([(1, "", "Unable to contact slurm controller (connect failure)"), TransientError("timeout"),
                  (0, "ok", "")])
    runner = SlurmRunner(t, retries=3, retry_delay=0.5, sleep=sleeps.append)
    result = runner.run(["scontrol", "ping"])[0]
    assert result.stdout == "ok" and result.attempts == 3 and sleeps == [0.5, 1.0]
    t = Scripted([(1, "", "slurm_update error: Invalid node name specified")])
    runner = SlurmRunner(t, retries=3, sleep=sleeps.append)
    with pytest.raises(SlurmCommandError, match="Invalid node name") as err:
        runner.run(["scontrol", "update", "NodeName=x", "State=DRAIN", "Reason=a b"])
    assert t.calls == 1 and err.value.commands == ["scontrol update NodeName=x State=DRAIN 'Reason=a b'"]


def test_format_command_quotes():
    assert format_command(["scontrol", "update", "Reason=it's"]) == "scontrol update 'Reason=it'\"'\"'s'"


def test_local_transport_sets_slurm_conf_and_runs(tmp_path):
    conf = tmp_path / "slurm.conf"
    t = LocalTransport(slurm_conf=str(conf), environ={"PATH": os.environ["PATH"]})
    with pytest.raises(SlurmCommandError, match="slurm.conf %s .* does not exist" % conf):
        t.exec(["true"], 5)
    conf.mkdir()
    with pytest.raises(SlurmCommandError, match="is not a file"):
        t.exec(["true"], 5)
    conf.rmdir()
    conf.write_text("ClusterName=x\n")
    rc, out, _err = t.exec(["sh", "-c", "echo $SLURM_CONF $LC_ALL $TZ"], 5)
    assert rc == 0 and out.split() == [str(conf), "C", "UTC0"]
    with pytest.raises(TransientError, match=r"did not finish within 0.2s: waiting$"):
        t.exec(["sh", "-c", "echo waiting >&2; sleep 5"], 0.2)
    with pytest.raises(SlurmCommandError, match="cannot run"):
        t.exec(["/nonexistent/scontrol"], 5)
    with pytest.raises(SlurmCommandError, match="cannot run"):
        t.exec(["scontrol", "Reason=a\x00b"], 5)


class FakeWs(object):
    def __init__(self, out, err, status):
        self.frames = [("out", out), ("err", err)]
        self.status = status
        self.open = True

    def is_open(self):
        return self.open

    def update(self, timeout=0):
        if not self.frames:
            self.open = False

    def run_forever(self, timeout=None):
        self.open = False    # the command ended; its frames stay buffered, as WSClient keeps them

    def peek_stdout(self):
        return bool(self.frames) and self.frames[0][0] == "out"

    def read_stdout(self):
        return self.frames.pop(0)[1]

    def peek_stderr(self):
        return bool(self.frames) and self.frames[0][0] == "err"

    def read_stderr(self):
        return self.frames.pop(0)[1]

    def read_channel(self, channel):
        return self.status

    def close(self):
        self.open = False


class FakeCore(object):
    def connect_get_namespaced_pod_exec(self, *a, **kw):
        raise AssertionError("called through stream() only")


def test_kubernetes_transport_exec():
    seen = {}

    def stream(func, pod, namespace, **kw):
        seen.update(pod=pod, namespace=namespace, **kw)
        return FakeWs("{}", "warn", '{"status": "Failure", "details": {"causes": '
                                    '[{"reason": "ExitCode", "message": "2"}]}}')
    t = KubernetesTransport("slurm", "demo-controller-0", slurm_conf="/etc/slurm/slurm.conf", core_v1=FakeCore(),
                            stream_func=stream)
    assert t.exec(["sinfo", "--json"], 5) == (2, "{}", "warn")
    assert seen["pod"] == "demo-controller-0" and seen["namespace"] == "slurm" and seen["container"] == "slurmctld"
    # ended in the pod too, a second after the client's own deadline of 5 s
    assert seen["command"] == ["timeout", "--kill-after=2", "6", "env", "SLURM_CONF=/etc/slurm/slurm.conf", "LC_ALL=C",
                               "TZ=UTC0", "sinfo", "--json"]
    assert seen["tty"] is False and seen["stdin"] is False

    t = KubernetesTransport("slurm", "p", core_v1=FakeCore(),
                            stream_func=lambda *a, **k: FakeWs("ok", "", '{"status": "Success"}'))
    assert t.exec(["scontrol", "ping"], 5) == (0, "ok", "")
    t = KubernetesTransport("slurm", "p", core_v1=FakeCore(),
                            stream_func=lambda *a, **k: FakeWs("", "", '{"status": "Failure", "message": "no sh"}'))
    with pytest.raises(SlurmCommandError, match="no sh"):
        t.exec(["scontrol"], 5)

    def refused(*a, **k):
        raise ConnectionRefusedError("connection refused")
    t = KubernetesTransport("slurm", "p", core_v1=FakeCore(), stream_func=refused)
    with pytest.raises(TransientError):
        t.exec(["sinfo"], 5)


def test_kubernetes_transport_missing_pod_is_not_retried():
    from kubernetes.client.exceptions import ApiException

    def missing(*a, **k):
        raise ApiException(status=404, reason="Not Found")
    t = KubernetesTransport("slurm", "demo-controller-0", core_v1=FakeCore(), stream_func=missing)
    runner = SlurmRunner(t, retries=3, sleep=lambda s: None)
    with pytest.raises(SlurmCommandError, match="404"):
        runner.run(["sinfo", "--json"])


def test_connection_args_share_kubernetes_core_auth():
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    spec = slurm_args.slurm_connection_argument_spec()
    assert set(AUTH_ARG_SPEC) <= set(spec)
    assert spec["api_key"]["no_log"] and spec["transport"]["choices"] == ["local", "kubernetes"]
    runner = slurm_args.runner_from_params({"transport": "kubernetes", "namespace": "slurm", "cluster_name": "demo",
                                            "retries": 1, "retry_delay": 0.1, "command_timeout": 9})
    assert runner.describe()["pod"] == "demo-controller-0" and runner.retries == 1 and runner.timeout == 9
    assert runner.transport.pods == ["demo-controller-0", "demo-controller-1"]     # the backup's pod stands by
    local = slurm_args.runner_from_params({"transport": "local", "slurm_conf": "/x/slurm.conf"})
    assert local.describe() == {"transport": "local", "slurm_conf": "/x/slurm.conf"}


# Slurm 26.05 (the images'), as its slurmctld printed them on the real node: sinfo --json lists groups of nodes,
# scontrol show nodes --json the per-node records (numbers as {set, infinite, number}).
GROUPED_SINFO = {"sinfo": [{"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["cpu-0", "cpu-1"], "total": 2}}],
                 "meta": {}, "errors": [], "warnings": []}


def _scontrol_node(name, state, reason=""):
    return {"name": name, "state": state, "cpus": 1, "alloc_cpus": 0, "real_memory": 1024, "alloc_memory": 0,
            "partitions": ["main"], "reason": reason, "reason_set_by_user": "", "features": [], "gres": "",
            "reason_changed_at": {"set": True, "infinite": False, "number": 0}, "address": name, "hostname": name,
            "slurmd_start_time": {"set": True, "infinite": False, "number": 1795541647}}


def test_read_sinfo_takes_scontrols_nodes_where_sinfo_lists_groups():
    nodes = {"nodes": [_scontrol_node("cpu-0", ["IDLE"]),
                       _scontrol_node("cpu-1", ["IDLE", "DRAIN"], "soperator: health_check: x")],
             "last_update": {}, "meta": {}, "errors": [], "warnings": []}
    t = Scripted([(0, json.dumps(GROUPED_SINFO), ""), (0, json.dumps(nodes), ""), (0, json.dumps(nodes), "")])
    runner = SlurmRunner(t, retries=0)
    first = sn.read_sinfo(runner)
    assert list(first) == ["cpu-0", "cpu-1"]
    assert first["cpu-1"].flags == ("DRAIN",) and first["cpu-1"].reason == "soperator: health_check: x"
    assert first["cpu-0"].cpus == 1 and first["cpu-0"].slurmd_start_time == 1795541647
    # The runner remembers: the next read asks scontrol only.
    assert list(sn.read_sinfo(runner)) == ["cpu-0", "cpu-1"]
    assert runner.commands == [format_command(sn.SINFO_JSON), format_command(sn.SCONTROL_NODES_JSON),
                               format_command(sn.SCONTROL_NODES_JSON)]


def test_a_json_without_nodes_or_groups_is_still_an_error():
    t = Scripted([(0, json.dumps({"meta": {}, "errors": []}), "")])
    with pytest.raises(SlurmOutputError, match="no 'nodes' list"):
        sn.read_sinfo(SlurmRunner(t, retries=0))


def _pods_answering(answers):
    """stream() of pods: answers[pod] is an exception to raise or the FakeWs its exec gets; the pods asked, in order,
    in .asked."""
    def stream(func, pod, namespace, **kw):
        stream.asked.append(pod)
        answer = answers[pod]
        if isinstance(answer, Exception):
            raise answer
        return answer()
    stream.asked = []
    return stream


def test_kubernetes_transport_runs_in_the_standby_pod_when_the_primarys_is_gone():
    from kubernetes.client.exceptions import ApiException
    not_running = '{"status": "Failure", "message": "container not found (\\"slurmctld\\")"}'
    for primary in (ApiException(status=404, reason="Not Found"), lambda: FakeWs("", "", not_running)):
        stream = _pods_answering({"c-controller-0": primary,
                                  "c-controller-1": lambda: FakeWs("ok", "", '{"status": "Success"}')})
        t = KubernetesTransport("slurm", "c-controller-0", core_v1=FakeCore(), stream_func=stream,
                                standby_pods=["c-controller-1"])
        assert t.exec(["scontrol", "ping"], 5) == (0, "ok", "")
        assert stream.asked == ["c-controller-0", "c-controller-1"] and t.describe()["pod"] == "c-controller-1"


def test_kubernetes_transport_keeps_a_commands_own_failure():
    exit_1 = '{"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "1"}]}}'
    stream = _pods_answering({"c-controller-0": lambda: FakeWs("", "boom", exit_1)})
    t = KubernetesTransport("slurm", "c-controller-0", core_v1=FakeCore(), stream_func=stream,
                            standby_pods=["c-controller-1"])
    assert t.exec(["scontrol", "ping"], 5) == (1, "", "boom")
    assert stream.asked == ["c-controller-0"]


def test_kubernetes_transport_no_pod_left():
    from kubernetes.client.exceptions import ApiException
    gone = ApiException(status=404, reason="Not Found")
    stream = _pods_answering({"c-controller-0": gone, "c-controller-1": gone})
    t = KubernetesTransport("slurm", "c-controller-0", core_v1=FakeCore(), stream_func=stream,
                            standby_pods=["c-controller-1"])
    runner = SlurmRunner(t, retries=3, sleep=lambda s: None)
    with pytest.raises(SlurmCommandError, match="c-controller-0 failed: 404.*c-controller-1 failed: 404"):
        runner.run(["sinfo", "--json"])
    assert stream.asked == ["c-controller-0", "c-controller-1"]     # not retried
    # a primary restarting (its container not running) is retried, whatever the standby says
    restarting = '{"status": "Failure", "message": "container not found (\\"slurmctld\\")"}'
    stream = _pods_answering({"c-controller-0": lambda: FakeWs("", "", restarting), "c-controller-1": gone})
    t = KubernetesTransport("slurm", "c-controller-0", core_v1=FakeCore(), stream_func=stream,
                            standby_pods=["c-controller-1"])
    with pytest.raises(TransientError):
        t.exec(["sinfo"], 5)


# `scontrol --oneliner show node` of Slurm 22.05.8 (TZ=UTC0), as the exporter reads every node (issue 32)
SCONTROL_22_05 = (
    "NodeName=n-0 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=9.49 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost Port=17827 "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=256 AllocMem=0 FreeMem=6077 "
    "Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=main  "
    "BootTime=2026-11-26T17:35:24 SlurmdStartTime=2026-11-27T09:21:23 LastBusyTime=2026-11-27T09:21:23 "
    "CfgTRES=cpu=1,mem=256M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s Comment=hello world Extra=extra stuff\n"
    "NodeName=n-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=1 CPUTot=1 CPULoad=9.49 "
    "AvailableFeatures=h100,ib ActiveFeatures=h100,ib Gres=gpu:h100:8 GresUsed=gpu:h100:2(IDX:0-1) "
    "NodeAddr=127.0.0.1 NodeHostName=localhost Port=17828 Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=256 AllocMem=128 FreeMem=6076 Sockets=1 Boards=1 State=MIXED+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=main,gpu  BootTime=2026-11-26T17:35:24 "
    "SlurmdStartTime=2026-11-27T09:21:23 LastBusyTime=2026-11-27T09:21:23 CfgTRES=cpu=1,mem=256M,billing=1 "
    "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=admin: x Comment=y [z] [root@2026-11-27T09:21:23] Comment=soperator: resume-requested 1700000000\n"
    "NodeName=n-10 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=N/A AvailableFeatures=(null) "
    "ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost Port=17837  RealMemory=256 "
    "AllocMem=0 FreeMem=N/A Sockets=1 Boards=1 State=DOWN* ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=main  BootTime=None SlurmdStartTime=None LastBusyTime=Unknown "
    "CfgTRES=cpu=1,mem=256M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=soperator: not started [root@2026-11-27T09:21:23]        "
    "second line\n")


def test_scontrol_lines_give_what_the_exporter_reports():
    records, missing = parse_scontrol_nodes(SCONTROL_22_05)
    n0, n1, n10 = records
    assert missing == [] and [r.name for r in records] == ["n-0", "n-1", "n-10"]
    assert (n0.state, n0.reason, n0.comment, n0.gres, n0.cpus, n0.alloc_cpus, n0.real_memory) == (
        "IDLE", "", "hello world", "", 1, 0, 256)
    assert n0.slurmd_start_time == 1795771283      # 2026-11-27T09:21:23 UTC
    # a reason holding ' Comment=' ends at its stamp; the node's own Comment follows it
    assert (n1.state, n1.reason, n1.reason_set_by_user, n1.reason_changed_at) == (
        "DRAINING", "admin: x Comment=y [z]", "root", 1795771283)
    assert n1.comment == "soperator: resume-requested 1700000000"
    assert (n1.gres, n1.gres_used, n1.alloc_memory, n1.features, n1.partitions) == (
        "gpu:h100:8", "gpu:h100:2(IDX:0-1)", 128, ("h100", "ib"), ("main", "gpu"))
    assert (n10.state, n10.flags, n10.slurmd_start_time, n10.comment) == ("DOWN", ("NOT_RESPONDING",), None, "")
    assert n10.reason == "soperator: not started\nsecond line"
    with pytest.raises(SlurmOutputError):
        parse_scontrol_nodes(SCONTROL_22_05.replace("CPUTot=1", "CPUTot=x"))
