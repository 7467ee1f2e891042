"""The local backend acts only on its own cluster, recovers a running cluster, and gives concurrent clusters their
own ports - against real daemons.

* Only a directory with our marker is a cluster: stop/purge of a parent folder of clusters or of a Slurm install
  prefix fails before a signal or a delete (through LocalCluster and through teardown.yml); purge of one cluster
  leaves the one beside it running with its files as they were; only processes we recorded are signalled (a decoy
  named like a daemon, working in the folder, survives).
* A slurmctld that refused its configuration, then a corrected run: the slurmds register again, the job runs on.
* Clusters started at the same time get distinct port blocks; a stored block that another process took moves (a
  stopped cluster) or fails naming the port (a running one).
* A state_dir that would inject into the configs is refused before anything is written.
"""
import hashlib
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb

from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    CTLD_OFFSET, LOOPBACK, LocalClusterError, MARKER, node_ports, ports_needed)
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import PortClaims
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import _pid_alive, _proc_start_time
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import _saved_base, read_marker
from local_helpers import DRAIN_TIMEOUT, JOB_WAIT, ROOT, TIMEOUT, job_state, load_model, wait_job
from requires import SLURM, skip_without
from waiting import wait_for

SMALL = "examples/small-cpu.yml"


def snapshot(root, skip=("log", "run", "ctld", "spool", "db")):
    """{relative path: (mode, sha256 or link target)} of every entry below root, not following links; the folders
    daemons write to while they run are listed but not read."""
    out = {}
    for top, dirs, files in os.walk(root):
        rel = os.path.relpath(top, root)
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            key = os.path.normpath(os.path.join(rel, name))
            if os.path.islink(path):
                out[key] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[key] = ("dir", st.st_mode)
            elif key.split(os.sep)[0] in skip:
                out[key] = ("file", None)
            else:
                with open(path, "rb") as f:
                    out[key] = ("file", st.st_mode, hashlib.sha256(f.read()).hexdigest())
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)).split(os.sep)[0] not in skip]
    return out


def ctld_identity(cluster):
    pid = cluster.pid("slurmctld")
    assert pid is not None
    return pid, _proc_start_time(pid)


def nodes(cluster):
    return dict((n["name"], n) for n in cluster.sinfo_nodes())


def wait_running(cluster, job):
    wait_job(cluster, job, ("RUNNING",))


