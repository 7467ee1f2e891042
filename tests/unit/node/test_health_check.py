"""health_check.py: parsers on transcribed nvidia-smi / dmesg / scontrol outputs, the drain/resume decision, the
program's config lookup, and health.json as render_slurm renders it from the spec."""
import json
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check as hc
from ansible_collections.soperator.slurm.plugins.module_utils.render.health_json import health_check_config
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from repo_root import ROOT

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "health")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def example(name):
    with open(os.path.join(ROOT, "examples", name)) as f:
        return build_model(load_documents(f.read()))


# --- nvidia-smi -----------------------------------------------------------------------------------------------------

def test_gpu_list():
    gpus = hc.parse_gpu_list(fixture("nvidia_smi_gpus_8.csv"))
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-4b8f3c1e-2a77-9d41-8e0c-1f6a9b3d5e21",
                       "bus_id": "00000000:18:00.0"}
    assert len(hc.parse_gpu_list(fixture("nvidia_smi_gpus_7.csv"))) == 7
    assert hc.parse_gpu_list("") == []
    with pytest.raises(ValueError):
        hc.parse_gpu_list("No devices were found\n")


def test_ecc_and_remapping_healthy():
    gpus = hc.parse_nvidia_smi_q(fixture("nvidia_smi_q_healthy.txt"))
    assert sorted(gpus) == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert gpus["00000000:18:00.0"]["ECC Errors"]["Volatile"]["DRAM Uncorrectable"] == "0"
    assert gpus["00000000:18:00.0"]["Remapped Rows"]["Bank Remap Availability Histogram"]["Max"] == "2560 bank(s)"
    assert hc.gpu_error_problems(gpus) == []


def test_ecc_and_remapping_failing():
    problems = hc.gpu_error_problems(hc.parse_nvidia_smi_q(fixture("nvidia_smi_q_failing.txt")))
    assert problems == ["00000000:2A:00.0: 3 volatile uncorrectable ECC errors",
                        "00000000:2A:00.0: row remapping pending (reset needed)"]
    # The threshold comes from health.json.
    assert hc.gpu_error_problems(hc.parse_nvidia_smi_q(fixture("nvidia_smi_q_failing.txt")),
                                 max_uncorrectable=3) == ["00000000:2A:00.0: row remapping pending (reset needed)"]


def test_ecc_legacy_layout():
    gpus = hc.parse_nvidia_smi_q(fixture("nvidia_smi_q_legacy_failing.txt"))
    assert gpus["00000000:86:00.0"]["Remapped Rows"] == "N/A"
    assert hc.gpu_error_problems(gpus) == ["00000000:86:00.0: 2 volatile uncorrectable ECC errors",
                                           "00000000:86:00.0: retired pages pending (reset needed)"]


def test_xids():
    events = hc.parse_xids(fixture("dmesg_xid.txt"))
    assert [(e[1], e[2]) for e in events] == [("0000:3a:00", 13), ("0000:5d:00", 79)]
    critical = [48, 79]
    assert hc.xid_problems(events, critical, 0) == ["0000:5d:00: Xid 79 (GPU has fallen off the bus.)"]
    assert hc.xid_problems(events, critical, 6000.0) == []            # older than the window
    assert hc.xid_problems(events, [], 0) == []                       # Xid 13 is an application error


def test_meminfo():
    info = hc.parse_meminfo("MemTotal:       16314884 kB\nMemAvailable:    9121428 kB\nHugePages_Total:       0\n")
    assert info == {"MemTotal": 16314884, "MemAvailable": 9121428, "HugePages_Total": 0}


# --- scontrol and the decision -----------------------------------------------------------------------------------

LINE = ("NodeName=cpu-1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=1 CPULoad=0.10 AvailableFeatures=(null) "
        "ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost Port=20011 Version=22.05.8 "
        "OS=Linux 6.1.0 #1 SMP RealMemory=512 AllocMem=0 FreeMem=1000 Sockets=1 Boards=1 State=IDLE+DRAIN "
        "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=main "
        "BootTime=2024-03-12T09:00:00 SlurmdStartTime=2024-03-12T09:10:00 LastBusyTime=2024-03-12T09:10:01 "
        "CfgTRES=cpu=1,mem=512M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
        "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=soperator: health:fault-file exit 1: x [root@2024-03-12T09:12:00]")


