"""A local cluster's jail must hold the chroot SPANK plugin at the path plugstack.conf names; the check walks the
jail's directories without following its links (the jail's users own its content)."""
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.login import require_jail_plugin

PLUGIN = "/usr/lib/slurm/spank_chroot.so"


def _put(root, path, text="plugin"):
    full = str(root) + path
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def test_a_jail_holding_the_plugin_passes(tmp_path):
    _put(tmp_path, PLUGIN)
    require_jail_plugin(str(tmp_path), PLUGIN)


def test_the_plugin_may_be_a_link_inside_the_jail(tmp_path):
    _put(tmp_path, "/usr/lib/slurm/spank_chroot.so.1")
    os.symlink("spank_chroot.so.1", str(tmp_path) + PLUGIN)
    require_jail_plugin(str(tmp_path), PLUGIN)


@pytest.mark.parametrize("jail", ["empty", "missing", "directory"])
def test_a_jail_without_the_plugin_is_refused(tmp_path, jail):
    root = tmp_path / "jail"
    if jail != "missing":
        root.mkdir()
    if jail == "directory":
        os.makedirs(str(root) + PLUGIN)
    with pytest.raises(LocalClusterError, match="the jail %s has no %s" % (root, PLUGIN)):
        require_jail_plugin(str(root), PLUGIN)


def test_a_linked_directory_is_not_followed_out_of_the_jail(tmp_path):
    outside = tmp_path / "host"
    _put(outside, "/slurm/spank_chroot.so")
    jail = tmp_path / "jail"
    (jail / "usr").mkdir(parents=True)
    os.symlink(str(outside), str(jail / "usr" / "lib"))     # usr/lib -> a host directory that holds a plugin
    with pytest.raises(LocalClusterError, match="has no"):
        require_jail_plugin(str(jail), PLUGIN)
