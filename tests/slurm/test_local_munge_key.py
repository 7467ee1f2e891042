"""A munge key deleted or replaced under a running local cluster (issue 35, class 9), against real daemons: the next
run restarts munged with the key on disk (the running munged's credentials decode with that key, checked by a munged
of the test's own), Slurm works on, and the run after that changes nothing; check mode says so first.
"""
import os
import secrets
import subprocess
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import files

from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary
from local_helpers import TIMEOUT
from requires import skip_without
from waiting import wait_for

SMALL = "examples/small-cpu.yml"
JOB_WAIT = 60


def credential(socket):
    """A credential from the munged listening on `socket`."""
    out = subprocess.run([find_binary("munge"), "--socket=%s" % socket, "-n"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=30, check=True)
    return out.stdout


def decodes_with_key(cred, key_file, tmp_path):
    """Whether `cred` decodes with `key_file`: a munged of this test's own, started on that key (stopped by pid)."""
    work = tempfile.mkdtemp(prefix="munge-", dir=str(tmp_path))
    sock = os.path.join(work, "sock")
    proc = subprocess.Popen([find_binary("munged"), "--foreground", "--force", "--key-file=%s" % key_file,
                             "--socket=%s" % sock, "--pid-file=%s" % os.path.join(work, "pid"),
                             "--log-file=%s" % os.path.join(work, "log"),
                             "--seed-file=%s" % os.path.join(work, "seed")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # (or its end: then at once)
        wait_for(lambda: os.path.exists(sock) or proc.poll() is not None, "the test's munged to start", TIMEOUT,
                 poll=0.1)
        assert os.path.exists(sock), "the test's munged did not start: exit %s" % proc.poll()
        out = subprocess.run([find_binary("unmunge"), "--socket=%s" % sock], input=cred, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=30, check=False)
        return out.returncode == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def srun_on(cluster, node):
    return cluster.run(["srun", "-N1", "-w", node, "-t", "1", "printenv", "SLURMD_NODENAME"],
                       timeout=JOB_WAIT).stdout.split()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_munge_key_changed_under_a_running_cluster_restarts_munged_with_it(local_cluster, tmp_path, how):
    skip_without(("unmunge",))
    cluster = local_cluster(SMALL)
    key = cluster.layout.munge_key
    old_munged = cluster.pid("munged")
    assert decodes_with_key(credential(cluster.layout.munge_socket), key, tmp_path)
    if how == "deleted":
        os.unlink(key)
    else:
        files.atomic_write(key, secrets.token_bytes(1024), 0o400)
    # check mode says what the run does
    plan = cluster.plan_present(cluster.model, cluster.status())
    assert "would restart munged (configuration changed)" in plan, plan

    done = cluster.ensure_started()
    assert "restarted munged (configuration changed)" in done["changes"], done
    assert ("generated munge key" in done["changes"]) == (how == "deleted")
    assert cluster.pid("munged") not in (None, old_munged)
    # the running munged and the file agree, and Slurm works through it
    assert decodes_with_key(credential(cluster.layout.munge_socket), key, tmp_path)
    assert srun_on(cluster, "cpu-1") == ["cpu-1"]
    assert cluster.ensure_started() == {"changed": False, "changes": []}
    assert not [a for a in cluster.plan_present(cluster.model, cluster.status()) if "munge" in a]