def test_parse_node_line():
    state = hc.parse_node_line(LINE + "\n", "cpu-1")
    assert state == {"state": "IDLE", "flags": ["DRAIN"], "not_responding": False,
                     "reason": "soperator: health:fault-file exit 1: x"}
    assert hc.parse_node_line(LINE.replace("State=IDLE+DRAIN", "State=DOWN*"), "cpu-1")["not_responding"]
    with pytest.raises(hc.HealthCheckError):
        hc.parse_node_line(LINE, "cpu-2")
    with pytest.raises(hc.HealthCheckError):
        hc.parse_node_line("Node cpu-1 not found\n", "cpu-1")
    assert list(hc.parse_nodes(LINE + "\n" + LINE.replace("cpu-1", "cpu-2"))) == ["cpu-1", "cpu-2"]


def state(flags=(), reason=""):
    return {"state": "IDLE", "flags": list(flags), "not_responding": False, "reason": reason}


FAILED = [{"check": "munge", "detail": "munge -n failed: socket gone"}]


@pytest.mark.parametrize("node,failed,expected", [
    (state(), FAILED, ("drain", "soperator: health:munge munge -n failed: socket gone")),
    (state(), [], (None, "healthy")),
    (state(["DRAIN"], "soperator: health:disk /tmp: 1% free"), [], ("resume", None)),
    (state(["DRAIN"], "soperator: health:disk /tmp: 1% free"), FAILED,
     ("drain", "soperator: health:munge munge -n failed: socket gone")),          # ours: the reason follows
    (state(["DRAIN"], "soperator: health:munge munge -n failed: socket gone"), FAILED,
     (None, "already drained for this")),
    (state(["DRAIN"], "admin: bad fan"), [], (None, "drained by someone else: left alone")),
    (state(["DRAIN"], "admin: bad fan"), FAILED, (None, "already drained by someone else (admin: bad fan)")),
    (state(["DRAIN"], "soperator: scale-down"), [], (None, "drained by someone else: left alone")),
    (state(["DRAIN"], "soperator: check:nccl busbw low"), [], (None, "drained by someone else: left alone")),
])
def test_plan_action(node, failed, expected):
    assert hc.plan_action(node, "soperator:", failed) == expected


def test_drain_reason_is_one_bounded_line():
    reason = hc.drain_reason("soperator:", "custom", "line one\nline two " + "x" * 500)
    assert "\n" not in reason and reason.startswith("soperator: health:custom line one line two x")
    assert len(reason) <= hc.MAX_DETAIL + len("soperator:") + 16


def test_drain_reason_drops_control_characters_a_check_printed():
    """A custom check's output becomes the reason: NUL, CR, ESC or BEL in it would break scontrol or the read-back."""
    reason = hc.drain_reason("soperator:", "custom", "bad\x00disk\r\x1b[31mred\x07 end\x7f")
    assert reason == "soperator: health:custom bad disk [31mred end"
    assert all(ord(ch) >= 0x20 and ord(ch) != 0x7f for ch in reason)


def test_find_config_order():
    assert hc.find_config("/a.json", {hc.CONFIG_ENV: "/b.json"}) == "/a.json"
    assert hc.find_config(None, {hc.CONFIG_ENV: "/b.json", "SLURM_CONF": "/c/slurm.conf"}) == "/b.json"
    assert hc.find_config(None, {"SLURM_CONF": "/c/slurm.conf"}) == "/c/health.json"
    assert hc.find_config(None, {}) == "/etc/slurm/health.json"


