"""playbooks/remediate.yml against the real API server as the remediation CronJob runs it - with the remediation
ServiceAccount's own token (TokenRequest), so the real RBAC authorizer judges every request by the Role and
ClusterRole the cluster renders - and real Slurm daemons (a local cluster, slurm_transport=local).

One pass reconciles the cluster from its CRs (edited with kubectl since the admin's apply; most of its objects
deleted: the pass recreates them with the verbs the Role grants, server-side apply being a patch) and replaces the
node our health check drained: it cordons the Kubernetes node the worker pod ran on, deletes the pod; the real
StatefulSet controller makes a new one, the scheduler places it on another node, kwok makes it Ready, and the test -
as the kubelet starting the container would - restarts that node's slurmd; the pass waits for it to register,
re-checks it and resumes it. The audit log is the server's account of each request: compared with the Role, the
grants it uses and the ones only other runs need (prunes; exec, which this transport does not use).

The same playbook in real pods, with the real CronJob controller and the runner image (and slurm_transport
kubernetes: exec into the pods), is tests/realnode's.
"""
import json
import os
import sys

import yaml

import ansible_run
from pod_slurmd import PodSlurmd
from slurm_kube import BOUND, until
from slurm_specs import ROOT, actions, admin_user, module
from slurm_specs import SMALL_CLAIMS as CLAIMS

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api, local_cluster

HEALTH_CHECK = os.path.join(ROOT, "plugins", "module_utils", "node", "health_check.py")
REMEDIATE = "soperator.slurm.remediation : Replace, re-check and resume the nodes we drained"
RECONCILE = "soperator.slurm.remediation : Reconcile the cluster on Kubernetes"
RBAC = "rbac.authorization.k8s.io"
# What an admin's apply made and the pass must be able to make again: everything but RBAC, the CRs, the remediation
# ServiceAccount and the volume claims (a claim the pods mount cannot be deleted under them: kubectl edits it).
DELETED = (("", "configmaps"), ("", "secrets"), ("", "services"), ("", "serviceaccounts"), ("apps", "statefulsets"),
           ("batch", "jobs"), ("batch", "cronjobs"), ("policy", "poddisruptionbudgets"))
RECREATED = {"ConfigMap", "Secret", "Service", "ServiceAccount", "StatefulSet", "Job", "CronJob",
             "PodDisruptionBudget"}
# Grants of the Role a pass like this one does not use, and what uses them: the prunes of a reconcile after a
# NodeSet (or a part: the exporter...) left the spec; the exec of slurm_transport=kubernetes (its websocket: a get
# before Kubernetes 1.31, a create since); the list of a slurmAware NodeSet's pods in a rolling upgrade (this pass
# lists the pods it replaces); the get of a pod that list lacks (an ephemeral worker's: made by no StatefulSet); the
# create of a volume claim deleted by hand (the ones here are mounted: they cannot go, the pass edits one instead).
OTHER_PASSES = set([(group, resource, "delete") for group, resource in DELETED] + [
    ("slurm.soperator.dev", "nodesets", "delete"), ("", "pods/exec", "create"), ("", "pods/exec", "get"),
    ("", "pods", "list"), ("", "pods", "get"), ("", "persistentvolumeclaims", "create")])


