"""Ephemeral NodeSets (spec.ephemeral): what the spec accepts and refuses, with field paths, and what slurm.conf gets
(render/power_save.py). The power saving cycle itself runs against real daemons in tests/slurm/."""
import copy
import re

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

from specs import documents

GPU = ("gpu", {"maxReplicas": 6, "ephemeral": {"enabled": True, "minReplicas": 1, "suspendTime": 60}})
CPU = ("cpu", {"replicas": 2})


def issues_of(documents):
    with pytest.raises(SpecError) as e:
        spec.build_model(documents)
    return dict((i.path, i.message) for i in e.value.issues)


def slurm_conf(documents):
    return render_slurm_configs(spec.build_model(documents))["slurm.conf"]


def settings(text):
    return dict((k, v) for k, v in re.findall(r"^([A-Za-z]+)=(\S+)$", text, re.M))


def test_the_model_keeps_the_floor_running_and_the_rest_to_slurm():
    gpu = {ns.name: ns for ns in spec.build_model(documents(CPU, GPU)).node_sets}["gpu"]
    assert (gpu.replicas, gpu.max_replicas, gpu.ephemeral.enabled) == (1, 6, True)
    assert (gpu.static_range, gpu.cloud_range) == ("gpu-0", "gpu-[1-5]")
    assert gpu.cloud_nodes == ["gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"]
    cpu = {ns.name: ns for ns in spec.build_model(documents(CPU, GPU)).node_sets}["cpu"]
    assert (cpu.static_range, cpu.cloud_range, cpu.ephemeral.enabled) == ("cpu-[0-1]", None, False)
    assert cpu.cloud_nodes == []


def test_a_nodeset_without_replicas_still_runs_one_worker():
    ns = spec.build_model(documents(("cpu", {}))).node_sets[0]
    assert (ns.replicas, ns.max_replicas) == (1, 1)


def test_slurm_conf_defines_cloud_nodes_and_power_saving():
    text = slurm_conf(documents(CPU, GPU))
    nodes = re.findall(r"^NodeName=(\S+) State=(\S+)", text, re.M)
    assert nodes == [("cpu-[0-1]", "FUTURE"), ("gpu-0", "FUTURE"), ("gpu-[1-5]", "CLOUD")]
    assert "NodeSet=gpu Nodes=gpu-[0-5]" in text
    got = settings(text)
    assert {k: got[k] for k in ("ResumeProgram", "SuspendProgram", "ResumeFailProgram", "SuspendTime",
                                "ResumeTimeout", "SuspendTimeout", "SuspendExcNodes", "SlurmctldParameters",
                                "PrivateData")} == {
        "ResumeProgram": "/opt/soperator/bin/power-resume", "SuspendProgram": "/opt/soperator/bin/power-suspend",
        "ResumeFailProgram": "/opt/soperator/bin/power-resume-fail", "SuspendTime": "60", "ResumeTimeout": "300",
        "SuspendTimeout": "90", "SuspendExcNodes": "cpu-[0-1],gpu-0",
        "SlurmctldParameters": "cloud_dns,idle_on_node_suspend", "PrivateData": "cloud"}


def test_a_cluster_without_ephemeral_nodesets_gets_no_power_saving():
    text = slurm_conf(documents(CPU, ("gpu", {"maxReplicas": 6, "ephemeral": {"enabled": False, "minReplicas": 1}})))
    for key in ("Suspend", "Resume", "CLOUD", "PrivateData", "SlurmctldParameters"):
        assert key not in text
    assert re.findall(r"^NodeName=(\S+) State=(\S+)", text, re.M) == [
        ("cpu-[0-1]", "FUTURE"), ("gpu-[0-5]", "FUTURE")]


def test_all_nodes_ephemeral_excludes_none():
    text = slurm_conf(documents(("gpu", {"maxReplicas": 3, "ephemeral": {"enabled": True}})))
    assert "SuspendExcNodes" not in text
    assert re.findall(r"^NodeName=(\S+) State=(\S+)", text, re.M) == [("gpu-[0-2]", "CLOUD")]


def test_the_users_words_are_kept_and_ours_added():
    users = {"slurmctldparameters": "enable_configless", "PrivateData": "jobs,cloud"}
    text = slurm_conf(documents(CPU, GPU, slurmConfig=users))
    assert re.findall(r"^slurmctldparameters=(\S+)$", text, re.M) == [
        "enable_configless,cloud_dns,idle_on_node_suspend"]
    assert re.findall(r"^PrivateData=(\S+)$", text, re.M) == ["jobs,cloud"]
    assert "SlurmctldParameters=" not in text