def playbook(name, *args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", name)] + list(args), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    out = json.loads(proc.stdout)
    tasks = dict((t["task"]["name"], t["hosts"].get("localhost", {})) for t in out["plays"][0]["tasks"])
    return proc.returncode, tasks


@pytest.fixture
def parent():
    """A folder holding clusters (a/ and b/): every cluster made in it is stopped by pid and purged at the end."""
    skip_without(SLURM)
    path = tempfile.mkdtemp(prefix="sop-p-", dir="/tmp")
    os.chmod(path, 0o755)
    made = []

    def make(name, **kwargs):
        kwargs.setdefault("timeout", TIMEOUT)
        kwargs.setdefault("drain_timeout", DRAIN_TIMEOUT)
        cluster = lb.LocalCluster(os.path.join(path, name), load_model(SMALL), **kwargs)
        made.append(cluster)
        cluster.ensure_started()
        return cluster

    yield path, make
    errors = []
    for cluster in made:
        try:
            cluster.stop(purge=True)
        except Exception as e:  # keep stopping the others
            errors.append("%s: %s" % (cluster.state_dir, e))
    shutil.rmtree(path, ignore_errors=True)
    assert not errors, errors


@pytest.fixture
def decoy(tmp_path):
    """A process that looks like one of ours to a /proc scan: named slurmd, working in (and naming) a folder."""
    started = []

    def start(folder):
        binary = tmp_path / "slurmd"
        shutil.copy("/bin/sh", str(binary))
        proc = subprocess.Popen([str(binary), "-c", "sleep 300; : %s" % folder], cwd=folder, start_new_session=True)
        wait_for(lambda: open("/proc/%d/comm" % proc.pid).read().strip(), "pid %d to exec slurmd" % proc.pid, 10,
                 poll=0.05, done=lambda comm: comm == "slurmd")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(10)


# --------------------------------------------------------------------------------------------- class 4: ownership

def test_purge_of_one_cluster_leaves_the_cluster_beside_it_running(local_cluster):
    first = local_cluster(SMALL, base_port=None)
    second = local_cluster(SMALL, base_port=None)
    ctld = ctld_identity(second)
    files = snapshot(second.state_dir)
    # a job running on the other cluster while this one goes
    job = second.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300"], timeout=30).stdout.strip()
    wait_running(second, job)

    done = first.stop(purge=True)
    assert done["stopped"][-1] == "purged %s" % first.state_dir
    assert not os.path.exists(first.state_dir)

    assert ctld_identity(second) == ctld
    assert snapshot(second.state_dir) == files
    assert job_state(second, job) == "RUNNING"
    assert sorted(n for n, s in nodes(second).items() if s["state"] in ("idle", "allocated", "mixed")) == \
        ["cpu-0", "cpu-1"]
    out = second.run(["srun", "-N1", "-w", "cpu-1", "-t", "1", "printenv", "SLURMD_NODENAME"], timeout=JOB_WAIT)
    assert out.stdout.split() == ["cpu-1"]


def test_stop_and_purge_of_a_parent_folder_touch_nothing(parent, decoy):
    folder, make = parent
    a, b = make("a"), make("b")
    before = dict((c.state_dir, (ctld_identity(c), snapshot(c.state_dir))) for c in (a, b))
    bystander = decoy(folder)

    for purge in (False, True):
        with pytest.raises(LocalClusterError, match="is not the state directory of a local cluster"):
            lb.LocalCluster(folder).stop(purge=purge)

    # the same through the teardown playbook (the slurm_cluster module), in check mode and for real
    if shutil.which("ansible-playbook"):
        for check in ((), ("--check",)):
            rc, tasks = playbook("teardown.yml", "-e", "slurm_target=local", "-e", "state_dir=%s" % folder,
                                 "-e", "purge=true", *check)
            assert rc == 2
            msg = tasks["soperator.slurm.cluster : Converge the local Slurm cluster"]["msg"]
            assert "refusing to purge %s" % folder in msg and "not the state directory" in msg, msg

    assert bystander.poll() is None
    assert sorted(os.listdir(folder)) == ["a", "b"]
    for cluster in (a, b):
        assert (ctld_identity(cluster), snapshot(cluster.state_dir)) == before[cluster.state_dir]
        assert sorted(nodes(cluster)) == ["cpu-0", "cpu-1"]


def test_stop_signals_only_what_the_cluster_recorded(local_cluster, decoy):
    cluster = local_cluster(SMALL)
    # named like our daemons, working in the state directory and naming it: a /proc scan would take it for ours
    bystander = decoy(cluster.state_dir)
    stopped = cluster.stop()["stopped"]
    assert sorted(stopped) == sorted(["munged", "slurmctld", "slurmd-cpu-0", "slurmd-cpu-1"])
    assert bystander.poll() is None
    assert cluster.leftover_processes() == []


def test_stop_without_slurmctld_stops_the_job_steps_it_left(local_cluster, tmp_path):
    cluster = local_cluster(SMALL)
    pid_file = tmp_path / "task.pid"
    job = cluster.run(["sbatch", "--parsable", "-w", "cpu-0", "-o", "/dev/null", "--wrap",
                       "echo $$ > %s; exec sleep 600" % pid_file], timeout=30).stdout.strip()
    wait_running(cluster, job)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), "the job's pid in %s" % pid_file, JOB_WAIT,
             poll=0.2)
    task = int(pid_file.read_text())
    task_start = _proc_start_time(task)
    # slurmctld gone (as after a crash): nothing can cancel the job, its slurmstepd outlives the slurmds
    ctld, start = ctld_identity(cluster)
    os.kill(ctld, 9)
    wait_for(lambda: not _pid_alive(ctld, start), "slurmctld[%d] to end after SIGKILL" % ctld, TIMEOUT, poll=0.05)
    steps = [pid for pid, name in cluster.leftover_processes() if name == "slurmstepd"]
    assert steps
    stopped = cluster.stop()["stopped"]
    assert ["slurmstepd[%d]" % pid for pid in steps] == \
        [s.split(" ")[0] for s in stopped if s.startswith("slurmstepd[")]
    assert not _pid_alive(task, task_start)
    assert cluster.leftover_processes() == []


