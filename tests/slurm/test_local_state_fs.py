"""A local cluster's state directory on a full or mounted filesystem (issue 35, class 8), against real daemons and a
small tmpfs mounted for each test (root only; unmounted after):

* the filesystem full: the run fails naming the file and saying the configs were left as they were - and they are,
  byte for byte, with no temporary file beside them; with space again it converges and Slurm runs jobs;
* purge of a state directory that is a mount point deletes its contents and keeps the mount point.
"""
import errno
import os
import subprocess
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb

from ci_skips import environmental
from local_helpers import DRAIN_TIMEOUT, ROOT, TIMEOUT, load_model
from requires import SLURM, skip_without
from test_local_munge_key import SMALL, srun_on
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError, ports_needed
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port


@pytest.fixture
def small_fs():
    """A 24 MiB tmpfs mounted on a fresh folder under /tmp (short: slurmstepd's socket paths), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip(environmental("mounting a filesystem needs root"))
    skip_without(SLURM)
    mnt = tempfile.mkdtemp(prefix="sop-fs-", dir="/tmp")
    os.chmod(mnt, 0o755)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0755", "tmpfs", mnt], check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        os.rmdir(mnt)
        pytest.skip(environmental("cannot mount a tmpfs here: %s" % e))
    made = []
    yield mnt, made
    try:
        for cluster in made:
            try:
                cluster.stop(purge=True)
            except (LocalClusterError, OSError):
                pass                        # purged already by the test; the unmount below must still run
    finally:
        subprocess.run(["umount", mnt], check=True, timeout=60)
        os.rmdir(mnt)


def start_on(small_fs, state_dir, model):
    mnt, made = small_fs
    cluster = lb.LocalCluster(state_dir, model, timeout=TIMEOUT, drain_timeout=DRAIN_TIMEOUT,
                              base_port=find_free_base_port(ports_needed(model),
                                                            start=20000 + (os.getpid() % 100) * 100))
    made.append(cluster)
    cluster.ensure_started()
    return cluster


def fill(directory):
    """Fill the filesystem of `directory` until it is full. -> the filler's path."""
    path = os.path.join(directory, "filler")
    block = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(block)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
    with open(path, "ab", buffering=0) as f:            # and the last bytes
        try:
            while f.write(b"\0"):
                pass
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return path


def etc_bytes(cluster):
    etc = cluster.layout.etc
    out = {}
    for name in sorted(os.listdir(etc)):
        with open(os.path.join(etc, name), "rb") as f:
            out[name] = f.read()
    return out


def test_a_full_state_filesystem_fails_naming_the_file_and_keeps_the_configs(small_fs, tmp_path):
    mnt, _made = small_fs
    model = load_model(SMALL)
    cluster = start_on(small_fs, os.path.join(mnt, "s"), model)
    ctld = cluster.pid("slurmctld")
    before = etc_bytes(cluster)
    with open(os.path.join(ROOT, SMALL)) as f:
        changed = load_model(f.read().replace("SlurmdTimeout: 120", "SlurmdTimeout: 121"))
    filler = fill(mnt)
    try:
        with pytest.raises(LocalClusterError) as err:
            cluster.ensure_started(changed)
        message = str(err.value)
        assert "No space left on device" in message, message
        assert os.path.join(cluster.layout.etc, "slurm.conf") in message, message
        assert "configs in %s were left as they were" % cluster.layout.etc in message, message
        assert etc_bytes(cluster) == before                     # byte for byte, no temporary file beside them
        assert cluster.pid("slurmctld") == ctld
    finally:
        os.unlink(filler)
    done = cluster.ensure_started(changed)
    assert "updated slurm.conf" in done["changes"]
    assert b"SlurmdTimeout=121" in etc_bytes(cluster)["slurm.conf"]
    assert srun_on(cluster, "cpu-0") == ["cpu-0"]


def test_purge_of_a_state_dir_that_is_a_mount_point_keeps_the_mount_point(small_fs):
    mnt, _made = small_fs
    cluster = start_on(small_fs, mnt, load_model(SMALL))
    plan = cluster.plan_absent(True, cluster.status())
    assert plan[-1] == "would delete %s (kept the directory: it is a mount point; its contents were deleted)" % mnt
    done = cluster.stop(purge=True)
    assert done["stopped"][-1] == "purged %s (kept the directory: it is a mount point; its contents were deleted)" \
        % mnt, done
    assert os.path.ismount(mnt) and os.listdir(mnt) == []
    assert not cluster.leftover_processes()
