"""`srun --container=BUNDLE` on real Slurm 22.05 (the host's): a local cluster with spec.containers on gets oci.conf
(render/oci_conf.py: runc, rootless), and its slurmds run each task of a step in a bundle node/oci_bundle.py made from
an image of two layers built here (tests/oci_helpers.host_layer: this machine's sh, cat and their libraries).

Steps run as root and, where the machine has a user with uid >= 1000, as that user (rootless: user namespaces).
RunTimeRun runs node/oci_run.py first (installed in <state_dir>/bin): the container starts in srun's directory."""
import os
import shutil
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local.programs import node_python
from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle
from ci_skips import environmental
from local_helpers import JOB_WAIT
import oci_helpers
from waiting import wait_for

SPEC = """\
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: oci, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  containers: {enabled: true}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec:
  clusterName: oci
  replicas: 2
  resources: {cpu: "1", memory: 1Gi}
"""


def test_srun_runs_each_task_in_the_bundle_on_both_workers(local_cluster, tmp_path):
    if shutil.which("runc") is None and shutil.which("runc", path="/usr/sbin:/sbin") is None:
        pytest.skip(environmental("runc is not installed (Debian package runc; make deps installs it)"))
    cluster = local_cluster(SPEC)
    with open(os.path.join(cluster.layout.etc, "oci.conf")) as f:
        # through the wrapper the backend installed; 22.05 has no %Z (the wrapper takes the step's PWD)
        assert "RunTimeRun=\"%s %s --bundle %%b -- runc --rootless=true --root=/tmp run %%n.%%u.%%j.%%s.%%t -b %%b\"" \
            % (node_python(), os.path.join(cluster.layout.bin, "oci_run.py")) in f.read()
    layout = str(tmp_path / "layout")
    upper = [(oci_helpers.member("etc/os-release", mode=0o644), b'PRETTY_NAME="soperator test image"\nID=upper\n'),
             (oci_helpers.member("etc/.wh.gone", mode=0o644), b"")]
    oci_helpers.make_layout(layout, [oci_helpers.host_layer(), upper])
    bundle = oci_bundle.make_bundle(layout, str(tmp_path / "bundles"))["bundle"]
    proc = cluster.run(["srun", "-N2", "-l", "--container=" + bundle, "sh", "-c",
                        "cat /etc/os-release; ls /etc; echo pid=$$; export -p"], timeout=JOB_WAIT, check=False)
    assert proc.returncode == 0, proc.stderr
    by_task = {}
    for line in proc.stdout.splitlines():
        task, text = line.split(": ", 1)
        by_task.setdefault(task.strip(), []).append(text)
    # -N2 with one task per node: task 0 on cpu-0, task 1 on cpu-1
    assert sorted(by_task) == ["0", "1"], proc.stdout
    for lines in by_task.values():
        # the image's files, the whiteout applied, pid 1 in its own pid namespace
        assert lines[:4] == ['PRETTY_NAME="soperator test image"', "ID=upper", "os-release", "pid=1"], proc.stdout
        # the step's environment inside (22.05 passes srun's; slurmd's per-task ones, SLURM_PROCID, are absent)
        exported = set(lines[4:])
        assert "export SLURM_STEP_NODELIST='cpu-[0-1]'" in exported, lines
        assert "export SLURM_CONTAINER='%s'" % bundle in exported, lines


def test_a_missing_bundle_fails_the_step_with_an_error(local_cluster, tmp_path):
    if shutil.which("runc") is None and shutil.which("runc", path="/usr/sbin:/sbin") is None:
        pytest.skip(environmental("runc is not installed (Debian package runc; make deps installs it)"))
    cluster = local_cluster(SPEC)
    proc = cluster.run(["srun", "-N1", "--container=" + str(tmp_path / "no-such-bundle"), "true"],
                       timeout=JOB_WAIT, check=False)
    # what 22.05's srun says: the runtime found no bundle
    assert proc.returncode != 0 and "Application launch failed: No such file or directory" in proc.stderr, \
        proc.stderr


def _regular_user():
    """(uid, gid) of a user with uid >= 1000 on this machine, or None."""
    import pwd
    for entry in pwd.getpwall():
        if 1000 <= entry.pw_uid < 60000:
            return entry.pw_uid, entry.pw_gid
    return None


def _users_bundle(top, uid, gid):
    """In `top` (a folder the user reaches: tmp_path is root's, mode 0700), a bundle made for the user that mounts
    `top`/data, and that data folder; everything under `top` the user's. Returns (bundle, data)."""
    os.chmod(top, 0o755)
    layout = os.path.join(top, "layout")
    oci_helpers.make_layout(layout, [oci_helpers.host_layer()])
    data = os.path.join(top, "data")
    os.mkdir(data)
    bundle = oci_bundle.make_bundle(layout, os.path.join(top, "bundles"), user=(uid, gid), mounts=[data],
                                    preserve_owner=False)["bundle"]
    for current, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(current, name), uid, gid, follow_symlinks=False)
    return bundle, data


