"""A jail directory that is a symbolic link (issue 35, defect 3): refused naming the option, as slurm_cluster refuses
a linked state_dir (one rule, safe_tree.link_refusal) - never followed, its target never chowned or filled.

Through populate() and the populate Job's program, in check mode and for real; and slurm_cluster's local jail_dir."""
import os
import stat
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as j
from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.local import jail_use
import tar_helpers
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from repo_root import ROOT

JAIL_PY = os.path.join(ROOT, "plugins", "module_utils", "node", "jail.py")


def _target(tmp_path):
    """A directory as a volume provisioner hands it out: world-writable, not root's - what the jail's root is chowned
    and chmodded from."""
    target = tmp_path / "volume"
    target.mkdir()
    os.chmod(str(target), 0o777)
    if os.geteuid() == 0:
        os.chown(str(target), 1234, 1234)
    link = tmp_path / "jail"
    os.symlink(str(target), str(link))
    return target, str(link)


def _state(path):
    st = os.lstat(str(path))
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, sorted(os.listdir(str(path)))


def _tar(tmp_path):
    info = tarfile.TarInfo("etc/os-release")
    info.mode = 0o644
    return tar_helpers.make_tar(tmp_path / "rootfs.tar", [(info, b"ID=jail\n")])


@pytest.mark.parametrize("overwrite", ["never", "always"])
def test_a_linked_jail_dir_is_refused_and_its_target_left_alone(tmp_path, overwrite):
    target, link = _target(tmp_path)
    source = _tar(tmp_path)
    before = _state(target)
    expect = "jail_dir %s is a symbolic link: pass the directory it points to" % link
    for check in (True, False):
        with pytest.raises(j.JailError, match=expect):
            j.populate(link, source, overwrite, check_mode=check)
        with pytest.raises(j.JailError, match=expect):
            jail_use.populate(link, source, overwrite, check_mode=check)
        argv = [sys.executable, JAIL_PY, "populate", "--source", source, "--jail", link, "--overwrite", overwrite]
        proc = subprocess.run(argv + (["--check"] if check else []), capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 1, proc.stderr
        assert "--jail %s is a symbolic link: pass the directory it points to" % link in proc.stderr, proc.stderr
        assert _state(target) == before and os.path.islink(link)


def test_the_real_directory_is_populated(tmp_path):
    target, unused_link = _target(tmp_path)
    assert j.populate(str(target), _tar(tmp_path))["action"] == j.POPULATED
    if os.geteuid() == 0:
        assert _state(target)[:3] == (0o755, 0, 0)      # sshd's ChrootDirectory rule, on the directory named


def test_slurm_cluster_refuses_a_linked_jail_dir_and_state_dir_by_the_same_rule(tmp_path):
    unused_target, link = _target(tmp_path)
    cluster = lb.LocalCluster(str(tmp_path / "state"), jail_dir=link)
    with pytest.raises(LocalClusterError, match="jail_dir %s is a symbolic link: pass the directory it points to"
                       % link):
        cluster.check_inputs()
    real_state = tmp_path / "real-state"
    real_state.mkdir()
    os.symlink(str(real_state), str(tmp_path / "state-link"))
    linked = lb.LocalCluster(str(tmp_path / "state-link"))
    with pytest.raises(LocalClusterError, match="state_dir %s is a symbolic link: pass the directory it points to"
                       % (tmp_path / "state-link")):
        linked.ownership()
