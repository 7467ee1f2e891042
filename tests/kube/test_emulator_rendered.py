"""Every object the collection renders, for every example, is accepted by the emulator as the real server would
(server-side apply, dry-run first), and a second apply of the same objects changes nothing."""
import glob
import os

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model, load_documents
from emu_helpers import make_ns

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.yml")))
CRD_FILES = sorted(glob.glob(os.path.join(ROOT, "crds", "*.yaml")))


def _documents(path):
    with open(path) as f:
        text = f.read()
    return text, [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("example", EXAMPLES, ids=[os.path.basename(p)[:-4] for p in EXAMPLES])
def test_rendered_objects_are_accepted_and_reapply_is_a_no_op(emulator, kube, example):
    text, documents = _documents(example)
    objects = render_cluster(build_model(load_documents(text))).manifests
    assert objects
    namespaces = set(o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace"))
    for ns in namespaces:
        make_ns(kube, ns)
    dyn = kube.dynamic()

    def path(obj):
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        return res.path(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))

    rv = emulator.resource_version
    for obj in objects:
        kube.apply(path(obj), obj, manager="soperator", dry_run=True)
    assert emulator.resource_version == rv  # the dry run stored nothing
    emulator.reset_counts()
    for obj in objects:
        kube.apply(path(obj), obj, manager="soperator")
    assert emulator.counts()["writes"] == len(objects)
    stored = dict(((o["kind"], o["metadata"]["name"]), emulator.get(o["apiVersion"], o["kind"], o["metadata"]["name"],
                                                                    o["metadata"].get("namespace")))
                  for o in objects)
    rv = emulator.resource_version
    for obj in objects:
        again = kube.apply(path(obj), obj, manager="soperator")
        assert again == stored[(obj["kind"], obj["metadata"]["name"])], (obj["kind"], obj["metadata"]["name"])
    assert emulator.resource_version == rv

    # The example's own custom objects, once the CRDs are installed.
    for crd_file in CRD_FILES:
        unused, (crd,) = _documents(crd_file)
        kube.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + crd["metadata"]["name"], crd,
                   manager="soperator")
    for doc in documents:
        created = kube.apply(path(doc), doc, manager="soperator")
        assert created["kind"] == doc["kind"]
        assert kube.apply(path(doc), doc, manager="soperator")["metadata"]["resourceVersion"] == \
            created["metadata"]["resourceVersion"]
