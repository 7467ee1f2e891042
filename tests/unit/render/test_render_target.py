"""render/target.py: the Slurm configs rendered for a target (pods or local processes), not rewritten afterwards."""
import json
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local import configs as lc
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.render import target as rt
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

from slurm_conf_reader import parse_slurm_file
from repo_root import ROOT

STATE = "/tmp/sop-target"


def example(name, **spec):
    with open(os.path.join(ROOT, "examples", name)) as f:
        documents = load_documents(f.read())
    documents[0]["spec"].update(spec)
    return build_model(documents)


def local(model, **kwargs):
    kwargs.setdefault("user", "someone")
    kwargs.setdefault("have_pmix", False)
    return lc.local_slurm_configs(model, STATE, 20000, db_password="secret", **kwargs)


def single(text):
    """{key: value} of the one-setting lines, as Slurm's parser reads them (the last one wins)."""
    return dict(pairs[0] for pairs in parse_slurm_file(text) if len(pairs) == 1)


@pytest.mark.parametrize("name", ["small-cpu.yml", "gpu-accounting.yml"])
def test_the_pods_target_is_the_default(name):
    model = example(name)
    assert render_slurm_configs(model, rt.KUBERNETES) == render_slurm_configs(model)
    assert render_slurm_configs(model, rt.SlurmTarget()) == render_slurm_configs(model)


def test_local_values_read_back_as_the_target_says():
    model = example("gpu-accounting.yml")
    target = lc.local_target(model, STATE, 20000, user="someone", db_password="secret", have_pmix=False)
    files = render_slurm_configs(model, target)
    conf = single(files["slurm.conf"])
    assert conf["StateSaveLocation"] == target.state_save_location == STATE + "/ctld"
    assert conf["PlugStackConfig"] == STATE + "/etc/plugstack.conf"
    assert conf["AuthInfo"] == "socket=%s/run/munge.socket" % STATE
    assert conf["AccountingStoragePass"] == STATE + "/run/munge.socket"
    assert conf["AccountingStoragePort"] == "20001" and conf["SlurmdParameters"] == "config_overrides"
    assert conf["JobAcctGatherType"] == "jobacct_gather/linux" and conf["MpiDefault"] == "none"
    assert "PrologFlags" not in conf
    dbd = single(files[c.SLURMDBD_CONF])
    assert (dbd["DbdHost"], dbd["DbdAddr"], dbd["DbdPort"]) == ("localhost", "127.0.0.1", "20001")
    assert (dbd["StorageHost"], dbd["StoragePort"], dbd["StoragePass"]) == ("127.0.0.1", "20002", "secret")
    assert dbd["LogFile"] == STATE + "/log/slurmdbd.log"
    # Every node line names its own port; gres.conf counts the GPUs instead of naming device files.
    nodes = [dict(pairs) for pairs in parse_slurm_file(files["slurm.conf"]) if pairs[0][0] == "NodeName"]
    assert [n["Port"] for n in nodes] == ["[20010-20025]", "[20026-20089]"]
    gres = [dict(pairs) for pairs in parse_slurm_file(files["gres.conf"])]
    assert gres == [{"NodeName": "gpu-[0-63]", "Name": "gpu", "Type": "h100", "Count": "8"}]
    health = json.loads(files[c.HEALTH_CONFIG_FILE])
    assert health["passive"]["munge"]["socket"] == STATE + "/run/munge.socket"


def test_user_settings_meet_the_same_target_rules_as_the_defaults():
    model = example("small-cpu.yml", slurmConfig={
        "proctracktype": "proctrack/cgroup", "PrologFlags": "Contain,X11", "TaskPlugin": "task/affinity",
        "CommunicationParameters": "block_null_hash", "ControlAddr": "10.0.0.1", "SlurmdParameters": "x"})
    pods = single(render_slurm_configs(model)["slurm.conf"])
    assert pods["proctracktype"] == "proctrack/cgroup" and pods["ControlAddr"] == "10.0.0.1"
    text = local(model)["slurm.conf"]
    conf = single(text)
    assert conf["proctracktype"] == "proctrack/linuxproc"          # the user's spelling, the local plugin
    assert conf["PrologFlags"] == "X11" and conf["TaskPlugin"] == "task/none"
    assert conf["CommunicationParameters"] == "block_null_hash,NoInAddrAny,NoCtldInAddrAny"
    assert conf["SlurmdParameters"] == "x,config_overrides"
    assert "ControlAddr" not in conf and "# local backend: one slurmctld, no backup: ControlAddr=10.0.0.1" in text
    # A choice that works on one host stays.
    kept = single(local(example("small-cpu.yml", slurmConfig={"ProctrackType": "proctrack/pgid"}))["slurm.conf"])
    assert kept["ProctrackType"] == "proctrack/pgid"


def test_pmix_stays_where_the_library_is():
    model = example("gpu-accounting.yml")
    assert single(local(model, have_pmix=True)["slurm.conf"])["MpiDefault"] == model.mpi.default


def test_a_target_without_a_port_for_a_node_is_refused():
    model = example("small-cpu.yml")
    with pytest.raises(ValueError, match=r"no slurmd port for cpu-\[1-3\]"):
        render_slurm_configs(model, rt.SlurmTarget(node_ports={"cpu-0": 1}))


@pytest.mark.parametrize("kwargs, error", [
    ({"jail_dir": "/srv/jail", "spank_chroot": "/opt/a b.so"}, "spank_chroot must be an absolute path"),
    ({"user": "someone"}, "state_dir"),
])
def test_local_target_checks_its_inputs_before_rendering(kwargs, error):
    state = STATE + " x" if error == "state_dir" else STATE
    with pytest.raises(LocalClusterError, match=error):
        lc.local_target(example("small-cpu.yml"), state, 20000, **kwargs)


def test_local_oci_conf_runs_the_wrapper_the_backend_installs_in_bin():
    def files(model, **kwargs):
        target = lc.local_target(model, STATE, 20000, user="someone", have_pmix=False, slurm_version=(22, 5),
                                 **kwargs)
        return render_slurm_configs(model, target)
    # gpu-accounting has GRES gpu, but the local target counts them without device files: no --gpus
    model = example("gpu-accounting.yml", containers={"enabled": True})
    run = single(files(model)["oci.conf"])["RunTimeRun"]
    assert run.startswith("%s %s/bin/oci_run.py --bundle %%b -- runc " % (lc.node_python(), STATE)), run
    # in a jail: the jail's python3, and bin/ bound into it at its host path (the chroot plugin's bind=)
    jailed = files(model, jail_dir="/srv/jail")
    run = single(jailed["oci.conf"])["RunTimeRun"]
    assert run.startswith("/usr/bin/python3 %s/bin/oci_run.py --bundle %%b -- runc " % STATE), run
    assert " bind=%s/bin " % STATE in jailed["plugstack.conf"].replace("\n", " "), jailed["plugstack.conf"]
    plain = files(example("gpu-accounting.yml"), jail_dir="/srv/jail")
    assert "oci.conf" not in plain and "bind=%s/bin" % STATE not in plain["plugstack.conf"]
