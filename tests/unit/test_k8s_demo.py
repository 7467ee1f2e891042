"""tools/k8s/demo.py's spec: examples/small-cpu.yml with two workers that fit the node (requests equal limits), the
demo's SSH key on the login node; a spec the product accepts."""
import pytest
import yaml
from repo_root import load_script

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

demo = load_script("soperator_k8s_demo", "tools", "k8s", "demo.py")


@pytest.mark.parametrize("cpus, per_worker", [(1, "1"), (2, "1"), (3.5, "1"), (4, "2"), (16, "8")])
def test_workers_get_half_the_node_at_least_one_cpu(cpus, per_worker):
    text = demo.sized_spec(cpus, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3R demo")
    docs = list(yaml.safe_load_all(text))
    assert docs[1]["spec"]["resources"]["cpu"] == per_worker
    assert docs[0]["spec"]["login"]["sshRootPublicKeys"] == ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3R demo"]
    model = spec.build_model(load_documents(text))
    assert [(n.name, n.replicas, n.cpus) for n in model.node_sets] == [("cpu", len(demo.WORKERS), int(per_worker))]


def test_cpu_quantities():
    assert demo._cpus("2") == 2 and demo._cpus("1500m") == 1.5