def test_run_checks_custom_and_timeouts(tmp_path):
    config = {"drainReasonPrefix": "soperator:", "passive": {"custom": [
        {"name": "ok", "command": "test \"$SLURMD_NODENAME\" = cpu-0", "timeoutSeconds": 5},
        {"name": "bad", "command": "echo broken >&2; exit 3", "timeoutSeconds": 5},
        # a child that keeps the pipe open must not hold the run past the limit
        {"name": "hang", "command": "sleep 30 & sleep 30", "timeoutSeconds": 1},
    ], "disk": {"paths": [str(tmp_path), str(tmp_path / "missing")], "minFreePercent": 0}}}
    failed, passed = hc.run_checks(config, "cpu-0")
    assert passed == ["ok"]
    assert failed == [{"check": "disk", "detail": "%s: No such file or directory" % (tmp_path / "missing")},
                      {"check": "bad", "detail": "exit 3: broken"},
                      {"check": "hang", "detail": "timed out after 1.0s"}]


def test_gpu_checks_only_where_gres_has_gpus():
    config = health_check_config(example("gpu-accounting.yml"))
    gpu_checks = [name for name, unused, unused2 in hc.checks_for(config, "gpu-3")]
    cpu_checks = [name for name, unused, unused2 in hc.checks_for(config, "cpu-3")]
    assert gpu_checks[:2] == ["gpu", "gpu-errors"]
    assert "gpu" not in cpu_checks and "gpu-errors" not in cpu_checks


# --- health.json ------------------------------------------------------------------------------------------------

def test_health_config_from_the_spec():
    model = example("gpu-accounting.yml")
    config = health_check_config(model)
    assert config["drainReasonPrefix"] == model.remediation.drain_reason_prefix
    assert config["nodeSets"] == {"cpu": {"nodes": "cpu-[0-15]", "gpus": 0}, "gpu": {"nodes": "gpu-[0-63]", "gpus": 8}}
    passive = config["passive"]
    assert passive["disk"] == {"paths": [c.JAIL_MOUNT, "/tmp"],
                               "minFreePercent": model.health_checks.passive.min_free_disk_percent}
    assert passive["gpu"] is True and passive["munge"]["enabled"] and passive["memory"]["enabled"]
    assert 79 in passive["gpuErrors"]["criticalXids"]
    assert config["active"]["partition"] == c.CHECKS_PARTITION
    assert config["active"]["checks"] == [{"name": "nccl", "type": "ncclAllReduce", "nodeSets": ["gpu"],
                                           "timeoutSeconds": 600, "drainOnFailure": True,
                                           "minBusBandwidthGBs": 400}]
    # It ships as health.json beside slurm.conf, and the program can load it.
    text = render_slurm_configs(model)[c.HEALTH_CONFIG_FILE]
    assert json.loads(text) == config


def test_health_config_custom_checks_and_switches(tmp_path):
    docs = load_documents(open(os.path.join(ROOT, "examples", "small-cpu.yml")).read())
    docs[0]["spec"]["healthChecks"] = {"passive": {
        "gpu": False, "memory": False, "munge": False, "minFreeDiskPercent": 0,
        "custom": [{"name": "ib", "command": "ibstat | grep -q Active", "timeoutSeconds": 2}]}}
    config = health_check_config(build_model(docs))
    passive = config["passive"]
    assert passive["custom"] == [{"name": "ib", "command": "ibstat | grep -q Active", "timeoutSeconds": 2}]
    assert passive["disk"]["paths"] == [] and not passive["memory"]["enabled"] and not passive["munge"]["enabled"]
    assert config["active"]["checks"] == []
    path = tmp_path / "health.json"
    path.write_text(json.dumps(config))
    assert [n for n, unused, unused2 in hc.checks_for(hc.load_config(str(path)), "cpu-0")] == ["ib"]


def test_load_config_refuses_what_is_not_ours(tmp_path):
    path = tmp_path / "health.json"
    path.write_text("{}")
    with pytest.raises(hc.HealthCheckError):
        hc.load_config(str(path))
    with pytest.raises(hc.HealthCheckError):
        hc.load_config(str(tmp_path / "missing.json"))


def test_no_nvidia_smi_is_the_documented_no_gpu_answer(monkeypatch, tmp_path):
    # a container the NVIDIA container toolkit did not set up: no nvidia-smi on PATH (run for real, not stood in)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hc.check_gpu_count(8, 10) == hc.NO_GPU
