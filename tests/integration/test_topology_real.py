"""spec.topology.nodeLabels on the real API server and the host's real slurmctld (Slurm 22.05, a local cluster the
module reaches with slurm_transport=local).

Kubernetes side: four kwok nodes of this test's own, labelled into two leaf switches (leaf-1: a1, a2; leaf-2: b1,
b2) under one spine and tainted so only this test's workers land there; the real scheduler spreads the three worker
pods (one per node: a required anti-affinity) over them. Slurm side: the local cluster of the same spec, its nodes
named like the pods. The kubelet's part - a ConfigMap mounted in the controller pod - is `Mount` below: it copies the
ConfigMap's topology files beside the local slurm.conf, as the kubelet refreshes a mounted ConfigMap, late; the
module waits until they are there before it runs `scontrol reconfigure` (kube/reconfigure.py).

Shown: the rendered tree matches the pods' nodes, `scontrol show topology` agrees, a `--switches=1` job of two nodes
lands within one leaf switch; moving a worker (its node cordoned, the pod deleted: the StatefulSet's new pod lands on
the other leaf) changes Slurm's view on the next run with a reconfigure and no slurmctld restart (22.05 has no
dynamic topology change); a run with nothing moved writes nothing and reconfigures nothing; each run reads the nodes
with one list; a node that loses its leaf label is left out of the tree and the run succeeds; the remediation pass
(playbooks/remediate.yml with its ServiceAccount's token) puts it back once the label is back. Then the same pass
replaces a worker our health check drained, and its new pod lands under the other leaf: the pass puts it there
(ConfigMap, reconfigure) before it resumes it - slurmctld's log has the reconfigure before the resume, and a
`--switches=1` job right after the pass runs on the new pair - and the next reconcile changes nothing.
"""
import os
import re
import sys
import threading
import uuid

import yaml

import ansible_run
from slurm_kube import BOUND, until
from slurm_specs import SMALL_CLAIMS as CLAIMS
from slurm_specs import actions, admin_user, module
from pod_slurmd import PodSlurmd
from test_remediation_real import HEALTH_CHECK, RECONCILE, REMEDIATE, sa_kubeconfig

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api, local_cluster

SPINE, LEAF = "topology.soperator.dev/spine", "topology.soperator.dev/leaf"
POOL = "soperator-it/topology"          # this test's nodes: label and taint
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
TOPOLOGY_FILES = ("topology.conf", "topology.yaml")


class Mount:
    """The kubelet's refresh of the configs ConfigMap in the controller pod, for the local slurmctld: every `poll`
    seconds the ConfigMap's topology files are copied beside its slurm.conf (replaced whole, as the kubelet swaps
    the volume), and removed there when the ConfigMap has none."""

    def __init__(self, api, namespace, name, conf_dir, poll=0.2):
        self.api, self.namespace, self.name, self.conf_dir, self.poll = api, namespace, name, conf_dir, poll
        self.copies = 0
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self):
        while not self._stop.is_set():
            try:
                self._once()
            except Exception as e:  # pylint: disable=broad-except  # tried again; the module's wait reports a stall
                self.error = e
            self._stop.wait(self.poll)

    def _once(self):
        try:
            data = self.api.core.read_namespaced_config_map(self.name, self.namespace).data or {}
        except self.api.client.exceptions.ApiException as e:
            if e.status == 404:
                return
            raise
        for key in TOPOLOGY_FILES:
            path = os.path.join(self.conf_dir, key)
            have = open(path).read() if os.path.exists(path) else None
            if data.get(key) == have:
                continue
            if key not in data:
                os.unlink(path)
            else:
                with open(path + ".new", "w") as f:
                    f.write(data[key])
                os.replace(path + ".new", path)
            self.copies += 1