@pytest.mark.parametrize("node_sets, path, fragment", [
    ([("gpu", {"ephemeral": {"enabled": True}})], "NodeSet/gpu spec.maxReplicas", "is required"),
    ([("gpu", {"maxReplicas": 2, "ephemeral": {"enabled": True, "minReplicas": 2}})],
     "NodeSet/gpu spec.ephemeral.minReplicas", "must be below maxReplicas (2)"),
    ([("gpu", {"maxReplicas": 4, "replicas": 3, "ephemeral": {"enabled": True, "minReplicas": 1}})],
     "NodeSet/gpu spec.replicas", "Slurm's to decide"),
    ([("gpu", {"maxReplicas": 4, "ephemeral": {"enabled": True, "suspendTime": 5}})],
     "NodeSet/gpu spec.ephemeral.suspendTime", "must be >= 10"),
    ([("gpu", {"maxReplicas": 4, "ephemeral": {"enabled": True, "resumeTimeout": 0}})],
     "NodeSet/gpu spec.ephemeral.resumeTimeout", "must be >= 1"),
    ([("gpu", {"maxReplicas": 4, "ephemeral": {"enabled": True, "suspendTimeout": 65536}})],
     "NodeSet/gpu spec.ephemeral.suspendTimeout", "must be <= 65535"),
    ([("a", {"maxReplicas": 4, "ephemeral": {"enabled": True}}),
      ("b", {"maxReplicas": 4, "ephemeral": {"enabled": True, "suspendTime": 600}})],
     "NodeSet/b spec.ephemeral.suspendTime", "differs from NodeSet/a's 300"),
], ids=["no-max", "min-not-below-max", "replicas", "suspend-time-short", "resume-timeout-zero",
        "suspend-timeout-16-bits", "times-differ"])
def test_bad_ephemeral_specs_fail_at_their_field(node_sets, path, fragment):
    found = issues_of(documents(*node_sets))
    assert path in found and fragment in found[path], found


def test_slurm_config_may_not_set_what_power_saving_owns():
    found = issues_of(documents(GPU, slurmConfig={"suspendtime": "30", "ResumeProgram": "/bin/true"}))
    assert "owned" not in found
    assert "SlurmCluster/c spec.slurmConfig.suspendtime" in found
    assert "SlurmCluster/c spec.slurmConfig.ResumeProgram" in found
    # without an ephemeral NodeSet they are the user's
    model = spec.build_model(documents(CPU, slurmConfig={"SuspendTime": "30"}))
    assert model.slurm_config == {"SuspendTime": "30"}


def test_replicas_equal_to_the_floor_is_accepted():
    gpu = copy.deepcopy(GPU)
    gpu[1]["replicas"] = 1
    assert spec.build_model(documents(gpu)).node_sets[0].replicas == 1


def test_the_exporter_counts_power_states_per_ephemeral_nodeset():
    from ansible_collections.soperator.slurm.plugins.module_utils.observe import metrics
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord
    nodes = [NodeRecord("cpu-0", "IDLE"),
             NodeRecord("gpu-0", "IDLE"),
             NodeRecord("gpu-1", "IDLE", ("CLOUD", "POWERED_DOWN")),
             NodeRecord("gpu-2", "ALLOCATED", ("CLOUD", "POWERING_UP")),
             NodeRecord("gpu-3", "DOWN", ("CLOUD", "POWERED_DOWN"), reason="soperator: resume-failed not up in 300s"),
             NodeRecord("gpu-4", "IDLE", ("CLOUD",)),
             NodeRecord("gpu-5", "DOWN", ("CLOUD", "POWERED_DOWN"), reason="someone else: resume-failed")]
    node_power, per_nodeset = metrics.power_families(nodes, "soperator:")
    assert sorted((s.labels["node"], s.labels["power"]) for s in node_power.samples) == [
        ("gpu-1", "powered_down"), ("gpu-2", "powering_up"), ("gpu-3", "resume_failed"), ("gpu-5", "powered_down")]
    assert dict((s.labels["power"], s.value) for s in per_nodeset.samples if s.labels["nodeset"] == "gpu") == {
        "powered_down": 2, "powering_up": 1, "powering_down": 0, "resume_failed": 1}
    assert set(s.labels["nodeset"] for s in per_nodeset.samples) == {"gpu"}
