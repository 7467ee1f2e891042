"""The chroot SPANK plugin (images/spank_chroot) on a real local cluster: job steps run in the jail.

The plugin is built here with its Makefile (warnings are errors); a small jail is made from the host's binaries and
their libraries (jail_helpers.make_jail). The cluster loads the plugin through LocalCluster(jail_dir=...,
spank_chroot=...).

Every mount the plugin makes lives in the mount namespace of a job step; after the clusters stop, no mount of the
jail is left on the host (checked below).
"""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec

from jail_helpers import MARKER, PLUGIN_DIR, ROOT, build_plugin, make_jail, mounts_under
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from local_helpers import JOB_WAIT, wait_job
from requires import skip_without

SMALL = "examples/small-cpu.yml"


# ------------------------------------------------------------------------------------------------ building


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The plugin built from images/spank_chroot with its Makefile into a tmp dir (-Wall -Wextra -Werror)."""
    return build_plugin(tmp_path_factory.mktemp("spank"))


@pytest.fixture(scope="module")
def jail(tmp_path_factory, plugin):
    if os.getuid() != 0:
        pytest.skip("the chroot SPANK plugin needs root (slurmstepd mounts the jail)")
    path = str(tmp_path_factory.mktemp("jail-parent") / "jail")
    make_jail(path, plugin)
    yield path
    assert mounts_under(path) == [], "mounts of the jail leaked to the host"


@pytest.fixture
def jailed(local_cluster, jail, plugin):
    """A started small-cpu cluster (cpu-0, cpu-1) whose job steps run in the jail. No login node: this jail lies
    below /tmp, where sshd does not chroot (test_login covers it)."""
    return local_cluster(SMALL, jail_dir=jail, spank_chroot=plugin, login=False)


def srun(cluster, *argv, **kwargs):
    return cluster.run(["srun", "--chdir=/"] + list(argv), timeout=JOB_WAIT, **kwargs)


def slurmd_logs(cluster):
    text = ""
    for name in sorted(os.listdir(cluster.layout.log)):
        if name.startswith("slurmd-") and name.endswith(".log"):
            with open(os.path.join(cluster.layout.log, name)) as f:
                text += f.read()
    return text


# ------------------------------------------------------------------------------------------------ the plugin


def test_makefile_installs_under_destdir(plugin, tmp_path):
    dest = tmp_path / "root"
    proc = subprocess.run(["make", "-C", PLUGIN_DIR, "install", "BUILD_DIR=%s" % os.path.dirname(plugin),
                           "DESTDIR=%s" % dest], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stdout
    assert os.path.isfile(str(dest) + c.SPANK_CHROOT_PLUGIN)


def test_default_binds_are_the_images_paths():
    """The node paths the plugin binds by default are the images' paths from constants.py."""
    with open(os.path.join(PLUGIN_DIR, "spank_chroot.c")) as f:
        source = f.read()
    block = re.search(r"default_binds\[\] = \{(.*?)\};", source, re.S).group(1)
    defaults = re.findall(r'"([^"]+)"', block)
    assert defaults == ["/tmp", c.SLURM_CONF_DIR, c.MUNGE_SOCKET_DIR, c.SLURMD_SPOOL]


# ------------------------------------------------------------------------------------------------ local backend


def load_model(path):
    with open(os.path.join(ROOT, path)) as f:
        return spec.build_model(load_documents(f.read()))


def _adapted_plugstack(**kwargs):
    return local_slurm_configs(load_model(SMALL), "/tmp/sop-x", 20000, user="someone", have_pmix=False,
                               **kwargs)["plugstack.conf"]


def _settings(text):
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_plugstack_without_jail_comments_the_plugin_out():
    text = _adapted_plugstack()
    assert _settings(text) == []
    assert "# required %s jail=%s" % (c.SPANK_CHROOT_PLUGIN, c.JAIL_MOUNT) in text.splitlines()


def test_plugstack_with_jail_loads_the_local_plugin_and_binds_the_state_dir():
    text = _adapted_plugstack(jail_dir="/srv/jail/", spank_chroot="/opt/x/spank_chroot.so")
    assert _settings(text) == ["required /opt/x/spank_chroot.so jail=/srv/jail nodefaults bind=/tmp "
                               "bind=/tmp/sop-x/etc bind=/tmp/sop-x/run bind=/tmp/sop-x/spool"]
    # Without spank_chroot: the installed plugin.
    assert _settings(_adapted_plugstack(jail_dir="/srv/jail"))[0].startswith(
        "required %s jail=/srv/jail " % c.SPANK_CHROOT_PLUGIN)


