"""Server-side apply in the emulator, through real HTTP: ownership per field manager, idempotence, removal of fields a
manager stops applying, conflicts and force, list topologies (associative, set, atomic), Update ownership."""
from emu_helpers import cm, cm_path, entry, failure, make_ns, sts, sts_path


def test_apply_creates_and_records_fields_v1(emulator, kube):
    make_ns(kube)
    response = kube.request("PATCH", sts_path(name="web"), sts(containers=[
        {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}], "env": [{"name": "X", "value": "1"}]}]),
        {"fieldManager": "ctl"}, "application/apply-patch+yaml")
    assert response.status_code == 201
    obj = response.data
    e = entry(obj, "ctl")
    assert (e["apiVersion"], e["fieldsType"]) == ("apps/v1", "FieldsV1") and e["time"].endswith("Z")
    assert "subresource" not in e
    assert e["fieldsV1"] == {"f:spec": {
        "f:selector": {}, "f:serviceName": {},
        "f:template": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:containers": {
            'k:{"name":"a"}': {".": {}, "f:env": {'k:{"name":"X"}': {".": {}, "f:name": {}, "f:value": {}}},
                               "f:image": {}, "f:name": {},
                               "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {
                                   ".": {}, "f:containerPort": {}}}}}}}}}
    # Defaults the server added after the merge belong to nobody.
    assert obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert len(obj["metadata"]["managedFields"]) == 1


