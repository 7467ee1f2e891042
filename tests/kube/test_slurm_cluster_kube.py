"""slurm_cluster with target=kubernetes against the API emulator over real HTTP: the module runs through
`ansible localhost -m` (a real Ansible run, the real kubernetes client), the emulator counts its requests."""
import copy
import json
import os
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU = os.path.join(ROOT, "examples", "gpu-accounting.yml")
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
CR = "slurm.soperator.dev/v1alpha1"
# Every kind the backend owns: a no-op run may read each once (plus the namespace and the CRDs), and write nothing.
MANAGED_KINDS = 2 + 13


def module(module_name, check=False, diff=False, expect_failed=False, **args):
    """Run soperator.slurm.<module_name> through `ansible localhost -m`; return its result."""
    argv = ["ansible", "localhost", "-m", "soperator.slurm.%s" % module_name, "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("no result from %s:\n%s\n%s" % (module_name, proc.stdout[-3000:], proc.stderr[-3000:]))
    assert bool(result.get("failed")) == expect_failed, json.dumps(result, indent=1)[:6000]
    return result


def spec_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def actions(result):
    return [(o["kind"], o["name"], o["action"]) for o in result["objects"]]


def changed_objects(result):
    return sorted((o["kind"], o["name"], o["action"]) for o in result["objects"] if o["action"] != "unchanged")


@pytest.fixture
def apply(kubeconfig):
    def run(definition=None, src=GPU, **kw):
        args = dict(state="present", target="kubernetes", kubeconfig=str(kubeconfig), wait=True, wait_timeout=30,
                    api_timeout=5)
        if definition is not None:
            args["definition"] = definition
        else:
            args["src"] = src
        args.update(kw)
        return module("slurm_cluster", **args)
    return run


def test_first_run_creates_everything_second_run_writes_nothing(emulator, apply):
    first = apply()
    assert first["changed"]
    kinds = set(o["kind"] for o in first["objects"])
    assert {"CustomResourceDefinition", "SlurmCluster", "NodeSet", "Secret", "ConfigMap", "StatefulSet",
            "Service", "Job", "CronJob"} <= kinds
    assert set(o["action"] for o in first["objects"]) == {"created"}
    namespace = spec_docs(GPU)[0]["metadata"]["namespace"]
    sts = emulator.get("apps/v1", "StatefulSet", "gpu", namespace)
    assert sts is not None and sts["spec"]["replicas"] >= 1
    cluster = emulator.get(CR, "SlurmCluster", spec_docs(GPU)[0]["metadata"]["name"], namespace)
    assert cluster["status"]["phase"] == "Ready", cluster["status"]
    conditions = {c["type"] for c in cluster["status"]["conditions"]}
    assert conditions >= {"ControllerReady", "LoginReady", "WorkersReady", "JailPopulated"}
    assert first["waited"] and first["status"]["phase"] == "Ready"

    emulator.reset_counts()
    second = apply()
    assert not second["changed"], changed_objects(second)
    assert set(o["action"] for o in second["objects"]) == {"unchanged"}
    counts = emulator.counts()
    assert counts["writes"] == 0 and counts["dry_run_writes"] == 0, emulator.requests
    # one list per managed kind, the namespace, the CRDs - and the wait's reads of the workloads
    assert counts["reads"] <= MANAGED_KINDS + 2 + 2, [(r.method, r.path) for r in emulator.requests]
    assert not second["status_updated"]


def test_a_spec_change_touches_only_its_objects_and_check_mode_predicts_it(emulator, apply, kubeconfig):
    base = spec_docs(SMALL)
    apply(definition=base)
    before = dict(((o["kind"], o["metadata"]["name"]), o["metadata"]["resourceVersion"])
                  for o in emulator.list("apps/v1", "StatefulSet", "slurm") + emulator.list("v1", "ConfigMap", "slurm"))
    edited = copy.deepcopy(base)
    edited[0]["spec"]["login"]["replicas"] = 2
    edited[0]["spec"]["slurmConfig"]["SlurmdTimeout"] = 300
    emulator.reset_counts()
    planned = module("slurm_cluster", check=True, diff=True, state="present", target="kubernetes",
                     definition=edited, kubeconfig=str(kubeconfig), reconfigure=False)
    assert emulator.counts()["writes"] == 0
    assert planned["changed"]
    expected = [("ConfigMap", "small-slurm-configs", "updated"), ("SlurmCluster", "small", "updated"),
                ("StatefulSet", "small-login", "updated")]
    assert changed_objects(planned) == expected
    slurm_conf_diff = [d for d in planned["diff"] if "small-slurm-configs" in d["before_header"]]
    assert "SlurmdTimeout=120" in slurm_conf_diff[0]["before"] and "SlurmdTimeout=300" in slurm_conf_diff[0]["after"]
    done = apply(definition=edited, reconfigure=False)
    assert changed_objects(done) == expected
    objects = emulator.list("apps/v1", "StatefulSet", "slurm") + emulator.list("v1", "ConfigMap", "slurm")
    after = dict(((o["kind"], o["metadata"]["name"]), o["metadata"]["resourceVersion"]) for o in objects)
    moved = sorted(k for k in after if after[k] != before.get(k))
    # the login StatefulSet's status moves too (the emulator's controller); the workers and controller do not
    assert ("StatefulSet", "cpu") not in moved and ("StatefulSet", "small-controller") not in moved
    assert ("ConfigMap", "small-slurm-configs") in moved and ("StatefulSet", "small-login") in moved
    assert emulator.get("apps/v1", "StatefulSet", "small-login", "slurm")["spec"]["replicas"] == 2


def test_check_mode_on_an_empty_cluster(emulator, kubeconfig, apply):
    emulator.reset_counts()
    planned = module("slurm_cluster", check=True, diff=True, state="present", target="kubernetes", src=SMALL,
                     kubeconfig=str(kubeconfig))
    assert planned["changed"] and emulator.counts()["writes"] == 0
    assert emulator.get("v1", "Namespace", "slurm") is None
    assert set(o["action"] for o in planned["objects"]) == {"created"}
    done = apply(src=SMALL)
    assert actions(done) == actions(planned)
    secrets = [yaml.safe_load(d["after"]) for d in planned["diff"] if "kind: Secret" in d["after"]]
    assert len(secrets) == 2
    for secret in secrets:
        assert set(secret["data"].values()) == {"<hidden>"}


def test_secrets_are_generated_once_and_survive_reruns(emulator, apply):
    apply(src=SMALL)
    first = emulator.get("v1", "Secret", "small-munge", "slurm")["data"]
    edited = spec_docs(SMALL)
    edited[1]["spec"]["replicas"] = 2
    edited[0]["spec"]["login"]["replicas"] = 3
    apply(definition=edited)
    assert emulator.get("v1", "Secret", "small-munge", "slurm")["data"] == first


def test_volumes_are_kept_unless_purged(emulator, apply):
    apply(src=SMALL)
    assert emulator.get("v1", "PersistentVolumeClaim", "small-jail", "slurm") is not None
    existing = spec_docs(SMALL)
    existing[0]["spec"]["jail"]["volume"] = {"existingClaim": "shared-jail"}
    kept = apply(definition=existing, wait=False)
    assert ("PersistentVolumeClaim", "small-jail", "kept") in actions(kept)
    assert emulator.get("v1", "PersistentVolumeClaim", "small-jail", "slurm") is not None
    purged = apply(definition=existing, wait=False, purge_volumes=True)
    assert ("PersistentVolumeClaim", "small-jail", "pruned") in actions(purged)
    assert emulator.get("v1", "PersistentVolumeClaim", "small-jail", "slurm") is None


def test_api_errors_are_retried_a_bounded_number_of_times(emulator, apply):
    emulator.fail_next(status=500, method="PATCH", path_contains="/statefulsets/", count=2)
    emulator.fail_next(status=409, method="PATCH", path_contains="/configmaps/", count=1, reason="Conflict",
                       message="the object has been modified")
    ok = apply(src=SMALL, api_retries=3)
    assert ok["changed"]
    assert emulator.get("apps/v1", "StatefulSet", "cpu", "slurm") is not None

    edited = spec_docs(SMALL)
    edited[0]["spec"]["login"]["replicas"] = 2
    # exactly the attempts the module may make: 1 + api_retries
    emulator.fail_next(status=503, method="PATCH", path_contains="/statefulsets/small-login", count=3)
    failed = apply(definition=edited, api_retries=2, expect_failed=True)
    assert "StatefulSet slurm/small-login" in failed["msg"] and "503" in failed["msg"], failed["msg"]
    assert "gave up after 3 attempts" in failed["msg"]
    converged = apply(definition=edited)
    assert ("StatefulSet", "small-login", "updated") in actions(converged)
    assert not apply(definition=edited)["changed"]


def test_a_slow_api_server_times_out_and_is_retried(emulator, apply):
    apply(src=SMALL)
    edited = spec_docs(SMALL)
    edited[0]["spec"]["login"]["replicas"] = 2
    emulator.delay_next(3, method="PATCH", path_contains="/statefulsets/small-login", count=1)
    done = apply(definition=edited, api_timeout=1)
    assert ("StatefulSet", "small-login", "updated") in actions(done)


def test_bad_spec_names_the_field_and_sends_nothing(emulator, apply):
    bad = spec_docs(SMALL)
    bad[1]["spec"]["replicas"] = -1
    emulator.reset_counts()
    failed = apply(definition=bad, expect_failed=True)
    assert "NodeSet/cpu spec.replicas" in failed["msg"]
    assert emulator.counts()["reads"] == 0 and emulator.counts()["writes"] == 0


def test_absent_deletes_what_we_own_but_keeps_volumes_and_crds(emulator, apply, kubeconfig):
    apply(src=SMALL)
    emulator.put_object({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "not-ours", "namespace": "slurm"}, "data": {}})
    gone = module("slurm_cluster", state="absent", target="kubernetes", src=SMALL, kubeconfig=str(kubeconfig))
    assert gone["changed"]
    assert emulator.list("apps/v1", "StatefulSet", "slurm") == []
    assert emulator.get("v1", "ConfigMap", "not-ours", "slurm") is not None
    assert emulator.get("v1", "PersistentVolumeClaim", "small-jail", "slurm") is not None
    assert emulator.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                        "slurmclusters.slurm.soperator.dev") is not None