def test_purge_of_a_folder_without_our_marker_deletes_nothing(tmp_path):
    # A Slurm install prefix: etc/slurm.conf and friends
    prefix = tmp_path / "prefix"
    for sub in ("etc", "sbin", "lib/slurm", "run"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "etc" / "slurm.conf").write_text("ClusterName=site\nStateSaveLocation=/var/spool/slurmctld\n")
    (prefix / "sbin" / "slurmctld").write_text("binary")
    # Our layout, but its slurm.conf was not written for this path: not proof that it is ours
    lookalike = tmp_path / "lookalike"
    (lookalike / "etc").mkdir(parents=True)
    (lookalike / "cluster.json").write_text('{"base_port": 17817}\n')
    (lookalike / "etc" / "slurm.conf").write_text("StateSaveLocation=/somewhere/else/ctld\n")
    for folder in (prefix, lookalike):
        before = snapshot(str(folder), skip=())
        for purge in (False, True):
            with pytest.raises(LocalClusterError, match="no %s" % MARKER):
                lb.LocalCluster(str(folder)).stop(purge=purge)
        with pytest.raises(LocalClusterError, match="is not the state directory"):
            lb.LocalCluster(str(folder), load_model(SMALL)).ensure_started()
        assert snapshot(str(folder), skip=()) == before


def test_purge_refuses_a_cluster_that_holds_another(tmp_path):
    outer = tmp_path / "outer"
    inner = outer / "spool" / "inner"
    inner.mkdir(parents=True)
    lb.LocalCluster(str(outer)).directory.write_marker()
    lb.LocalCluster(str(inner)).directory.write_marker()
    before = snapshot(str(outer), skip=())
    with pytest.raises(LocalClusterError, match="holds the state directory of other local clusters"):
        lb.LocalCluster(str(outer)).stop(purge=True)
    assert snapshot(str(outer), skip=()) == before
    # and no cluster is made inside another one's state directory
    nested = outer / "etc" / "new"
    cluster = lb.LocalCluster(str(nested), load_model(SMALL))
    with pytest.raises(LocalClusterError, match="inside the state directory of the local cluster in %s" % outer):
        cluster.ensure_started()
    # check mode (slurm_cluster reports LocalCluster.plan_present) says so too
    with pytest.raises(LocalClusterError, match="inside the state directory of the local cluster in %s" % outer):
        cluster.plan_present(cluster.model, cluster.status())
    assert not nested.exists()


def test_a_state_dir_of_an_earlier_version_is_marked_and_kept(local_cluster):
    cluster = local_cluster(SMALL)
    cluster.stop()
    os.unlink(os.path.join(cluster.state_dir, MARKER))      # as an earlier version left it
    assert cluster.ownership() == "legacy"
    again = cluster.ensure_started()
    assert any(c.startswith("marked %s" % cluster.state_dir) for c in again["changes"]), again
    assert read_marker(cluster.state_dir)["adopted"] is True
    assert sorted(nodes(cluster)) == ["cpu-0", "cpu-1"]