def test_reapply_is_a_no_op(emulator, kube):
    make_ns(kube)
    body = sts(containers=[{"name": "a", "image": "a:1", "resources": {"requests": {"cpu": "1000m",
                                                                                    "memory": "1024Mi"}}}])
    first = kube.apply(sts_path(name="web"), body)
    stored = emulator.get("apps/v1", "StatefulSet", "web", "t")  # status filled by the controller since
    rv = emulator.resource_version
    again = kube.apply(sts_path(name="web"), body)
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == stored["metadata"]["managedFields"]
    assert entry(again, "test")["time"] == entry(first, "test")["time"]
    assert emulator.resource_version == rv
    # Non-canonical quantities in the applied config are not a change either.
    requests = again["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "1", "memory": "1Gi"}


def test_fields_a_manager_stops_applying_are_removed(emulator, kube):
    make_ns(kube)
    kube.apply(cm_path(name="c"), cm("c", {"a": "1", "b": "2"}, labels={"x": "1", "y": "2"}))
    obj = kube.apply(cm_path(name="c"), cm("c", {"a": "1"}, labels={"x": "1"}))
    assert obj["data"] == {"a": "1"} and obj["metadata"]["labels"] == {"x": "1"}
    assert entry(obj, "test")["fieldsV1"] == {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}
    obj = kube.apply(cm_path(name="c"), cm("c"))
    assert "labels" not in obj["metadata"] and "data" not in obj  # empty maps are not stored


def test_empty_maps_are_not_stored_but_owned(emulator, kube):
    make_ns(kube)
    obj = kube.apply(cm_path(name="c"), cm("c", {}), manager="one")
    assert "data" not in obj and entry(obj, "one")["fieldsV1"] == {"f:data": {}}
    # Applying the same empty map again is no change; another manager doing it adds a field "one" owns (as SMD
    # compares the absent live map with the applied empty one): a conflict, as on the real server.
    assert kube.apply(cm_path(name="c"), cm("c", {}), manager="one")["metadata"]["resourceVersion"] == \
        obj["metadata"]["resourceVersion"]
    e, body = failure(kube.apply, cm_path(name="c"), cm("c", {}), manager="two")
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "one": .data'


def test_fields_owned_by_another_manager_stay(emulator, kube):
    make_ns(kube)
    kube.apply(cm_path(name="c"), cm("c", {"a": "1", "shared": "s"}), manager="one")
    kube.apply(cm_path(name="c"), cm("c", {"b": "2", "shared": "s"}), manager="two")  # same value: co-owned
    kube.call("PATCH", cm_path(name="c"), {"data": {"edited": "e"}}, query={"fieldManager": "editor"},
              content_type="application/merge-patch+json")
    obj = kube.apply(cm_path(name="c"), cm("c"), manager="one")
    assert obj["data"] == {"b": "2", "shared": "s", "edited": "e"}
    obj = kube.apply(cm_path(name="c"), cm("c"), manager="two")
    assert obj["data"] == {"edited": "e"}
    assert entry(obj, "editor", "Update")["fieldsV1"] == {"f:data": {"f:edited": {}}}


def test_conflict_then_force(emulator, kube):
    make_ns(kube)
    kube.apply(sts_path(name="web"), sts(replicas=2), manager="deploy")
    e, body = failure(kube.apply, sts_path(name="web"), sts(replicas=5), manager="autoscaler")
    assert (e.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "deploy": .spec.replicas'
    assert body["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "deploy"',
                                          "field": ".spec.replicas"}]
    assert emulator.get("apps/v1", "StatefulSet", "web", "t")["spec"]["replicas"] == 2
    # The same value is no conflict: both managers own the field.
    shared = kube.apply(sts_path(name="web"), sts(replicas=2), manager="autoscaler")
    assert "f:replicas" in entry(shared, "autoscaler")["fieldsV1"]["f:spec"]
    obj = kube.apply(sts_path(name="web"), sts(replicas=5), manager="autoscaler", force=True)
    assert obj["spec"]["replicas"] == 5
    assert "f:replicas" not in entry(obj, "deploy")["fieldsV1"]["f:spec"]  # force moved the field
    # deploy no longer owns replicas: applying without it does not remove it.
    body = sts()
    assert kube.apply(sts_path(name="web"), body, manager="deploy")["spec"]["replicas"] == 5


def test_conflicts_with_several_fields_and_update_managers(emulator, kube):
    make_ns(kube)
    kube.apply(cm_path(name="c"), cm("c", {"a": "1", "b": "1"}), manager="one")
    kube.call("PATCH", cm_path(name="c"), {"data": {"b": "2"}}, query={"fieldManager": "editor"},
              content_type="application/merge-patch+json")
    # The Update took b from "one" (the real server's behaviour), so re-applying b=1 conflicts with "editor".
    e, body = failure(kube.apply, cm_path(name="c"), cm("c", {"a": "9", "b": "1"}), manager="two")
    assert body["message"] == ('Apply failed with 2 conflicts: conflicts with "editor" using v1:\n- .data.b\n'
                               'conflicts with "one":\n- .data.a')
    assert sorted(c["field"] for c in body["details"]["causes"]) == [".data.a", ".data.b"]
    e, body = failure(kube.apply, cm_path(name="c"), cm("c", {"a": "1", "b": "1"}), manager="one")
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "editor" using v1: .data.b'


def test_associative_lists_merge_by_key_across_managers(emulator, kube):
    make_ns(kube)
    a = {"name": "a", "image": "a:1"}
    b = {"name": "b", "image": "b:1"}
    kube.apply(sts_path(name="web"), sts(containers=[a]), manager="one")
    obj = kube.apply(sts_path(name="web"), {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                            "metadata": {"name": "web"},
                                            "spec": {"template": {"spec": {"containers": [b]}}}}, manager="two")
    names = [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]]
    assert names == ["a", "b"]
    assert list(entry(obj, "two")["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]) == \
        ['k:{"name":"b"}']
    # "one" changes its container: b is untouched.
    obj = kube.apply(sts_path(name="web"), sts(containers=[dict(a, image="a:2")]), manager="one")
    assert [(c["name"], c["image"]) for c in obj["spec"]["template"]["spec"]["containers"]] == \
        [("a", "a:2"), ("b", "b:1")]
    # Another manager changing "one"'s image conflicts on that item's field only.
    e, body = failure(kube.apply, sts_path(name="web"), {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:3"}]}}}}, manager="two")
    assert body["details"]["causes"][0]["field"] == '.spec.template.spec.containers[name="a"].image'
    # "one" drops its container (it must keep one: a pod needs containers), b stays.
    obj = kube.apply(sts_path(name="web"), sts(containers=[{"name": "c", "image": "c:1"}]), manager="one")
    assert [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]] == ["b", "c"]


def test_list_item_kept_for_the_fields_another_manager_owns(emulator, kube):
    make_ns(kube)

    def env(*items):
        return sts(containers=[{"name": "a", "image": "a:1", "env": list(items)}])

    kube.apply(sts_path(name="web"), env({"name": "X", "value": "1"}, {"name": "Y", "value": "1"}), manager="one")
    kube.call("PATCH", sts_path(name="web"), {"spec": {"template": {"spec": {"containers": [
        {"name": "a", "env": [{"name": "X", "value": "2"}]}]}}}}, query={"fieldManager": "editor"},
        content_type="application/strategic-merge-patch+json")
    obj = kube.apply(sts_path(name="web"), env({"name": "Y", "value": "1"}), manager="one")
    # X stays for the value the editor owns, with its key; Y is still one's.
    env_vars = obj["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env_vars == [{"name": "X", "value": "2"}, {"name": "Y", "value": "1"}]


def test_sets_merge_by_value_and_atomic_lists_replace(emulator, kube):
    make_ns(kube)
    body = cm("c")
    body["metadata"]["finalizers"] = ["example.com/a"]
    kube.apply(cm_path(name="c"), body, manager="one")
    body["metadata"]["finalizers"] = ["example.com/b"]
    obj = kube.apply(cm_path(name="c"), body, manager="two")
    assert obj["metadata"]["finalizers"] == ["example.com/a", "example.com/b"]
    assert entry(obj, "two")["fieldsV1"]["f:metadata"]["f:finalizers"] == {'v:"example.com/b"': {}}

    args = sts(containers=[{"name": "a", "image": "a:1", "args": ["--x", "--y"]}])
    kube.apply(sts_path(name="web"), args, manager="one")
    args["spec"]["template"]["spec"]["containers"][0]["args"] = ["--z"]
    obj = kube.apply(sts_path(name="web"), args, manager="one")
    assert obj["spec"]["template"]["spec"]["containers"][0]["args"] == ["--z"]
    fields = entry(obj, "one")["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"a"}']
    assert fields["f:args"] == {}  # an atomic list is one field
    other = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
             "spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["--other"]}]}}}}
    e, body = failure(kube.apply, sts_path(name="web"), other, manager="two")
    assert body["details"]["causes"][0]["field"] == '.spec.template.spec.containers[name="a"].args'


def test_update_takes_ownership_and_status_apply(emulator, kube):
    make_ns(kube)
    kube.apply(sts_path(name="web"), sts(replicas=2), manager="deploy")
    kube.call("PATCH", sts_path(name="web"), {"spec": {"replicas": 3}}, query={"fieldManager": "kubectl-edit"},
              content_type="application/merge-patch+json")
    obj = emulator.get("apps/v1", "StatefulSet", "web", "t")
    assert "f:replicas" not in entry(obj, "deploy")["fieldsV1"]["f:spec"]
    assert entry(obj, "kubectl-edit", "Update")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}

    status = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
              "spec": {"replicas": 99}, "status": {"replicas": 3, "readyReplicas": 1}}
    # The simulated controller owns the status it wrote: a different value conflicts with it.
    e, body = failure(kube.apply, sts_path(name="web", sub="status"), status, manager="prober")
    assert body["message"] == ('Apply failed with 1 conflict: conflict with "kube-controller-manager" with '
                               'subresource "status" using apps/v1: .status.readyReplicas')
    out = kube.apply(sts_path(name="web", sub="status"), status, manager="prober", force=True)
    assert out["status"]["readyReplicas"] == 1 and out["spec"]["replicas"] == 3
    e = entry(out, "prober", "Apply", "status")
    assert e["fieldsV1"] == {"f:status": {"f:readyReplicas": {}, "f:replicas": {}}}
    # Status in a main-resource apply is ignored and not owned.
    main = sts(replicas=3)
    main["status"] = {"readyReplicas": 42}
    out = kube.apply(sts_path(name="web"), main, manager="deploy", force=True)
    assert out["status"]["readyReplicas"] == 1 and "f:status" not in entry(out, "deploy")["fieldsV1"]


def test_apply_request_rules(emulator, kube):
    make_ns(kube)
    e, body = failure(kube.call, "PATCH", cm_path(name="c"), cm("c"), content_type="application/apply-patch+yaml")
    assert (e.status, body["reason"]) == (422, "Invalid")
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required '
                               'for apply patch')
    created = kube.apply(cm_path(name="c"), cm("c", {"a": "1"}))
    stale = cm("c", {"a": "2"})
    stale["metadata"]["resourceVersion"] = "1"
    e, body = failure(kube.apply, cm_path(name="c"), stale)
    assert (e.status, body["reason"]) == (409, "Conflict")
    current = cm("c", {"a": "2"})
    current["metadata"]["resourceVersion"] = emulator.get("v1", "ConfigMap", "c", "t")["metadata"]["resourceVersion"]
    assert kube.apply(cm_path(name="c"), current)["data"] == {"a": "2"}
    e, body = failure(kube.apply, cm_path(name="other"), cm("c"))
    assert e.status == 400 and "does not match the name on the URL" in body["message"]
    with_mf = cm("c")
    with_mf["metadata"]["managedFields"] = created["metadata"]["managedFields"]
    e, body = failure(kube.apply, cm_path(name="c"), with_mf)
    assert (e.status, body["message"]) == (400, "metadata.managedFields must be nil")
    e, body = failure(kube.apply, cm_path(name="c"), {"metadata": {"name": "c"}, "data": {}})
    assert e.status == 400 and "Object 'Kind' is missing" in body["message"]
    # Unknown fields and wrong types make the real server fail building the typed patch (a 500, as it answers).
    unknown = sts()
    unknown["spec"]["replicass"] = 1
    e, body = failure(kube.apply, sts_path(name="web"), unknown)
    assert e.status == 500 and body["message"] == (
        "failed to create typed patch object (t/web; apps/v1, Kind=StatefulSet): .spec.replicass: field not declared "
        "in schema")
    wrong = sts()
    wrong["spec"]["replicas"] = "2"
    e, body = failure(kube.apply, sts_path(name="web"), wrong)
    assert e.status == 500 and ".spec.replicas: expected numeric (int or float), got string" in body["message"]
    ports = sts(containers=[{"name": "a", "image": "a:1", "ports": [{"containerPort": 80}, {"containerPort": 80}]}])
    e, body = failure(kube.apply, sts_path(name="web"), ports)
    assert e.status == 500 and "duplicate entries for key" in body["message"]
    assert emulator.get("apps/v1", "StatefulSet", "web", "t") is None
    # Validation still applies after the merge.
    bad = sts()
    bad["spec"]["selector"]["matchLabels"]["app"] = "other"
    e, body = failure(kube.apply, sts_path(name="web"), bad)
    assert e.status == 422


def test_objects_created_without_tracking_get_a_before_first_apply_manager(emulator, kube):
    make_ns(kube)
    emulator.put_object(cm("c", {"old": "1"}, namespace="t"))
    assert "managedFields" not in emulator.get("v1", "ConfigMap", "c", "t")["metadata"]
    obj = kube.apply(cm_path(name="c"), cm("c", {"new": "2"}))
    assert obj["data"] == {"old": "1", "new": "2"}
    assert entry(obj, "before-first-apply", "Update")["fieldsV1"] == {"f:data": {".": {}, "f:old": {}}}
    e, body = failure(kube.apply, cm_path(name="c"), cm("c", {"old": "changed"}))
    assert 'conflict with "before-first-apply" using v1' in body["message"]


def test_defaults_owned_by_the_creator_of_an_update(emulator, kube):
    make_ns(kube)
    obj = kube.call("POST", sts_path(), sts(), query={"fieldManager": "creator"})
    fields = entry(obj, "creator", "Update")["fieldsV1"]
    assert "f:podManagementPolicy" in fields["f:spec"] and "f:replicas" in fields["f:spec"]
    assert "f:status" not in fields  # status is reset by the strategy, nobody owns it
    e, body = failure(kube.apply, sts_path(name="web"), sts(replicas=3))
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "creator" using apps/v1: .spec.replicas'
