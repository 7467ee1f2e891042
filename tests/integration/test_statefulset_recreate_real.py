"""Immutable StatefulSet fields against the real API server: the plan refuses a change of the controller's spool size
(its volumeClaimTemplates) before any write unless recreate_statefulsets; then the StatefulSet is deleted with
propagationPolicy=Orphan - the real garbage collector takes the owner reference off its pods, which keep running -
and created again, and the real StatefulSet controller adopts the same pods; the claims stay. Writes are counted
from the audit log. Each test has a namespace of its own (conftest.py's namespaced_spec)."""
import json
import urllib.parse

import pytest
import yaml

from slurm_kube import until
from slurm_specs import SMALL_CLAIMS, admin_user, module

CONTROLLER = "small-controller"


def with_spool(docs, size):
    docs[0]["spec"].setdefault("controller", {})["spool"] = {"size": size}
    return docs


def run(docs, kubeconfig, check=False, diff=False, expect_failed=False, **kw):
    args = dict(state="present", target="kubernetes", definition=docs, kubeconfig=kubeconfig, wait=True,
                wait_timeout=120)
    args.update(kw)
    return module("slurm_cluster", check=check, diff=diff, expect_failed=expect_failed, **args)


def by_key(result):
    return dict(((o["kind"], o["name"]), o) for o in result["objects"])


def spool_size(yaml_text):
    return yaml.safe_load(yaml_text)["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]


class Live:
    """What the server holds, read with kubectl as the admin."""

    def __init__(self, cluster, namespace):
        self.cluster, self.namespace = cluster, namespace

    def _get(self, *what):
        out = self.cluster.kubectl("get", *what, "-n", self.namespace, "-o", "json", "--ignore-not-found").stdout
        return json.loads(out) if out.strip() else None

    def statefulset(self, name=CONTROLLER):
        return self._get("statefulset", name)

    def pods(self):
        """{name: (uid, [owner uids])} of the pods not being deleted, but Jobs' pods: the remediation CronJob starts
        one every few minutes (seen in a CI run, between two reads of this test), and no StatefulSet owns them."""
        return dict((p["metadata"]["name"], (p["metadata"]["uid"], [r["uid"] for r in p["metadata"].get(
            "ownerReferences") or []])) for p in self._get("pods")["items"]
            if not p["metadata"].get("deletionTimestamp")
            and "batch.kubernetes.io/job-name" not in (p["metadata"].get("labels") or {}))

    def claims(self):
        return dict((c["metadata"]["name"], c["metadata"]["uid"]) for c in self._get("pvc")["items"])


def propagation(request):
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.event["requestURI"]).query)
    return (query.get("propagationPolicy") or [None])[0]


@pytest.fixture
def ready(namespaced_spec, kubeconfig, volumes, real_cluster):
    """examples/small-cpu.yml with a 10Gi controller spool in a namespace of its own, applied and Ready (the
    controllers and kwok have made and run every pod); -> (docs, Live)."""
    docs = with_spool(namespaced_spec(), "10Gi")
    namespace = docs[0]["metadata"]["namespace"]
    volumes(namespace, SMALL_CLAIMS)
    assert run(docs, kubeconfig)["status"]["phase"] == "Ready"
    return docs, Live(real_cluster, namespace)


def test_an_immutable_change_is_refused_before_any_write_and_check_mode_plans_the_recreate(
        ready, kubeconfig, audit):
    docs, live = ready
    namespace = live.namespace
    user = admin_user(kubeconfig)
    before = live.statefulset()
    pods = live.pods()
    bigger = with_spool(docs, "20Gi")

    mark = audit.mark()
    failed = run(bigger, kubeconfig, expect_failed=True)
    assert "StatefulSet %s/%s: spec.volumeClaimTemplates" % (namespace, CONTROLLER) in failed["msg"], failed["msg"]
    assert "recreate_statefulsets=true" in failed["msg"] and "nothing was changed" in failed["msg"]
    # check mode plans the same and refuses the same way
    planned = run(bigger, kubeconfig, check=True, expect_failed=True)
    assert "spec.volumeClaimTemplates" in planned["msg"]
    ours = audit.requests(mark, user=user)
    assert ours and [r for r in ours if r.write] == [], ours    # not even a dry run
    assert live.statefulset()["metadata"]["uid"] == before["metadata"]["uid"]

    mark = audit.mark()
    planned = run(bigger, kubeconfig, check=True, diff=True, recreate_statefulsets=True)
    assert planned["changed"]
    ours = audit.requests(mark, user=user)
    assert [r for r in ours if r.write and not r.dry_run] == [], ours
    assert [(r.resource, r.name, propagation(r)) for r in ours if r.verb == "delete"] == [
        ("statefulsets", CONTROLLER, "Orphan")]
    changed = dict((k, o) for k, o in by_key(planned).items() if o["action"] != "unchanged")
    assert changed[("StatefulSet", CONTROLLER)]["action"] == "recreated"
    assert changed[("StatefulSet", CONTROLLER)]["fields"] == ["spec.volumeClaimTemplates"]
    [diff] = [d for d in planned["diff"] if CONTROLLER in d["before_header"] and "StatefulSet" in d["before_header"]]
    assert "recreated" in diff["before_header"]
    assert spool_size(diff["before"]) == "10Gi" and spool_size(diff["after"]) == "20Gi"
    after = live.statefulset()
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"], "deleted by a dry run"
    assert live.pods()[CONTROLLER + "-0"] == pods[CONTROLLER + "-0"]


