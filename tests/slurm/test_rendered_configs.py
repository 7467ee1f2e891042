"""Acceptance of the Slurm renderer against a real slurmctld: every example's configs (rendered for the local
target) load, and every NodeSet's nodes (all max_replicas of them) show up with the right partitions, CPUs,
memory, GRES and features. No slurmd is started: the FUTURE nodes are revealed with `scontrol update state=down`."""
import dataclasses
import glob
import json
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from local_helpers import assert_nodes_as_specified
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
EXAMPLE_FILES = sorted(glob.glob(os.path.join(EXAMPLES, "*.yml")) + glob.glob(os.path.join(EXAMPLES, "*.yaml")))


def test_there_are_examples():
    assert EXAMPLE_FILES


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[os.path.basename(p) for p in EXAMPLE_FILES])
def test_example_nodes_as_slurmctld_sees_them(local_cluster, path):
    with open(path) as f:
        model = spec.build_model(load_documents(f.read()))
    # Controller only: no worker runs, so nodes of any size can be checked on this machine.
    no_workers = dataclasses.replace(model, node_sets=tuple(dataclasses.replace(ns, replicas=0)
                                                            for ns in model.node_sets))
    cluster = local_cluster(model=no_workers)
    # FUTURE nodes are not listed yet; ephemeral NodeSets' CLOUD nodes are, powered down (PrivateData=cloud)
    cloud = model.cloud_nodes
    listed = cluster.sinfo_nodes()
    assert sorted(n["name"] for n in listed) == sorted(cloud)
    assert all("POWERED_DOWN" in n["state_flags"] for n in listed), listed

    assert_nodes_as_specified(cluster, model, "config-check")


# --- the local target changes only what it must (no daemon needed) -----------------------------------------------

# Keys the local target may change, per file; any other line of the pods' configs must be there byte for byte.
ADAPTED_KEYS = {
    "slurm.conf": {"slurmctldhost", "slurmctldport", "slurmuser", "slurmduser", "statesavelocation", "slurmdspooldir",
                   "slurmctldpidfile", "slurmdpidfile", "slurmctldlogfile", "slurmdlogfile", "plugstackconfig",
                   "authinfo", "accountingstoragehost", "accountingstorageport", "accountingstoragepass",
                   "communicationparameters", "slurmdparameters", "proctracktype", "taskplugin",
                   "jobacctgathertype", "prologflags", "mpidefault", "healthcheckprogram", "healthcheckinterval",
                   "healthchecknodestate", "nodename", "resumeprogram", "suspendprogram", "resumefailprogram"},
    "gres.conf": {"nodename"},
    "plugstack.conf": {"required", "optional"},
    "slurmdbd.conf": {"dbdhost", "dbdaddr", "dbdport", "slurmuser", "authinfo", "storagehost", "storageport",
                      "storageuser", "storageloc", "storagepass", "logfile", "pidfile"},
}
STATE = "/tmp/sop-adapt"


def _render_and_adapt(path, have_pmix=False):
    """The model of `path`, its configs for the pods and for the local target."""
    from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
    with open(path) as f:
        model = spec.build_model(load_documents(f.read()))
    from dataclasses import replace
    from ansible_collections.soperator.slurm.plugins.module_utils.local import configs
    from ansible_collections.soperator.slurm.plugins.module_utils.render.target import KUBERNETES
    # the pods' files for the host's Slurm: what differs below is the target's doing, not the Slurm version's
    rendered = render_slurm_configs(model, replace(KUBERNETES, slurm_version=configs.host_slurm_version()
                                                   or configs.OLDEST_SLURM))
    adapted = local_slurm_configs(model, STATE, 20000, user="someone", db_password="secret", have_pmix=have_pmix)
    return model, rendered, adapted


def test_health_json_adaptation():
    model, rendered, adapted = _render_and_adapt(os.path.join(EXAMPLES, "gpu-accounting.yml"))
    before, after = json.loads(rendered[c.HEALTH_CONFIG_FILE]), json.loads(adapted[c.HEALTH_CONFIG_FILE])
    assert before["passive"]["disk"]["paths"] == [c.JAIL_MOUNT, "/tmp"]
    assert after["passive"]["disk"]["paths"] == ["/tmp"]               # no local jail: not checked
    assert after["passive"]["munge"]["socket"] == STATE + "/run/munge.socket"
    # Check jobs write where the runner reads: in the jail (under its mount on Kubernetes), else in the state dir.
    assert (before["active"]["outputRoot"], before["active"]["outputDir"]) == (c.JAIL_MOUNT, "/var/lib/soperator/checks")
    assert (after["active"]["outputRoot"], after["active"]["outputDir"]) == ("", STATE + "/checks")
    before["passive"]["disk"]["paths"], before["passive"]["munge"]["socket"] = ["/tmp"], STATE + "/run/munge.socket"
    before["active"].update(outputRoot="", outputDir=STATE + "/checks")
    # The checks' last results: in the jail's status directory in pods, in the state dir locally.
    assert (before["statusDir"], after["statusDir"]) == (c.JAIL_MOUNT + "/var/lib/soperator/status", STATE + "/status")
    before["statusDir"] = after["statusDir"]
    assert after == before                                             # nothing else changes
    with_jail = local_slurm_configs(model, STATE, 20000, user="someone", db_password="secret", have_pmix=False,
                                    jail_dir="/srv/jail")
    jailed = json.loads(with_jail[c.HEALTH_CONFIG_FILE])
    assert jailed["passive"]["disk"]["paths"] == ["/srv/jail", "/tmp"]
    assert (jailed["active"]["outputRoot"], jailed["active"]["outputDir"]) == ("/srv/jail", "/var/lib/soperator/checks")


