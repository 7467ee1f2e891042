"""A bundle oci_bundle makes runs in a real OCI runtime: runc (Debian's, what oci.conf names) runs a command in it,
as root. Through Slurm: tests/slurm/test_container_srun.py.

The image is built here from this machine's own /bin/sh, cat and their libraries (oci_helpers.host_layer), in two
layers: the upper one replaces /etc/os-release and whites out a file of the lower one."""
import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle
from ci_skips import environmental
import oci_helpers


def test_runc_runs_a_command_in_a_bundle_made_from_two_layers(tmp_path):
    if shutil.which("runc") is None and shutil.which("runc", path="/usr/sbin:/sbin") is None:
        pytest.skip(environmental("runc is not installed (Debian package runc; make deps installs it)"))
    if os.geteuid() != 0:
        pytest.skip(environmental("runc runs a bundle without a user namespace only as root"))
    runc = shutil.which("runc") or shutil.which("runc", path="/usr/sbin:/sbin")
    layout = str(tmp_path / "layout")
    upper = [(oci_helpers.member("etc/os-release", mode=0o644), b'PRETTY_NAME="soperator test image"\nID=upper\n'),
             (oci_helpers.member("etc/.wh.gone", mode=0o644), b"")]
    oci_helpers.make_layout(layout, [oci_helpers.host_layer(), upper])
    made = oci_bundle.make_bundle(oci_helpers.make_archive(tmp_path / "image.tar", layout), str(tmp_path / "cache"))
    config_path = os.path.join(made["bundle"], "config.json")
    with open(config_path) as f:
        config = json.load(f)
    # what slurmstepd does for a step: the step's command in process.args
    config["process"]["args"] = ["/bin/sh", "-c", "cat /etc/os-release; ls /etc; echo pid=$$"]
    with open(config_path, "w") as f:
        json.dump(config, f)
    name = "soperator-test-%d" % os.getpid()
    try:
        proc = subprocess.run([runc, "run", "--bundle", made["bundle"], name], capture_output=True, text=True,
                              timeout=120, check=False, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([runc, "delete", "--force", name], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ['PRETTY_NAME="soperator', 'test', 'image"', "ID=upper", "os-release", "pid=1"]