def granted(role):
    """{(group, resource, verb)} a Role's rules allow."""
    return set((group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"])


def used(requests):
    """{(group, resource, verb)} the resource requests needed (discovery and other non-resource URLs left out). A
    server-side apply that made the object (201) was authorized as a create as well as the patch."""
    out = set()
    for r in requests:
        if r.resource:
            resource = r.resource + ("/" + r.subresource if r.subresource else "")
            out.add((r.group, resource, r.verb))
            if r.verb == "patch" and r.code == 201:
                out.add((r.group, resource, "create"))
    return out


def sa_kubeconfig(real_cluster, namespace, path):
    """The admin's kubeconfig with the remediation ServiceAccount's own token instead of the admin's certificate."""
    token = real_cluster.kubectl("create", "token", "small-remediation", "-n", namespace,
                                 "--duration=1h").stdout.strip()
    with open(real_cluster.kubeconfig) as f:
        config = yaml.safe_load(f)
    config["users"] = [{"name": "remediation", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "remediation"
    path.write_text(json.dumps(config))
    return str(path)


def _delete_what_the_pass_recreates(real_cluster, namespace):
    """Every object of ours of the DELETED kinds but the remediation ServiceAccount; the StatefulSets with their
    pods orphaned (kept: running jobs survive a reconcile that recreates their StatefulSet, which adopts them)."""
    selector = "app.kubernetes.io/managed-by=soperator.slurm,app.kubernetes.io/instance=small"
    for group, resource in DELETED:
        kind = resource + ("." + group if group else "")
        names = real_cluster.kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "name").stdout.split()
        names = [n for n in names if n != "serviceaccount/small-remediation"]
        assert names or resource == "serviceaccounts", (kind, names)
        if names:
            real_cluster.kubectl("delete", "-n", namespace, "--cascade=orphan" if resource == "statefulsets" else
                                 "--cascade=background", "--wait=true", *names)


def test_remediate_playbook_with_its_own_token(namespaced, api, volumes, audit, local_cluster, real_cluster,
                                               tmp_path, request):
    ns = namespaced.name
    docs = namespaced.applied(namespaced.docs())
    docs[0]["spec"]["remediation"] = {"cordonKubernetesNode": True}
    # No periodic passive check: slurmd would run it every 120 s, find cpu-0 healthy and resume the drain this test
    # sets before the pass sees it (seen in CI). Only the pass brings the node back here.
    docs[0]["spec"]["healthChecks"] = {"passive": {"interval": 0}}
    volumes(ns, CLAIMS)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    slurm_conf = cluster.env()["SLURM_CONF"]
    # the health-check program as the worker image installs it (here: run with this Python)
    program = tmp_path / "health-check"
    program.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, HEALTH_CHECK))
    os.chmod(str(program), 0o755)

    # The admin deploys the cluster: CRDs, RBAC and all, waited for.
    module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True, wait_timeout=BOUND,
           kubeconfig=namespaced.kubeconfig, slurm_transport="local", slurm_conf=slurm_conf)
    admin = admin_user(namespaced.kubeconfig)
    role = api.client.RbacAuthorizationV1Api(api.api).read_namespaced_role("small-remediation", ns).to_dict()
    cluster_role = api.client.RbacAuthorizationV1Api(api.api).read_cluster_role(
        "soperator-slurm-%s-small-remediation" % ns).to_dict()
    for rules in (role, cluster_role):       # the client's snake_case: as the API names the fields
        rules["rules"] = [{"apiGroups": r["api_groups"], "resources": r["resources"], "verbs": r["verbs"]}
                          for r in rules["rules"]]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    sa_uid = api.core.read_namespaced_service_account("small-remediation", ns).metadata.uid

    def workers():
        pods = api.pods(ns)
        return pods if {"cpu-0", "cpu-1"} <= set(pods) else None
    pods = until("cpu-0 and cpu-1", workers)
    host = pods["cpu-0"].spec.node_name
    old_uid = pods["cpu-0"].metadata.uid
    nodes = [n.metadata.name for n in api.core.list_node().items]
    cordoned_before = set(n.metadata.name for n in api.core.list_node().items if n.spec.unschedulable)
    assert host not in cordoned_before

    def uncordon():     # the session's nodes, for the tests after this one
        for name in set(nodes) - cordoned_before:
            real_cluster.kubectl("uncordon", name, check=False)
    request.addfinalizer(uncordon)

    _delete_what_the_pass_recreates(real_cluster, ns)
    # someone else's field manager changes a label we own on the jail's claim: the pass takes it back
    real_cluster.kubectl("label", "pvc", "small-jail", "-n", ns, "app.kubernetes.io/component=edited", "--overwrite")
    # `kubectl edit` of both CRs: the pass applies what they say
    real_cluster.kubectl("patch", "slurmcluster", "small", "-n", ns, "--type=merge",
                         "-p", json.dumps({"spec": {"slurmConfig": {"SlurmdTimeout": 150}}}))
    real_cluster.kubectl("patch", "nodeset", "cpu", "-n", ns, "--type=merge",
                         "-p", json.dumps({"spec": {"features": ["cpu", "edited"]}}))
    # cpu-0 was drained by a health check of ours; cpu-1 by an admin
    cluster.run(["scontrol", "update", "NodeName=cpu-0", "State=DRAIN", "Reason=soperator: health:gpu_count 7 of 8"])
    cluster.run(["scontrol", "update", "NodeName=cpu-1", "State=DRAIN", "Reason=hw: bad dimm"])

    # The kubelet's part, for the test: once a new cpu-0 pod is Ready, its slurmd starts (and registers again).
    sa_user = "system:serviceaccount:%s:small-remediation" % ns
    kubeconfig = sa_kubeconfig(real_cluster, ns, tmp_path / "remediation.kubeconfig")
    mark = audit.mark()
    with PodSlurmd(api, ns, cluster, ["cpu-0"]) as watch:
        run = ansible_run.playbook(
            "remediate.yml", "-e", "cluster=small", "-e", "slurm_namespace=%s" % ns, "-e", "kubeconfig=%s" % kubeconfig,
            "-e", "slurm_transport=local", "-e", "slurm_conf=%s" % slurm_conf,
            "-e", "health_check_program=%s" % program, "-e", "register_timeout=%d" % BOUND, expect_rc=None)
        requests = audit.requests(mark, user=sa_user)
        tasks = run.tasks()
        assert run.rc == 0, [(name, t.get("msg")) for name, t in tasks.items() if t.get("failed")] or run.output()

    # cpu-0 was replaced, re-checked and resumed; the admin's drain of cpu-1 is left alone
    done = dict((n["name"], n) for n in tasks[REMEDIATE]["nodes"])
    assert done["cpu-0"]["steps"] == ["replaced", "rechecked", "resumed"], done["cpu-0"]
    assert watch.restarted == ["cpu-0"], ("no new cpu-0 pod became Ready", watch.failures)
    assert done["cpu-0"]["replacement"]["cordoned"] == host
    assert done["cpu-1"]["action"] == "skipped-foreign"
    states = dict((n["name"], n) for n in cluster.sinfo_nodes())
    assert "DRAIN" not in states["cpu-0"]["state_flags"] and "DRAIN" in states["cpu-1"]["state_flags"]
    # only our drained node's pod was deleted; the StatefulSet made a new one, away from the cordoned node
    assert [(r.verb, r.name) for r in requests if r.resource == "pods" and r.write] == [("delete", "cpu-0")]
    new = api.pods(ns)["cpu-0"]
    assert new.metadata.uid != old_uid and new.spec.node_name != host
    # the Kubernetes node it ran on, and no other, was cordoned
    assert [(r.verb, r.name) for r in requests if r.resource == "nodes"] == [("patch", host)]
    assert [n.metadata.name for n in api.core.list_node().items if n.spec.unschedulable] == sorted(
        cordoned_before | {host})
    # Events on the SlurmCluster
    events = [e for e in api.core.list_namespaced_event(ns).items if e.reporting_component == "soperator.slurm"]
    assert sorted(e.reason for e in events) == ["NodeReplaced", "NodeResumed"], events
    assert all((e.involved_object.kind, e.involved_object.name) == ("SlurmCluster", "small") for e in events)

    # The reconcile recreated what was missing, took back the claim's label, applied the edited CRs - and read or
    # wrote no RBAC object, CRD or namespace.
    reconciled = tasks[RECONCILE]
    created = set(kind for kind, name, action in actions(reconciled) if action == "created")
    assert RECREATED <= created, created
    assert ("PersistentVolumeClaim", "small-jail", "updated") in actions(reconciled)
    assert api.pvc("small-jail", ns).metadata.labels["app.kubernetes.io/component"] == "jail"
    assert "SlurmdTimeout=150" in api.core.read_namespaced_config_map("small-slurm-configs", ns).data["slurm.conf"]
    assert not [r for r in requests if r.group in (RBAC, "apiextensions.k8s.io") or r.resource == "namespaces"]
    assert api.core.read_namespaced_service_account("small-remediation", ns).metadata.uid == sa_uid

    # RBAC: nothing was refused; every request is granted by the Role (the cordon by the ClusterRole), and the Role
    # grants nothing this pass did not use but what other passes need (OTHER_PASSES).
    assert [r for r in requests if r.code == 403] == []
    made = used(requests)
    assert made - granted(role) - granted(cluster_role) == set()
    assert granted(role) - made <= OTHER_PASSES, sorted(granted(role) - made - OTHER_PASSES)
    assert {("", "nodes", "patch"), ("", "pods", "delete"), ("", "events", "create")} <= made
    assert set(("", kind, "create") for kind in ("configmaps", "secrets", "services", "serviceaccounts")) <= made

    # What the pass did, for the exporter: the remediation record, a key of a ConfigMap the cluster renders, written
    # under the remediation's own field manager - so the admin's next apply leaves it and changes nothing there.
    def record():
        data = api.core.read_namespaced_config_map("small-remediation-status", ns).data or {}
        return json.loads(data["remediation.json"])
    assert record()["actions"]["replace"] == {"success": 1, "failure": 0}
    assert record()["runs"] == {"success": 1, "failure": 0} and record()["lastRun"]["success"] is True
    assert record()["lastRun"]["nodes"] == {"resumed": 1, "skipped-foreign": 1}
    mark = audit.mark()
    again = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=False,
                   kubeconfig=namespaced.kubeconfig, slurm_transport="local", slurm_conf=slurm_conf)
    assert [a for k, n, a in actions(again) if n == "small-remediation-status"] == ["unchanged"]
    assert not [r for r in audit.requests(mark, user=admin) if r.resource == "configmaps" and r.write
                and r.name == "small-remediation-status"]
    assert record()["runs"] == {"success": 1, "failure": 0}
