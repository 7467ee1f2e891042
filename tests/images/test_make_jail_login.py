"""The README's local login quick start, as a user runs it: `make jail`, then site.yml with the README's arguments,
then ssh to the port the play prints - the session's / is the jail `make jail` built, and `srun -N2 hostname` works
there and from inside a batch job submitted there.

`make jail` is run as it is (images/build.py keeps its root filesystems in ~/.cache/soperator/images keyed by their
inputs, so after the first build it takes about a second); like any `make jail`, it writes
build/jail/jail-rootfs.tar and installs the chroot plugin at /usr/lib/slurm/spank_chroot.so. It needs root and what
`make images-deps` installs; the test skips only when those are missing, and that skip fails under CI=true, which
has them. The commands are read from the README's code block, so the two cannot drift; the only departures are where
the cluster keeps its state and where the jail is (temporary folders, not ~/.local/state or /srv/jail) and the key
(a fresh one).
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What the README's commands and `make jail` run (the packages are the Makefile's IMAGES_APT_PACKAGES).
PROGRAMS = ("make", "ansible-playbook", "ssh", "ssh-keygen", "sshd", "unshare", "munged", "slurmctld", "slurmd",
            "scontrol", "sbatch")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
JOB_WAIT = 120


def readme_login_commands():
    """The README's local login quick start: the shell block that starts with `make jail`, as a list of commands
    (continuation lines joined, comments dropped)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"^```sh\n(.*?)^```", f.read(), re.M | re.S)
    block = [b for b in blocks if b.startswith("make jail")]
    assert len(block) == 1, "the README has no (or more than one) shell block starting with `make jail`"
    commands = []
    for line in block[0].replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line:
            commands.append(re.sub(r"\s+", " ", line))
    return commands


def _images_apt_packages():
    with open(os.path.join(ROOT, "Makefile")) as f:
        return re.search(r"^IMAGES_APT_PACKAGES\s*:?=\s*(.*)$", f.read(), re.M).group(1).split()


def _require():
    if os.geteuid() != 0:
        pytest.skip("the README's login node needs root (sshd's chroot, the chroot SPANK plugin)")
    missing = [p for p in PROGRAMS if shutil.which(p) is None and shutil.which(p, path=SBIN) is None]
    missing += [p for p in _images_apt_packages()
                if subprocess.run(["dpkg", "-s", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  check=False).returncode != 0]
    if missing:
        pytest.skip("make jail and the README's login node need %s (make deps images-deps)" % ", ".join(missing))


def _run(argv, timeout, env=None):
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=timeout, env=env, check=False)
    assert proc.returncode == 0, "%s failed:\n%s" % (" ".join(argv[:3]), proc.stdout[-6000:])
    return proc.stdout


@pytest.fixture
def folders():
    """(state directory below /tmp, the jail below /var/lib: sshd chroots only into a root-owned path no one else can
    write to, which /tmp is not)."""
    _require()
    state = tempfile.mkdtemp(prefix="sop-readme-", dir="/tmp")
    os.chmod(state, 0o755)
    parent = tempfile.mkdtemp(prefix="soperator-readme-", dir="/var/lib")
    yield state, os.path.join(parent, "jail")
    try:
        subprocess.run(["ansible-playbook", "playbooks/teardown.yml", "-e", "slurm_target=local",
                        "-e", "spec_file=examples/small-cpu.yml", "-e", "state_dir=%s" % state, "-e", "purge=true"],
                       cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)
    finally:
        with open("/proc/self/mountinfo") as f:
            leaked = [ln.split()[4] for ln in f if ln.split()[4].startswith(parent + "/")]
        shutil.rmtree(parent)
        if os.path.isdir(state):
            shutil.rmtree(state)
        assert leaked == [], "mounts of the jail leaked to the host"


def test_make_jail_then_the_readme_login_path_works_verbatim(folders, tmp_path):
    state, jail = folders
    make, play, login, srun, sbatch = readme_login_commands()
    assert (make, login) == ("make jail", "ssh -p PORT root@127.0.0.1")
    assert play.startswith("ansible-playbook playbooks/site.yml ") and "-e jail_dir=/srv/jail " in play, play
    assert srun.startswith("srun ") and sbatch.startswith("sbatch "), (srun, sbatch)

    out = _run(["bash", "-c", make], timeout=3600)
    assert re.search(r"jail root filesystem build/jail/jail-rootfs\.tar \(\w+, Slurm [0-9.]+", out), out[-2000:]

    key = str(tmp_path / "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    play = play.replace("-e jail_dir=/srv/jail ", "-e jail_dir=%s " % jail).replace("~/.ssh/id_ed25519.pub",
                                                                                    key + ".pub")
    out = _run(["bash", "-c", play + " -e state_dir=%s" % state], timeout=900,
               env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    port = re.search(r"ssh -p (\d+) root@127\.0\.0\.1", out)       # the play prints the login node's port
    assert port, out[-4000:]

    def ssh(command):
        argv = login.replace("PORT", port.group(1)).split()
        proc = subprocess.run(argv[:1] + ["-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                                          "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                                          "-o", "LogLevel=ERROR", "-F", "/dev/null"] + argv[1:] + [command],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=180,
                              check=False)
        assert proc.returncode == 0, "%s: %s%s" % (command, proc.stdout, proc.stderr)
        return proc.stdout

    host = os.uname()[1]
    # `/` is the jail make jail built (only its root filesystem has this file), and the README's srun works there
    lines = ssh("cat /etc/soperator-jail-release && %s" % srun).splitlines()
    assert lines == ["soperator.slurm jail root filesystem", host, host], lines
    assert not os.path.exists("/etc/soperator-jail-release")

    # the README's sbatch from the session; the batch script's srun runs from inside the job
    job = ssh(sbatch.replace("sbatch ", "sbatch --parsable ", 1)).strip().split(";")[0]
    slurm_conf = dict(os.environ, SLURM_CONF=os.path.join(state, "etc", "slurm.conf"))
    deadline = time.time() + JOB_WAIT
    while True:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], stdout=subprocess.PIPE, env=slurm_conf,
                               universal_newlines=True, timeout=30, check=True).stdout
        status = re.search(r"\bJobState=(\S+)", shown).group(1)
        if status not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        assert time.time() < deadline, "job %s still %s after %ss" % (job, status, JOB_WAIT)
        time.sleep(0.5)
    # its output went to the session's working directory: root's home in the jail
    with open(os.path.join(jail, "root", "slurm-%s.out" % job)) as f:
        output = f.read()
    assert status == "COMPLETED", shown + output
    assert output.splitlines() == [host, host]