def _node(name, namespace, leaf, unschedulable=False):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name, POOL: namespace,
                                    SPINE: "spine-a", LEAF: leaf}},
            "spec": {"taints": [{"key": POOL, "value": namespace, "effect": "NoSchedule"}],
                     "unschedulable": unschedulable},
            "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                       "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def _docs(namespaced):
    docs = namespaced.docs()
    ns = namespaced.name
    docs[0]["spec"]["topology"] = {"nodeLabels": {"tiers": [SPINE, LEAF], "nodeSets": ["cpu"]}}
    # slurmd runs the health check when it starts (what the remediation's hold is about) and then every interval:
    # at the default 120 s, a slurmd's periodic check resumed the node the test had just drained "health:" before
    # the remediation pass listed it (a CI run); an hour never comes within the test
    docs[0]["spec"].setdefault("healthChecks", {}).setdefault("passive", {})["interval"] = 3600
    workers = docs[1]["spec"]
    workers.update(replicas=3, maxReplicas=3, nodeSelector={POOL: ns},
                   tolerations=[{"key": POOL, "operator": "Equal", "value": ns, "effect": "NoSchedule"}],
                   affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                       "labelSelector": {"matchLabels": {"slurm.soperator.dev/nodeset": "cpu",
                                                         "app.kubernetes.io/instance": "small"}},
                       "topologyKey": "kubernetes.io/hostname"}]}})
    return docs


def _slurm_topology(cluster):
    """{leaf switch (Level 0): [nodes]} and {switch: [child switches]} of `scontrol show topology`."""
    leaves, parents = {}, {}
    for line in cluster.run(["scontrol", "show", "topology"]).stdout.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "SwitchName" not in fields:
            continue
        if fields.get("Level") == "0":
            leaves[fields["SwitchName"]] = _hostnames(cluster, fields["Nodes"])
        if fields.get("Switches") not in (None, "(null)"):
            parents[fields["SwitchName"]] = sorted(fields["Switches"].split(","))
    return leaves, parents


def _hostnames(cluster, hostlist):
    return sorted(cluster.run(["scontrol", "show", "hostnames", hostlist]).stdout.split())


def _job_nodes(cluster, job):
    out = cluster.run(["scontrol", "show", "job", "-o", job]).stdout
    state = re.search(r"JobState=(\S+)", out).group(1)
    if state != "RUNNING":
        return None, state
    return _hostnames(cluster, re.search(r" NodeList=(\S+)", out).group(1)), state


def _two_node_job(cluster):
    """The nodes a 2-node `--switches=1` job runs on (it is cancelled then)."""
    job = cluster.run(["sbatch", "--parsable", "-N2", "--switches=1", "-o", "/dev/null", "--wrap",
                       "sleep 300"]).stdout.strip()
    try:
        return until("job %s to run" % job, lambda: _job_nodes(cluster, job)[0], timeout=60)
    finally:
        cluster.run(["scancel", job], check=False)
        until("job %s to end" % job, lambda: _job_nodes(cluster, job)[1] not in ("RUNNING", "PENDING"), timeout=60)


def _boot_time(cluster):
    return re.search(r"BOOT_TIME\s*=\s*(.+)", cluster.run(["scontrol", "show", "config"]).stdout).group(1).strip()


def _tree_by_leaf(result):
    return dict((u["name"], sorted(u["nodes"])) for u in result["topology"]["units"] if "nodes" in u)


def _node_reads(audit, mark, user):
    return [(r.verb, r.resource) for r in audit.requests(mark, user=user) if r.resource == "nodes" and r.read]


