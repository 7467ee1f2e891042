"""Every object the collection renders, for every example, as the real API server takes it: a server-side apply dry
run stores nothing, the apply stores each object once, a second apply of the same objects changes none of them
(our field manager's entry keeps its time, and the spec its generation; controllers may write status or
annotations in between, so the resourceVersion is no judge), and the example's own custom objects are accepted
once the CRDs are installed.

The renderer is called directly (no module, no plan): what is judged here is the objects themselves. The modules'
own runs against the real server are in test_site_real.py and test_slurm_cluster_real.py."""
import glob
import os
import uuid

import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.yml")))
CRD_FILES = sorted(glob.glob(os.path.join(ROOT, "crds", "*.yaml")))
MANAGER = "soperator-it-rendered"


@pytest.fixture
def dyn(kubeconfig):
    from kubernetes import config, dynamic
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        yield dynamic.DynamicClient(api)
    finally:
        api.close()


def _apply(dyn, obj, dry_run=False):
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    kw = {"dry_run": "All"} if dry_run else {}
    return resource.server_side_apply(body=obj, name=obj["metadata"]["name"],
                                      namespace=obj["metadata"].get("namespace"), field_manager=MANAGER,
                                      force_conflicts=True, **kw).to_dict()


def _ours(obj):
    """Our field manager's managedFields entry: its time moves only when an apply of ours changes the object."""
    (entry,) = [m for m in obj["metadata"]["managedFields"] if m["manager"] == MANAGER and m["operation"] == "Apply"]
    return entry


def _delete(dyn, obj):
    from kubernetes.client.exceptions import ApiException
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        resource.delete(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
    except ApiException as e:
        if e.status != 404:
            raise


@pytest.mark.parametrize("example", EXAMPLES, ids=[os.path.basename(p)[:-4] for p in EXAMPLES])
def test_rendered_objects_are_accepted_and_reapply_is_a_no_op(dyn, audit, example):
    namespace = "soperator-it-%s" % uuid.uuid4().hex[:8]
    with open(example) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    for doc in documents:
        doc["metadata"]["namespace"] = namespace
    objects = render_cluster(build_model(load_documents(yaml.safe_dump_all(documents)))).manifests
    assert objects
    assert set(o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")) == {namespace}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    _apply(dyn, ns)
    try:
        mark = audit.mark()
        for obj in objects:
            assert _apply(dyn, obj, dry_run=True)["kind"] == obj["kind"]
        writes = [r for r in audit.requests(mark) if r.write and r.namespace == namespace
                  and not r.user.startswith("system:")]  # ours, not the controllers' (kube-root-ca.crt)
        assert writes and all(r.dry_run for r in writes), writes  # the dry run stored nothing

        stored = dict(((o["kind"], o["metadata"]["name"]), _apply(dyn, o)) for o in objects)
        for obj in objects:
            again = _apply(dyn, obj)
            key = (obj["kind"], obj["metadata"]["name"])
            assert _ours(again) == _ours(stored[key]), key
            assert again["metadata"].get("generation") == stored[key]["metadata"].get("generation"), key

        # The example's own custom objects, once the CRDs are installed (they stay: other tests share them).
        for path in CRD_FILES:
            with open(path) as f:
                _apply(dyn, yaml.safe_load(f))
        for doc in documents:
            created = _wait_for_kind(dyn, doc)
            assert created["kind"] == doc["kind"]
            again = _apply(dyn, doc)
            assert _ours(again) == _ours(created)
            assert again["metadata"]["generation"] == created["metadata"]["generation"]
    finally:
        for obj in objects:
            if not obj["metadata"].get("namespace"):
                _delete(dyn, obj)  # cluster-scoped: the namespace's deletion does not take them
        _delete(dyn, ns)


def _wait_for_kind(dyn, doc, timeout=60):
    """The first apply of a custom object: the CRD just applied may not serve yet (Established comes shortly after
    the create), so a 404 is retried for a bounded time."""
    import time
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _apply(dyn, doc)
        except (ApiException, ResourceNotFoundError) as e:
            if time.monotonic() > deadline or (isinstance(e, ApiException) and e.status != 404):
                raise
            dyn.resources.invalidate_cache()
            time.sleep(0.5)
