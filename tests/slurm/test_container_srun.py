"""`srun --container=BUNDLE` on real Slurm 22.05 (the host's): a local cluster with spec.containers on gets oci.conf
(render/oci_conf.py: runc, rootless), and its slurmds run each task of a step in a bundle node/oci_bundle.py made from
an image of two layers built here (tests/oci_helpers.host_layer: this machine's sh, cat and their libraries).

The local cluster's jobs run as root; a user's rootless run (user namespaces on the workers) is not shown here."""
import os
import shutil

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle
from ci_skips import environmental
from local_helpers import JOB_WAIT
import oci_helpers

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
        assert "RunTimeRun=\"runc --rootless=true --root=/tmp run %n.%u.%j.%s.%t -b %b\"" in f.read()
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
