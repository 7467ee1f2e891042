"""Immutable StatefulSet fields: the plan refuses before any write unless recreate_statefulsets; then the StatefulSet is
deleted with its pods orphaned and created again, the pods adopted and the claims kept. Against the emulator with
simulated pods, the module run through `ansible localhost -m` (test_slurm_cluster_kube.module)."""
import copy

import pytest
import yaml

from emu_helpers import KubeClient, failure, make_ns, sts, sts_path
from emulator import KubeEmulator
from test_slurm_cluster_kube import SMALL, module, spec_docs

NS = "slurm"
CONTROLLER = "small-controller"


@pytest.fixture
def emu_pods(tmp_path):
    emu = KubeEmulator(simulate_controllers=True, simulate_pods=True)
    emu.start()
    try:
        yield emu, emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    finally:
        emu.stop()
    assert emu.internal_errors == []


def uids(objects):
    return dict((o["metadata"]["name"], o["metadata"]["uid"]) for o in objects)


def owner_uids(pod):
    return [r["uid"] for r in pod["metadata"].get("ownerReferences") or []]


def with_spool(size):
    docs = spec_docs(SMALL)
    docs[0]["spec"].setdefault("controller", {})["spool"] = {"size": size}
    return docs


def run(kubeconfig, definition, check=False, diff=False, expect_failed=False, **kw):
    args = dict(state="present", target="kubernetes", kubeconfig=kubeconfig, definition=definition, wait=True,
                wait_timeout=30, api_timeout=5)
    args.update(kw)
    return module("slurm_cluster", check=check, diff=diff, expect_failed=expect_failed, **args)


def spool_size(yaml_text):
    return yaml.safe_load(yaml_text)["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]


def by_key(result):
    return dict(((o["kind"], o["name"]), o) for o in result["objects"])


# --- the emulator behaves like the API server here --------------------------------------------------------------

def test_emulator_refuses_immutable_fields_and_orphans_then_adopts_pods(tmp_path):
    with KubeEmulator(simulate_pods=True) as emu:
        kube = KubeClient(emu.write_kubeconfig(str(tmp_path / "k")))
        try:
            make_ns(kube)
            body = sts(replicas=2)
            body["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
            old = kube.call("POST", sts_path(), body)
            pods = uids(emu.list("v1", "Pod", "t"))
            claims = uids(emu.list("v1", "PersistentVolumeClaim", "t"))
            assert sorted(pods) == ["web-0", "web-1"] and sorted(claims) == ["data-web-0", "data-web-1"]

            bigger = copy.deepcopy(body)
            bigger["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "2Gi"
            for field, value in (("volumeClaimTemplates", bigger["spec"]["volumeClaimTemplates"]),
                                 ("serviceName", "other"), ("podManagementPolicy", "Parallel")):
                edited = copy.deepcopy(body)
                edited["spec"][field] = value
                e, status = failure(kube.apply, sts_path(name="web"), edited, force=True)
                assert e.status == 422 and status["reason"] == "Invalid"
                assert status["message"].startswith('StatefulSet.apps "web" is invalid: spec: Forbidden: updates to '
                                                    'statefulset spec for fields other than'), status["message"]

            kube.call("DELETE", sts_path(name="web"), query={"propagationPolicy": "Orphan"})
            assert emu.get("apps/v1", "StatefulSet", "web", "t") is None
            orphans = emu.list("v1", "Pod", "t")
            assert uids(orphans) == pods and all(owner_uids(p) == [] for p in orphans)

            new = kube.call("POST", sts_path(), bigger)
            assert new["metadata"]["uid"] != old["metadata"]["uid"]
            adopted = emu.list("v1", "Pod", "t")
            assert uids(adopted) == pods   # the same pods: adopted, not replaced
            assert all(owner_uids(p) == [new["metadata"]["uid"]] for p in adopted)
            assert uids(emu.list("v1", "PersistentVolumeClaim", "t")) == claims

            kube.call("DELETE", sts_path(name="web"))   # background: dependents go with it
            assert emu.list("v1", "Pod", "t") == []
        finally:
            kube.close()
        assert emu.internal_errors == []


# --- slurm_cluster ----------------------------------------------------------------------------------------------

def test_immutable_change_is_refused_before_any_write(emu_pods):
    emu, kubeconfig = emu_pods
    run(kubeconfig, with_spool("10Gi"))
    before = emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)
    emu.reset_counts()
    failed = run(kubeconfig, with_spool("20Gi"), expect_failed=True)
    assert "StatefulSet slurm/small-controller: spec.volumeClaimTemplates" in failed["msg"], failed["msg"]
    assert "recreate_statefulsets=true" in failed["msg"] and "nothing was changed" in failed["msg"]
    counts = emu.counts()
    assert counts["writes"] == 0 and counts["dry_run_writes"] == 0, emu.requests
    assert emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]
    # check mode plans the same and refuses the same way
    planned = run(kubeconfig, with_spool("20Gi"), check=True, expect_failed=True)
    assert "spec.volumeClaimTemplates" in planned["msg"]
    assert emu.counts()["writes"] == 0


def test_check_mode_predicts_recreated_and_sends_only_a_dry_run(emu_pods):
    emu, kubeconfig = emu_pods
    run(kubeconfig, with_spool("10Gi"))
    before = emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)
    emu.reset_counts()
    planned = run(kubeconfig, with_spool("20Gi"), check=True, diff=True, recreate_statefulsets=True)
    assert planned["changed"]
    counts = emu.counts()
    assert counts["writes"] == 0, [(r.method, r.path) for r in emu.requests if not r.dry_run]
    deletes = [r for r in emu.requests if r.method == "DELETE"]
    assert [(r.path.rsplit("/", 1)[-1], r.dry_run, r.query.get("propagationPolicy")) for r in deletes] == \
        [(CONTROLLER, True, "Orphan")]
    changed = dict((k, o) for k, o in by_key(planned).items() if o["action"] != "unchanged")
    assert changed[("StatefulSet", CONTROLLER)]["action"] == "recreated"
    assert changed[("StatefulSet", CONTROLLER)]["fields"] == ["spec.volumeClaimTemplates"]
    [diff] = [d for d in planned["diff"] if CONTROLLER in d["before_header"] and "StatefulSet" in d["before_header"]]
    assert "recreated" in diff["before_header"]
    assert spool_size(diff["before"]) == "10Gi" and spool_size(diff["after"]) == "20Gi"
    assert emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)["metadata"]["uid"] == before["metadata"]["uid"]


