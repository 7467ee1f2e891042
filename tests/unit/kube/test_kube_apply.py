"""The pure parts of the Kubernetes apply: when an object counts as unchanged, the plan, and what a diff shows."""
import copy

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.kube import apply as ka
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import object_key

STS = {
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "gpu", "namespace": "slurm", "labels": {"app.kubernetes.io/managed-by": "soperator.slurm"}},
    "spec": {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "slurmd", "image": "w:1", "args": ["slurmd", "-D"],
         "resources": {"requests": {"cpu": "2000m", "memory": "1024Mi"}}}]}}},
}


def live_of(obj):
    """What a server returns for an applied object: our digest, defaults, bookkeeping, canonical quantities."""
    live = copy.deepcopy(ka.with_digest(obj))
    live["metadata"].update(uid="u", resourceVersion="7", managedFields=[{"manager": "x"}])
    live["spec"]["podManagementPolicy"] = "OrderedReady"
    ctr = live["spec"]["template"]["spec"]["containers"][0]
    ctr["imagePullPolicy"] = "IfNotPresent"
    ctr["resources"]["requests"] = {"cpu": "2", "memory": "1Gi"}
    live["status"] = {"replicas": 2}
    return live


def test_server_defaults_and_canonical_quantities_count_as_unchanged():
    assert ka.unchanged(STS, live_of(STS))


def test_what_a_controller_made_from_our_template_is_not_pruned():
    # The remediation CronJob's Jobs carry our labels (its jobTemplate's): found by our selector, never rendered.
    made = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "demo-remediation-29925530", "namespace": "slurm", "labels": {"app.kubernetes.io/instance": "demo"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "demo-remediation", "uid": "u",
                             "controller": True}]}}
    ours = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "old-job", "namespace": "slurm"}}
    changes = ka.plan([], {object_key(made): made, object_key(ours): ours})
    assert [(ch.action, ch.live["metadata"]["name"]) for ch in changes] == [(ka.PRUNE, "old-job")]


def test_crd_schema_bounds_compare_as_the_float64_the_api_server_keeps():
    # kube-apiserver 1.37 returns a CRD's `maximum: 9223372036854775807` as 9223372036854776000 (JSONSchemaProps
    # holds float64): the same bound, not an edit. Other numbers stay exact.
    want = {"properties": {"n": {"type": "integer", "minimum": 0, "maximum": 2 ** 63 - 1}}}
    have = {"properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9223372036854776000}}}
    assert ka.contained(want, have)
    assert not ka.contained(want, {"properties": {"n": {"type": "integer", "minimum": 0, "maximum": 2 ** 53}}})
    assert not ka.contained({"replicas": 2 ** 63 - 1}, {"replicas": 9223372036854776000})


def test_a_field_we_set_edited_by_someone_else_is_a_change():
    live = live_of(STS)
    live["spec"]["replicas"] = 5
    assert not ka.unchanged(STS, live)
    live = live_of(STS)
    live["spec"]["template"]["spec"]["containers"][0]["args"] = ["slurmd"]
    assert not ka.unchanged(STS, live)


def test_a_field_we_stopped_rendering_is_a_change():
    # the live object still has it (we applied it before); only the digest tells that apply would remove it
    before = copy.deepcopy(STS)
    before["metadata"]["labels"]["extra"] = "1"
    live = live_of(before)
    assert ka.contained(STS, live)
    assert not ka.unchanged(STS, live)


def test_containers_added_by_others_do_not_count_but_order_and_missing_ones_do():
    live = live_of(STS)
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s"})
    assert ka.unchanged(STS, live)
    two = copy.deepcopy(STS)
    two["spec"]["template"]["spec"]["containers"].append({"name": "b", "image": "b"})
    live = live_of(two)
    live["spec"]["template"]["spec"]["containers"].reverse()
    assert not ka.contained(two, live)
    del live["spec"]["template"]["spec"]["containers"][0]
    assert not ka.contained(two, live)


def test_one_volume_mounted_at_two_paths_is_matched_by_mount_path():
    want = {"volumeMounts": [{"name": "jail", "mountPath": "/mnt/jail"},
                             {"name": "jail", "mountPath": "/var/lib/extrausers", "subPath": "etc", "readOnly": True}]}
    assert ka.contained(want, copy.deepcopy(want))
    moved = copy.deepcopy(want)
    moved["volumeMounts"][1]["subPath"] = "home"
    assert not ka.contained(want, moved)
    assert not ka.contained(want, {"volumeMounts": want["volumeMounts"][:1]})


def test_secret_digest_ignores_values_which_are_compared_one_by_one():
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"},
              "data": {"munge.key": "AAAA"}}
    other = copy.deepcopy(secret)
    other["data"]["munge.key"] = "BBBB"
    assert ka.applied_digest(secret) == ka.applied_digest(other)
    assert "AAAA" not in str(ka.with_digest(secret)["metadata"])
    assert not ka.unchanged(other, ka.with_digest(secret))
    assert ka.unchanged(secret, ka.with_digest(secret))


def test_plan_creates_updates_prunes_and_keeps_volumes():
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "jail", "namespace": "slurm"}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "slurm"}}
    changed = copy.deepcopy(STS)
    changed["spec"]["replicas"] = 3
    new = dict(copy.deepcopy(STS), metadata={"name": "cpu", "namespace": "slurm"})
    live = ka.index([live_of(STS), pvc, cm])
    actions = [(ch.kind, ch.name, ch.action) for ch in ka.plan([changed, new], live)]
    assert actions == [("StatefulSet", "gpu", "update"), ("StatefulSet", "cpu", "create"),
                       ("PersistentVolumeClaim", "jail", "keep"), ("ConfigMap", "old", "prune")]
    purge = [(ch.kind, ch.action) for ch in ka.plan([changed], live, purge_volumes=True)]
    assert ("PersistentVolumeClaim", "prune") in purge


