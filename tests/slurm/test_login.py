"""The local login node: sshd with ChrootDirectory into the jail, public keys only; sbatch from a session runs a job.

The jail is built from the host's binaries (jail_helpers.make_jail) below /var/lib, not /tmp: sshd chroots only into
a path whose every directory is root-owned and not writable by others. The cluster runs its job steps in the same
jail (the chroot SPANK plugin), so a job submitted from the login node writes its output into the jail.
"""
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec

from jail_helpers import MARKER, ROOT, build_plugin, make_jail, mounts_under
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LOGIN_DAEMON, LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.login import _jail_mount_point
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import _pid_alive
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from local_helpers import wait_job
from requires import missing_programs, skip_without

SMALL = "examples/small-cpu.yml"
SSH_TIMEOUT = 60


def _require_slurm():
    skip_without(("munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "scancel", "sbatch"))


def load_model():
    with open(os.path.join(ROOT, SMALL)) as f:
        return spec.build_model(load_documents(f.read()))


def _require(*programs):
    missing = missing_programs(programs)
    if missing:
        pytest.skip("the login test needs %s (Debian: openssh-server, openssh-client, util-linux)"
                    % ", ".join(missing))


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    return build_plugin(tmp_path_factory.mktemp("spank"))


@pytest.fixture(scope="module")
def jail(plugin):
    if os.getuid() != 0:
        pytest.skip("the login sshd and the chroot SPANK plugin need root")
    _require("sshd", "ssh", "ssh-keygen", "ssh-keyscan", "unshare")
    parent = tempfile.mkdtemp(prefix="soperator-test-", dir="/var/lib")
    path = os.path.join(parent, "jail")
    try:
        make_jail(path, plugin)
        yield path
        assert mounts_under(path) == [], "mounts of the jail leaked to the host"
    finally:
        shutil.rmtree(parent)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """(authorized key path, its public line, another key path that is not authorized)."""
    folder = tmp_path_factory.mktemp("ssh")
    for name in ("user", "stranger"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(folder / name)],
                       check=True)
    return str(folder / "user"), (folder / "user.pub").read_text().strip(), str(folder / "stranger")


@pytest.fixture
def login(local_cluster, jail, plugin, keys):
    return local_cluster(SMALL, jail_dir=jail, spank_chroot=plugin, login_authorized_keys=[keys[1]])


def ssh(cluster, key, command, *options):
    address = cluster.status()["login"]
    argv = ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-F", "/dev/null",
            "-p", str(address["port"]), "-i", key] + list(options) + ["%s@%s" % (address["user"], address["host"]),
                                                                      command]
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=SSH_TIMEOUT, check=False)


