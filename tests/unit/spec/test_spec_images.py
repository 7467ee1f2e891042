"""Image references: the spec takes those the kubelet parses (the distribution spec's reference grammar) and refuses
the others with the field path (issue 35, defect 10). Where podman is installed, its reference parser (the same
grammar, containers/image) is the judge of a drawn sample too."""
import copy
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ci_skips import environmental

SHA = "sha256:" + "0123456789abcdef" * 4
GOOD = ["ghcr.io/soperator-slurm/worker:26.05.5-0.1.0", "docker.io/library/mariadb:10.11", "ubuntu", "w:1",
        "localhost:5000/team/worker:Custom_Tag", "Registry.Example.COM/worker",
        "a__b/c--d.e_f", "worker:24.11.1@" + SHA, "worker@" + SHA, "worker@sha512:" + "a" * 128]
BAD = ["ghcr.io/Soperator/worker:1", "Worker", "ghcr.io/soperator/worker:", "worker:-1", "worker:1:2", "worker/",
       "/worker", "team//worker", "a..b", "a_-b", "worker:" + "t" * 129, "worker@sha256:abc",
       "worker@sha256:" + "0123456789ABCDEF" * 4, "worker@md5:" + "0" * 32, "a" * 256, "team/" + "a" * 251 + ":1",
       "worker latest", " worker", "worker\n", "[::1]:5000/worker"]


def docs(worker=None, node_set_image=None, registry=None):
    cluster = {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster",
               "metadata": {"name": "demo", "namespace": "hpc"},
               "spec": {"jail": {"volume": {"size": "1Gi"}}, "images": {}}}
    node_set = {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet",
                "metadata": {"name": "cpu", "namespace": "hpc"},
                "spec": {"clusterName": "demo", "resources": {"cpu": "2", "memory": "1Gi"}}}
    if worker is not None:
        cluster["spec"]["images"]["worker"] = worker
    if registry is not None:
        cluster["spec"]["images"]["registry"] = registry
    if node_set_image is not None:
        node_set["spec"]["image"] = node_set_image
    return [cluster, node_set]


def issue_paths(documents):
    try:
        s.build_model(copy.deepcopy(documents))
    except SpecError as e:
        return [i.path for i in e.issues]
    return []


@pytest.mark.parametrize("reference", GOOD)
def test_references_the_kubelet_parses_are_taken(reference):
    model = s.build_model(docs(worker=reference, node_set_image=reference))
    assert model.images.worker == reference and model.node_sets[0].image == reference


@pytest.mark.parametrize("reference", BAD)
def test_references_the_kubelet_refuses_are_refused_with_the_path(reference):
    assert issue_paths(docs(worker=reference)) == ["SlurmCluster/demo spec.images.worker"]
    assert issue_paths(docs(node_set_image=reference)) == ["NodeSet/cpu spec.image"]


@pytest.mark.parametrize("registry, path", [("ghcr.io/MyOrg", "SlurmCluster/demo spec.images.registry"),
                                            ("ghcr.io/org:1", "SlurmCluster/demo spec.images.registry"),
                                            ("r.io/" + "a" * 240, "SlurmCluster/demo spec.images.registry")])
def test_a_registry_that_makes_bad_references_is_refused(registry, path):
    assert issue_paths(docs(registry=registry)) == [path]


def test_the_default_registry_is_taken():
    model = s.build_model(docs(registry="localhost:5000/my-org"))
    assert model.images.controller.startswith("localhost:5000/my-org/controller:")


def _podman_parses(reference):
    """Whether podman's reference parser takes `reference` (exit 125: "invalid reference format"; 0 or 1: it
    parsed it and looked it up in the local store, found or not)."""
    done = subprocess.run([shutil.which("podman"), "image", "exists", "--", reference], timeout=60,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert done.returncode in (0, 1, 125), done.stderr
    return done.returncode != 125


@pytest.fixture(scope="module")
def podman():
    if not shutil.which("podman"):
        pytest.skip(environmental("podman (its reference parser is the judge here) is not installed"))


REFERENCES = st.one_of(
    st.sampled_from(GOOD + BAD),
    st.text(alphabet="aB0-._:/@", min_size=1, max_size=14),
    st.tuples(st.sampled_from(["", "ghcr.io/", "localhost:5000/", "Reg.io/", "a/"]),
              st.text(alphabet="ab0-._", min_size=1, max_size=6),
              st.sampled_from(["", ":1", ":v1.0-rc_1", ":-x", "@" + SHA, ":t@" + SHA])).map("".join))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(reference=REFERENCES)
def test_the_spec_agrees_with_a_real_reference_parser(podman, reference):
    if reference.strip() != reference or reference.startswith("-"):
        return                  # podman would read these as options or trim them: not a parser question
    assert (issue_paths(docs(worker=reference)) == []) == _podman_parses(reference), reference
