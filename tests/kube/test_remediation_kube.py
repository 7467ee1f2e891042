"""playbooks/remediate.yml against the API emulator (the Kubernetes side) and a real local Slurm cluster (the nodes,
with slurm_transport=local): the reconcile and a pod replacement, every API request recorded and compared with the
Role the cluster renders for the remediation CronJob."""
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import yaml

from kube_module import SMALL, module, spec_docs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEALTH_CHECK = os.path.join(ROOT, "plugins", "module_utils", "node", "health_check.py")
_spec = importlib.util.spec_from_file_location("slurm_fixtures", os.path.join(ROOT, "tests", "slurm", "conftest.py"))
_slurm_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_slurm_fixtures)
local_cluster = _slurm_fixtures.local_cluster
CR = "slurm.soperator.dev/v1alpha1"
NS = "slurm"
# Kinds an admin's apply creates and the in-cluster run must be able to recreate (everything but RBAC, the CRs and
# the remediation ServiceAccount).
RECREATED = ("ConfigMap", "Secret", "Service", "StatefulSet", "Job", "CronJob", "PodDisruptionBudget")


def playbook(*args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", "remediate.yml")] + list(args),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    tasks = {}
    for play in json.loads(proc.stdout)["plays"]:
        for task in play["tasks"]:
            tasks[task["task"]["name"]] = task["hosts"].get("localhost", {})
    return tasks


def pod(name, node_name, uid_hint):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"test": uid_hint}},
            "spec": {"nodeName": node_name, "containers": [{"name": "slurmd", "image": "worker:test"}]}}


def make_ready(emulator, name):
    emulator.set_status("v1", "Pod", name, NS, {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]})


