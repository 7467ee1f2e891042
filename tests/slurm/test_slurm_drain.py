"""slurm_drain / slurm_node_info against real slurmctld + slurmd (the local backend), run the way Ansible runs them
(tests/ansible_run.py's module(): the module's own process, some through `ansible localhost -m`) and the drain/resume
playbooks."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

import ansible_run
from specs import spec_text
from waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = "examples/small-cpu.yml"          # cpu-0, cpu-1 running; cpu-[2-3] FUTURE
JOB_WAIT = 60

pytestmark = pytest.mark.skipif(shutil.which("ansible") is None, reason="ansible is not installed")

THOUSAND = spec_text("loopback-nodes", cluster="big", replicas=2, nodes=1000, slurm_config="{}")


def _env(cluster):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("SLURM_CONF", None)
    env.update(cluster.env())
    return env


def module(cluster, name, check=False, diff=False, expect_failed=False, cli=None, **args):
    """Run soperator.slurm.<name> (tests/ansible_run.py: without the `ansible` CLI unless cli=True); return its
    result."""
    return ansible_run.module(name, args, check=check, diff=diff, expect_failed=expect_failed, cli=cli,
                              env=_env(cluster), timeout=300)


def drain(cluster, **args):
    return module(cluster, "slurm_drain", **args)


def playbook(cluster, name, *extra):
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", name)] + list(extra), cwd=ROOT,
                          env=_env(cluster), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def states(cluster, names=None):
    """{node: (sinfo-like state, reason)} read straight from slurmctld (scontrol, FUTURE nodes included)."""
    argv = ["scontrol", "--oneliner", "--future", "show", "node"] + ([names] if names else [])
    out = cluster.run(argv, timeout=30).stdout
    result = {}
    for line in out.splitlines():
        fields = dict(w.split("=", 1) for w in line.split(" Reason=")[0].split() if "=" in w)
        reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in line else ""
        result[fields["NodeName"]] = (fields["State"], reason)
    return result


def after(result):
    return dict((n["name"], n["after"]["state"]) for n in result["nodes"])


def sbatch_sleep(cluster, node, seconds):
    job = cluster.run(["sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", "sleep %d" % seconds],
                      timeout=30).stdout.strip().split(";")[0]

    def job_state():
        return cluster.run(["squeue", "-h", "-j", job, "-o", "%T"], timeout=30).stdout.strip()
    wait_for(job_state, "job %s to run" % job, JOB_WAIT, poll=0.3, done=lambda state: state == "RUNNING")
    return job


def jobs_on(cluster, node):
    return cluster.run(["squeue", "-h", "-w", node, "-o", "%i"], timeout=30).stdout.split()


def test_drain_waits_for_jobs_then_resume(local_cluster):
    cluster = local_cluster(SMALL)
    # Long enough to outlive every step before the wait on any machine; the wait's end comes from the scancel below.
    job = sbatch_sleep(cluster, "cpu-0", 600)

    # Check mode: the command is listed, nothing changes.
    # through the `ansible` CLI: one of this suite's module runs the way a user makes it
    checked = drain(cluster, check=True, diff=True, nodes="cpu-[0-1]", reason="maintenance", cli=True)
    assert checked["changed"] and checked["commands"] == [
        "scontrol update 'NodeName=cpu-[0-1]' State=DRAIN 'Reason=soperator: maintenance'"]
    assert after(checked) == {"cpu-0": "DRAINING", "cpu-1": "DRAINED"}
    assert states(cluster, "cpu-[0-1]") == {"cpu-0": ("MIXED", ""), "cpu-1": ("IDLE", "")}

    # Drain without waiting: the busy node is DRAINING, the other DRAINED; one scontrol update.
    first = drain(cluster, nodes=["cpu-0", "cpu-1"], reason="maintenance")
    assert first["changed"] and len(first["commands"]) == 1
    assert after(first) == {"cpu-0": "DRAINING", "cpu-1": "DRAINED"}
    assert [n["before"]["state"] for n in first["nodes"]] == ["MIXED", "IDLE"]
    got = states(cluster, "cpu-[0-1]")
    assert got["cpu-0"] == ("MIXED+DRAIN", "soperator: maintenance") and got["cpu-1"][0] == "IDLE+DRAIN"
    assert jobs_on(cluster, "cpu-0") == [job]

    # The same again with wait: nothing to change, returns only once the job is gone (DRAINED). The job is
    # cancelled while the module is already waiting.
    canceller = threading.Timer(3, lambda: cluster.run(["scancel", job], timeout=30))
    canceller.start()
    try:
        second = drain(cluster, nodes="cpu-[0-1]", reason="maintenance", wait=True, timeout=JOB_WAIT, wait_sleep=0.5)
    finally:
        canceller.join()
    assert not second["changed"] and second["commands"] == []
    assert after(second) == {"cpu-0": "DRAINED", "cpu-1": "DRAINED"}
    assert jobs_on(cluster, "cpu-0") == []

    info = module(cluster, "slurm_node_info", nodes="cpu-[0-1]")
    assert [(n["name"], n["state"], n["ours"], n["jobs"]) for n in info["nodes"]] == [
        ("cpu-0", "DRAINED", True, 0), ("cpu-1", "DRAINED", True, 0)]

    # Resume: check mode first, then for real, then a second run that changes nothing.
    checked = drain(cluster, check=True, nodes="cpu-[0-1]", state="resumed")
    assert checked["changed"] and checked["commands"] == ["scontrol update 'NodeName=cpu-[0-1]' State=RESUME"]
    assert states(cluster, "cpu-[0-1]")["cpu-0"][0] == "IDLE+DRAIN"
    resumed = drain(cluster, nodes="cpu-[0-1]", state="resumed", diff=True, wait=True, timeout=JOB_WAIT,
                    wait_sleep=0.5)
    assert resumed["changed"] and after(resumed) == {"cpu-0": "IDLE", "cpu-1": "IDLE"}
    assert resumed["diff"]["after"] == "cpu-0: IDLE\ncpu-1: IDLE\n"
    assert states(cluster, "cpu-[0-1]") == {"cpu-0": ("IDLE", ""), "cpu-1": ("IDLE", "")}
    again = drain(cluster, nodes="cpu-[0-1]", state="resumed")
    assert not again["changed"] and again["commands"] == [] and again["queries"] == ["sinfo --json"]


def test_wait_really_waits_for_a_running_job(local_cluster):
    cluster = local_cluster(SMALL)
    job = sbatch_sleep(cluster, "cpu-1", 600)
    cancelled = threading.Event()

    def cancel():
        # Once the module's drain is in place it is in its wait loop; only then does the job end.
        deadline = time.time() + JOB_WAIT
        while "DRAIN" not in states(cluster, "cpu-1")["cpu-1"][0] and time.time() < deadline:
            time.sleep(0.2)
        cluster.run(["scancel", job], timeout=30)
        cancelled.set()

    # The job ends only when cancelled, while the module waits: returning before that would be a false DRAINED.
    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        result = drain(cluster, nodes="cpu-1", reason="reboot", wait=True, timeout=JOB_WAIT, wait_sleep=0.5)
        returned_after_cancel = cancelled.is_set()
    finally:
        canceller.join()
    assert result["changed"] and after(result) == {"cpu-1": "DRAINED"}
    assert returned_after_cancel and jobs_on(cluster, "cpu-1") == []
    # A job that outlives the timeout: the task fails, the node stays drained and is reported DRAINING.
    drain(cluster, nodes="cpu-1", state="resumed")
    sbatch_sleep(cluster, "cpu-1", 60)
    timed_out = drain(cluster, nodes="cpu-1", reason="reboot", wait=True, timeout=2, wait_sleep=0.5,
                      expect_failed=True)
    assert "timed out after 2s" in timed_out["msg"] and "cpu-1" in timed_out["msg"]
    assert after(timed_out) == {"cpu-1": "DRAINING"}


def test_foreign_drain_is_left_alone_unless_forced(local_cluster):
    cluster = local_cluster(SMALL)
    cluster.run(["scontrol", "update", "NodeName=cpu-1", "State=DRAIN", "Reason=hw: bad dimm"], timeout=30)

    resumed = drain(cluster, nodes="cpu-[0-1]", state="resumed")
    assert not resumed["changed"] and resumed["commands"] == []
    assert resumed["skipped_nodes"][0]["name"] == "cpu-1" and resumed["skipped_nodes"][0]["reason"] == "hw: bad dimm"
    assert states(cluster, "cpu-1") == {"cpu-1": ("IDLE+DRAIN", "hw: bad dimm")}

    drained = drain(cluster, nodes="cpu-[0-1]", reason="maintenance")
    assert drained["commands"] == ["scontrol update NodeName=cpu-0 State=DRAIN 'Reason=soperator: maintenance'"]
    assert [n["action"] for n in drained["nodes"]] == ["drain", "skipped"]
    assert states(cluster, "cpu-1")["cpu-1"][1] == "hw: bad dimm"

    undrained = drain(cluster, nodes="cpu-[0-1]", state="undrained")
    assert [n["action"] for n in undrained["nodes"]] == ["undrain", "skipped"]

    forced = drain(cluster, nodes="cpu-[0-1]", state="resumed", force=True, wait=True, timeout=JOB_WAIT,
                   wait_sleep=0.5)
    assert forced["changed"] and forced["skipped_nodes"] == [] and after(forced) == {"cpu-0": "IDLE", "cpu-1": "IDLE"}
    assert states(cluster, "cpu-[0-1]") == {"cpu-0": ("IDLE", ""), "cpu-1": ("IDLE", "")}


def test_reasons_that_cannot_read_back_are_refused_before_any_command(local_cluster):
    """A line break, CR, NUL or other control character would split or cut the reason slurmctld stores, so the
    drain could never be read back as done: refused up front, nothing run. Quotes, '#' and '=' read back as they are."""
    cluster = local_cluster(SMALL)
    for reason in ("two\nlines", "cr\rhere", "nul\x00byte", "bell\x07", "del\x7f"):
        failed = drain(cluster, nodes="cpu-0", reason=reason, expect_failed=True)
        assert "reason must be one line of printable text" in failed["msg"], failed["msg"]
        assert failed["commands"] == [] and failed["queries"] == []
    failed = drain(cluster, nodes="cpu-0", state="resumed", reason_prefix="ours\n", expect_failed=True)
    assert "reason_prefix must be one line" in failed["msg"] and failed["queries"] == []
    assert states(cluster, "cpu-0") == {"cpu-0": ("IDLE", "")}
    odd = 'it\'s "quoted" #1 a=b'
    drained = drain(cluster, nodes="cpu-0", reason=odd)
    assert drained["changed"] and states(cluster, "cpu-0")["cpu-0"] == ("IDLE+DRAIN", "soperator: " + odd)
    again = drain(cluster, nodes="cpu-0", reason=odd)
    assert not again["changed"] and again["commands"] == []


def test_a_missing_slurm_conf_is_named_at_once(tmp_path):
    missing = str(tmp_path / "nowhere" / "slurm.conf")
    proc = subprocess.run(["ansible", "localhost", "-m", "soperator.slurm.slurm_node_info", "-a",
                           json.dumps({"slurm_conf": missing, "retries": 0})],
                          cwd=ROOT, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                                             ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json"),
                          capture_output=True, text=True, timeout=120, check=False)
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["failed"] and "slurm.conf %s (slurm_conf, or SLURM_CONF of the environment) does not exist" \
        % missing in result["msg"], result["msg"]


def test_unknown_and_future_nodes(local_cluster):
    cluster = local_cluster(SMALL)
    missing = drain(cluster, nodes="cpu-[0-1],gpu-0", reason="x", expect_failed=True)
    assert "do not exist in Slurm: gpu-0" in missing["msg"] and missing["commands"] == []
    future = drain(cluster, nodes="cpu-[1-3]", reason="x", expect_failed=True)
    assert "2 node(s) are FUTURE (defined in slurm.conf but not running): cpu-[2-3]" in future["msg"]
    assert states(cluster)["cpu-1"] == ("IDLE", "")

    forced = drain(cluster, nodes="cpu-[1-3]", reason="x", force=True)
    assert after(forced) == {"cpu-1": "DRAINED", "cpu-2": "FUTURE", "cpu-3": "FUTURE"}
    assert states(cluster, "cpu-[2-3]") == {"cpu-2": ("FUTURE+DRAIN", "soperator: x"),
                                            "cpu-3": ("FUTURE+DRAIN", "soperator: x")}
    back = drain(cluster, nodes="cpu-[1-3]", state="resumed", force=True, wait=True, timeout=JOB_WAIT,
                 wait_sleep=0.5)
    assert back["commands"] == ["scontrol update 'NodeName=cpu-[2-3]' State=UNDRAIN",
                                "scontrol update NodeName=cpu-1 State=RESUME"]
    got = states(cluster, "cpu-[1-3]")
    assert got["cpu-1"] == ("IDLE", "") and got["cpu-2"][0] == "FUTURE" and got["cpu-3"][0] == "FUTURE"


def test_playbooks_drain_and_resume(local_cluster):
    cluster = local_cluster(SMALL)
    slurm_conf = cluster.env()["SLURM_CONF"]
    result = playbook(cluster, "drain.yml", "-e", "nodes=cpu-[0-1]", "-e", "reason='disk check'",
                      "-e", "slurm_conf=%s" % slurm_conf)
    assert result["changed"] and result["reason"] == "soperator: disk check"
    assert states(cluster, "cpu-[0-1]")["cpu-0"] == ("IDLE+DRAIN", "soperator: disk check")
    result = playbook(cluster, "resume.yml", "-e", "nodes=cpu-[0-1]", "-e", "slurm_conf=%s" % slurm_conf)
    assert result["changed"] and after(result) == {"cpu-0": "IDLE", "cpu-1": "IDLE"}


def test_controller_down_fails_after_bounded_retries(local_cluster):
    cluster = local_cluster(SMALL)
    pid = cluster.pid("slurmctld")
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not cluster.pid("slurmctld"), "slurmctld to stop", 30, poll=0.2)

    # Each attempt gives up after command_timeout (the Slurm client itself would wait ~9 s to connect).
    failed = drain(cluster, nodes="cpu-[0-1]", reason="x", retries=2, retry_delay=0.5, command_timeout=4,
                   expect_failed=True)
    assert "did not answer sinfo --json after 3 attempt(s)" in failed["msg"], failed["msg"]
    assert failed["commands"] == [] and not failed.get("changed")
    # Without a client timeout: sinfo --json exits 0 but lists an error and no nodes; that is a failure, not
    # "no nodes".
    info = module(cluster, "slurm_node_info", retries=0, expect_failed=True)
    assert "did not answer sinfo --json after 1 attempt(s)" in info["msg"] and "Unspecified error" in info["msg"]
    assert "nodes" not in info


def test_thousand_nodes(local_cluster):
    """1,000 nodes in slurm.conf, 2 of them running slurmd; the other 998 are FUTURE as soperator defines them."""
    cluster = local_cluster(THOUSAND)
    everything = "n-[0-999]"

    refused = drain(cluster, nodes=everything, reason="x", expect_failed=True)
    assert "998 node(s) are FUTURE (defined in slurm.conf but not running): n-[2-999]" in refused["msg"]
    assert refused["commands"] == []

    # FUTURE nodes need force: the drain flag is set on all 1,000 with one update and cleared again with UNDRAIN.
    forced = drain(cluster, nodes=everything, reason="all", force=True)
    assert len(forced["commands"]) == 1 and len(forced["nodes"]) == 1000
    assert set(after(forced).values()) == {"DRAINED", "FUTURE"}
    assert all("DRAIN" in n["after"]["flags"] for n in forced["nodes"])
    back = drain(cluster, nodes=everything, state="resumed", force=True)
    assert len(back["commands"]) == 2
    assert all("DRAIN" not in n["after"]["flags"] for n in back["nodes"])

    # Nodes that registered once and whose slurmd is gone (DOWN, our reason): the normal path, no force.
    cluster.run(["scontrol", "update", "NodeName=n-[2-999]", "State=DOWN", "Reason=soperator: not started"],
                timeout=30)
    drained = drain(cluster, nodes=everything, reason="all")
    assert drained["commands"] == ["scontrol update 'NodeName=n-[0-999]' State=DRAIN 'Reason=soperator: all'"]
    assert set(after(drained).values()) == {"DRAINED"}
    assert drained["queries"] == ["sinfo --json", "scontrol --oneliner --future show node 'n-[0-999]'"]
    assert not drain(cluster, nodes=everything, reason="all")["changed"]
    resumed = drain(cluster, nodes=everything, state="resumed")
    assert resumed["commands"] == ["scontrol update 'NodeName=n-[0-999]' State=RESUME"]
    assert set(after(resumed).values()) == {"IDLE"}
    assert not drain(cluster, nodes=everything, state="resumed")["changed"]