def host_key(cluster):
    """The ed25519 host key the login sshd presents."""
    port = cluster.status()["login"]["port"]
    out = subprocess.run(["ssh-keyscan", "-p", str(port), "-t", "ed25519", "127.0.0.1"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, universal_newlines=True, timeout=30, check=True).stdout
    (line,) = [ln for ln in out.splitlines() if not ln.startswith("#")]
    return line.split()[1:3]


def test_ssh_with_a_key_lands_in_the_jail_and_sbatch_runs_a_job(login, jail, keys):
    key = keys[0]
    assert login.status()["processes"][LOGIN_DAEMON]["running"]
    proc = ssh(login, key, "cat /etc/jail-marker; echo ---; ls /; echo ---; echo $SLURM_CONF")
    assert proc.returncode == 0, proc.stderr
    marker, listing, conf = proc.stdout.split("---\n")
    assert marker == MARKER
    assert sorted(listing.split()) == sorted(os.listdir(jail)) != sorted(os.listdir("/"))
    assert conf.strip() == login.layout.slurm_conf

    proc = ssh(login, key, "cd /home/shared && sbatch --parsable -o job-%j.out "
                           "--wrap 'hostname; cat /etc/jail-marker > marker-copy'")
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    assert wait_job(login, job) == "COMPLETED"
    shared = os.path.join(jail, "home", "shared")
    with open(os.path.join(shared, "job-%s.out" % job)) as f:
        assert f.read() == os.uname()[1] + "\n"
    with open(os.path.join(shared, "marker-copy")) as f:
        assert f.read() == MARKER
    assert ssh(login, key, "squeue -h -j %s -t all -o %%T" % job).stdout.strip() in ("COMPLETED", "")


def test_only_authorized_keys_get_in(login, keys):
    key, unused, stranger = keys
    proc = ssh(login, key, "true", "-o", "PreferredAuthentications=password,keyboard-interactive",
               "-o", "PubkeyAuthentication=no")
    assert proc.returncode == 255
    assert "Permission denied (publickey)" in proc.stderr          # the only method the server offers
    proc = ssh(login, stranger, "true")
    assert proc.returncode == 255 and "Permission denied (publickey)" in proc.stderr


def test_host_keys_survive_a_restart_and_stop_ends_sshd(login, jail):
    before = host_key(login)
    with open(os.path.join(login.layout.ssh_host_keys, "ssh_host_ed25519_key.pub")) as f:
        assert f.read().split()[:2] == before
    pid = login.pid(LOGIN_DAEMON)
    port = login.status()["login"]["port"]

    stopped = login.stop()["stopped"]
    assert LOGIN_DAEMON in stopped and not _pid_alive(pid)
    assert not login.login_node.ready(port)
    assert mounts_under(jail) == []

    started = login.ensure_started()["changes"]
    assert "started %s" % LOGIN_DAEMON in started
    assert not any("host keys" in c for c in started)
    assert host_key(login) == before
    assert login.ensure_started() == {"changed": False, "changes": []}


def _playbook(name, *args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", name)] + list(args), cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    return dict((t["task"]["name"], t["hosts"].get("localhost", {})) for t in tasks)


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed")
def test_site_playbook_populates_the_jail_and_runs_the_login_node(jail, plugin, keys):
    """site.yml -> the cluster role -> jail_populate (from a tarball of the test jail) and slurm_cluster target=local
    with jail_dir: check mode is truthful, a re-run changes nothing, teardown stops sshd."""
    _require_slurm()
    state = tempfile.mkdtemp(prefix="sop-login-", dir="/tmp")
    os.chmod(state, 0o755)
    parent = tempfile.mkdtemp(prefix="soperator-test-", dir="/var/lib")
    tarball = os.path.join(parent, "rootfs.tar")      # not in state: a cluster takes only a new or empty folder
    with tarfile.open(tarball, "w") as tar:
        tar.add(jail, arcname=".")
    fresh = os.path.join(parent, "jail")
    extra = json.dumps({"slurm_target": "local", "spec_file": os.path.join(ROOT, SMALL), "state_dir": state,
                        "jail_dir": fresh, "jail_source": tarball, "spank_chroot": plugin,
                        "login_authorized_keys": [keys[1]], "wait_timeout": 60})
    populate = "soperator.slurm.cluster : Populate the local jail"
    converge = "soperator.slurm.cluster : Converge the local Slurm cluster"
    try:
        planned = _playbook("site.yml", "-e", extra, "--check")
        assert planned[populate]["changed"] and planned[populate]["outcome"] == "populated"
        assert planned[converge]["changed"] and "would start sshd" in planned[converge]["actions"]
        assert not os.path.exists(fresh) and not os.path.exists(state + "/login")   # check mode wrote nothing

        first = _playbook("site.yml", "-e", extra)
        assert first[populate]["changed"] and first[populate]["outcome"] == "populated"
        assert os.path.exists(os.path.join(fresh, ".soperator-jail.json"))
        result = first[converge]
        assert "started sshd" in result["actions"]
        port = result["login"]["port"]
        assert result["login"] == {"host": "127.0.0.1", "port": port, "user": "root"}
        cluster = lb.LocalCluster(state, jail_dir=jail)
        assert ssh(cluster, keys[0], "cat /etc/jail-marker").stdout == MARKER

        again = _playbook("site.yml", "-e", extra, "--check")
        assert again[populate]["changed"] is False
        assert again[converge]["changed"] is False and again[converge]["actions"] == [], again[converge]["actions"]
        rerun = _playbook("site.yml", "-e", extra)
        assert rerun[populate]["changed"] is False and rerun[converge]["changed"] is False

        stopped = _playbook("teardown.yml", "-e", extra)
        assert any("stopped sshd" in a for t in stopped.values() for a in t.get("actions", []))
        assert not cluster.login_node.ready(port)
    finally:
        lb.LocalCluster(state).stop(purge=True)
        assert mounts_under(fresh) == [], "mounts of the jail leaked to the host"
        shutil.rmtree(parent)


def test_a_jail_sshd_cannot_chroot_into_is_refused_before_anything_starts(tmp_path, plugin):
    if os.getuid() != 0:
        pytest.skip("a jail needs root")
    _require_slurm()
    _require("sshd", "unshare")
    jail = tmp_path / "jail"                  # below /tmp: world-writable
    jail.mkdir()
    cluster = lb.LocalCluster(str(tmp_path / "state"), load_model(), jail_dir=str(jail), spank_chroot=plugin)
    with pytest.raises(LocalClusterError, match=r"cannot chroot into .*not so: /tmp \(owner uid 0, mode 1777\)"):
        cluster.ensure_started()
    assert not (tmp_path / "state").exists()


def test_mount_points_are_opened_without_following_the_jails_links(tmp_path):
    """The jail's content (which its users can change) must not redirect the login's mkdirs or mounts onto host
    paths: every component is opened with O_NOFOLLOW, and mounts go onto the opened directory."""
    jail = tmp_path / "jail"
    host = tmp_path / "host"
    (jail / "tmp").mkdir(parents=True)
    host.mkdir()
    os.symlink(str(host), str(jail / "tmp" / "state"))
    with pytest.raises(LocalClusterError, match="crosses a symbolic link"):
        _jail_mount_point(str(jail), "/tmp/state/etc")
    with pytest.raises(LocalClusterError, match="climbs out"):
        _jail_mount_point(str(jail), "/tmp/../../host")
    assert os.listdir(str(host)) == []
    _jail_mount_point(str(jail), "/var/lib/x")
    assert (jail / "var" / "lib" / "x").is_dir()
