"""The ansible-runner image remediates the local cluster (issue 13): ansible-runner, with podman as its process
isolation, runs playbooks/remediate.yml in the image against a local cluster of real Slurm daemons on this machine.

The image is `make runner-local`'s: the runner's recipe from this machine's Debian suite, so its Slurm client speaks
the host's Slurm (22.05 on Debian 12; the default forky image's 26.05 client cannot talk to a 22.05 slurmctld). The
test runs `make runner-local` as it is (cached by content: about 3 s after the first build, about 1 min cold), like
test_make_jail_login runs `make jail`.

What runs in the container is the image's own: its ansible-playbook, its copy of the collection
(`soperator.slurm.remediate`), its scontrol and munge client library, its /opt/soperator/bin/health-check. From the
host it gets only the cluster's state directory (slurm.conf, the munge socket, where the remediation record goes),
the host network (slurmctld listens on loopback) and the folder of the fault file the spec's custom check looks at.
It runs as root, the cluster's SlurmUser here: `scontrol update` is for SlurmUser and root.

One cluster, two nodes: cpu-0 drained by a health check of ours, cpu-1 drained by an admin. A first run, while the
fault is there, re-checks cpu-0 in the container and leaves it drained; once the fault is gone a second run resumes
it. The host's own scontrol says so, and so does the playbook's result (ansible-runner's job events). cpu-1 is
never touched, no slurmd is restarted (the host owns the processes: replace_drained_nodes=false, reconcile=false),
and the containers are gone afterwards.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = os.path.join(ROOT, "images")
sys.path.insert(0, IMAGES)

import build  # noqa: E402  (images/build.py)
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError, ports_needed  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary  # noqa: E402

REGISTRY = os.environ.get("REGISTRY") or build.DEFAULT_REGISTRY
ENV = dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF") or os.path.join(IMAGES, "containers.conf"))
# `make runner-local` and what the image needs to run (the Makefile's IMAGES_APT_PACKAGES give buildah and friends).
PROGRAMS = ("make", "podman", "buildah", "mmdebstrap", "ansible-runner", "ansible-galaxy")
SLURM = ("munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
BUILD_TIMEOUT = 1800
RUN_TIMEOUT = 300
TASK = "Replace, re-check and resume the nodes we drained"
OUR_DRAIN = "soperator: health:fault injected"
FOREIGN_DRAIN = "hw: bad dimm"


def _require():
    if os.geteuid() != 0:
        pytest.skip("the images are built and run as root, and the runner must be the cluster's SlurmUser")
    missing = [p for p in PROGRAMS if shutil.which(p) is None and shutil.which(p, path=SBIN) is None]
    for name in SLURM:
        try:
            find_binary(name)
        except LocalClusterError:
            missing.append(name)
    if missing:
        pytest.skip("the runner image against a local cluster needs %s (make deps images-deps)" % ", ".join(missing))


def _podman(*args, **kw):
    return subprocess.run(["podman"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=ENV, timeout=kw.pop("timeout", 120), check=False, **kw)


def _host_slurm_version():
    """The version of the slurmctld a local cluster runs here."""
    out = subprocess.run([find_binary("slurmctld"), "-V"], stdout=subprocess.PIPE, universal_newlines=True,
                         timeout=30, check=True).stdout
    return re.match(r"slurm(?:-wlm)? (\S+)$", out.strip()).group(1)


@pytest.fixture(scope="module")
def runner_image():
    """`make runner-local`, then the image it made for this host's Slurm: <registry>/ansible-runner:<host Slurm
    version>-<collection version>, labelled with that Slurm version."""
    _require()
    proc = subprocess.run(["make", "runner-local"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=BUILD_TIMEOUT, check=False)
    assert proc.returncode == 0, "make runner-local failed:\n%s" % proc.stdout[-6000:]
    version = _host_slurm_version()
    ref = "%s/ansible-runner:%s-%s" % (REGISTRY, version, build.collection_version())
    assert _podman("image", "exists", ref).returncode == 0, "make runner-local made no %s:\n%s" % (ref, proc.stdout)
    label = _podman("image", "inspect", "--format", '{{index .Labels "%s"}}' % build.LABEL_SLURM, ref).stdout.strip()
    assert label == version, (ref, label)
    # The image's own Slurm client, of the host's version (nothing of the host is mounted here).
    out = _podman("run", "--rm", "--pull=never", "--network=none", ref, "dpkg-query", "-W", "-f", "${Version}",
                  "slurm-client")
    assert build.upstream(out.stdout.strip()) == version, out.stdout + out.stderr
    return ref


def _spec(fault):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    # Only the custom check, never run by slurmd on its own (interval 0): the runs below decide when checks run.
    docs[0]["spec"]["healthChecks"] = {"passive": {
        "interval": 0, "gpu": False, "memory": False, "munge": False, "minFreeDiskPercent": 0,
        "custom": [{"name": "fault", "command": "test ! -e %s" % fault}]}}
    docs[1]["spec"]["replicas"] = 2
    return docs


@pytest.fixture
def cluster(runner_image, tmp_path):
    """A local cluster of real daemons (state below /tmp: unix socket paths are short), stopped and purged after,
    by the pids it recorded; its logs are copied to tmp_path first."""
    faults = tmp_path / "faults"
    faults.mkdir()
    docs = _spec(str(faults / "fault"))
    model = spec.build_model(docs)
    state = tempfile.mkdtemp(prefix="sop-", dir="/tmp")
    os.chmod(state, 0o755)
    base = find_free_base_port(ports_needed(model), start=20000 + (os.getpid() % 100) * 100)
    local = lb.LocalCluster(state, model, base_port=base, timeout=60, drain_timeout=60)
    try:
        local.ensure_started()
        yield local, docs, faults
    finally:
        logs = os.path.join(state, "log")
        if os.path.isdir(logs):
            shutil.copytree(logs, str(tmp_path / "logs"), dirs_exist_ok=True)
        local.stop(purge=True)


def _run_in_image(ref, local, docs, faults, pdd):
    """`ansible-runner run` of soperator.slurm.remediate in the image (podman): -> (rc, the remediation task's
    result from the job events, the podman command line, the container's name, the play's output)."""
    os.makedirs(os.path.join(pdd, "env"), exist_ok=True)
    os.makedirs(os.path.join(pdd, "project"), exist_ok=True)
    with open(os.path.join(pdd, "project", "spec.yml"), "w") as f:
        yaml.safe_dump_all(docs, f)
    with open(os.path.join(pdd, "env", "extravars"), "w") as f:
        yaml.safe_dump({"slurm_target": "local", "spec_file": "/runner/project/spec.yml",
                        "state_dir": local.state_dir, "reconcile": False, "replace_drained_nodes": False,
                        "health_check_program": "/opt/soperator/bin/health-check", "register_timeout": 60}, f)
    ident = "sop-remediate-%s" % uuid.uuid4().hex[:12]
    name = "ansible_runner_%s" % ident
    argv = ["ansible-runner", "run", pdd, "-p", "soperator.slurm.remediate", "--ident", ident,
            "--process-isolation", "--process-isolation-executable", "podman", "--container-image", ref,
            "--container-volume-mount", "%s:%s" % (local.state_dir, local.state_dir),
            "--container-volume-mount", "%s:%s:ro" % (faults, faults),
            "--container-option=--network=host", "--container-option=--user=0",
            "--container-option=--pull=never"]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              env=ENV, timeout=RUN_TIMEOUT, check=False)
    finally:
        # Ours by its unique name: gone already when ansible-runner's `podman run --rm` ended as it should.
        if _podman("container", "exists", name).returncode == 0:
            _podman("rm", "-f", "-t", "0", name)
            pytest.fail("the container %s outlived ansible-runner" % name)
    artifacts = os.path.join(pdd, "artifacts", ident)
    with open(os.path.join(artifacts, "command")) as f:
        command = json.load(f)["command"]
    results = []
    for path in sorted(glob.glob(os.path.join(artifacts, "job_events", "*.json"))):
        with open(path) as f:
            event = json.load(f)
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("task") == TASK:
            results.append(data["res"])
    assert len(results) == 1, "no single result of %r:\n%s" % (TASK, proc.stdout[-6000:])
    return proc.returncode, results[0], command, name, proc.stdout


def _nodes(local):
    """The host's sinfo (the host's Slurm binaries, the cluster's SLURM_CONF) -> {node: its record}."""
    return dict((n["name"], n) for n in local.sinfo_nodes())