def test_recreate_keeps_the_pods_and_claims_and_converges(ready, kubeconfig, audit):
    docs, live = ready
    user = admin_user(kubeconfig)
    old = live.statefulset()
    pods = live.pods()
    claims = live.claims()
    assert pods[CONTROLLER + "-0"][1] == [old["metadata"]["uid"]] and "spool-%s-0" % CONTROLLER in claims

    mark = audit.mark()
    done = run(with_spool(docs, "20Gi"), kubeconfig, recreate_statefulsets=True)
    changed = sorted((k, o["action"]) for k, o in by_key(done).items() if o["action"] != "unchanged")
    assert changed == [(("SlurmCluster", "small"), "updated"), (("StatefulSet", CONTROLLER), "recreated")]
    ours = audit.requests(mark, user=user)
    assert [(r.resource, r.name, r.dry_run, propagation(r)) for r in ours if r.verb == "delete"] == [
        ("statefulsets", CONTROLLER, False, "Orphan")]
    assert done["status"]["phase"] == "Ready"

    new = live.statefulset()
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    # No pod was deleted: the controller pod is the same one, adopted by the new StatefulSet; the claims stay
    now = live.pods()
    assert dict((n, uid) for n, (uid, _owners) in now.items()) == dict((n, uid) for n, (uid, _o) in pods.items())
    assert now[CONTROLLER + "-0"][1] == [new["metadata"]["uid"]]
    assert live.claims() == claims

    mark = audit.mark()
    again = run(with_spool(docs, "20Gi"), kubeconfig, recreate_statefulsets=True)
    assert not again["changed"], [o for o in again["objects"] if o["action"] != "unchanged"]
    assert [r for r in audit.requests(mark, user=user) if r.write] == []


def test_a_statefulset_held_by_a_finalizer_is_waited_for_a_bounded_time(ready, kubeconfig, real_cluster):
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

    docs, live = ready
    namespace = live.namespace
    pods = dict((n, uid) for n, (uid, _owners) in live.pods().items())
    real_cluster.kubectl("patch", "statefulset", CONTROLLER, "-n", namespace, "--type=merge",
                         "-p", json.dumps({"metadata": {"finalizers": ["example.com/hold"]}}))
    try:
        client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm")
        model = build_model(load_documents(yaml.safe_dump_all(with_spool(docs, "20Gi"))))
        options = KubeOptions(wait=True, wait_timeout=2, poll=0.2, recreate_statefulsets=True)
        cluster = KubeCluster(client, model, options)
        with pytest.raises(BackendError) as e:
            cluster.present()
        assert "StatefulSet %s/%s was deleted (pods orphaned) but is still there after 2s" % (
            namespace, CONTROLLER) in str(e.value)
        held = live.statefulset()
        assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["example.com/hold"]
        # The garbage collector orphans the pods without waiting for other finalizers; they keep running
        until("the garbage collector to orphan %s-0" % CONTROLLER, lambda: live.pods()[CONTROLLER + "-0"][1] == [])
        assert dict((n, uid) for n, (uid, _owners) in live.pods().items()) == pods
    finally:
        real_cluster.kubectl("patch", "statefulset", CONTROLLER, "-n", namespace, "--type=merge",
                             "-p", json.dumps({"metadata": {"finalizers": None}}), check=False)
    until("StatefulSet %s to be gone" % CONTROLLER, lambda: live.statefulset() is None)
    # the re-run finds it gone and creates it; it adopts the running pod
    done = run(with_spool(docs, "20Gi"), kubeconfig, recreate_statefulsets=True)
    assert by_key(done)[("StatefulSet", CONTROLLER)]["action"] == "created"
    new = live.statefulset()
    now = live.pods()
    assert dict((n, uid) for n, (uid, _owners) in now.items()) == pods
    assert now[CONTROLLER + "-0"][1] == [new["metadata"]["uid"]]