def test_a_regular_users_step_runs_rootless_and_writes_its_files_as_the_user(local_cluster):
    if shutil.which("runc") is None and shutil.which("runc", path="/usr/sbin:/sbin") is None:
        pytest.skip(environmental("runc is not installed (Debian package runc; make deps installs it)"))
    user = _regular_user()
    if user is None or os.geteuid() != 0:
        pytest.skip(environmental("needs root and a user with uid >= 1000 on this machine"))
    uid, gid = user
    cluster = local_cluster(SPEC)
    top = tempfile.mkdtemp(prefix="sop-oci-", dir="/tmp")
    try:
        bundle, data = _users_bundle(top, uid, gid)
        proc = cluster.run(["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups",
                            "srun", "-N2", "-l", "--container=" + bundle, "sh", "-c",
                            "echo uid_map $(cat /proc/self/uid_map); echo written >> %s/out" % data],
                           timeout=JOB_WAIT, check=False)
        assert proc.returncode == 0, proc.stderr
        # each task: root of a user namespace that maps only the user's uid; what it wrote is the user's
        assert sorted(proc.stdout.splitlines()) == ["0: uid_map 0 %d 1" % uid, "1: uid_map 0 %d 1" % uid], proc.stdout
        st = os.stat(os.path.join(data, "out"))
        assert (st.st_uid, st.st_gid) == (uid, gid)
        with open(os.path.join(data, "out")) as f:
            assert f.read() == "written\nwritten\n"
    finally:
        shutil.rmtree(top)


def test_a_regular_users_step_starts_in_the_directory_srun_ran_in(local_cluster):
    """The rendered RunTimeRun runs node/oci_run.py (the backend's copy in <state_dir>/bin) before runc: the step's
    bundle copy in slurmd's spool is the user's folder, its config.json is replaced with process.cwd set to the
    directory srun ran in, seen in the container through the bundle's same-path bind mount (22.05 never sets
    process.cwd: without the wrapper the container starts in the image's /). A wrapper that fails says so in one
    line on the job's stderr."""
    if shutil.which("runc") is None and shutil.which("runc", path="/usr/sbin:/sbin") is None:
        pytest.skip(environmental("runc is not installed (Debian package runc; make deps installs it)"))
    user = _regular_user()
    if user is None or os.geteuid() != 0:
        pytest.skip(environmental("needs root and a user with uid >= 1000 on this machine"))
    uid, gid = user
    cluster = local_cluster(SPEC)
    top = tempfile.mkdtemp(prefix="sop-oci-", dir="/tmp")
    try:
        bundle, data = _users_bundle(top, uid, gid)
        srun = "cd %s && exec setpriv --reuid %d --regid %d --clear-groups srun -N2 -l --container=%s sh -c pwd" \
            % (data, uid, gid, bundle)
        done = cluster.run(["sh", "-c", srun], timeout=JOB_WAIT, check=False)
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.splitlines()) == ["0: %s" % data, "1: %s" % data], done.stdout
        # slurmstepd removes its copies afterwards: the wrapper left nothing beside config.json. It does so in its
        # own clean-up, after it told srun the step ended (CI saw cpu-1's copy still there when srun returned)
        spool = os.path.join(cluster.state_dir, "spool")
        wait_for(lambda: [p for p, _d, _f in os.walk(spool) if "oci-job" in p], "slurmstepd to remove its bundle copies",
                 JOB_WAIT, poll=0.3, done=lambda left: left == [])
        # the wrapper refusing (here: pointed at a bundle copy that is not there; slurmstepd reads oci.conf anew for
        # each step): the step fails, the wrapper's line on the job's stderr
        conf = os.path.join(cluster.layout.etc, "oci.conf")
        with open(conf) as f:
            text = f.read()
        assert text.count(" --bundle %b ") == 1, text
        with open(conf, "w") as f:
            f.write(text.replace(" --bundle %b ", " --bundle %b/gone "))
        failed = cluster.run(["sh", "-c", srun.replace("-N2 -l", "-N1")], timeout=JOB_WAIT, check=False)
        print("22.05, the wrapper failing: rc %d\n%s" % (failed.returncode, failed.stderr))
        assert failed.returncode != 0 and failed.stdout == "", failed
        assert "soperator oci_run: cannot open the step's bundle " in failed.stderr, failed.stderr
    finally:
        shutil.rmtree(top)