def test_an_object_being_deleted_is_not_deleted_again():
    # A purged claim that a pod still mounts stays, deletionTimestamp set, until the pod goes (pvc-protection).
    held = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
        "name": "jail", "namespace": "slurm", "deletionTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": ["kubernetes.io/pvc-protection"]}}
    for purge in (True, False):
        [change] = ka.plan([], ka.index([held]), purge_volumes=purge)
        assert change.action == "unchanged" and not change.writes
        assert change.note == "being deleted, held by finalizers: kubernetes.io/pvc-protection"


def test_jobs_run_once():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "populate", "namespace": "slurm"},
           "spec": {"template": {"spec": {"containers": [{"name": "p", "image": "a"}]}}}}
    edited = copy.deepcopy(job)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "b"
    [change] = ka.plan([edited], ka.index([ka.with_digest(job)]))
    assert change.action == "unchanged" and "delete the Job" in change.note


def test_diff_hides_secret_values_and_server_bookkeeping():
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"},
              "data": {"munge.key": "c2VjcmV0"}}
    change = ka.Change(ka.UPDATE, secret, dict(ka.with_digest(secret), status={"x": 1}))
    diff = change.diff()
    assert "c2VjcmV0" not in diff["before"] + diff["after"]
    assert "<hidden>" in diff["after"]
    assert ka.APPLIED_ANNOTATION not in diff["before"] and "status" not in diff["before"]


def test_zero_values_the_server_drops_count_as_unchanged():
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "n"},
           "spec": {"publishNotReadyAddresses": False, "ports": [{"port": 1}], "selector": {}, "x": 0}}
    live = ka.with_digest(svc)
    for key in ("publishNotReadyAddresses", "selector", "x"):
        del live["spec"][key]
    assert ka.unchanged(svc, live)
    live["spec"]["publishNotReadyAddresses"] = True
    assert not ka.unchanged(svc, live)


CLAIM = {"metadata": {"name": "spool", "labels": {"app": "c"}},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                  "storageClassName": "fast"}}


def sts_with_claims(**spec):
    obj = copy.deepcopy(STS)
    obj["spec"].update(serviceName="gpu", selector={"matchLabels": {"app": "c"}},
                       volumeClaimTemplates=[copy.deepcopy(CLAIM)])
    obj["spec"].update(spec)
    return obj


def live_with_claim_defaults(obj):
    """As the server stores it: each claim template gains apiVersion, kind, status, volumeMode."""
    live = live_of(obj)
    live["spec"]["podManagementPolicy"] = obj["spec"].get("podManagementPolicy", "OrderedReady")
    for template in live["spec"].get("volumeClaimTemplates") or []:
        template.update(apiVersion="v1", kind="PersistentVolumeClaim", status={"phase": "Pending"})
        template["metadata"]["creationTimestamp"] = None
        template["spec"]["volumeMode"] = "Filesystem"
    return live


def test_immutable_statefulset_fields_are_compared_without_server_defaults():
    live = live_with_claim_defaults(sts_with_claims())
    assert ka.immutable_changes(sts_with_claims(), live) == []
    # mutable fields are not immutable changes
    assert ka.immutable_changes(sts_with_claims(replicas=9), live) == []
    bigger = sts_with_claims()
    bigger["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "20Gi"
    assert ka.immutable_changes(bigger, live) == ["spec.volumeClaimTemplates"]
    # a field we stop rendering would be removed by the apply: a change too
    no_class = sts_with_claims()
    del no_class["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"]
    assert ka.immutable_changes(no_class, live) == ["spec.volumeClaimTemplates"]
    assert ka.immutable_changes(sts_with_claims(volumeClaimTemplates=[]), live) == ["spec.volumeClaimTemplates"]
    moved = sts_with_claims(serviceName="other", podManagementPolicy="Parallel")
    assert ka.immutable_changes(moved, live) == ["spec.serviceName", "spec.podManagementPolicy"]
    # podManagementPolicy defaults to OrderedReady: leaving it out of a Parallel StatefulSet changes it
    parallel = live_with_claim_defaults(sts_with_claims(podManagementPolicy="Parallel"))
    assert ka.immutable_changes(sts_with_claims(), parallel) == ["spec.podManagementPolicy"]
    assert ka.immutable_changes(sts_with_claims(selector={"matchLabels": {"app": "d"}}), live) == ["spec.selector"]


def test_plan_refuses_a_recreate_unless_allowed():
    live = ka.index([live_with_claim_defaults(sts_with_claims())])
    moved = sts_with_claims(serviceName="other")
    with pytest.raises(ka.PlanError) as refused:
        ka.plan([moved], live)
    assert "StatefulSet slurm/gpu: spec.serviceName" in str(refused.value)
    assert "recreate_statefulsets=true" in str(refused.value)
    [change] = ka.plan([moved], live, recreate_statefulsets=True)
    assert change.action == ka.RECREATE and change.writes
    assert change.result() == {"kind": "StatefulSet", "namespace": "slurm", "name": "gpu", "action": "recreated",
                               "note": change.note, "fields": ["spec.serviceName"]}
    diff = change.diff()
    assert "recreated" in diff["before_header"]
    assert "serviceName: gpu" in diff["before"] and "serviceName: other" in diff["after"]
