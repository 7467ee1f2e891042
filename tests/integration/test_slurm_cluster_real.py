"""slurm_cluster (target=kubernetes) against the real API server, through `ansible localhost -m`: what a run writes
and reads is counted from the server's audit log (k8s_audit.py); API errors and a slow server come from the fault
proxy in front of it (fault_proxy.py, the `faults` fixture). Each test has a namespace of its own, removed at the end.

Asserted elsewhere, not here: site.yml of examples/small-cpu.yml - first run, a re-run that writes nothing, check
mode, --diff, another field manager's edits, teardown keeping CRDs and claims (test_site_real.py); the CRDs'
validation and defaulting (test_crds_real.py); plan, first run and re-run of the module on any cluster, without an
audit log (test_real_cluster.py).
"""
import copy
import itertools
import uuid

import pytest
import yaml

from k8s_audit import reads_per_resource
from slurm_specs import GPU, SMALL_CLAIMS, actions, admin_user, api, changed, module

# What a failed injected request looks like to the module: the Status message the proxy sends.
INJECTED = "injected by the test's fault proxy"


def present(docs, kubeconfig, check=False, diff=False, expect_failed=False, **kw):
    args = dict(state="present", target="kubernetes", definition=docs, kubeconfig=kubeconfig, wait=False,
                api_timeout=10)
    args.update(kw)
    return module("slurm_cluster", check=check, diff=diff, expect_failed=expect_failed, **args)


def namespace_of(docs):
    return docs[0]["metadata"]["namespace"]


def read(kubeconfig, call, *args, **kw):
    """A read through the kubernetes package's typed API (call: e.g. "CoreV1Api.read_namespace"); None on 404."""
    from kubernetes import client
    cls, method = call.split(".")
    with api(kubeconfig) as a:
        try:
            return getattr(getattr(client, cls)(a), method)(*args, **kw)
        except client.exceptions.ApiException as e:
            if e.status == 404:
                return None
            raise


def writes(requests, dry_run=False):
    """(resource, name, subresource) of each successful write among the requests, dry runs or real ones."""
    return sorted((r.resource, r.name, r.subresource or "") for r in requests
                  if r.write and r.dry_run == dry_run and r.code in (200, 201))


def claims_of(docs):
    """[(claim, storage class)] of every volume claim the spec's cluster makes: its PersistentVolumeClaims and, for
    each replica, its StatefulSets' claim templates (as render_cluster renders them)."""
    from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
    out = []
    for obj in render_cluster(build_model(load_documents(yaml.safe_dump_all(docs)))).manifests:
        if obj["kind"] == "PersistentVolumeClaim":
            out.append((obj["metadata"]["name"], obj["spec"].get("storageClassName")))
        elif obj["kind"] == "StatefulSet":
            for template in obj["spec"].get("volumeClaimTemplates") or []:
                out += [("%s-%s-%d" % (template["metadata"]["name"], obj["metadata"]["name"], i),
                         template["spec"].get("storageClassName")) for i in range(obj["spec"]["replicas"])]
    return out


