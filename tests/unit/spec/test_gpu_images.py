"""GPU NodeSets and the images: a NodeSet with GRES gpu runs the GPU worker image (images/worker-gpu: the CUDA runtime
and NCCL) unless it names its own, the jail comes from jail-gpu when any NodeSet has GPUs, and runtimeClassName
reaches the pods (GPU nodes whose default runtime is not the NVIDIA container toolkit's)."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import render_manifests
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

from specs import documents

TAG = "ghcr.io/soperator-slurm/%s:26.05.5-0.1.0"
GPU = ("gpu", {"gres": ["gpu:h100:8"]})
CPU = ("cpu", {})


def images(docs):
    model = spec.build_model(docs)
    return {ns.name: ns.image for ns in model.node_sets}, model.jail.populate_image


def test_gpu_node_sets_default_to_the_gpu_images():
    workers, jail = images(documents(CPU, GPU))
    assert workers == {"cpu": TAG % "worker", "gpu": TAG % "worker-gpu"}
    assert jail == TAG % "jail-gpu"


def test_without_gpus_nothing_changes():
    workers, jail = images(documents(CPU, ("gpu", {"gres": ["nic:2"]})))
    assert workers == {"cpu": TAG % "worker", "gpu": TAG % "worker"}
    assert jail == TAG % "jail"


def test_explicit_images_win():
    docs = documents(CPU, GPU, ("own", {"gres": ["gpu:1"], "image": "registry.example/own:1"}),
                     images={"workerGpu": "registry.example/cuda-worker:2", "populateJail": "registry.example/j:3",
                             "registry": "registry.example/soperator", "tag": "t1"})
    workers, jail = images(docs)
    assert workers == {"cpu": "registry.example/soperator/worker:t1", "gpu": "registry.example/cuda-worker:2",
                       "own": "registry.example/own:1"}
    assert jail == "registry.example/j:3"


def test_runtime_class_reaches_the_pods_of_its_node_set_only():
    docs = documents(CPU, ("gpu", {"gres": ["gpu:8"], "runtimeClassName": "nvidia"}))
    model = spec.build_model(docs)
    objects = render_manifests(model, render_slurm_configs(model), secrets.ensure_secret_material(model, {})[0])
    sets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "StatefulSet"}
    assert sets["gpu"]["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in sets["cpu"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("field,value", [("runtimeClassName", "Nvidia_Runtime"), ("image", "Bad Image")])
def test_bad_values_name_their_field(field, value):
    with pytest.raises(SpecError) as e:
        spec.build_model(documents(("gpu", {"gres": ["gpu:8"], field: value})))
    assert [i.path for i in e.value.issues] == ["NodeSet/gpu spec.%s" % field]