def test_purge_keeps_what_the_local_backend_did_not_create(local_cluster):
    cluster = local_cluster(SMALL)
    notes = os.path.join(cluster.state_dir, "notes.txt")
    with open(notes, "w") as f:
        f.write("mine")
    outside = tempfile.mkdtemp(prefix="sop-o-", dir="/tmp")
    try:
        with open(os.path.join(outside, "keep"), "w") as f:
            f.write("keep")
        os.symlink(outside, os.path.join(cluster.state_dir, "log", "elsewhere"))   # never followed
        done = cluster.stop(purge=True)
        assert "also holds notes.txt" in done["stopped"][-1]
        assert sorted(os.listdir(cluster.state_dir)) == ["notes.txt"]
        assert os.listdir(outside) == ["keep"]
        with pytest.raises(LocalClusterError, match="no %s" % MARKER):     # no longer a cluster
            cluster.stop(purge=True)
        os.unlink(notes)
        os.rmdir(cluster.state_dir)
    finally:
        shutil.rmtree(outside)


def test_links_planted_in_a_state_dir_are_not_written_through(local_cluster, tmp_path):
    cluster = local_cluster(SMALL)
    cluster.stop()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("untouched")
    before = snapshot(str(victim), skip=())
    # a link where the next run writes: a daemon's output file, then the health programs' folder
    out = os.path.join(cluster.state_dir, "log", "slurmctld.out")
    os.unlink(out)
    os.symlink(str(victim / "file"), out)
    with pytest.raises(LocalClusterError, match="slurmctld.out is a symbolic link"):
        cluster.ensure_started()
    os.unlink(out)
    cluster.stop()
    shutil.rmtree(os.path.join(cluster.state_dir, "bin"))
    os.symlink(str(victim), os.path.join(cluster.state_dir, "bin"))
    with pytest.raises(LocalClusterError, match="bin is not a directory"):
        cluster.ensure_started()
    assert snapshot(str(victim), skip=()) == before
    os.unlink(os.path.join(cluster.state_dir, "bin"))


# -------------------------------------------------------------------------------------------- class 6: recovery

def test_a_refused_config_then_a_corrected_run_brings_the_cluster_back_with_its_job(local_cluster):
    from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
    bad = {"on": False}

    def renderer(model, target):
        configs = render_slurm_configs(model, target)
        if bad["on"]:
            # a plugin that does not exist: slurmctld 22.05 exits at start ("Failed to initialize sched plugin")
            configs["slurm.conf"] += "SchedulerType=sched/nonexistent\n"
        return configs

    cluster = local_cluster(SMALL, renderer=renderer)
    job = cluster.run(["sbatch", "--parsable", "-w", "cpu-0", "-o", "/dev/null", "--wrap", "sleep 600"],
                      timeout=30).stdout.strip()
    wait_running(cluster, job)
    slurmds = dict((n, cluster.pid("slurmd-%s" % n)) for n in ("cpu-0", "cpu-1"))

    bad["on"] = True
    with pytest.raises(LocalClusterError, match="slurmctld exited"):
        cluster.ensure_started()

    bad["on"] = False
    # check mode (slurm_cluster reports LocalCluster.plan_present) says what the corrected run will do, slurmds included
    plan = cluster.plan_present(cluster.model, cluster.status())
    assert "would start slurmctld" in plan
    assert all(any(a.startswith("would restart slurmd-%s " % n) for a in plan) for n in ("cpu-0", "cpu-1")), plan
    done = cluster.ensure_started()
    assert "started slurmctld" in done["changes"]
    for node in ("cpu-0", "cpu-1"):
        assert "restarted slurmd-%s (slurmctld restarted: the node registers again)" % node in done["changes"]
        assert cluster.pid("slurmd-%s" % node) != slurmds[node]
    states = nodes(cluster)
    assert states["cpu-0"]["state"] in ("allocated", "mixed"), states["cpu-0"]
    assert states["cpu-1"]["state"] == "idle", states["cpu-1"]
    assert job_state(cluster, job) == "RUNNING"
    out = cluster.run(["srun", "-N1", "-w", "cpu-1", "-t", "1", "printenv", "SLURMD_NODENAME"], timeout=JOB_WAIT)
    assert out.stdout.split() == ["cpu-1"]
    assert cluster.ensure_started() == {"changed": False, "changes": []}


# ----------------------------------------------------------------------------------------------- class 7: ports

def _claim(state_dir, queue):
    cluster = lb.LocalCluster(state_dir, load_model(SMALL))
    with cluster._locked(create=True):
        queue.put(cluster.ports.choose(cluster.model, []))


