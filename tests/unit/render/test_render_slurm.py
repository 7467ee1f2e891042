"""Unit tests of render_slurm: the Slurm configuration files rendered from a ClusterModel."""
import copy
import dataclasses
import json
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from repo_root import ROOT

BASE_FILES = {"slurm.conf", "cgroup.conf", "gres.conf", "plugstack.conf", "mpi.conf", "topology.conf", "health.json"}


# --- helpers ------------------------------------------------------------------------------------------------------

def example(name):
    with open(os.path.join(ROOT, "examples", name)) as f:
        return build_model(load_documents(f.read()))


def cluster_doc(name="demo", **spec):
    body = {"jail": {"volume": {"size": "1Gi"}}}
    body.update(spec)
    return {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster",
            "metadata": {"name": name, "namespace": "hpc"}, "spec": body}


def nodeset_doc(name, cluster="demo", **spec):
    body = {"clusterName": cluster, "replicas": 1, "resources": {"cpu": "4", "memory": "8Gi"}}
    body.update(spec)
    return {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet",
            "metadata": {"name": name, "namespace": "hpc"}, "spec": body}


def model_of(cluster=None, *node_sets):
    return build_model([cluster or cluster_doc()] + list(node_sets or [nodeset_doc("cpu")]))


def settings(text):
    """Non-comment, non-empty lines."""
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def keyed(text):
    """{key: value} of the single-word `Key=Value` lines (node, nodeset and partition lines left out)."""
    out = {}
    for line in settings(text):
        if " " in line:
            continue
        key, value = line.split("=", 1)
        assert key not in out, "duplicate key %s" % key
        out[key] = value
    return out


def lines_starting(text, prefix):
    return [line for line in settings(text) if line.startswith(prefix)]


def scaled(model, name, replicas=None, max_replicas=None):
    node_sets = []
    for ns in model.node_sets:
        if ns.name == name:
            ns = dataclasses.replace(ns, replicas=ns.replicas if replicas is None else replicas,
                                     max_replicas=ns.max_replicas if max_replicas is None else max_replicas)
        node_sets.append(ns)
    return dataclasses.replace(model, node_sets=tuple(node_sets))


# --- the examples -------------------------------------------------------------------------------------------------

def test_small_cpu_files():
    files = render_slurm_configs(example("small-cpu.yml"))
    assert set(files) == BASE_FILES                       # no accounting: no slurmdbd.conf
    conf = files["slurm.conf"]
    kv = keyed(conf)
    assert kv["ClusterName"] == "small"
    assert kv["SlurmctldHost"] == "small-controller-0(small-controller-0.small-controller.slurm.svc.cluster.local)"
    assert kv["SlurmctldPort"] == "6817"
    assert kv["SlurmdPort"] == str(c.SLURMD_PORT)
    assert kv["SlurmUser"] == c.SLURM_USER
    assert kv["AuthType"] == "auth/munge" and kv["CredType"] == "cred/munge"
    assert kv["StateSaveLocation"] == c.CONTROLLER_SPOOL
    assert kv["SlurmdSpoolDir"] == c.SLURMD_SPOOL
    assert kv["SlurmctldPidFile"] == c.SLURM_RUN_DIR + "/slurmctld.pid"
    assert kv["SlurmdPidFile"] == c.SLURM_RUN_DIR + "/slurmd.pid"
    assert kv["SlurmctldLogFile"] == c.SLURM_LOG_DIR + "/slurmctld.log"
    assert kv["SlurmdLogFile"] == c.SLURM_LOG_DIR + "/slurmd.log"
    assert kv["ProctrackType"] == "proctrack/cgroup"
    assert kv["TaskPlugin"] == "task/cgroup,task/affinity"
    assert kv["SelectType"] == "select/cons_tres" and kv["SelectTypeParameters"] == "CR_Core_Memory"
    assert kv["SchedulerType"] == "sched/backfill"
    assert kv["ReturnToService"] == "2"
    assert kv["PrologFlags"] == "Contain"
    assert kv["MpiDefault"] == "none"
    assert kv["PlugStackConfig"] == c.SLURM_CONF_DIR + "/plugstack.conf"
    assert kv["SlurmdTimeout"] == "120"                   # from the example's slurmConfig, over our 300
    assert kv["HealthCheckProgram"] == c.HEALTH_CHECK_PROGRAM
    assert kv["HealthCheckInterval"] == "120" and kv["HealthCheckNodeState"] == "ANY"
    for absent in ("GresTypes", "TopologyPlugin", "AccountingStorageType", "AccountingStorageHost",
                   "AccountingStoragePort", "JobAcctGatherType", "AccountingStorageTRES"):
        assert absent not in kv
    assert lines_starting(conf, "NodeName=") == [
        "NodeName=cpu-[0-3] State=FUTURE CPUs=2 RealMemory=1024 Feature=cpu Weight=1"]
    assert lines_starting(conf, "NodeSet=") == ["NodeSet=cpu Nodes=cpu-[0-3]"]
    assert lines_starting(conf, "PartitionName=") == ["PartitionName=main Nodes=cpu Default=YES State=UP"]
    # Nodes come after every setting, partitions after the nodes.
    lines = settings(conf)
    assert lines.index(lines_starting(conf, "NodeName=")[0]) > lines.index("ReturnToService=2")
    assert lines.index(lines_starting(conf, "PartitionName=")[0]) > lines.index("NodeSet=cpu Nodes=cpu-[0-3]")
    assert "NodeAddr" not in conf and "NodeHostname" not in conf

    assert settings(files["gres.conf"]) == []
    assert settings(files["mpi.conf"]) == []
    assert settings(files["topology.conf"]) == []
    assert settings(files["plugstack.conf"]) == ["required %s jail=%s" % (c.SPANK_CHROOT_PLUGIN, c.JAIL_MOUNT)]
    assert settings(files["cgroup.conf"]) == ["CgroupPlugin=autodetect", "IgnoreSystemd=yes", "ConstrainCores=yes",
                                              "ConstrainRAMSpace=yes", "ConstrainDevices=yes"]