def granted(role):
    out = set()
    for rule in role["rules"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                out.add((resource, verb))
    return out


def used(requests):
    out = set()
    for r in requests:
        # a kind the server does not serve (the prometheus-operator's, no CRD here) is still a request the
        # authorizer judges before the 404: it counts
        if r.verb in ("discovery", "health"):
            continue
        verb = r.verb or {"GET": "list"}.get(r.method, r.method.lower())     # an unserved kind: only lists here
        resource = r.path.split("/")[-1] if r.name is None else r.path.split("/")[-2]
        if r.subresource:
            resource = r.path.split("/")[-3] + "/" + r.subresource
        out.add((resource, verb))
    return out


def test_remediate_playbook_on_kubernetes(emulator, kubeconfig, local_cluster, tmp_path):
    docs = spec_docs(SMALL)
    docs[0]["spec"]["remediation"] = {"cordonKubernetesNode": True}
    cluster = local_cluster(yaml.safe_dump_all(docs))
    # the program as the worker image installs it (here: run with this Python)
    program = tmp_path / "health-check"
    program.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, HEALTH_CHECK))
    os.chmod(str(program), 0o755)
    slurm_conf = cluster.env()["SLURM_CONF"]
    # The admin deploys the cluster (CRDs, RBAC and all).
    module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True, wait_timeout=30,
           kubeconfig=str(kubeconfig), slurm_transport="local", slurm_conf=slurm_conf)
    role = emulator.get("rbac.authorization.k8s.io/v1", "Role", "small-remediation", NS)
    cron = emulator.get("batch/v1", "CronJob", "small-remediation", NS)
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"] == "small-remediation"
    assert emulator.get("v1", "ServiceAccount", "small-remediation", NS) is not None
    assert emulator.get("rbac.authorization.k8s.io/v1", "RoleBinding", "small-remediation", NS) is not None
    remediation_sa_uid = emulator.get("v1", "ServiceAccount", "small-remediation", NS)["metadata"]["uid"]
    # Everything but the CRs and RBAC is gone (a first in-cluster reconcile recreates it all): the run then uses
    # every verb it may need to apply.
    for kind_version, kind in (("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("apps/v1", "StatefulSet"),
                               ("batch/v1", "Job"), ("batch/v1", "CronJob"), ("policy/v1", "PodDisruptionBudget")):
        for obj in emulator.list(kind_version, kind, NS):
            if (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "soperator.slurm":
                emulator.delete_object(kind_version, kind, obj["metadata"]["name"], NS)
    for kind_version, kind in (("v1", "PersistentVolumeClaim"), ("v1", "ServiceAccount")):
        for obj in emulator.list(kind_version, kind, NS):
            if (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "soperator.slurm" and \
                    obj["metadata"]["name"] != "small-remediation":
                emulator.delete_object(kind_version, kind, obj["metadata"]["name"], NS)
    # `kubectl edit` of both CRs: the next run applies what they say
    for kind, name, edit in (("SlurmCluster", "small", lambda spec: spec["slurmConfig"].update(SlurmdTimeout=150)),
                             ("NodeSet", "cpu", lambda spec: spec.update(features=["cpu", "edited"]))):
        obj = emulator.get(CR, kind, name, NS)
        edit(obj["spec"])
        emulator.put_object(obj, manager="kubectl-edit")
    for host in ("n1", "n2", "n3"):
        emulator.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": host}})
    # cpu-0 runs on Kubernetes node n1 and was drained by a health check of ours; cpu-1 by an admin.
    emulator.put_object(pod("cpu-0", "n1", "old"))
    make_ready(emulator, "cpu-0")
    emulator.put_object(pod("cpu-1", "n2", "old"))
    make_ready(emulator, "cpu-1")
    cluster.run(["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=soperator: health:gpu_count 7 of 8"])
    cluster.run(["scontrol", "update", "NodeName=cpu-1", "State=DRAIN", "Reason=hw: bad dimm"])
    old_uid = emulator.get("v1", "Pod", "cpu-0", NS)["metadata"]["uid"]

    # The StatefulSet controller and kubelet, for the test: when the pod is deleted, a new one starts (Ready) and
    # its slurmd registers again.
    stop = threading.Event()

    def recreate():
        while not stop.is_set():
            if any(r.method == "DELETE" and r.path.endswith("/pods/cpu-0") for r in list(emulator.requests)):
                if emulator.get("v1", "Pod", "cpu-0", NS) is None:
                    emulator.put_object(pod("cpu-0", "n3", "new"))
                    make_ready(emulator, "cpu-0")
                    cluster.restart_node("cpu-0")
                    return
            time.sleep(0.2)
    thread = threading.Thread(target=recreate, daemon=True)
    thread.start()
    emulator.reset_counts()
    try:
        tasks = playbook("-e", "cluster=small", "-e", "slurm_namespace=%s" % NS, "-e", "kubeconfig=%s" % kubeconfig,
                         "-e", "slurm_transport=local", "-e", "slurm_conf=%s" % slurm_conf,
                         "-e", "health_check_program=%s" % program, "-e", "register_timeout=60")
    finally:
        stop.set()
        thread.join(10)
    requests = list(emulator.requests)

    done = tasks["soperator.slurm.remediation : Replace, re-check and resume the nodes we drained"]
    nodes = dict((n["name"], n) for n in done["nodes"])
    assert nodes["cpu-0"]["steps"] == ["replaced", "rechecked", "resumed"], nodes["cpu-0"]
    assert nodes["cpu-0"]["replacement"]["cordoned"] == "n1"
    assert nodes["cpu-1"]["action"] == "skipped-foreign"
    assert "DRAIN" not in dict((n["name"], n) for n in cluster.sinfo_nodes())["cpu-0"]["state_flags"]
    # only our drained node's pod was deleted; the Kubernetes node it ran on was cordoned
    deletes = [r.path for r in requests if r.method == "DELETE" and "/pods/" in r.path]
    assert deletes == ["/api/v1/namespaces/%s/pods/cpu-0" % NS]
    assert emulator.get("v1", "Pod", "cpu-0", NS)["metadata"]["uid"] != old_uid
    assert [r.path for r in requests if "/nodes/" in r.path] == ["/api/v1/nodes/n1"]
    # Events on the SlurmCluster
    events = emulator.list("v1", "Event", NS)
    assert sorted(e["reason"] for e in events) == ["NodeReplaced", "NodeResumed"]
    for event in events:
        assert event["involvedObject"]["kind"] == "SlurmCluster" and event["involvedObject"]["name"] == "small"
        assert event["reportingComponent"] == "soperator.slurm"
    # the reconcile recreated what was missing, and touched no RBAC, CRD or namespace
    reconciled = tasks["soperator.slurm.remediation : Reconcile the cluster on Kubernetes"]
    created = set(o["kind"] for o in reconciled["objects"] if o["action"] == "created")
    assert set(RECREATED) <= created, created
    assert not [r for r in requests if r.kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
                                                  "Namespace", "CustomResourceDefinition")]

    # the remediation ServiceAccount is left alone (neither applied nor pruned)
    assert emulator.get("v1", "ServiceAccount", "small-remediation", NS)["metadata"]["uid"] == remediation_sa_uid

    # every request the run made is granted by the Role (the cordon by the ClusterRole rendered for it), and the Role
    # grants nothing the run does not use - but the prunes a reconcile may do (delete) and the exec of the
    # kubernetes transport (this run execs nothing: slurm_transport=local)
    cluster_role = emulator.get("rbac.authorization.k8s.io/v1", "ClusterRole",
                                "soperator-slurm-%s-small-remediation" % NS)
    allowed = granted(role) | granted(cluster_role)
    made = used(requests)
    assert made - allowed == set()
    unused = granted(role) - made
    assert set(v for r, v in unused if r != "pods/exec") <= {"delete"}, " ".join("%s:%s" % u for u in sorted(unused))
    prune_only = set(r for r, v in unused if v == "delete")
    assert prune_only <= {"nodesets", "configmaps", "secrets", "services", "serviceaccounts", "statefulsets", "jobs",
                          "cronjobs", "poddisruptionbudgets"}
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    assert ("nodes", "patch") in made
    assert emulator.get("v1", "Node", "n1")["spec"]["unschedulable"] is True
    assert not (emulator.get("v1", "Node", "n2").get("spec") or {}).get("unschedulable")

    # What the pass did, for the exporter: the remediation record, the key of a ConfigMap the cluster renders; the
    # key is the remediation's own (its field manager), so the admin's next apply leaves it and changes nothing.
    def record():
        data = emulator.get("v1", "ConfigMap", "small-remediation-status", NS).get("data") or {}
        return json.loads(data["remediation.json"])
    assert record()["actions"]["replace"] == {"success": 1, "failure": 0}
    assert record()["runs"] == {"success": 1, "failure": 0} and record()["lastRun"]["success"] is True
    assert record()["lastRun"]["nodes"] == {"resumed": 1, "skipped-foreign": 1}
    again = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=False,
                   kubeconfig=str(kubeconfig), slurm_transport="local", slurm_conf=slurm_conf)
    assert [o["action"] for o in again["objects"] if o["name"] == "small-remediation-status"] == ["unchanged"]
    assert record()["runs"] == {"success": 1, "failure": 0}