@pytest.mark.parametrize("kwargs, error", [
    ({"spank_chroot": "/opt/x/spank_chroot.so"}, "spank_chroot needs jail_dir"),
    ({"jail_dir": "relative/jail"}, "jail_dir must be an absolute path"),
    ({"jail_dir": "/srv/my jail"}, "jail_dir must be an absolute path without whitespace"),
    ({"jail_dir": "/srv/jail", "spank_chroot": "spank_chroot.so"}, "spank_chroot must be an absolute path"),
])
def test_plugstack_jail_arguments_are_checked(kwargs, error):
    with pytest.raises(LocalClusterError, match=error):
        _adapted_plugstack(**kwargs)


def test_local_cluster_refuses_a_missing_plugin(tmp_path):
    # checked before the plugin
    skip_without(("munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "scancel"))
    cluster = lb.LocalCluster(str(tmp_path / "state"), load_model(SMALL), jail_dir=str(tmp_path), login=False,
                              spank_chroot=str(tmp_path / "missing.so"))
    with pytest.raises(LocalClusterError, match="make spank"):
        cluster.ensure_started()
    assert not (tmp_path / "state").exists()                # refused before anything was created or started


# ------------------------------------------------------------------------------------------------ jobs in the jail

@pytest.fixture(scope="module")
def host_only():
    """A directory with a file on the host's root filesystem that no job in the jail may see. Not below /tmp (bound
    into the jail) - nor this checkout, which may itself lie below /tmp."""
    folder = tempfile.mkdtemp(prefix="soperator-host-only-", dir="/var/lib")
    with open(os.path.join(folder, "file"), "w") as f:
        f.write("host\n")
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_job_sees_the_jail_not_the_host(jailed, jail, host_only):
    assert srun(jailed, "cat", "/etc/jail-marker").stdout == MARKER
    path = os.path.join(host_only, "file")
    assert os.path.exists(path)
    out = srun(jailed, "sh", "-c", "test -e %s && echo visible || echo hidden" % path).stdout
    assert out.strip() == "hidden"
    # The step's root mount is the jail (mountinfo field 4 is the mount's root within its filesystem).
    mountinfo = srun(jailed, "cat", "/proc/self/mountinfo").stdout
    points = dict((line.split()[4], line.split()) for line in mountinfo.splitlines())
    root = points["/"][3]
    assert root != "/" and os.path.realpath(jail).endswith(root), mountinfo
    assert points["/proc"][points["/proc"].index("-") + 1] == "proc", mountinfo


def test_job_has_its_own_proc(jailed):
    out = srun(jailed, "sh", "-c", "echo $$; cat /proc/$$/status; ls /proc/self/").stdout.splitlines()
    pid = out[0]
    assert "Name:\tsh" in out and "Pid:\t%s" % pid in out, out
    assert "mountinfo" in out


def test_file_written_on_one_node_is_read_on_another(jailed, jail):
    srun(jailed, "-w", "cpu-0", "sh", "-c", "echo from $SLURMD_NODENAME > /home/shared/handoff")
    assert srun(jailed, "-w", "cpu-1", "cat", "/home/shared/handoff").stdout == "from cpu-0\n"
    with open(os.path.join(jail, "home", "shared", "handoff")) as f:   # it is the jail's file
        assert f.read() == "from cpu-0\n"


def test_batch_script_runs_in_the_jail_and_its_srun_reaches_slurmctld(jailed, jail, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ncat /etc/jail-marker\nsrun -N2 hostname\necho step-rc=$?\n")
    out = jailed.run(["sbatch", "--parsable", "-N2", "--chdir=/home/shared", "-o", "batch-%j.out", str(script)],
                     timeout=30).stdout.strip().split(";")[0]
    assert wait_job(jailed, out) == "COMPLETED", slurmd_logs(jailed)[-3000:]
    # slurmstepd opened the output file in the jail: the path is the jail's /home/shared.
    path = os.path.join(jail, "home", "shared", "batch-%s.out" % out)
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == MARKER.strip()
    assert lines[1:] == [os.uname()[1]] * 2 + ["step-rc=0"], lines
    assert not os.path.exists("/home/shared/batch-%s.out" % out)


def test_working_directory_is_the_jails(jailed, host_only):
    # /home/shared exists only in the jail: slurmstepd changes to it after the plugin entered the jail.
    assert jailed.run(["srun", "--chdir=/home/shared", "sh", "-c", "pwd"], timeout=JOB_WAIT).stdout == "/home/shared\n"
    # A directory the jail lacks (it exists on the host only): Slurm's fallback, /tmp, with its error.
    proc = jailed.run(["srun", "--chdir=%s" % host_only, "sh", "-c", "pwd"], timeout=JOB_WAIT)
    assert proc.stdout == "/tmp\n"
    assert "couldn't chdir to `%s'" % host_only in proc.stderr


def _install_plugin_only(jail, plugin):
    os.makedirs(jail + os.path.dirname(plugin))
    shutil.copy2(plugin, jail + plugin)


def test_missing_jail_fails_the_job_closed(local_cluster, plugin, tmp_path):
    missing = str(tmp_path / "no-such-jail")
    with pytest.raises(LocalClusterError, match="the jail %s has no %s" % (re.escape(missing), re.escape(plugin))):
        local_cluster(SMALL, jail_dir=missing, spank_chroot=plugin, login=False)
    # a jail that goes away under a running cluster: every job step fails closed
    _install_plugin_only(missing, plugin)
    cluster = local_cluster(SMALL, jail_dir=missing, spank_chroot=plugin, login=False)
    shutil.rmtree(missing)
    message = "cannot enter the jail %s: jail directory %s: No such file or directory" % (missing, missing)
    ran = tmp_path / "ran"

    proc = cluster.run(["srun", "-N2", "touch", str(ran)], timeout=JOB_WAIT, check=False)
    assert proc.returncode == 1, proc
    assert "spank_chroot: not running the task: job " in proc.stderr and message in proc.stderr, proc.stderr
    assert not ran.exists()                  # nothing ran on the host's root filesystem instead

    out = tmp_path / "batch.out"
    job = cluster.run(["sbatch", "--parsable", "-o", str(out), "--wrap", "touch %s" % ran],
                      timeout=30).stdout.strip().split(";")[0]
    assert wait_job(cluster, job) == "FAILED"
    assert re.search(r"\bExitCode=1:0\b", cluster.run(["scontrol", "show", "job", "-o", job]).stdout)
    assert not ran.exists()
    assert message in out.read_text()        # the job's stderr (on the host: slurmstepd never entered the jail)
    assert message in slurmd_logs(cluster)
    # The nodes stay in service (a launch failure would drain a batch job's node).
    assert all(not n["state_flags"] for n in cluster.sinfo_nodes())


def test_broken_plugstack_options_fail_closed(jailed, tmp_path):
    """An unknown plugin option in plugstack.conf (slurmstepd reads it at each launch) fails the tasks too."""
    _edit_plugstack(jailed, "nodefaults", "nodefaults no_such_option")
    ran = tmp_path / "ran"
    proc = jailed.run(["srun", "touch", str(ran)], timeout=JOB_WAIT, check=False)
    assert proc.returncode == 1
    assert "spank_chroot: not running the task: plugstack.conf: unknown option 'no_such_option'" in proc.stderr
    assert not ran.exists()


def test_no_jail_option_only_when_allowed(jailed, host_only):
    """--no-jail keeps a job on the host's root only with allow_no_jail in plugstack.conf (srun and slurmstepd read
    it at each launch, so the test edits the cluster's file)."""
    proc = srun(jailed, "--no-jail", "true", check=False)
    assert proc.returncode != 0 and "no-jail" in proc.stderr          # srun does not know the option
    _edit_plugstack(jailed, "nodefaults", "nodefaults allow_no_jail")
    assert srun(jailed, "--no-jail", "cat", os.path.join(host_only, "file")).stdout == "host\n"
    assert srun(jailed, "cat", "/etc/jail-marker").stdout == MARKER       # without it: still the jail


def _edit_plugstack(cluster, old, new):
    """Change the cluster's plugstack.conf in place: srun and slurmstepd read it at each launch."""
    conf = os.path.join(cluster.layout.etc, "plugstack.conf")
    with open(conf) as f:
        text = f.read()
    assert old in text
    with open(conf, "w") as f:
        f.write(text.replace(old, new))


def test_read_only_bind(jailed, tmp_path):
    shared = tmp_path / "datasets"
    shared.mkdir()
    (shared / "data.txt").write_text("read me\n")
    _edit_plugstack(jailed, "nodefaults", "nodefaults bind=%s:/datasets:ro" % shared)
    assert srun(jailed, "cat", "/datasets/data.txt").stdout == "read me\n"
    proc = srun(jailed, "touch", "/datasets/new", check=False)
    assert proc.returncode != 0 and "Read-only file system" in proc.stderr
    assert not (shared / "new").exists()


def test_mount_point_through_a_symlink_is_refused(jailed, jail, tmp_path):
    # /lib in the test jail is a symlink (usr/lib, as on the host): a mount there could be redirected.
    assert os.path.islink(os.path.join(jail, "lib"))
    _edit_plugstack(jailed, "nodefaults", "nodefaults bind=%s:/lib/redirected" % tmp_path)
    ran = tmp_path / "ran"
    proc = srun(jailed, "touch", str(ran), check=False)
    assert proc.returncode == 1
    assert "mount point %s/lib/redirected: %s/lib is a symbolic link" % (jail, jail) in proc.stderr, proc.stderr
    assert not ran.exists() and not os.path.exists(os.path.join(jail, "usr", "lib", "redirected"))
