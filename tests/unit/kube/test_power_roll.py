"""Upgrades of ephemeral workers (pure parts): the digest each NodeSet's pod template carries (render/power_kube.py)
changes with the template and only with it; the power ConfigMap a run applies gives the current digests
(kube/power_roll.py); which outdated workers Slurm is asked to power down (slurm/power_down.py plan)."""
import copy

from ansible_collections.soperator.slurm.plugins.module_utils.kube import power_roll
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
from ansible_collections.soperator.slurm.plugins.module_utils.render import power_kube as pk
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import power_down
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec

from specs import documents

GPU = ("gpu", {"maxReplicas": 4, "ephemeral": {"enabled": True, "suspendTime": 60}})
CPU = ("cpu", {"replicas": 2})


def digests(*node_sets):
    model = spec.build_model(documents(*node_sets))
    objects = rk.render_manifests(model, render_slurm_configs(model), rk.placeholder_secret_material(model))
    return power_roll.current_digests(model, objects)


def test_the_digest_follows_the_template_and_only_it():
    before = digests(CPU, GPU)
    assert set(before) == {"gpu"} and len(before["gpu"]) == 16
    assert digests(CPU, GPU) == before
    newer = copy.deepcopy(GPU)
    newer[1]["image"] = "example.invalid/worker:2"
    assert digests(CPU, newer)["gpu"] != before["gpu"]
    # the fixed NodeSet's template is not in the ephemeral pods' digest
    assert digests(("cpu", {"replicas": 3}), GPU) == before


def test_a_pod_template_carries_its_own_digest():
    model = spec.build_model(documents(CPU, GPU))
    workers = dict((o["metadata"]["name"], o) for o in rk.render_manifests(
        model, render_slurm_configs(model), rk.placeholder_secret_material(model)) if o["kind"] == "StatefulSet")
    pod = pk.ephemeral_pod(model, workers["gpu"], model.node_sets[1])
    assert pod["metadata"]["annotations"][pk.TEMPLATE_ANNOTATION] == pk.template_hash(pod)


def test_no_power_config_no_digests():
    assert digests(CPU) is None


PREFIX = "soperator:"


def test_slurm_is_asked_only_for_up_cloud_nodes_not_held_by_others():
    records = dict((r.name, r) for r in [
        NodeRecord("gpu-0", "ALLOCATED", ("CLOUD",)),
        NodeRecord("gpu-1", "IDLE", ("CLOUD",)),
        NodeRecord("gpu-2", "IDLE", ("CLOUD", "DRAIN", "POWER_DOWN"), reason="soperator: upgrade"),
        NodeRecord("gpu-3", "IDLE", ("CLOUD", "POWERED_DOWN")),
        NodeRecord("gpu-4", "IDLE", ("CLOUD", "DRAIN"), reason="admin: bad fan"),
        NodeRecord("gpu-5", "IDLE", ("CLOUD", "DRAIN"), reason="soperator: upgrade"),
        NodeRecord("cpu-0", "IDLE"),
    ])
    todo, kept = power_down.plan(records, ["gpu-%d" % i for i in range(7)] + ["cpu-0"], PREFIX)
    assert todo == ["gpu-0", "gpu-1", "gpu-5"]
    assert kept == ["kept cpu-0: not a node Slurm powers up and down",
                    "kept gpu-2: powering down already",
                    "kept gpu-3: powered down already",
                    "kept gpu-4: drained (admin: bad fan): left to its owner",
                    "kept gpu-6: not a node Slurm powers up and down"]