def test_the_runner_image_remediates_the_local_cluster(runner_image, cluster, tmp_path):
    local, docs, faults = cluster
    local.run(["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=%s" % OUR_DRAIN])
    local.run(["scontrol", "update", "NodeName=cpu-1", "State=DRAIN", "Reason=%s" % FOREIGN_DRAIN])
    (faults / "fault").write_text("bad\n")
    pids = dict((n, local.pid("slurmd-%s" % n)) for n in ("cpu-0", "cpu-1"))
    assert all(pids.values()), pids

    # 1. the fault is there: the image's health check, in the container, fails cpu-0's custom check; left drained
    rc, result, command, first, out = _run_in_image(runner_image, local, docs, faults, str(tmp_path / "run-1"))
    assert rc == 0, out[-6000:]
    assert command[:2] == ["podman", "run"] and runner_image in command and "--rm" in command, command
    nodes = dict((n["name"], n) for n in result["nodes"])
    assert nodes["cpu-0"]["steps"] == ["rechecked", "left-drained"], nodes["cpu-0"]
    assert [f["check"] for f in nodes["cpu-0"]["checks"]["failed"]] == ["fault"], nodes["cpu-0"]
    assert nodes["cpu-1"]["action"] == "skipped-foreign", nodes["cpu-1"]
    assert not result["changed"]
    before = _nodes(local)["cpu-0"]
    assert "DRAIN" in before["state_flags"] and before["reason"] == OUR_DRAIN, before

    # 2. fixed: the next run resumes cpu-0, and only cpu-0
    (faults / "fault").unlink()
    rc, result, command, second, out = _run_in_image(runner_image, local, docs, faults, str(tmp_path / "run-2"))
    assert rc == 0, out[-6000:]
    nodes = dict((n["name"], n) for n in result["nodes"])
    assert result["changed"]
    assert nodes["cpu-0"]["steps"] == ["rechecked", "resumed"], nodes["cpu-0"]
    assert nodes["cpu-0"]["checks"]["healthy"] is True, nodes["cpu-0"]
    assert nodes["cpu-1"]["action"] == "skipped-foreign", nodes["cpu-1"]
    assert result["actions"]["resume"] == {"success": 1, "failure": 0}, result["actions"]
    assert "cpu-0: resumed" in out   # the play's report

    # what the host's own Slurm says
    after = _nodes(local)
    assert "DRAIN" not in after["cpu-0"]["state_flags"] and after["cpu-0"]["state"] == "idle", after["cpu-0"]
    assert "DRAIN" in after["cpu-1"]["state_flags"] and after["cpu-1"]["reason"] == FOREIGN_DRAIN, after["cpu-1"]
    # back in service: a job lands on it
    assert local.run(["srun", "-w", "cpu-0", "-N1", "printenv", "SLURMD_NODENAME"], timeout=60).stdout.strip() == "cpu-0"
    # the host's processes untouched: no slurmd restarted
    assert dict((n, local.pid("slurmd-%s" % n)) for n in pids) == pids
    # the remediation record the container wrote into the state directory (the exporter reads it)
    with open(os.path.join(local.state_dir, "status", "remediation.json")) as f:
        record = json.load(f)
    assert record["runs"] == {"success": 2, "failure": 0}, record
    assert record["actions"]["resume"]["success"] == 1, record
    # no container left of either run (podman run --rm, by ansible-runner)
    assert [n for n in (first, second) if _podman("container", "exists", n).returncode == 0] == []
