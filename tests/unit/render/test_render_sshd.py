"""render_sshd: the login nodes' sshd_config, as the Kubernetes pods and the local backend's login sshd use it."""
import os
import shutil
import subprocess

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout
from ansible_collections.soperator.slurm.plugins.module_utils.local.login import (
    login_binds, render_login_sshd_config, unsafe_path_components)


def settings(text):
    """[(keyword, value)] of the lines that set something."""
    return [tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_one_renderer_for_both_backends():
    kube = settings(rk.login_sshd_config())
    local = settings(render_login_sshd_config("/srv/jail", Layout("/srv/state"), 20000))
    changed = dict(set(local) - set(kube))
    # what the local backend adapts, and only that
    assert sorted(changed) == ["AuthorizedKeysFile", "ChrootDirectory", "HostKey", "ListenAddress", "PidFile",
                               "Port", "SetEnv"]
    assert changed["Port"] == "20003" and changed["ListenAddress"] == "127.0.0.1"
    assert changed["ChrootDirectory"] == "/srv/jail"
    assert changed["AuthorizedKeysFile"] == "/srv/state/login/authorized-keys/%u /srv/jail%h/.ssh/authorized_keys"
    assert changed["SetEnv"] == "SLURM_CONF=/srv/state/etc/slurm.conf"
    expected = ["/srv/state/secrets/ssh_host_%s_key" % key_type for key_type in s.SSH_HOST_KEY_TYPES]
    assert [v for k, v in local if k == "HostKey"] == expected
    assert ("StrictModes", "yes") in local and ("StrictModes", "yes") in kube
    # the login Service's users may share the node's address: no per-source lockout in the pods (the images'
    # OpenSSH 10.x reads the key); the host's sshd (9.2 on Debian 12) refuses a file with it, so local has none
    assert ("PerSourcePenalties", "no") in kube and "PerSourcePenalties" not in dict(local)


def test_local_state_dir_below_tmp_turns_strict_modes_off(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    text = render_login_sshd_config("/srv/jail", Layout(str(tmp_path / "state")), 20000)
    assert ("StrictModes", "no") in settings(text)
    assert "StrictModes off: the state directory lies below a directory that others can write to" in text


def test_unsafe_path_components(tmp_path):
    assert unsafe_path_components("/usr/lib") == []
    assert unsafe_path_components("/usr/no-such-dir/below") == []        # stops where the path ends
    bad = unsafe_path_components(str(tmp_path))
    assert bad and bad[0].startswith("/tmp (owner uid 0, mode 1777)")


def test_login_binds_leave_out_what_tmp_brings_along():
    assert login_binds(Layout("/tmp/sop-x")) == ["/tmp"]
    assert login_binds(Layout("/srv/x")) == ["/tmp", "/srv/x/etc", "/srv/x/run", "/srv/x/spool"]


@pytest.mark.skipif(shutil.which("sshd", path="/usr/sbin:/sbin:" + os.environ.get("PATH", "")) is None
                    or shutil.which("ssh-keygen") is None, reason="needs openssh-server and ssh-keygen")
def test_sshd_accepts_the_rendered_config(tmp_path):
    """`sshd -t`: every keyword and value is one this sshd knows (host keys from ssh-keygen)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    for key_type in s.SSH_HOST_KEY_TYPES:
        subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-f", str(keys / s.ssh_host_key_file(key_type))],
                       check=True)
    config = tmp_path / "sshd_config"
    config.write_text(render_sshd_config("/mnt/jail", str(keys), "/etc/ssh/authorized-keys", port=2222))
    sshd = shutil.which("sshd", path="/usr/sbin:/sbin:" + os.environ.get("PATH", ""))
    if not os.path.isdir("/run/sshd"):
        # sshd's privilege separation directory, which `sshd -t` wants too (the local backend creates it the same way)
        os.makedirs("/run/sshd", 0o755)
    proc = subprocess.run([sshd, "-t", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stdout
