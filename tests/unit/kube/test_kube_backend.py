"""KubeCluster (kube/backend.py) against an in-memory API server: the order of present()'s and absent()'s writes,
check mode (no write at all, the same plan), idempotent re-runs, and the options object. The real-server suites
(tests/integration) run the same code against kube-apiserver."""
import copy
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import RESOURCES, KubeError, object_key
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import KIND_ORDER
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from repo_root import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "small-cpu.yml")


def _matches(obj, selector):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in (selector or "").split(",") if term))


class FakeApi:
    """Objects by (kind, namespace, name); every write recorded as (verb, kind, name, dry_run) in `writes`."""

    def __init__(self):
        self.objects = {}
        self.writes = []
        self.calls = {"reads": 0, "writes": 0, "dry_run_writes": 0}
        self.uid = 0

    def _count(self, dry_run):
        self.calls["dry_run_writes" if dry_run else "writes"] += 1

    def get(self, kind, name, namespace=None, subresource=None):
        self.calls["reads"] += 1
        namespaced = RESOURCES[kind][2]
        return copy.deepcopy(self.objects.get((kind, namespace if namespaced else None, name)))

    def list(self, kind, namespace=None, label_selector=None):
        self.calls["reads"] += 1
        return [copy.deepcopy(o) for (k, ns, _n), o in sorted(self.objects.items(), key=lambda i: str(i[0]))
                if k == kind and (namespace is None or ns == namespace) and _matches(o, label_selector)]

    def apply(self, obj, dry_run=False, force=True, subresource=None, field_manager=None):
        self._count(dry_run)
        key = object_key(obj)
        self.writes.append(("apply/" + subresource if subresource else "apply", key[0], key[2], dry_run))
        current = self.objects.get(key)
        if subresource == "status":
            if current is None:
                raise KubeError("%s not found" % key[2], status=404)
            stored = dict(current, status=copy.deepcopy(obj["status"]))
        else:
            stored = copy.deepcopy(obj)
            meta = stored["metadata"]
            self.uid += 1
            meta["uid"] = (current or {}).get("metadata", {}).get("uid") or "uid-%d" % self.uid
            meta["generation"] = (current or {}).get("metadata", {}).get("generation", 0) + 1
            if current is not None and "status" in current:
                stored["status"] = current["status"]
            if key[0] == "CustomResourceDefinition":     # served at once
                stored["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
            if key[0] == "StatefulSet":                  # its controller, at once: every replica current
                replicas = stored["spec"].get("replicas", 1)
                revision = "%s-%d" % (key[2], meta["generation"])
                stored["status"] = {"observedGeneration": meta["generation"], "replicas": replicas,
                                    "readyReplicas": replicas, "updatedReplicas": replicas,
                                    "currentRevision": revision, "updateRevision": revision}
        if not dry_run:
            self.objects[key] = stored
        return copy.deepcopy(stored), current is None

    def create(self, obj, dry_run=False):
        return self.apply(obj, dry_run=dry_run)[0]

    def delete(self, kind, name, namespace=None, dry_run=False, propagation="Background", uid=None):
        self._count(dry_run)
        self.writes.append(("delete", kind, name, dry_run))
        if not dry_run:
            self.objects.pop((kind, namespace if RESOURCES[kind][2] else None, name), None)

    def pod_log(self, namespace, name, tail_lines=50):
        return ""


def no_slurm():
    raise AssertionError("no Slurm access expected: a new cluster's configs are loaded by its first start")


def no_sleep(seconds):
    raise AssertionError("a wait that the fake API server does not end (%ss)" % seconds)


def cluster(api, check_mode=False, docs=None, **options):
    model = build_model(docs or documents_from(EXAMPLE, None))
    return KubeCluster(api, model, KubeOptions(check_mode=check_mode, **options), runner_factory=no_slurm,
                       checker_factory=no_slurm, sleep=no_sleep)


def applied_kinds(api, dry_run=False):
    return [kind for verb, kind, _name, dry in api.writes if verb == "apply" and dry == dry_run]


def test_present_writes_the_namespace_the_crds_and_the_custom_resources_before_the_parts_in_apply_order():
    api = FakeApi()
    result = cluster(api).present()
    kinds = [kind for verb, kind, _name, _dry in api.writes if verb in ("apply",)]
    assert kinds[0] == "Namespace" and set(kinds[1:3]) == {"CustomResourceDefinition"}
    assert kinds[3:5] == ["SlurmCluster", "NodeSet"]
    parts = kinds[5:]
    assert parts == sorted(parts, key=KIND_ORDER.index), "the parts in KIND_ORDER (the populate Job before " \
                                                         "the StatefulSets that mount the jail)"
    assert "Job" in parts and "StatefulSet" in parts
    # the status last, once the objects exist
    last = [(verb, kind) for verb, kind, _n, _d in api.writes[-2:]]
    assert last == [("apply/status", "SlurmCluster"), ("apply/status", "NodeSet")]
    assert result["changed"] and result["status_updated"] and not api.calls["dry_run_writes"]
    assert set(o["action"] for o in result["objects"]) == {"created"}


def test_check_mode_on_an_empty_server_writes_nothing_and_plans_what_the_real_run_does():
    api = FakeApi()
    planned = cluster(api, check_mode=True).present()
    assert api.writes == [] and api.objects == {}
    assert planned["changed"] and not planned["status_updated"]
    done = cluster(FakeApi()).present()
    assert [(o["kind"], o["name"], o["action"]) for o in planned["objects"]] == \
        [(o["kind"], o["name"], o["action"]) for o in done["objects"]]


def test_a_second_present_changes_nothing_and_check_mode_agrees():
    api = FakeApi()
    cluster(api).present()
    before = copy.deepcopy(api.objects)
    api.writes = []
    planned = cluster(api, check_mode=True).present()
    assert not planned["changed"] and api.writes == []
    again = cluster(api).present()
    assert not again["changed"] and api.writes == [] and api.objects == before


def test_check_mode_of_a_change_is_the_servers_dry_run_only():
    api = FakeApi()
    cluster(api).present()
    before = copy.deepcopy(api.objects)
    api.writes = []
    docs = documents_from(EXAMPLE, None)
    docs[1]["spec"]["replicas"] = docs[1]["spec"]["replicas"] + 1
    result = cluster(api, check_mode=True, docs=docs).present()
    assert result["changed"] and api.objects == before
    assert api.writes and all(dry for _v, _k, _n, dry in api.writes)
    assert ("NodeSet", "updated") in [(o["kind"], o["action"]) for o in result["objects"]]


def test_absent_deletes_what_we_own_parts_first_custom_resources_last_and_keeps_volumes_namespace_and_crds():
    api = FakeApi()
    cluster(api).present()
    api.writes = []
    planned = cluster(api, check_mode=True).absent()
    assert planned["changed"] and api.writes and all(dry for _v, _k, _n, dry in api.writes)
    before = copy.deepcopy(api.objects)
    api.writes = []
    result = cluster(api).absent()
    deleted = [kind for verb, kind, _n, dry in api.writes if verb == "delete" and not dry]
    assert result["changed"] and deleted[-2:] == ["NodeSet", "SlurmCluster"]
    order = ("SlurmCluster", "NodeSet") + KIND_ORDER
    assert deleted == sorted(deleted, key=lambda k: -order.index(k))
    kept = sorted(name for kind, _ns, name in api.objects if kind == "PersistentVolumeClaim")
    assert kept and kept == sorted(n for k, _ns, n in before if k == "PersistentVolumeClaim")
    assert sorted(set(k for k, _ns, _n in api.objects)) == ["CustomResourceDefinition", "Namespace",
                                                            "PersistentVolumeClaim"]
    assert [(o["kind"], o["name"]) for o in planned["objects"]] == [(o["kind"], o["name"]) for o in result["objects"]]
    assert not cluster(api).absent()["changed"]
    cluster(api, purge_volumes=True).absent()
    assert sorted(set(k for k, _ns, _n in api.objects)) == ["CustomResourceDefinition", "Namespace"]


def test_absent_of_a_missing_namespace_reads_one_object_and_changes_nothing():
    api = FakeApi()
    result = cluster(api).absent()
    assert not result["changed"] and api.writes == [] and api.calls["reads"] == 1


def test_the_options_default_to_the_modules_defaults():
    options = KubeOptions()
    assert not options.check_mode and options.install_crds and options.wait_timeout == 600 and options.poll == 2.0
    with pytest.raises(Exception):
        options.wait = True         # frozen: one run's options do not change under it
