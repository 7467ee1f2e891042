"""The remediation loop against real Slurm daemons (local backend): slurm_remediate through `ansible localhost -m`,
and playbooks/remediate.yml through ansible-playbook.

One cluster of four nodes holds every case at once: cpu-0 drained by a health check of ours (a custom check that
fails while a fault file exists), cpu-1 drained by an admin, cpu-2 drained by our scale-down, cpu-3 drained by us
while a job runs on it. Only cpu-0 is ever replaced (its slurmd restarted) and, once the fault is gone, resumed."""
import os
import shutil
import sys

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb

import ansible_run
from waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEALTH_CHECK = os.path.join(ROOT, "plugins", "module_utils", "node", "health_check.py")
BOUND = 120

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible is not installed")


def spec_docs(fault_file):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    # Only the custom check, and slurmd does not run it on its own (interval 0): the test decides when checks run.
    docs[0]["spec"]["healthChecks"] = {"passive": {
        "interval": 0, "gpu": False, "memory": False, "munge": False, "minFreeDiskPercent": 0,
        "custom": [{"name": "fault", "command": "test ! -e %s" % fault_file}]}}
    docs[1]["spec"]["replicas"] = 4
    return docs


def module(args, check=False, diff=False):
    return ansible_run.module("slurm_remediate", args, check=check, diff=diff)


def playbook(*args):
    done = ansible_run.playbook("remediate.yml", *args)
    return done.tasks(), done.stats()


def by_name(result):
    return dict((n["name"], n) for n in result["nodes"])


def node(cluster, name):
    return dict((n["name"], n) for n in cluster.sinfo_nodes())[name]


def health_program(cluster):
    """The local backend installs health_check.py as <state_dir>/bin/health-check; install it if it did not."""
    path = os.path.join(cluster.state_dir, "bin", "health-check")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, HEALTH_CHECK))
        os.chmod(path, 0o755)
    return path


@pytest.mark.skipif(not os.path.exists(HEALTH_CHECK), reason="the health-check program is not there")
def test_remediation_replaces_rechecks_and_resumes_only_our_idle_drains(local_cluster, tmp_path):
    fault = tmp_path / "fault"
    docs = spec_docs(str(fault))
    cluster = local_cluster(yaml.safe_dump_all(docs))
    assert os.path.exists(os.path.join(cluster.state_dir, "etc", "health.json"))
    health_program(cluster)
    run = cluster.run
    job = run(["sbatch", "--parsable", "-o", "/dev/null", "-w", "cpu-3", "--wrap", "sleep 600"]).stdout.strip()

    def job_state():
        return run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
    wait_for(job_state, "job %s to run" % job, BOUND, done=lambda state: state == "RUNNING")
    run(["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=soperator: health:fault injected"])
    run(["scontrol", "update", "NodeName=cpu-1", "State=DRAIN", "Reason=hw: bad dimm"])
    run(["scontrol", "update", "NodeName=cpu-2", "State=DRAIN", "Reason=soperator: scale-down"])
    run(["scontrol", "update", "NodeName=cpu-3", "State=DRAIN", "Reason=soperator: health:fault injected"])
    fault.write_text("bad\n")
    pids = dict((n, cluster.pid("slurmd-%s" % n)) for n in ("cpu-0", "cpu-1", "cpu-2", "cpu-3"))
    args = dict(target="local", definition=docs, state_dir=cluster.state_dir, register_timeout=BOUND,
                wait_sleep=0.5)

    # check mode: would replace cpu-0, changes nothing
    planned = module(args, check=True, diff=True)
    assert planned["changed"]
    # the diff names only the node the pass would act on
    assert planned["diff"]["before"] == "cpu-0: DRAINED (soperator: health:fault injected)\n", planned["diff"]
    assert planned["diff"]["after"].startswith("cpu-0: replaced, ")
    assert by_name(planned)["cpu-0"]["action"] == "replaced"
    assert cluster.pid("slurmd-cpu-0") == pids["cpu-0"]

    # 1. cpu-0 is replaced (its slurmd restarted) and re-checked; the fault is there, so it stays drained
    first = module(args)
    nodes = by_name(first)
    assert first["changed"]
    assert nodes["cpu-0"]["steps"] == ["replaced", "rechecked", "left-drained"], nodes["cpu-0"]
    assert nodes["cpu-0"]["checks"]["healthy"] is False
    assert [f["check"] for f in nodes["cpu-0"]["checks"]["failed"]] == ["fault"]
    assert nodes["cpu-1"]["action"] == "skipped-foreign"
    assert nodes["cpu-2"]["action"] == "skipped-scale-down"
    assert nodes["cpu-3"]["action"] == "skipped-busy"
    new_pid = cluster.pid("slurmd-cpu-0")
    assert new_pid is not None and new_pid != pids["cpu-0"]
    assert nodes["cpu-0"]["replacement"] == {"node": "cpu-0", "old_pid": pids["cpu-0"], "new_pid": new_pid,
                                             "registered": True}
    assert "DRAIN" in node(cluster, "cpu-0")["state_flags"]
    for other in ("cpu-1", "cpu-2", "cpu-3"):
        assert cluster.pid("slurmd-%s" % other) == pids[other]

    # 2. the fault stays: a second pass re-checks cpu-0 without replacing it again, and changes nothing
    second = module(args)
    assert not second["changed"]
    assert by_name(second)["cpu-0"]["steps"] == ["rechecked", "left-drained"]
    assert cluster.pid("slurmd-cpu-0") == new_pid

    # 3. fixed: the playbook (reconcile + remediate) resumes cpu-0 and nothing else
    fault.unlink()
    spec_file = tmp_path / "spec.yml"
    spec_file.write_text(yaml.safe_dump_all(docs))
    common = ["-e", "slurm_target=local", "-e", "spec_file=%s" % spec_file, "-e", "state_dir=%s" % cluster.state_dir,
              "-e", "register_timeout=%d" % BOUND]
    tasks, stats = playbook(*common)
    done = tasks["soperator.slurm.remediation : Replace, re-check and resume the nodes we drained"]
    assert done["changed"]
    assert by_name(done)["cpu-0"]["steps"] == ["rechecked", "resumed"]
    # The reconcile (slurm_cluster) finishes what it owns: cpu-2 is still in the spec, so a scale-down drain left on
    # it is an interrupted scale-down and is undone. Remediation itself never touched it (steps 1 and 2).
    reconcile = tasks["soperator.slurm.remediation : Reconcile the local cluster"]
    assert reconcile["actions"] == ["resumed cpu-2 (left drained by an unfinished scale-down)"]
    states = dict((n["name"], n) for n in cluster.sinfo_nodes())
    assert "DRAIN" not in states["cpu-0"]["state_flags"]
    assert states["cpu-1"]["reason"] == "hw: bad dimm" and "DRAIN" in states["cpu-1"]["state_flags"]
    assert "DRAIN" not in states["cpu-2"]["state_flags"]
    assert "DRAIN" in states["cpu-3"]["state_flags"]
    assert run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING"

    # 4. a second playbook run changes nothing
    tasks, stats = playbook(*common)
    assert stats["changed"] == 0, tasks
    assert lb.LocalCluster(cluster.state_dir).pid("slurmd-cpu-0") == new_pid