def test_gpu_accounting_files():
    files = render_slurm_configs(example("gpu-accounting.yml"))
    assert set(files) == BASE_FILES | {c.SLURMDBD_CONF}
    conf = files["slurm.conf"]
    kv = keyed(conf)
    assert kv["ClusterName"] == "gpu-demo"
    assert kv["MpiDefault"] == "pmix"
    assert kv["GresTypes"] == "gpu"
    assert kv["TopologyPlugin"] == "topology/tree"
    assert kv["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert kv["AccountingStorageHost"] == "gpu-demo-accounting-0.gpu-demo-accounting.slurm.svc.cluster.local"
    assert kv["AccountingStoragePort"] == "6819"
    assert kv["JobAcctGatherType"] == "jobacct_gather/cgroup"
    assert kv["AccountingStorageTRES"] == "gres/gpu"
    assert kv["HealthCheckNodeState"] == "IDLE,MIXED"
    assert kv["SlurmdTimeout"] == "300"                   # our default: this example does not override it
    assert lines_starting(conf, "NodeName=") == [
        "NodeName=cpu-[0-15] State=FUTURE CPUs=32 RealMemory=131072 Feature=cpu Weight=1",
        "NodeName=gpu-[0-63] State=FUTURE CPUs=128 RealMemory=1638400 Sockets=2 CoresPerSocket=32 ThreadsPerCore=2 "
        "Gres=gpu:h100:8 Feature=h100,ib Weight=1",
    ]
    assert lines_starting(conf, "NodeSet=") == ["NodeSet=cpu Nodes=cpu-[0-15]", "NodeSet=gpu Nodes=gpu-[0-63]"]
    assert lines_starting(conf, "PartitionName=") == [
        "PartitionName=main Nodes=cpu,gpu Default=YES State=UP MaxTime=INFINITE",
        "PartitionName=gpu Nodes=gpu Default=NO State=UP MaxTime=7-00:00:00 OverSubscribe=EXCLUSIVE",
        "PartitionName=cpu Nodes=cpu Default=NO State=UP",
        # the example has an active check: its hidden partition
        "PartitionName=%s Nodes=ALL Default=NO Hidden=YES AllowGroups=root OverSubscribe=EXCLUSIVE State=UP"
        % c.CHECKS_PARTITION,
    ]
    assert settings(files["gres.conf"]) == ["NodeName=gpu-[0-63] Name=gpu Type=h100 File=/dev/nvidia[0-7]"]
    assert settings(files["topology.conf"]) == [
        "SwitchName=cpu Nodes=cpu-[0-15]",
        "SwitchName=gpu Nodes=gpu-[0-63]",
        "SwitchName=root Switches=cpu,gpu",
    ]
    dbd = files[c.SLURMDBD_CONF]
    assert keyed(dbd) == {
        "DbdHost": "gpu-demo-accounting-0",
        "DbdPort": "6819",
        "SlurmUser": c.SLURM_USER,
        "AuthType": "auth/munge",
        "StorageType": "accounting_storage/mysql",
        "StorageHost": "gpu-demo-accounting-db",
        "StoragePort": "3306",
        "StorageUser": "slurm",
        "StorageLoc": "slurm_acct_db",
        "LogFile": c.SLURM_LOG_DIR + "/slurmdbd.log",
        "PidFile": c.SLURM_RUN_DIR + "/slurmdbd.pid",
    }
    assert "StoragePass" not in "\n".join(settings(dbd))
    assert any("StoragePass" in line and "entrypoint" in line for line in dbd.splitlines() if line.startswith("#"))


@pytest.mark.parametrize("name", ["small-cpu.yml", "gpu-accounting.yml"])
def test_every_file_has_the_header(name):
    model = example(name)
    for file_name, text in render_slurm_configs(model).items():
        if file_name == c.HEALTH_CONFIG_FILE:      # JSON has no comments: it names its generator in a key
            assert json.loads(text)["generatedBy"].startswith("soperator.slurm from SlurmCluster %s " % model.name)
            continue
        first = text.splitlines()[0]
        assert first.startswith("# ") and "generated by soperator.slurm" in first, file_name
        assert "SlurmCluster %s " % model.name in first, file_name
        assert text.endswith("\n") and not text.endswith("\n\n"), file_name


def test_controller_port_and_cluster_domain_flow_through():
    model = model_of(cluster_doc(clusterDomain="example.org", controller={"port": 7000}))
    kv = keyed(render_slurm_configs(model)["slurm.conf"])
    assert kv["SlurmctldHost"] == "demo-controller-0(demo-controller-0.demo-controller.hpc.svc.example.org)"
    assert kv["SlurmctldPort"] == "7000"


# --- slurmConfig / cgroupConfig merging ---------------------------------------------------------------------------

def test_slurm_config_replaces_a_default_in_place_with_the_users_spelling():
    base = render_slurm_configs(model_of())["slurm.conf"].splitlines()
    over = render_slurm_configs(model_of(cluster_doc(slurmConfig={"slurmdTIMEOUT": 99})))["slurm.conf"].splitlines()
    index = base.index("SlurmdTimeout=300")
    assert over[index] == "slurmdTIMEOUT=99"
    assert "SlurmdTimeout=300" not in over
    assert len(over) == len(base)                         # nothing appended: no "From spec.slurmConfig" section
    assert not any("spec.slurmConfig" in line for line in over)


def test_slurm_config_new_keys_are_appended_sorted_before_the_nodes():
    model = model_of(cluster_doc(slurmConfig={"MaxJobCount": 50000, "DefMemPerCPU": 1024,
                                              "SelectTypeParameters": "CR_CPU_Memory"}))
    conf = render_slurm_configs(model)["slurm.conf"]
    lines = conf.splitlines()
    section = lines.index("# --- From spec.slurmConfig")
    assert lines[section + 1:section + 3] == ["DefMemPerCPU=1024", "MaxJobCount=50000"]
    assert section > lines.index("ReturnToService=2")
    assert section < lines.index(lines_starting(conf, "NodeName=")[0])
    kv = keyed(conf)
    assert kv["SelectTypeParameters"] == "CR_CPU_Memory"   # replaced where it stood, not appended
    assert lines.index("SelectTypeParameters=CR_CPU_Memory") < section


def test_slurm_config_can_override_a_conditional_default():
    model = example("gpu-accounting.yml")
    model = dataclasses.replace(model, slurm_config={"jobacctgathertype": "jobacct_gather/linux"})
    kv = keyed(render_slurm_configs(model)["slurm.conf"])
    assert kv["jobacctgathertype"] == "jobacct_gather/linux"
    assert "JobAcctGatherType" not in kv


def test_cgroup_config_merge():
    model = model_of(cluster_doc(cgroupConfig={"constrainramspace": "no", "AllowedRAMSpace": 95,
                                               "ConstrainSwapSpace": "yes"}))
    lines = settings(render_slurm_configs(model)["cgroup.conf"])
    assert lines == ["CgroupPlugin=autodetect", "IgnoreSystemd=yes", "ConstrainCores=yes", "constrainramspace=no",
                     "ConstrainDevices=yes", "AllowedRAMSpace=95", "ConstrainSwapSpace=yes"]
    assert "# --- From spec.cgroupConfig" in render_slurm_configs(model)["cgroup.conf"]


@pytest.mark.parametrize("config", [{"Bad Key": "x"}, {"Key=": "x"}, {"Prolog": "/bin/true\nNodeName=evil"}])
def test_unsafe_user_entries_are_refused(config):
    model = dataclasses.replace(model_of(), slurm_config=config)
    with pytest.raises(ValueError):
        render_slurm_configs(model)


# --- determinism, scaling ------------------------------------------------------------------------------------------

def test_rendering_is_deterministic():
    model = example("gpu-accounting.yml")
    first = render_slurm_configs(model)
    assert render_slurm_configs(copy.deepcopy(model)) == first
    assert render_slurm_configs(example("gpu-accounting.yml")) == first


def test_user_map_order_does_not_matter():
    one = model_of(cluster_doc(slurmConfig={"MaxJobCount": 1, "DefMemPerCPU": 2},
                               cgroupConfig={"MinRAMSpace": 1, "AllowedRAMSpace": 2},
                               mpi={"config": {"PMIxTimeout": 300, "PMIxDebug": 0}}))
    two = model_of(cluster_doc(slurmConfig={"DefMemPerCPU": 2, "MaxJobCount": 1},
                               cgroupConfig={"AllowedRAMSpace": 2, "MinRAMSpace": 1},
                               mpi={"config": {"PMIxDebug": 0, "PMIxTimeout": 300}}))
    assert list(one.slurm_config) != list(two.slurm_config)   # the premise: different insertion orders
    assert render_slurm_configs(one) == render_slurm_configs(two)
    # Keys equal but for case: one wins, whatever the order they were given in.
    three = dataclasses.replace(one, slurm_config={"maxjobcount": "1", "MaxJobCount": "2"})
    four = dataclasses.replace(one, slurm_config={"MaxJobCount": "2", "maxjobcount": "1"})
    assert render_slurm_configs(three) == render_slurm_configs(four)
    assert len([k for k in keyed(render_slurm_configs(three)["slurm.conf"]) if k.lower() == "maxjobcount"]) == 1


def test_replicas_do_not_change_any_file():
    model = example("gpu-accounting.yml")
    two = render_slurm_configs(scaled(model, "gpu", replicas=2))
    four = render_slurm_configs(scaled(model, "gpu", replicas=4))
    assert two == four
    # ... but max_replicas does (so the comparison above can fail).
    more = render_slurm_configs(scaled(model, "gpu", max_replicas=65))
    assert more["slurm.conf"] != four["slurm.conf"]
    assert "NodeName=gpu-[0-64] " in more["slurm.conf"]


def test_file_size_does_not_grow_with_workers():
    def render(count):
        return render_slurm_configs(model_of(cluster_doc(topology={"enabled": True}),
                                             nodeset_doc("cpu", replicas=count, maxReplicas=count,
                                                         gres=["gpu:a100:4"], resources={
                                                             "cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 4})))
    # past 256 nodes render/size.py adds its few lines once (tests/unit/render/test_render_size.py): compare from there
    small, huge = render(257), render(10000)
    for name in small:
        assert len(huge[name].splitlines()) == len(small[name].splitlines()), name
        assert len(huge[name]) - len(small[name]) < 40, name
    conf = huge["slurm.conf"]
    assert len(lines_starting(conf, "NodeName=")) == 1
    assert lines_starting(conf, "NodeName=")[0].startswith("NodeName=cpu-[0-9999] State=FUTURE ")
    assert lines_starting(conf, "NodeSet=") == ["NodeSet=cpu Nodes=cpu-[0-9999]"]
    assert settings(huge["gres.conf"]) == ["NodeName=cpu-[0-9999] Name=gpu Type=a100 File=/dev/nvidia[0-3]"]
    assert "SwitchName=cpu Nodes=cpu-[0-9999]" in settings(huge["topology.conf"])
    assert "cpu-9999" not in conf                          # never expanded


def test_single_node_nodeset_uses_a_plain_name():
    conf = render_slurm_configs(model_of(None, nodeset_doc("cpu", replicas=1)))["slurm.conf"]
    assert lines_starting(conf, "NodeName=") == ["NodeName=cpu-0 State=FUTURE CPUs=4 RealMemory=8192 Weight=1"]
    assert lines_starting(conf, "NodeSet=") == ["NodeSet=cpu Nodes=cpu-0"]


def test_node_line_options():
    ns = nodeset_doc("big", replicas=2, maxReplicas=3, features=["a", "b_c"],
                     slurmNode={"cpus": 96, "realMemory": 500000, "threadsPerCore": 2, "weight": 7})
    conf = render_slurm_configs(model_of(None, ns))["slurm.conf"]
    assert lines_starting(conf, "NodeName=") == [
        "NodeName=big-[0-2] State=FUTURE CPUs=96 RealMemory=500000 ThreadsPerCore=2 Feature=a,b_c Weight=7"]


# --- GRES ----------------------------------------------------------------------------------------------------------

def test_gres_lines():
    model = model_of(
        cluster_doc(partitions=[{"name": "all-nodes", "nodeSets": ["a", "b", "c"], "default": True}]),
        nodeset_doc("a", replicas=2, gres=["gpu:1"], resources={"cpu": "4", "memory": "8Gi"}),
        nodeset_doc("b", replicas=1, maxReplicas=8, gres=["nic:mlx5:2", "gpu:h200:8"],
                    resources={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 8}),
        nodeset_doc("c", replicas=1, gres=["shard:16"]),
    )
    files = render_slurm_configs(model)
    assert settings(files["gres.conf"]) == [
        "NodeName=a-[0-1] Name=gpu File=/dev/nvidia0",
        "NodeName=b-[0-7] Name=nic Type=mlx5 Count=2",
        "NodeName=b-[0-7] Name=gpu Type=h200 File=/dev/nvidia[0-7]",
        "NodeName=c-0 Name=shard Count=16",
    ]
    kv = keyed(files["slurm.conf"])
    assert kv["GresTypes"] == "gpu,nic,shard"
    nodes = lines_starting(files["slurm.conf"], "NodeName=")
    assert " Gres=gpu:1 " in nodes[0]
    assert " Gres=nic:mlx5:2,gpu:h200:8 " in nodes[1]
    assert " Gres=shard:16 " in nodes[2]


def test_gres_of_a_nodeset_without_nodes_is_left_out():
    model = model_of(cluster_doc(partitions=[{"name": "p", "nodeSets": ["cpu", "gpu"]}]),
                     nodeset_doc("cpu"),
                     nodeset_doc("gpu", replicas=0, maxReplicas=0, gres=["gpu:2"],
                                 resources={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2}))
    files = render_slurm_configs(model)
    assert settings(files["gres.conf"]) == []
    assert "GresTypes" not in keyed(files["slurm.conf"])


# --- topology ------------------------------------------------------------------------------------------------------

def test_topology_disabled():
    files = render_slurm_configs(model_of())
    assert settings(files["topology.conf"]) == []
    assert "TopologyPlugin" not in keyed(files["slurm.conf"])


def test_topology_default_root_name_avoids_a_nodeset_called_root():
    model = model_of(cluster_doc(topology={"enabled": True}), nodeset_doc("root", replicas=2),
                     nodeset_doc("cpu", replicas=0, maxReplicas=0), nodeset_doc("gpu", replicas=3))
    files = render_slurm_configs(model)
    assert settings(files["topology.conf"]) == [
        "SwitchName=gpu Nodes=gpu-[0-2]",
        "SwitchName=root Nodes=root-[0-1]",
        "SwitchName=root-2 Switches=gpu,root",
    ]
    assert keyed(files["slurm.conf"])["TopologyPlugin"] == "topology/tree"


def test_topology_explicit_switches():
    model = model_of(
        cluster_doc(topology={"enabled": True, "switches": [
            {"name": "spine", "switches": ["leaf1", "leaf2", "empty"]},
            {"name": "leaf1", "nodeSets": ["a", "b"]},
            {"name": "leaf2", "nodeSets": ["c"]},
            {"name": "empty", "nodeSets": ["z"]},          # only a NodeSet without nodes: dropped
        ]}),
        nodeset_doc("a", replicas=2), nodeset_doc("b"), nodeset_doc("c", replicas=4),
        nodeset_doc("z", replicas=0, maxReplicas=0))
    assert settings(render_slurm_configs(model)["topology.conf"]) == [
        "SwitchName=spine Switches=leaf1,leaf2",
        "SwitchName=leaf1 Nodes=a-[0-1],b-0",
        "SwitchName=leaf2 Nodes=c-[0-3]",
    ]


def test_topology_switch_with_nodes_and_switches_gets_a_leaf_for_its_nodes():
    # topology/tree refuses a switch with both Nodes and Switches: its nodes move to an added leaf switch.
    model = model_of(
        cluster_doc(topology={"enabled": True, "switches": [
            {"name": "top", "nodeSets": ["a"], "switches": ["leaf"]},
            {"name": "leaf", "nodeSets": ["b"]},
            {"name": "top-nodes", "nodeSets": ["b"]},     # the natural name is taken
        ]}),
        nodeset_doc("a"), nodeset_doc("b", replicas=2))
    lines = settings(render_slurm_configs(model)["topology.conf"])
    assert lines == [
        "SwitchName=top-nodes-2 Nodes=a-0",
        "SwitchName=top Switches=leaf,top-nodes-2",
        "SwitchName=leaf Nodes=b-[0-1]",
        "SwitchName=top-nodes Nodes=b-[0-1]",
    ]
    for line in lines:
        assert not ("Nodes=" in line and "Switches=" in line)


def test_topology_with_no_node_at_all_turns_the_plugin_off():
    model = model_of(
        cluster_doc(topology={"enabled": True, "switches": [{"name": "s", "nodeSets": ["cpu"]},
                                                            {"name": "r", "switches": ["s"]}]}),
        nodeset_doc("cpu", replicas=0, maxReplicas=0))
    files = render_slurm_configs(model)
    assert settings(files["topology.conf"]) == []
    assert "TopologyPlugin" not in keyed(files["slurm.conf"])
    default = render_slurm_configs(dataclasses.replace(
        model, topology=dataclasses.replace(model.topology, switches=())))
    assert settings(default["topology.conf"]) == []
    assert "TopologyPlugin" not in keyed(default["slurm.conf"])


def test_topology_cycle_is_refused():
    # A spec error with the field path, before anything is rendered (render_slurm keeps its own assertion).
    with pytest.raises(SpecError, match=r"SlurmCluster/demo spec.topology.switches\[0\].switches: switches form a "
                                        r"cycle: a -> b -> a"):
        model_of(cluster_doc(topology={"enabled": True, "switches": [
            {"name": "a", "switches": ["b"]}, {"name": "b", "switches": ["a"], "nodeSets": ["cpu"]}]}))


# --- accounting ----------------------------------------------------------------------------------------------------

def test_accounting_off_has_no_accounting_anywhere():
    files = render_slurm_configs(model_of())
    assert c.SLURMDBD_CONF not in files
    assert "Accounting" not in "\n".join(settings(files["slurm.conf"]))
    assert "JobAcctGather" not in files["slurm.conf"]


def test_accounting_on_without_gpus_has_no_gpu_tres():
    model = model_of(cluster_doc(accounting={"enabled": True, "port": 7019}))
    files = render_slurm_configs(model)
    kv = keyed(files["slurm.conf"])
    assert kv["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert kv["AccountingStorageHost"] == "demo-accounting-0.demo-accounting.hpc.svc.cluster.local"
    assert kv["AccountingStoragePort"] == "7019"
    assert "AccountingStorageTRES" not in kv
    dbd = keyed(files[c.SLURMDBD_CONF])
    assert dbd["DbdPort"] == "7019" and dbd["DbdHost"] == "demo-accounting-0"
    assert dbd["StorageHost"] == "demo-accounting-db"


def test_accounting_external_database():
    model = model_of(cluster_doc(accounting={"enabled": True, "database": {"external": {
        "host": "db.example.org", "port": 3307, "user": "acct", "database": "cluster_a",
        "passwordSecret": {"name": "db-pass"}}}}))
    dbd = render_slurm_configs(model)[c.SLURMDBD_CONF]
    kv = keyed(dbd)
    assert (kv["StorageHost"], kv["StoragePort"], kv["StorageUser"], kv["StorageLoc"]) == (
        "db.example.org", "3307", "acct", "cluster_a")
    assert "StoragePass" not in kv and "db-pass" not in dbd


# --- NodeSets with max_replicas 0, partitions ---------------------------------------------------------------------

def test_nodeset_with_max_replicas_zero():
    model = model_of(
        cluster_doc(partitions=[{"name": "main", "nodeSets": ["cpu", "idle"], "default": True},
                                {"name": "later", "nodeSets": ["idle"], "config": {"MaxTime": "60"}}]),
        nodeset_doc("cpu", replicas=2), nodeset_doc("idle", replicas=0, maxReplicas=0))
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines_starting(conf, "NodeName=") == ["NodeName=cpu-[0-1] State=FUTURE CPUs=4 RealMemory=8192 Weight=1"]
    assert lines_starting(conf, "NodeSet=") == ["NodeSet=cpu Nodes=cpu-[0-1]"]
    # slurmctld 22.05 accepts a partition without Nodes= (and rejects one naming an undefined NodeSet).
    assert lines_starting(conf, "PartitionName=") == [
        "PartitionName=main Nodes=cpu Default=YES State=UP",
        "PartitionName=later Default=NO State=UP MaxTime=60",
    ]
    assert "idle" not in "\n".join(settings(conf)).replace("PartitionName=later", "")
    assert "# NodeSets with maxReplicas 0 define no node: idle" in conf.splitlines()


def test_only_nodesets_without_nodes():
    model = model_of(None, nodeset_doc("cpu", replicas=0, maxReplicas=0))
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines_starting(conf, "NodeName=") == [] and lines_starting(conf, "NodeSet=") == []
    assert lines_starting(conf, "PartitionName=") == ["PartitionName=main Default=YES State=UP"]


def test_partition_config_can_replace_state_and_is_sorted():
    model = model_of(cluster_doc(partitions=[{"name": "main", "nodeSets": ["cpu"], "default": True,
                                              "config": {"state": "DRAIN", "MaxTime": "1:00:00", "Hidden": "YES"}}]))
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines_starting(conf, "PartitionName=") == [
        "PartitionName=main Nodes=cpu Default=YES state=DRAIN Hidden=YES MaxTime=1:00:00"]


def test_partition_value_with_a_space_is_quoted():
    # s_p_parse_line reads `Key="a b"` back as `a b`; an unquoted space would start a new word.
    model = model_of(cluster_doc(partitions=[{"name": "main", "nodeSets": ["cpu"],
                                              "config": {"AllowGroups": "a b"}}]))
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines_starting(conf, "PartitionName=main") == [
        'PartitionName=main Nodes=cpu Default=NO State=UP AllowGroups="a b"']


def test_nodeset_names_slurm_cannot_take_are_listed_by_their_nodes():
    # A NodeSet named like another NodeSet's node clashes (cpu-9 does not: cpu has only cpu-[0-3]).
    model = model_of(
        cluster_doc(partitions=[{"name": "main", "nodeSets": ["cpu", "cpu-1", "cpu-9"], "default": True}]),
        nodeset_doc("cpu", replicas=4), nodeset_doc("cpu-1", replicas=2), nodeset_doc("cpu-9"))
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines_starting(conf, "NodeSet=") == ["NodeSet=cpu Nodes=cpu-[0-3]", "NodeSet=cpu-9 Nodes=cpu-9-0"]
    assert lines_starting(conf, "PartitionName=") == [
        "PartitionName=main Nodes=cpu,cpu-1-[0-1],cpu-9 Default=YES State=UP"]
    assert len(lines_starting(conf, "NodeName=")) == 3


# --- health checks, MPI ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("passive,expected", [
    ({"enabled": False}, None),
    ({"interval": 0}, None),
    ({"interval": 60, "nodeStates": ["IDLE", "ALLOC"], "cycle": True}, ("60", "IDLE,ALLOC,CYCLE")),
    ({"nodeStates": ["IDLE", "MIXED", "IDLE"]}, ("120", "IDLE,MIXED")),
])
def test_passive_health_checks(passive, expected):
    kv = keyed(render_slurm_configs(model_of(cluster_doc(healthChecks={"passive": passive})))["slurm.conf"])
    if expected is None:
        assert not [k for k in kv if k.startswith("HealthCheck")]
    else:
        assert kv["HealthCheckProgram"] == c.HEALTH_CHECK_PROGRAM
        assert (kv["HealthCheckInterval"], kv["HealthCheckNodeState"]) == expected


def test_mpi_conf():
    model = model_of(cluster_doc(mpi={"default": "pmi2", "config": {"PMIxTimeout": 300, "PMIxDebug": 1}}))
    files = render_slurm_configs(model)
    assert settings(files["mpi.conf"]) == ["PMIxDebug=1", "PMIxTimeout=300"]
    assert keyed(files["slurm.conf"])["MpiDefault"] == "pmi2"


def test_keys_the_target_release_does_not_read_are_left_out_for_it():
    """The spec takes keys of any supported release; a file for a release that does not read one leaves it out, in a
    comment (slurmctld refuses an unknown key in slurm.conf: "Unable to process configuration file")."""
    from ansible_collections.soperator.slurm.plugins.module_utils.render.target import KUBERNETES
    model = model_of(cluster_doc(
        slurmConfig={"MaxBatchRequeue": 3, "MaxJobCount": 100}, cgroupConfig={"SystemdTimeout": 1000},
        mpi={"config": {"PMIxShareServerTopology": "yes", "PMIxTimeout": 300}},
        partitions=[{"name": "main", "nodeSets": ["cpu"], "default": True,
                     "config": {"PowerDownOnIdle": "NO", "MaxTime": "60"}}]))
    old = render_slurm_configs(model, dataclasses.replace(KUBERNETES, slurm_version=(22, 5)))
    new = render_slurm_configs(model, dataclasses.replace(KUBERNETES, slurm_version=(26, 5)))
    assert "# Slurm 22.05 does not read this key: MaxBatchRequeue=3" in old["slurm.conf"].splitlines()
    assert "# Slurm 22.05 does not read this key: PowerDownOnIdle=NO" in old["slurm.conf"].splitlines()
    assert "# Slurm 22.05 does not read this key: SystemdTimeout=1000" in old["cgroup.conf"].splitlines()
    assert "# Slurm 22.05 does not read this key: PMIxShareServerTopology=yes" in old["mpi.conf"].splitlines()
    assert keyed(old["slurm.conf"])["MaxJobCount"] == "100" and "MaxBatchRequeue" not in keyed(old["slurm.conf"])
    assert lines_starting(old["slurm.conf"], "PartitionName=main") == [
        "PartitionName=main Nodes=cpu Default=YES State=UP MaxTime=60"]
    assert "PMIxTimeout=300" in settings(old["mpi.conf"])
    assert "PMIxShareServerTopology=yes" not in settings(old["mpi.conf"])
    # the images' release reads them all
    assert keyed(new["slurm.conf"])["MaxBatchRequeue"] == "3"
    assert keyed(new["cgroup.conf"])["SystemdTimeout"] == "1000"
    assert "PMIxShareServerTopology=yes" in settings(new["mpi.conf"])
    assert lines_starting(new["slurm.conf"], "PartitionName=main") == [
        "PartitionName=main Nodes=cpu Default=YES State=UP MaxTime=60 PowerDownOnIdle=NO"]