@pytest.fixture
def gpu_nodes(kubeconfig):
    """Four fake nodes for examples/gpu-accounting.yml's gpu NodeSet, run by kwok like the suite's own (its
    annotation): the NodeSet's nodeSelector label, 8 nvidia.com/gpu each in the node's capacity (as a device plugin
    advertises them) and the GPU taint the NodeSet tolerates, which keeps every other pod off them. Deleted after."""
    from kubernetes import client
    names = ["soperator-it-gpu-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(4)]
    capacity = {"cpu": "256", "memory": "4Ti", "pods": "110", "nvidia.com/gpu": "8"}
    with api(kubeconfig) as a:
        core = client.CoreV1Api(a)
        try:
            for name in names:
                core.create_node({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                 "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
                    "status": {"capacity": capacity, "allocatable": capacity}})
            yield names
        finally:
            for name in names:
                try:
                    core.delete_node(name)
                except client.exceptions.ApiException as e:
                    if e.status != 404:
                        raise


def test_the_gpu_example_is_created_ready_and_a_rerun_writes_nothing(
        namespaced_spec, kubeconfig, audit, volumes, gpu_nodes):
    """examples/gpu-accounting.yml (accounting in the cluster, GPU and CPU NodeSets, health checks): the scheduler
    places its GPU workers on the GPU nodes, kwok runs every pod, the cluster becomes Ready."""
    docs = namespaced_spec(GPU)
    namespace = namespace_of(docs)
    by_class = sorted(claims_of(docs), key=lambda c: c[1] or "")
    for storage_class, claims in itertools.groupby(by_class, key=lambda c: c[1]):
        volumes(namespace, [name for name, _class in claims], storage_class=storage_class, capacity="4Ti")
    user = admin_user(kubeconfig)

    first = present(docs, kubeconfig, wait=True, wait_timeout=180)
    assert first["changed"]
    assert {"SlurmCluster", "NodeSet", "Secret", "ConfigMap", "StatefulSet", "Service", "Job", "CronJob",
            "PersistentVolumeClaim", "Role", "ClusterRole"} <= set(o["kind"] for o in first["objects"])
    # The CRDs are cluster-wide: an earlier test may have installed them.
    assert set(o["action"] for o in first["objects"] if o["kind"] != "CustomResourceDefinition") == {"created"}
    assert first["status"]["phase"] == "Ready", first["status"]
    conditions = dict((c["type"], c["status"]) for c in first["status"]["conditions"])
    ready = ("ControllerReady", "LoginReady", "WorkersReady", "AccountingReady", "JailPopulated")
    assert all(conditions[t] == "True" for t in ready), conditions
    live = read(kubeconfig, "CustomObjectsApi.get_namespaced_custom_object", "slurm.soperator.dev", "v1alpha1",
                namespace, "slurmclusters", "gpu-demo")
    assert live["status"]["phase"] == "Ready"
    gpu_pods = read(kubeconfig, "CoreV1Api.list_namespaced_pod", namespace,
                    label_selector="slurm.soperator.dev/nodeset=gpu").items
    assert len(gpu_pods) == 4 and set(p.spec.node_name for p in gpu_pods) <= set(gpu_nodes), \
        [(p.metadata.name, p.spec.node_name) for p in gpu_pods]

    mark = audit.mark()
    second = present(docs, kubeconfig, wait=True, wait_timeout=180)
    assert not second["changed"], changed(second)
    assert set(o["action"] for o in second["objects"]) == {"unchanged"}
    assert not second["status_updated"]
    ours = audit.requests(mark, user=user)
    assert [r for r in ours if r.write] == [], ours
    reads = reads_per_resource(ours)
    assert reads and max(reads.values()) == 1, reads


def test_a_spec_change_touches_only_its_objects_and_check_mode_predicts_it(namespaced_spec, kubeconfig, audit,
                                                                           volumes):
    docs = namespaced_spec()
    namespace = namespace_of(docs)
    volumes(namespace, SMALL_CLAIMS)
    user = admin_user(kubeconfig)
    present(docs, kubeconfig, wait=True, wait_timeout=120)
    generations = dict((s.metadata.name, s.metadata.generation) for s in read(
        kubeconfig, "AppsV1Api.list_namespaced_stateful_set", namespace).items)
    edited = copy.deepcopy(docs)
    edited[0]["spec"]["login"]["replicas"] = 2
    edited[0]["spec"]["slurmConfig"]["SlurmdTimeout"] = 300
    expected = [("ConfigMap", "small-slurm-configs", "updated"), ("SlurmCluster", "small", "updated"),
                ("StatefulSet", "small-login", "updated")]

    # reconfigure=false: `scontrol reconfigure` would exec into the controller pod, which kwok does not run
    mark = audit.mark()
    planned = present(edited, kubeconfig, check=True, diff=True, reconfigure=False)
    assert planned["changed"] and changed(planned) == expected
    ours = audit.requests(mark, user=user)
    assert writes(ours) == [] and writes(ours, dry_run=True) == [
        ("configmaps", "small-slurm-configs", ""), ("slurmclusters", "small", ""),
        ("statefulsets", "small-login", "")], ours
    [slurm_conf] = [d for d in planned["diff"] if "small-slurm-configs" in d["before_header"]]
    assert "SlurmdTimeout=120" in slurm_conf["before"] and "SlurmdTimeout=300" in slurm_conf["after"]

    mark = audit.mark()
    done = present(edited, kubeconfig, reconfigure=False, wait=True, wait_timeout=120)
    assert changed(done) == expected
    # the same three objects written, and the status of the SlurmCluster (its login replicas) - nothing else
    assert writes(audit.requests(mark, user=user)) == [
        ("configmaps", "small-slurm-configs", ""), ("slurmclusters", "small", ""),
        ("slurmclusters", "small", "status"), ("statefulsets", "small-login", "")]
    after = dict((s.metadata.name, s) for s in read(kubeconfig, "AppsV1Api.list_namespaced_stateful_set",
                                                    namespace).items)
    assert after["small-login"].spec.replicas == 2 and after["small-login"].metadata.generation > generations[
        "small-login"]
    assert after["cpu"].metadata.generation == generations["cpu"]
    assert after["small-controller"].metadata.generation == generations["small-controller"]


def test_check_mode_on_an_empty_namespace_writes_nothing_and_hides_secrets(namespaced_spec, kubeconfig, audit):
    docs = namespaced_spec()
    namespace = namespace_of(docs)
    user = admin_user(kubeconfig)
    mark = audit.mark()
    planned = present(docs, kubeconfig, check=True, diff=True)
    assert planned["changed"]
    assert writes(audit.requests(mark, user=user)) == []
    assert read(kubeconfig, "CoreV1Api.read_namespace", namespace) is None
    assert set(o["action"] for o in planned["objects"] if o["kind"] != "CustomResourceDefinition") == {"created"}
    secrets = [yaml.safe_load(d["after"]) for d in planned["diff"] if "kind: Secret" in d["after"]]
    assert sorted(s["metadata"]["name"] for s in secrets) == ["small-munge", "small-ssh-host-keys"]
    for secret in secrets:
        assert secret["data"] and set(secret["data"].values()) == {"<hidden>"}
    done = present(docs, kubeconfig)
    assert actions(done) == actions(planned)


def test_secrets_are_generated_once_and_never_rewritten(namespaced_spec, kubeconfig, audit):
    docs = namespaced_spec()
    docs[0]["spec"]["rest"] = {"enabled": True}     # its JWT key Secret too, and slurmrestd's objects
    namespace = namespace_of(docs)
    user = admin_user(kubeconfig)
    present(docs, kubeconfig)
    names = ("small-munge", "small-jwt-key")
    before = [read(kubeconfig, "CoreV1Api.read_namespaced_secret", name, namespace) for name in names]
    rest = read(kubeconfig, "AppsV1Api.read_namespaced_deployment", "small-rest", namespace)
    assert rest.spec.replicas == 1 and rest.spec.template.spec.containers[0].security_context.run_as_user == 65534
    assert read(kubeconfig, "CoreV1Api.read_namespaced_service", "small-rest", namespace).spec.ports[0].port == 6820
    edited = copy.deepcopy(docs)
    edited[1]["spec"]["replicas"] = 3
    edited[0]["spec"]["login"]["replicas"] = 3
    edited[0]["spec"]["rest"]["replicas"] = 2
    mark = audit.mark()
    assert present(edited, kubeconfig)["changed"]
    assert [w for w in writes(audit.requests(mark, user=user)) if w[0] == "secrets"] == []
    after = [read(kubeconfig, "CoreV1Api.read_namespaced_secret", name, namespace) for name in names]
    for old, new in zip(before, after):
        assert new.data == old.data and new.metadata.resource_version == old.metadata.resource_version
    assert read(kubeconfig, "AppsV1Api.read_namespaced_deployment", "small-rest", namespace).spec.replicas == 2


def test_volumes_are_kept_unless_purged_and_a_claim_in_use_is_deleted_once(namespaced_spec, kubeconfig, volumes):
    docs = namespaced_spec()
    namespace = namespace_of(docs)
    # No workers: moving the jail changes their pod template, and rolling them onto it needs Slurm in the pods
    docs[1]["spec"]["replicas"] = 0
    volumes(namespace, SMALL_CLAIMS)
    present(docs, kubeconfig, wait=True, wait_timeout=120)
    existing = copy.deepcopy(docs)
    existing[0]["spec"]["jail"]["volume"] = {"existingClaim": "shared-jail"}
    kept = present(existing, kubeconfig)
    assert ("PersistentVolumeClaim", "small-jail", "kept") in actions(kept)
    claim = read(kubeconfig, "CoreV1Api.read_namespaced_persistent_volume_claim", "small-jail", namespace)
    assert claim is not None and claim.metadata.deletion_timestamp is None

    purged = present(existing, kubeconfig, purge_volumes=True)
    assert ("PersistentVolumeClaim", "small-jail", "pruned") in actions(purged)
    # The populate Job runs once: it stays, and its completed pod still names the claim, so kubernetes.io/pvc-
    # protection holds the claim. A re-run leaves its deletion to it: unchanged, nothing sent (it used to delete it
    # again, and report a change, on every run for as long as the pod was there).
    claim = read(kubeconfig, "CoreV1Api.read_namespaced_persistent_volume_claim", "small-jail", namespace)
    assert claim.metadata.deletion_timestamp is not None, claim.metadata
    again = present(existing, kubeconfig, purge_volumes=True)
    assert not again["changed"], changed(again)
    [held] = [o for o in again["objects"] if (o["kind"], o["name"]) == ("PersistentVolumeClaim", "small-jail")]
    assert held["action"] == "unchanged" and held["note"] == \
        "being deleted, held by finalizers: kubernetes.io/pvc-protection", held


def test_api_errors_are_retried_a_bounded_number_of_times(namespaced_spec, kubeconfig, faults):
    docs = namespaced_spec()
    namespace = namespace_of(docs)
    faults.fail_next(500, method="PATCH", path="/statefulsets/", count=2)
    faults.fail_next(409, method="PATCH", path="/configmaps/", reason="Conflict",
                     message="the object has been modified; please apply your changes to the latest version")
    faults.fail_next(429, method="GET", path="/namespaces/%s/secrets$" % namespace)
    ok = present(docs, faults.kubeconfig, api_retries=3)
    assert ok["changed"] and set(o["action"] for o in ok["objects"] if o["kind"] == "StatefulSet") == {"created"}
    assert read(kubeconfig, "AppsV1Api.read_namespaced_stateful_set", "cpu", namespace) is not None
    # each failed request was sent again, the same request, until the server had it
    for method, path, codes in (("PATCH", "/statefulsets/", [500, 500, 201]), ("PATCH", "/configmaps/", [409, 201]),
                                ("GET", "/secrets$", [429, 200])):
        first = faults.matching(method, path)[0].path
        assert [r.status for r in faults.matching(method, first + "$")] == codes, faults.matching(method, path)

    edited = copy.deepcopy(docs)
    edited[0]["spec"]["login"]["replicas"] = 2
    # exactly the attempts the module may make: 1 + api_retries
    faults.fail_next(503, method="PATCH", path="/statefulsets/small-login$", count=3)
    mark = faults.mark()
    failed = present(edited, faults.kubeconfig, api_retries=2, expect_failed=True)
    assert "StatefulSet %s/small-login" % namespace in failed["msg"] and "503" in failed["msg"], failed["msg"]
    assert INJECTED in failed["msg"] and "gave up after 3 attempts" in failed["msg"], failed["msg"]
    assert [r.fault for r in faults.matching("PATCH", "/statefulsets/small-login$", since=mark)] == ["fail"] * 3
    assert read(kubeconfig, "AppsV1Api.read_namespaced_stateful_set", "small-login", namespace).spec.replicas == 1

    # a re-run continues where it stopped, then there is nothing left to do
    converged = present(edited, faults.kubeconfig)
    assert ("StatefulSet", "small-login", "updated") in actions(converged)
    assert not present(edited, faults.kubeconfig)["changed"]


def test_a_slow_api_server_times_out_and_is_retried(namespaced_spec, kubeconfig, faults):
    docs = namespaced_spec()
    namespace = namespace_of(docs)
    # The server creates the namespace but answers after the client gave up: the retry meets what the first
    # attempt made (409 AlreadyExists) and goes on with it.
    faults.delay_next(3, method="POST", path="^/api/v1/namespaces$", after=True)
    first = present(docs, faults.kubeconfig, api_timeout=1)
    assert ("Namespace", namespace, "created") in actions(first)
    assert [(r.status, r.fault) for r in faults.matching("POST", "^/api/v1/namespaces$")] == [
        (201, "delay"), (409, None)]

    edited = copy.deepcopy(docs)
    edited[0]["spec"]["login"]["replicas"] = 2
    faults.delay_next(3, method="PATCH", path="/statefulsets/small-login$")
    mark = faults.mark()
    done = present(edited, faults.kubeconfig, api_timeout=1)
    assert ("StatefulSet", "small-login", "updated") in actions(done)
    assert [r.fault for r in faults.matching("PATCH", "/statefulsets/small-login$", since=mark)] == ["delay", None]
    assert read(kubeconfig, "AppsV1Api.read_namespaced_stateful_set", "small-login", namespace).spec.replicas == 2

    # Slow on every attempt: the run fails naming the object and the timeout, after 1 + api_retries attempts.
    edited[0]["spec"]["login"]["replicas"] = 3
    faults.delay_next(3, method="PATCH", path="/statefulsets/small-login$", count=2)
    mark = faults.mark()
    failed = present(edited, faults.kubeconfig, api_timeout=1, api_retries=1, expect_failed=True)
    assert "StatefulSet %s/small-login" % namespace in failed["msg"], failed["msg"]
    assert "no answer from the API server (timeout)" in failed["msg"], failed["msg"]
    assert "gave up after 2 attempts" in failed["msg"], failed["msg"]
    assert [r.fault for r in faults.matching("PATCH", "/statefulsets/small-login$", since=mark)] == ["delay"] * 2


def test_a_bad_spec_names_the_field_and_sends_nothing(namespaced_spec, faults):
    bad = namespaced_spec()
    bad[1]["spec"]["replicas"] = -1
    failed = present(bad, faults.kubeconfig, expect_failed=True)
    assert "NodeSet/cpu spec.replicas" in failed["msg"], failed["msg"]
    assert faults.requests == []


def test_absent_deletes_only_what_this_cluster_owns(namespaced_spec, kubeconfig, audit):
    from kubernetes import client
    docs = namespaced_spec()
    namespace = namespace_of(docs)
    user = admin_user(kubeconfig)
    present(docs, kubeconfig)
    labels = {"app.kubernetes.io/managed-by": "soperator.slurm", "app.kubernetes.io/instance": "other"}
    with api(kubeconfig) as a:
        core = client.CoreV1Api(a)
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "not-ours"}, "data": {}})
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "other-cluster", "labels": labels}})

    gone = module("slurm_cluster", state="absent", target="kubernetes", definition=docs, kubeconfig=kubeconfig)
    assert gone["changed"]
    assert ("PersistentVolumeClaim", "small-jail", "kept") in actions(gone)
    assert read(kubeconfig, "AppsV1Api.list_namespaced_stateful_set", namespace).items == []
    left = sorted(c.metadata.name for c in read(kubeconfig, "CoreV1Api.list_namespaced_config_map", namespace).items)
    assert "not-ours" in left and "other-cluster" in left and "small-slurm-configs" not in left, left

    mark = audit.mark()
    again = module("slurm_cluster", state="absent", target="kubernetes", definition=docs, kubeconfig=kubeconfig)
    assert not again["changed"], changed(again)
    assert [r for r in audit.requests(mark, user=user) if r.write] == []