def test_topology_follows_the_pods(namespaced, api, volumes, audit, local_cluster, real_cluster, request, tmp_path):
    ns = namespaced.name
    suffix = uuid.uuid4().hex[:6]
    hosts = dict((name, "topo-%s-%s" % (suffix, name)) for name in ("a1", "a2", "b1", "b2"))
    leaf_of = {hosts["a1"]: "leaf-1", hosts["a2"]: "leaf-1", hosts["b1"]: "leaf-2", hosts["b2"]: "leaf-2"}

    def remove_nodes():
        for host in hosts.values():
            real_cluster.kubectl("delete", "node", host, "--wait=true", check=False)
    request.addfinalizer(remove_nodes)
    for host, leaf in leaf_of.items():     # b2 cordoned: the three pods take a1, a2, b1
        api.core.create_node(_node(host, ns, leaf, unschedulable=host == hosts["b2"]))
    until("this test's kwok nodes Ready", lambda: all(
        any(c.type == "Ready" and c.status == "True" for c in (api.core.read_node(h).status.conditions or []))
        for h in hosts.values()))

    docs = namespaced.applied(_docs(namespaced))
    volumes(ns, CLAIMS)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    slurm_conf = cluster.env()["SLURM_CONF"]
    slurm = dict(kubeconfig=namespaced.kubeconfig, slurm_transport="local", slurm_conf=slurm_conf)
    admin = admin_user(namespaced.kubeconfig)
    # No worker placed yet: TopologyPlugin topology/tree with a tree of no switch; slurmctld runs.
    assert "TopologyPlugin=topology/tree" in open(slurm_conf).read()

    with Mount(api, ns, "small-slurm-configs", os.path.dirname(slurm_conf)) as mount:
        first = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True,
                       wait_timeout=BOUND, **slurm)
        # the pods did not exist when the run read them: every worker is out of the tree, said why
        placed_first = dict((u["node"], u["reason"]) for u in first["topology"]["unplaced"])
        assert set(placed_first) <= {"cpu-0", "cpu-1", "cpu-2"}, first["topology"]

        def bound():
            pods = api.pods(ns, "slurm.soperator.dev/nodeset=cpu")
            where = dict((name, p.spec.node_name) for name, p in pods.items())
            return where if len(where) == 3 and all(where.values()) else None
        where = until("the three workers bound to nodes", bound)
        assert set(where.values()) == {hosts["a1"], hosts["a2"], hosts["b1"]}, where

        # The run that sees the pods: the tree of their nodes, in the ConfigMap and in slurmctld (reconfigured
        # once the "kubelet" copied the file), and one list of the nodes for it.
        boot = _boot_time(cluster)
        mark = audit.mark()
        placed = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True,
                        wait_timeout=BOUND, **slurm)
        assert _node_reads(audit, mark, admin) == [("list", "nodes")]
        expected = {}
        for pod, host in where.items():
            expected.setdefault(leaf_of[host], []).append(pod)
        expected = dict((leaf, sorted(pods)) for leaf, pods in expected.items())
        assert _tree_by_leaf(placed) == expected, placed["topology"]
        assert placed["topology"]["unplaced"] == []
        assert ("ConfigMap", "small-slurm-configs", "updated") in actions(placed)
        assert any(a.startswith("ran scontrol reconfigure") for a in placed["actions"]), placed["actions"]
        config = api.core.read_namespaced_config_map("small-slurm-configs", ns).data
        assert "SwitchName=leaf-1 Nodes=" in config["topology.conf"]
        assert "switch: leaf-1" in config["topology.yaml"]         # the images' Slurm (26.05) reads this one
        leaves, parents = _slurm_topology(cluster)
        assert leaves == expected and parents == {"spine-a": ["leaf-1", "leaf-2"]}, (leaves, parents)
        pair = expected["leaf-1"]
        assert _two_node_job(cluster) == pair

        # Nothing moved: nothing written, no reconfigure.
        mark = audit.mark()
        again = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True,
                       wait_timeout=BOUND, **slurm)
        assert again["changed"] is False and again["actions"] == [], (again["actions"], actions(again))
        assert not [r for r in audit.requests(mark, user=admin) if r.write and not r.dry_run]
        assert _tree_by_leaf(again) == expected

        # Move a worker of leaf-1 to b2 (leaf-2): the one that leaves leaf-2 a pair other than cpu-[0-1], which a
        # scheduler without the tree would pick first.
        alone = expected["leaf-2"][0]
        moved = [p for p in pair if sorted([alone, p]) != ["cpu-0", "cpu-1"]][0]
        real_cluster.kubectl("cordon", where[moved])
        real_cluster.kubectl("uncordon", hosts["b2"])
        old_uid = api.pods(ns)[moved].metadata.uid
        api.core.delete_namespaced_pod(moved, ns)

        def moved_to_b2():
            new = api.pods(ns).get(moved)
            return new is not None and new.metadata.uid != old_uid and new.spec.node_name == hosts["b2"]
        until("%s on %s" % (moved, hosts["b2"]), moved_to_b2)
        planned = module("slurm_cluster", check=True, diff=True, state="present", target="kubernetes",
                         definition=docs, **slurm)
        assert ("ConfigMap", "small-slurm-configs", "updated") in actions(planned)
        [config_diff] = [d for d in planned["diff"] if "small-slurm-configs" in d["before_header"]]
        after = {"leaf-1": sorted(p for p in pair if p != moved), "leaf-2": sorted([alone, moved])}
        leaf_2 = cluster.run(["scontrol", "show", "hostlist", ",".join(after["leaf-2"])]).stdout.strip()
        assert "SwitchName=leaf-2 Nodes=%s\n" % leaf_2 in config_diff["after"], config_diff["after"]
        assert "SwitchName=leaf-2 Nodes=%s\n" % leaf_2 not in config_diff["before"]
        assert any(a.startswith("would run scontrol reconfigure") for a in planned["actions"]), planned["actions"]
        assert _slurm_topology(cluster)[0] == expected      # check mode changed nothing

        moved_run = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True,
                           wait_timeout=BOUND, **slurm)
        assert _tree_by_leaf(moved_run) == after, moved_run["topology"]
        assert any(a.startswith("ran scontrol reconfigure") for a in moved_run["actions"])
        assert _slurm_topology(cluster)[0] == after
        assert _boot_time(cluster) == boot, "slurmctld was restarted"
        assert _two_node_job(cluster) == after["leaf-2"]

        # A node loses its leaf label: its worker is left out of the tree, said why; the run succeeds.
        [lone] = after["leaf-1"]
        real_cluster.kubectl("label", "node", where[lone], LEAF + "-")
        bad = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True,
                     wait_timeout=BOUND, **slurm)
        assert bad["topology"]["unplaced"] == [
            {"node": lone, "reason": "Kubernetes node %s has no label %s" % (where[lone], LEAF)}]
        assert _tree_by_leaf(bad) == {"leaf-2": after["leaf-2"]}
        leaves, parents = _slurm_topology(cluster)
        assert leaves == {"leaf-2": after["leaf-2"]} and lone not in str(leaves)
        assert "# %s: left out" % lone in open(os.path.join(os.path.dirname(slurm_conf), "topology.conf")).read()

        # The remediation CronJob's pass, with its own token (its ClusterRole lists nodes): its reconcile puts the
        # worker back once its node has the label again.
        real_cluster.kubectl("label", "node", where[lone], "%s=leaf-1" % LEAF)
        kubeconfig = sa_kubeconfig(real_cluster, ns, tmp_path / "remediation.kubeconfig")
        run = ansible_run.playbook(
            "remediate.yml", "-e", "cluster=small", "-e", "slurm_namespace=%s" % ns, "-e", "kubeconfig=%s" % kubeconfig,
            "-e", "slurm_transport=local", "-e", "slurm_conf=%s" % slurm_conf, "-e", "replace_drained_nodes=false",
            "-e", "register_timeout=%d" % BOUND, expect_rc=None)
        tasks = run.tasks()
        assert run.rc == 0, [(name, t.get("msg")) for name, t in tasks.items() if t.get("failed")] or run.output()
        assert _tree_by_leaf(tasks[RECONCILE]) == after and tasks[RECONCILE]["topology"]["unplaced"] == []
        assert any(a.startswith("ran scontrol reconfigure") for a in tasks[RECONCILE]["actions"])
        assert _slurm_topology(cluster)[0] == after
        assert mount.copies >= 4

        # The remediation replaces a worker of leaf-2 that our health check drained, and its new pod lands on the
        # free node of leaf-1: the pass puts it under leaf-1 (ConfigMap, reconfigure) BEFORE it resumes it, so the
        # first job after the pass already sees it there - no site.yml run in between.
        healed = [p for p in after["leaf-2"] if sorted([lone, p]) != ["cpu-0", "cpu-1"]][0]
        final = {"leaf-1": sorted([lone, healed]), "leaf-2": [p for p in after["leaf-2"] if p != healed]}
        real_cluster.kubectl("uncordon", where[moved])           # free since `moved` left it
        real_cluster.kubectl("cordon", api.pods(ns)[healed].spec.node_name)
        cluster.run(["scontrol", "update", "NodeName=%s" % healed, "State=DRAIN",
                     "Reason=soperator: health:test moved"])
        program = tmp_path / "health-check"
        program.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, HEALTH_CHECK))
        os.chmod(str(program), 0o755)
        log = cluster.log_files(["slurmctld"])["slurmctld"]
        log_start = os.path.getsize(log)
        with PodSlurmd(api, ns, cluster, [healed]) as watch:
            run = ansible_run.playbook(
                "remediate.yml", "-e", "cluster=small", "-e", "slurm_namespace=%s" % ns, "-e",
                "kubeconfig=%s" % kubeconfig, "-e", "slurm_transport=local", "-e", "slurm_conf=%s" % slurm_conf,
                "-e", "health_check_program=%s" % program, "-e", "replace_drained_nodes=true",
                "-e", "register_timeout=%d" % BOUND, expect_rc=None)
            tasks = run.tasks()
            assert run.rc == 0, [(name, t.get("msg")) for name, t in tasks.items() if t.get("failed")] or run.output()
        assert watch.restarted == [healed], (watch.failures, tasks[REMEDIATE].get("nodes"),
                                             tasks[REMEDIATE].get("errors"))
        assert api.pods(ns)[healed].spec.node_name == where[moved]
        assert _tree_by_leaf(tasks[RECONCILE]) == after      # the reconcile ran before the replacement
        [done] = [n for n in tasks[REMEDIATE]["nodes"] if n["name"] == healed]
        assert done["steps"] == ["replaced", "placed", "rechecked", "resumed"], done
        assert done["topology"]["switch"] == "leaf-1" and done["topology"]["changed"] is True, done["topology"]
        # slurmctld's own account: held drained (its new slurmd's health check would resume a health: drain), then
        # the reconfigure that read the new tree, and only then the resume
        assert done["held"] == "soperator: replacing (health:test moved)"
        with open(log) as f:
            f.seek(log_start)
            lines = f.read().splitlines()
        held = [i for i, line in enumerate(lines) if "update_node: node %s reason set to: %s" % (healed, done["held"])
                in line]
        reconfigured = [i for i, line in enumerate(lines) if "_slurm_rpc_reconfigure_controller: completed" in line]
        resumed = [i for i, line in enumerate(lines) if "update_node: node %s state set to IDLE" % healed in line]
        assert held and reconfigured and resumed and held[0] < reconfigured[-1] < resumed[0], lines
        assert _slurm_topology(cluster)[0] == final
        assert _boot_time(cluster) == boot, "slurmctld was restarted"
        assert _two_node_job(cluster) == final["leaf-1"]
        # the next reconcile finds the tree and the configs slurmctld runs on as they are: nothing to do
        mark = audit.mark()
        settled = module("slurm_cluster", state="present", target="kubernetes", definition=docs, wait=True,
                         wait_timeout=BOUND, **slurm)
        assert settled["changed"] is False and settled["actions"] == [], (settled["actions"], actions(settled))
        assert _tree_by_leaf(settled) == final