def _settings(text):
    return [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[os.path.basename(p) for p in EXAMPLE_FILES])
def test_adaptation_keeps_every_other_line(path):
    model, rendered, adapted = _render_and_adapt(path)
    assert sorted(adapted) == sorted(rendered)
    for name, text in rendered.items():
        if name == c.HEALTH_CONFIG_FILE:
            continue                # JSON, not lines: test_health_json_adaptation
        kept = set(adapted[name].splitlines())
        for line in _settings(text):
            if line in kept:
                continue
            key = line.split("=", 1)[0].split()[0].lower()
            assert key in ADAPTED_KEYS.get(name, set()), "%s: %r changed" % (name, line)
        # Comments and blank lines of the rendered file all survive.
        for line in text.splitlines():
            if not line.strip() or line.strip().startswith("#"):
                assert line in kept, "%s: comment %r lost" % (name, line)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[os.path.basename(p) for p in EXAMPLE_FILES])
def test_adaptation_points_everything_local(path):
    model, rendered, adapted = _render_and_adapt(path)
    conf = adapted["slurm.conf"]
    settings = dict(line.split("=", 1) for line in _settings(conf) if " " not in line)
    assert settings["SlurmctldHost"] == "localhost(127.0.0.1)"
    assert settings["SlurmctldPort"] == "20000"
    assert settings["SlurmUser"] == "someone" and settings["SlurmdUser"] == "someone"
    assert settings["AuthInfo"] == "socket=%s/run/munge.socket" % STATE
    assert settings["SlurmdSpoolDir"] == "%s/spool/%%n" % STATE
    assert "%n" in settings["SlurmdPidFile"] and "%n" in settings["SlurmdLogFile"]
    assert set(settings["CommunicationParameters"].split(",")) >= {"NoInAddrAny", "NoCtldInAddrAny"}
    assert settings["ProctrackType"] == "proctrack/linuxproc" and settings["TaskPlugin"] == "task/none"
    if model.health_checks.passive.enabled and model.health_checks.passive.interval:
        assert settings["HealthCheckProgram"] == STATE + "/bin/health-check"      # install_node_programs
    if model.mpi.default.startswith("pmix"):
        assert settings["MpiDefault"] == "none"
        _m, _r, with_pmix = _render_and_adapt(path, have_pmix=True)
        assert "MpiDefault=%s" % model.mpi.default in with_pmix["slurm.conf"].splitlines()
    # Every path a daemon writes is under the state directory; no in-container path is left in a setting.
    for name, text in adapted.items():
        for line in _settings(text):
            for container_path in ("/var/spool", "/var/log", "/run/", "/etc/slurm", "/dev/nvidia", "/opt/soperator",
                                   "/usr/lib/slurm/spank_chroot"):
                assert "=" + container_path not in line and not line.startswith(container_path), \
                    "%s: %r" % (name, line)
                assert "spank_chroot" not in line
    # One slurmd port per possible node, all distinct, on loopback.
    ports = []
    for line in _settings(conf):
        if line.startswith("NodeName="):
            words = dict(w.split("=", 1) for w in line.split())
            assert words["NodeAddr"] == "127.0.0.1" and words["NodeHostname"] == "localhost"
            names = hostlist.expand(words["NodeName"])
            got = _ports(words["Port"])
            assert len(got) == len(names)
            ports += got
    assert len(ports) == len(set(ports)) == sum(ns.max_replicas for ns in model.node_sets)
    if "gres.conf" in adapted:
        for line in _settings(adapted["gres.conf"]):
            assert "File=" not in line and "Count=" in line
    if model.accounting.enabled:
        dbd = dict(line.split("=", 1) for line in _settings(adapted["slurmdbd.conf"]))
        assert dbd["DbdAddr"] == "127.0.0.1" and dbd["StorageHost"] == "127.0.0.1"
        assert dbd["StoragePass"] == "secret"
        assert settings["AccountingStorageHost"] == "localhost"
        assert settings["AccountingStoragePass"] == "%s/run/munge.socket" % STATE


def _ports(expr):
    """Port=17820 or Port=[17820-17823] as a list of ints (a hostlist of numbers)."""
    if not expr.startswith("["):
        return [int(expr)]
    return [int(name[1:]) for name in hostlist.expand("x" + expr)]