def test_recreate_keeps_pods_and_claims_and_converges(emu_pods):
    emu, kubeconfig = emu_pods
    run(kubeconfig, with_spool("10Gi"))
    old = emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)
    pods = uids(emu.list("v1", "Pod", NS))
    claims = uids(emu.list("v1", "PersistentVolumeClaim", NS))
    assert "small-controller-0" in pods and "spool-small-controller-0" in claims
    emu.reset_counts()
    done = run(kubeconfig, with_spool("20Gi"), recreate_statefulsets=True)
    assert done["changed"]
    changed = sorted((k, o["action"]) for k, o in by_key(done).items() if o["action"] != "unchanged")
    assert changed == [(("SlurmCluster", "small"), "updated"), (("StatefulSet", CONTROLLER), "recreated")]
    deletes = [r for r in emu.requests if r.method == "DELETE"]
    assert [(r.path.rsplit("/", 1)[-1], r.dry_run, r.query.get("propagationPolicy")) for r in deletes] == \
        [(CONTROLLER, False, "Orphan")]

    new = emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    # no pod was deleted: the controller pod is the same one, now owned by the new StatefulSet
    assert uids(emu.list("v1", "Pod", NS)) == pods
    assert owner_uids(emu.get("v1", "Pod", "small-controller-0", NS)) == [new["metadata"]["uid"]]
    assert uids(emu.list("v1", "PersistentVolumeClaim", NS)) == claims
    assert done["status"]["phase"] == "Ready"

    emu.reset_counts()
    again = run(kubeconfig, with_spool("20Gi"), recreate_statefulsets=True)
    assert not again["changed"], [o for o in again["objects"] if o["action"] != "unchanged"]
    assert emu.counts()["writes"] == 0


def test_a_statefulset_held_by_a_finalizer_is_waited_for_a_bounded_time(emu_pods):
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import BackendError, KubeCluster
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (
        KubeClient as Client, api_client_from_params)
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model, load_documents

    emu, kubeconfig = emu_pods
    run(kubeconfig, with_spool("10Gi"))
    pods = uids(emu.list("v1", "Pod", NS))
    raw = KubeClient(kubeconfig)
    hold = {"metadata": {"finalizers": ["example.com/hold"]}}
    try:
        raw.call("PATCH", sts_path(NS, CONTROLLER), hold, content_type="application/merge-patch+json")
        client = Client(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm")
        model = build_model(load_documents(yaml.safe_dump_all(with_spool("20Gi"))))
        cluster = KubeCluster(client, model, wait=True, wait_timeout=1, poll=0.1, recreate_statefulsets=True)
        with pytest.raises(BackendError) as e:
            cluster.present()
        assert "StatefulSet slurm/small-controller was deleted (pods orphaned) but is still there after 1s" in \
            str(e.value)
        held = emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)
        assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["example.com/hold"]
        # orphaned at once (the garbage collector does not wait for other finalizers), and still running
        assert uids(emu.list("v1", "Pod", NS)) == pods
        assert owner_uids(emu.get("v1", "Pod", "small-controller-0", NS)) == []
        raw.call("PATCH", sts_path(NS, CONTROLLER), {"metadata": {"finalizers": None}},
                 content_type="application/merge-patch+json")
    finally:
        raw.close()
    assert emu.get("apps/v1", "StatefulSet", CONTROLLER, NS) is None
    assert uids(emu.list("v1", "Pod", NS)) == pods
    # the re-run finds it gone and creates it; it adopts the running pod
    done = run(kubeconfig, with_spool("20Gi"), recreate_statefulsets=True)
    assert by_key(done)[("StatefulSet", CONTROLLER)]["action"] == "created"
    new = emu.get("apps/v1", "StatefulSet", CONTROLLER, NS)
    assert uids(emu.list("v1", "Pod", NS)) == pods
    assert owner_uids(emu.get("v1", "Pod", "small-controller-0", NS)) == [new["metadata"]["uid"]]
