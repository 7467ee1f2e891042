"""The collection's CRDs (crds/) on a real API server, through the kubectl we build: accepted and structural, the
server refuses a bad NodeSet at the same field path as our own validation, and `kubectl scale` works through the
scale subresource within the CRD's rules."""
import glob
import json
import os
import re
import uuid

import pytest
import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRD_FILES = sorted(glob.glob(os.path.join(ROOT, "crds", "*.yaml")))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")


@pytest.fixture(scope="module")
def crds(real_cluster):
    for path in CRD_FILES:
        real_cluster.kubectl("apply", "--server-side", "--field-manager=soperator-it", "-f", path)
    for path in CRD_FILES:
        with open(path) as f:
            name = yaml.safe_load(f)["metadata"]["name"]
        real_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/" + name)
    return real_cluster


@pytest.fixture
def namespace(crds):
    name = "soperator-it-%s" % uuid.uuid4().hex[:8]
    crds.kubectl("create", "namespace", name)
    yield name
    crds.kubectl("delete", "namespace", name, "--wait=false")


def small_docs():
    with open(SMALL) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_crds_are_established_and_structural(crds):
    for path in CRD_FILES:
        with open(path) as f:
            name = yaml.safe_load(f)["metadata"]["name"]
        crd = json.loads(crds.kubectl("get", "crd", name, "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        # A non-structural schema is accepted but flagged with NonStructuralSchema=True.
        assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True", conditions
        assert conditions.get("NonStructuralSchema", "False") == "False", conditions
    resources = crds.kubectl("api-resources", "--api-group=slurm.soperator.dev", "-o", "name").stdout.split()
    assert sorted(resources) == ["nodesets.slurm.soperator.dev", "slurmclusters.slurm.soperator.dev"]


def our_field_paths(docs, obj="NodeSet/cpu"):
    """The field paths our validation (slurm_cluster state=rendered) names for one object's errors."""
    result = ansible_run.module("slurm_cluster", {"state": "rendered", "definition": docs, "dest": "/nonexistent"},
                                expect_failed=True)
    paths = re.findall(r"%s (spec[^:]*):" % re.escape(obj), result["msg"])
    assert paths, result["msg"]
    return set(paths)


def server_field_paths(stderr):
    """The field paths of kubectl's "is invalid" message: one cause inline, several as a "* path: ..." list."""
    paths = re.findall(r'(?:is invalid: |^\* )\.?(spec[^:]*): ', stderr, re.M)
    assert paths, stderr
    return paths


DROP = object()     # a field the case removes from the example's NodeSet


@pytest.mark.parametrize("bad", [
    {"replicas": -1}, {"replicas": 5, "maxReplicas": 4}, {"maxReplicas": -3},
    {"updateStrategy": {"type": "scheduled"}},
    {"updateStrategy": {"window": {"start": "2026-11-28T02:00:00Z", "durationMinutes": 60}}},
    {"updateStrategy": {"type": "scheduled", "window": {"start": "2026-11-28T02:00:00", "durationMinutes": 0}}},
    {"ephemeral": {"enabled": True}, "maxReplicas": DROP},
    {"ephemeral": {"enabled": True, "minReplicas": 4}, "maxReplicas": 4},
    {"ephemeral": {"enabled": True, "minReplicas": 1}, "maxReplicas": 4, "replicas": 2},
    {"ephemeral": {"enabled": True, "suspendTime": 5, "resumeTimeout": 0}, "maxReplicas": 4},
], ids=["replicas", "max-below-replicas", "max-negative", "scheduled-no-window", "window-not-scheduled",
        "window-start-and-duration", "ephemeral-no-max", "ephemeral-min-not-below-max", "ephemeral-replicas",
        "ephemeral-times"])
def test_a_bad_nodeset_is_refused_at_our_field_path(crds, namespace, bad):
    docs = small_docs()
    if "ephemeral" in bad:
        docs[1]["spec"].pop("replicas", None)     # an ephemeral NodeSet leaves it out, unless a case gives it
    docs[1]["spec"].update(bad)
    for key in [k for k, v in bad.items() if v is DROP]:
        del docs[1]["spec"][key]
    ours = our_field_paths(docs)
    nodeset = docs[1]
    nodeset["metadata"]["namespace"] = namespace
    refused = crds.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(nodeset), check=False)
    assert refused.returncode != 0, refused.stdout
    # The server may name a field twice (spec.replicas is also the scale subresource's specReplicasPath).
    assert set(server_field_paths(refused.stderr)) == ours, (ours, refused.stderr)
    assert crds.kubectl("get", "nodesets", "-n", namespace, "-o", "name").stdout == ""


# Each of the SlurmCluster CRD's CEL rules, broken: the server names the object holding the rule, as we do.
@pytest.mark.parametrize("bad", [
    {"jail": {"volume": {"size": "20Gi", "existingClaim": "mine"}}},
    {"jail": {"volume": {}}},
    {"accounting": {"enabled": True, "database": {
        "inCluster": {"storage": "1Gi"},
        "external": {"host": "db", "user": "slurm", "passwordSecret": {"name": "db"}}}}},
    {"topology": {"enabled": True, "nodeLabels": {"tiers": ["example.com/leaf"], "nodeSets": ["cpu"]}}},
    {"topology": {"nodeLabels": {"plugin": "topology/block", "tiers": ["example.com/spine", "example.com/leaf"],
                                 "nodeSets": ["cpu"]}}},
], ids=["jail-claim-and-size", "jail-neither", "database-both", "topology-labels-and-static",
        "topology-block-two-tiers"])
def test_a_bad_slurmcluster_is_refused_at_our_field_path(crds, namespace, bad):
    docs = small_docs()
    docs[0]["spec"].update(bad)
    ours = our_field_paths(docs, "SlurmCluster/small")
    cluster = docs[0]
    cluster["metadata"]["namespace"] = namespace
    refused = crds.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(cluster), check=False)
    assert refused.returncode != 0, refused.stdout
    assert set(server_field_paths(refused.stderr)) == ours, (ours, refused.stderr)
    assert crds.kubectl("get", "slurmclusters", "-n", namespace, "-o", "name").stdout == ""


