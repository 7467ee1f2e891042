"""playbooks/site.yml and teardown.yml with slurm_target=local: real ansible-playbook, real Slurm daemons.

One cluster goes through its whole life: up -> nodes idle -> second run changed=0 -> check mode with new replicas
reports the change and does nothing -> scale 2->4 -> teardown leaves no process. Its state directory is a short path
under /tmp (slurmstepd's unix sockets live under it; sun_path holds 108 bytes), stopped and purged in any case.
"""
import json
import os
import shutil
import subprocess
import tempfile

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from requires import SLURM, skip_without

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
CONVERGE = "soperator.slurm.cluster : Converge the local Slurm cluster"

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed")


def playbook(name, *args, expect_rc=0):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", name)] + list(args),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == expect_rc, proc.stdout[-4000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    tasks = dict((t["task"]["name"], t["hosts"].get("localhost", {})) for t in out["plays"][0]["tasks"])
    return tasks, out["stats"]["localhost"]


@pytest.fixture
def state_dir():
    skip_without(SLURM)
    path = tempfile.mkdtemp(prefix="sop-site-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    try:
        lb.LocalCluster(path).stop(purge=True)
    finally:
        assert lb.LocalCluster(path).leftover_processes() == []


def slurm(state, *argv):
    env = dict(os.environ, SLURM_CONF=os.path.join(state, "etc", "slurm.conf"))
    proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def nodes(state):
    return dict((n["name"], n) for n in json.loads(slurm(state, "sinfo", "--json"))["nodes"])


def spec_with_replicas(tmp_path, replicas):
    docs = list(yaml.safe_load_all(open(SMALL)))
    for doc in docs:
        if doc["kind"] == "NodeSet":
            doc["spec"]["replicas"] = replicas
    path = tmp_path / ("small-%d.yml" % replicas)
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def site(state, spec, *args, **kw):
    return playbook("site.yml", "-e", "slurm_target=local", "-e", "spec_file=%s" % spec, "-e", "state_dir=%s" % state,
                    *args, **kw)


def test_site_local_up_idempotent_check_mode_scale_and_teardown(state_dir, tmp_path):
    state = state_dir
    # 1. up: every node idle, the export line printed
    tasks, stats = site(state, SMALL)
    result = tasks[CONVERGE]
    assert result["changed"] and stats["changed"] == 1
    assert "started slurmctld" in result["actions"]
    assert result["env"] == {"SLURM_CONF": os.path.join(state, "etc", "slurm.conf")}
    shown = tasks["soperator.slurm.cluster : Show how to use the cluster"]["msg"]
    assert "export SLURM_CONF=%s/etc/slurm.conf" % state in shown
    listed = nodes(state)
    assert sorted(listed) == ["cpu-0", "cpu-1"]
    assert all(n["state"].lower() == "idle" and not n.get("state_flags") for n in listed.values())
    assert sorted(n["name"] for n in result["nodes"]) == ["cpu-0", "cpu-1"]
    ctld = lb.LocalCluster(state).pid("slurmctld")

    # 2. second run: nothing changes
    tasks, stats = site(state, SMALL)
    assert stats["changed"] == 0 and tasks[CONVERGE]["actions"] == []

    # 3. check mode with 4 replicas: reports the two new slurmds, starts nothing
    four = spec_with_replicas(tmp_path, 4)
    tasks, stats = site(state, four, "--check", "--diff")
    result = tasks[CONVERGE]
    assert stats["changed"] == 1 and result["changed"]
    assert result["actions"] == ["would start slurmd-cpu-2", "would start slurmd-cpu-3"]
    assert result["diff"]["after"]["nodes"] == ["cpu-0", "cpu-1", "cpu-2", "cpu-3"]
    assert sorted(nodes(state)) == ["cpu-0", "cpu-1"]
    assert lb.LocalCluster(state).pid("slurmd-cpu-2") is None

    # 4. scale 2 -> 4 for real: new nodes idle, slurmctld not restarted, then idempotent again
    tasks, stats = site(state, four)
    assert stats["changed"] == 1
    assert tasks[CONVERGE]["actions"] == ["started slurmd-cpu-2", "started slurmd-cpu-3"]
    listed = nodes(state)
    assert sorted(listed) == ["cpu-0", "cpu-1", "cpu-2", "cpu-3"]
    assert all(n["state"].lower() == "idle" for n in listed.values())
    assert lb.LocalCluster(state).pid("slurmctld") == ctld
    out = slurm(state, "srun", "-N4", "-l", "printenv", "SLURMD_NODENAME")
    assert sorted(line.split(": ")[1] for line in out.splitlines()) == ["cpu-0", "cpu-1", "cpu-2", "cpu-3"]
    stats = site(state, four)[1]
    assert stats["changed"] == 0

    # 5. teardown (state kept), check mode first: nothing stopped by it
    tasks, stats = playbook("teardown.yml", "-e", "slurm_target=local", "-e", "state_dir=%s" % state, "--check")
    planned = tasks["soperator.slurm.cluster : Converge the local Slurm cluster"]["actions"]
    assert "would stop slurmctld" in planned and stats["changed"] == 1
    assert lb.LocalCluster(state).pid("slurmctld") == ctld
    tasks, stats = playbook("teardown.yml", "-e", "slurm_target=local", "-e", "state_dir=%s" % state)
    stopped = tasks["soperator.slurm.cluster : Converge the local Slurm cluster"]["actions"]
    assert {"stopped slurmctld", "stopped munged", "stopped slurmd-cpu-3"} <= set(stopped)
    assert lb.LocalCluster(state).leftover_processes() == []
    assert subprocess.run(["pgrep", "-f", state], capture_output=True, check=False).stdout == b""
    assert os.path.exists(os.path.join(state, "etc", "slurm.conf"))      # kept without purge
    stats = playbook("teardown.yml", "-e", "slurm_target=local", "-e", "state_dir=%s" % state)[1]
    assert stats["changed"] == 0

    # 6. purge deletes the state directory
    tasks = playbook("teardown.yml", "-e", "slurm_target=local", "-e", "state_dir=%s" % state, "-e", "purge=true")[0]
    assert tasks["soperator.slurm.cluster : Converge the local Slurm cluster"]["actions"] == ["purged %s" % state]
    assert not os.path.exists(state)


def test_purge_refuses_a_directory_that_is_not_a_state_dir(tmp_path):
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("do not delete")
    tasks = playbook("teardown.yml", "-e", "slurm_target=local", "-e", "state_dir=%s" % other, "-e", "purge=true",
                     expect_rc=2)[0]
    assert "refusing to purge" in tasks["soperator.slurm.cluster : Converge the local Slurm cluster"]["msg"]
    assert (other / "thesis.tex").exists()
