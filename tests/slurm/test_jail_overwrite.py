"""jail_populate overwrite=always on a jail a running local cluster uses (real slurmds and a real login sshd in it).

Refused - in check mode as in the real run, before anything is written, naming the fields (overwrite, force), the
cluster and its daemons - unless force=true, as on Kubernetes. With force the jail is replaced, the slurmds keep
running, and the login sshd is restarted so that its mounts are made in the new jail: ssh lands in the new root
filesystem and srun works from there. A jail no running cluster uses, or the same jail once the cluster is stopped,
is replaced without force.
"""
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import jail_use
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as nj

from jail_helpers import ROOT, make_jail, mounts_under
from requires import missing_programs
from test_login import SMALL, keys, plugin, ssh  # noqa: F401 (fixtures) pylint: disable=unused-import

NEW_MARKER = "the replaced jail\n"


def _tar(tree, path):
    with tarfile.open(path, "w") as tar:
        tar.add(tree, arcname=".")
    return path


@pytest.fixture
def sources(plugin):
    """(parent folder below /var/lib, tarball of the test jail, tarball of the same jail with another marker)."""
    if os.getuid() != 0:
        pytest.skip("the login sshd and the chroot SPANK plugin need root")
    missing = missing_programs(("sshd", "ssh", "ssh-keygen", "unshare"))
    if missing:
        pytest.skip("the jail tests need %s (Debian: openssh-server, openssh-client, util-linux)" % ", ".join(missing))
    parent = tempfile.mkdtemp(prefix="soperator-test-", dir="/var/lib")
    try:
        tree = os.path.join(parent, "tree")
        make_jail(tree, plugin)
        first = _tar(tree, os.path.join(parent, "first.tar"))
        with open(os.path.join(tree, "etc", "jail-marker"), "w") as f:
            f.write(NEW_MARKER)
        second = _tar(tree, os.path.join(parent, "second.tar"))
        shutil.rmtree(tree)
        yield parent, first, second
    finally:
        for path in (os.path.join(parent, "jail"), os.path.join(parent, "other")):
            assert mounts_under(path) == [], "mounts of the jail leaked to the host"
        shutil.rmtree(parent)


@pytest.fixture
def running(local_cluster, sources, plugin, keys):
    """A local cluster running with a jail populated from the first tarball -> (cluster, jail, second tarball)."""
    parent, first, second = sources
    jail = os.path.join(parent, "jail")
    assert jail_use.populate(jail, first)["action"] == nj.POPULATED
    cluster = local_cluster(SMALL, jail_dir=jail, spank_chroot=plugin, login_authorized_keys=[keys[1]])
    return cluster, jail, second


def _snapshot(jail):
    with open(os.path.join(jail, "etc", "jail-marker")) as f:
        marker = f.read()
    return sorted(os.listdir(jail)), nj.read_sentinel(jail), marker


def _pids(cluster):
    return dict((name, p["pid"]) for name, p in cluster.status()["processes"].items() if p["running"])


def _module(args, check=False):
    """jail_populate through Ansible (ad hoc, as a task runs it): (rc, the result)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_NOCOLOR="1")
    argv = ["ansible", "localhost", "-m", "soperator.slurm.jail_populate", "-a", json.dumps(args)]
    proc = subprocess.run(argv + (["--check"] if check else []), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return proc.returncode, result


def test_overwrite_always_is_refused_while_the_cluster_runs_in_check_mode_too(running, sources):
    cluster, jail, second = running
    pids = _pids(cluster)
    before = _snapshot(jail)
    for check in (True, False):
        result = jail_use.populate(jail, second, "always", check_mode=check)
        assert result["action"] == nj.REFUSED and result["changed"] is False
        message = result["message"]
        assert "refusing overwrite=always" in message and "set force=true" in message, message
        assert "the local cluster in %s" % cluster.state_dir in message, message
        for name in ("sshd", "slurmd-cpu-0", "slurmd-cpu-1"):
            assert "%s pid %d" % (name, pids[name]) in message, message
        assert result["in_use_by"] == [{"state_dir": cluster.state_dir, "daemons": [
            {"name": n, "pid": pids[n]} for n in ("slurmd-cpu-0", "slurmd-cpu-1", "sshd")]}]
        assert _snapshot(jail) == before

    # the module: the task fails with that message, in check mode too, and writes nothing
    if shutil.which("ansible") is not None:
        args = {"target": "local", "jail_dir": jail, "source": second, "overwrite": "always"}
        for check in (True, False):
            rc, result = _module(args, check)
            assert rc != 0 and result["failed"] and result["outcome"] == nj.REFUSED, result
            assert "refusing overwrite=always" in result["msg"] and cluster.state_dir in result["msg"]
            assert _snapshot(jail) == before
    assert _pids(cluster) == pids

    # a jail no running cluster uses is replaced without force
    other = os.path.join(os.path.dirname(jail), "other")
    assert jail_use.populate(other, second, "never")["action"] == nj.POPULATED
    replaced = jail_use.populate(other, second, "always")
    assert replaced["action"] == nj.REPLACED and replaced["in_use_by"] == [] and replaced["restarted"] == []

    # once the cluster is stopped, its jail is not in use either
    cluster.stop()
    replaced = jail_use.populate(jail, second, "always")
    assert replaced["action"] == nj.REPLACED and replaced["in_use_by"] == []
    assert _snapshot(jail)[2] == NEW_MARKER


def test_force_replaces_the_jail_and_restarts_the_login_sshd_in_it(running, keys):
    cluster, jail, second = running
    key = keys[0]
    pids = _pids(cluster)
    before = _snapshot(jail)
    # a session in the old jail: it ends with the old login sshd
    session = subprocess.Popen(["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                                "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR",
                                "-F", "/dev/null", "-p", str(cluster.status()["login"]["port"]), "-i", key,
                                "root@127.0.0.1", "echo in; exec sleep 300"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, universal_newlines=True)
    try:
        assert session.stdout.readline() == "in\n"

        planned = jail_use.populate(jail, second, "always", force=True, check_mode=True)
        assert planned["action"] == nj.REPLACED and planned["changed"] is True
        assert planned["restarted"] == ["would restart sshd of the local cluster in %s (the jail is replaced)"
                                        % cluster.state_dir]
        assert _snapshot(jail) == before and _pids(cluster) == pids

        done = jail_use.populate(jail, second, "always", force=True)
        assert done["action"] == nj.REPLACED and done["changed"] is True
        after = _pids(cluster)
        assert done["restarted"] == ["restarted sshd of the local cluster in %s (pid %d -> %d): the jail was "
                                     "replaced" % (cluster.state_dir, pids["sshd"], after["sshd"])]
        assert after["sshd"] != pids["sshd"]
        assert dict(after, sshd=None) == dict(pids, sshd=None)        # slurmctld and the slurmds kept running
        assert _snapshot(jail)[2] == NEW_MARKER
        assert nj.read_sentinel(jail)["digest"] != before[1]["digest"]
        session.wait(timeout=60)                                      # the old session ended
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()

    # the new login sshd's mounts are in the new jail: a session sees it, and srun reaches the cluster from there
    proc = ssh(cluster, key, "cat /etc/jail-marker; srun -N2 -t 1 hostname")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] + "\n" == NEW_MARKER
    assert lines[1:] == [os.uname()[1]] * 2
    # the cluster's next run finds everything as it should be: nothing restarted again
    assert cluster.ensure_started() == {"changed": False, "changes": []}