def without_nones(value):
    if isinstance(value, dict):
        return {k: without_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nones(v) for v in value]
    return value


def test_the_server_defaults_a_nodeset_as_our_spec_does(crds, namespace):
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import NODESET_SPEC
    nodeset = small_docs()[1]
    nodeset["metadata"]["namespace"] = namespace
    nodeset["spec"] = {"clusterName": "small", "resources": {"cpu": "2", "memory": "1Gi"}}
    issues = []
    ours = without_nones(NODESET_SPEC.validate(nodeset["spec"], "spec", issues))
    assert issues == []
    crds.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(nodeset))
    live = json.loads(crds.kubectl("get", "nodeset", "cpu", "-n", namespace, "-o", "json").stdout)["spec"]
    assert live == ours


def test_kubectl_scale_goes_through_the_scale_subresource(crds, namespace):
    nodeset = small_docs()[1]
    nodeset["metadata"]["namespace"] = namespace
    crds.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(nodeset))
    crds.kubectl("scale", "nodeset", "cpu", "-n", namespace, "--replicas=3")
    path = "/apis/slurm.soperator.dev/v1alpha1/namespaces/%s/nodesets/cpu/scale" % namespace
    scale = json.loads(crds.kubectl("get", "--raw", path).stdout)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    live = json.loads(crds.kubectl("get", "nodeset", "cpu", "-n", namespace, "-o", "json").stdout)
    assert live["spec"]["replicas"] == 3
    # The CRD's rule holds through the subresource too: beyond maxReplicas (4) is refused, nothing changes.
    refused = crds.kubectl("scale", "nodeset", "cpu", "-n", namespace, "--replicas=9", check=False)
    assert refused.returncode != 0 and "maxReplicas must be >= replicas" in refused.stderr, refused.stderr
    live = json.loads(crds.kubectl("get", "nodeset", "cpu", "-n", namespace, "-o", "json").stdout)
    assert live["spec"]["replicas"] == 3