def test_port_blocks_chosen_at_the_same_time_by_processes_are_distinct(tmp_path):
    count = ports_needed(load_model(SMALL))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    dirs = [str(tmp_path / ("c%d" % i)) for i in range(6)]
    procs = [ctx.Process(target=_claim, args=(d, queue)) for d in dirs]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
            assert proc.exitcode == 0
        bases = sorted(queue.get(timeout=10) for dummy in procs)
        assert all(b2 >= b1 + count for b1, b2 in zip(bases, bases[1:])), bases
        claims = PortClaims().read()
        assert sorted(claims[d]["base"] for d in dirs) == bases
    finally:
        for d in dirs:          # no marker, no claim: the blocks are free again
            if os.path.exists(os.path.join(d, MARKER)):
                os.unlink(os.path.join(d, MARKER))


def test_three_clusters_started_at_once_come_up_on_their_own_ports(local_cluster):
    clusters = [local_cluster(SMALL, base_port=None, start=False) for dummy in range(3)]
    errors = []

    def start(cluster):
        try:
            cluster.ensure_started()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=start, args=(c,)) for c in clusters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    count = ports_needed(clusters[0].model)
    bases = sorted(_saved_base(c.layout) for c in clusters)
    assert all(b2 >= b1 + count for b1, b2 in zip(bases, bases[1:])), bases
    for cluster in clusters:
        assert sorted(n for n, s in nodes(cluster).items() if s["state"] == "idle") == ["cpu-0", "cpu-1"]
        out = cluster.run(["srun", "-N2", "-t", "1", "printenv", "SLURM_CLUSTER_NAME"], timeout=JOB_WAIT)
        assert out.stdout.split() == ["small", "small"]


def _listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((LOOPBACK, port))
    s.listen(1)
    return s


def test_a_stored_block_taken_by_another_process(local_cluster):
    cluster = local_cluster(SMALL, base_port=None)
    old = _saved_base(cluster.layout)
    cluster.stop()
    # stopped: the taken block is left for a free one, and slurm.conf follows
    foreign = _listen(old + CTLD_OFFSET)
    try:
        done = cluster.ensure_started()
        new = _saved_base(cluster.layout)
        assert new != old
        assert "moved the ports from %d to %d: port %d is in use by another process" % (old, new, old) \
            in done["changes"]
        with open(cluster.layout.slurm_conf) as f:
            assert "SlurmctldPort=%d\n" % new in f.read()
        assert sorted(n for n, s in nodes(cluster).items() if s["state"] == "idle") == ["cpu-0", "cpu-1"]
    finally:
        foreign.close()
    # running: a port of its block taken (the one of cpu-3, not started) fails the run, naming it; nothing restarts
    ctld = ctld_identity(cluster)
    port = node_ports(cluster.model, new)["cpu-3"]
    foreign = _listen(port)
    try:
        with pytest.raises(LocalClusterError, match="port %d is in use by another process" % port):
            cluster.ensure_started()
        with pytest.raises(LocalClusterError, match="port %d is in use by another process" % port):
            cluster.scale({"cpu": 4})
    finally:
        foreign.close()
    assert ctld_identity(cluster) == ctld
    assert _saved_base(cluster.layout) == new


# ------------------------------------------------------------------------------------------------- unsafe paths

@pytest.mark.parametrize("name", ["with space", "hash#x", "eq=x", "new\nline", 'quote"x', "quote'x", "pct%n",
                                  "colon:x", "comma,x", "dollar$x"])
def test_a_state_dir_that_would_inject_into_the_configs_is_refused_before_any_write(tmp_path, name):
    state = str(tmp_path / name)
    with pytest.raises(LocalClusterError, match="state_dir .* cannot be used"):
        lb.LocalCluster(state, load_model(SMALL)).ensure_started()
    assert not os.path.lexists(state)
    with pytest.raises(LocalClusterError, match="state_dir"):
        local_slurm_configs(load_model(SMALL), state, 20000)
