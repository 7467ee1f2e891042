"""SlurmCluster/NodeSet validation and defaulting: every bad spec names its field; valid specs are fully defaulted."""
import copy
import glob
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import (
    CLUSTER_DOCUMENT, DEFAULT_REGISTRY, DEFAULT_TAG, DNS_LABEL, MAX_NODESET_NAME, NODESET_DOCUMENT)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.quantity import is_quantity
from repo_root import ROOT

EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.yml")))


def base_docs():
    return [
        {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster",
         "metadata": {"name": "demo", "namespace": "slurm"},
         "spec": {"jail": {"volume": {"size": "100Gi"}},
                  "partitions": [{"name": "main", "nodeSets": ["cpu", "gpu"], "default": True},
                                 {"name": "gpu", "nodeSets": ["gpu"]}]}},
        {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet",
         "metadata": {"name": "cpu", "namespace": "slurm"},
         "spec": {"clusterName": "demo", "replicas": 2, "resources": {"cpu": "8", "memory": "32Gi"}}},
        {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet",
         "metadata": {"name": "gpu", "namespace": "slurm"},
         "spec": {"clusterName": "demo", "replicas": 1, "maxReplicas": 8,
                  "resources": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8},
                  "gres": ["gpu:h100:8"], "features": ["h100"]}},
    ]


def issues_of(docs):
    with pytest.raises(SpecError) as err:
        s.build_model(docs)
    return {(i.path, i.message) for i in err.value.issues}, err.value


def paths_of(docs):
    return {p for p, dummy in issues_of(docs)[0]}


# ---- valid specs ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_examples_are_valid(path):
    with open(path) as f:
        model = s.build_model(load_documents(f.read()))
    assert model.node_sets and model.partitions
    assert sum(p.default for p in model.partitions) == 1


def test_defaults_are_filled_in():
    model = s.build_model(base_docs())
    assert model.login.replicas == 2
    assert model.login.service.type == "LoadBalancer"
    assert model.controller.port == 6817
    assert model.controller.spool_size == "10Gi"
    assert model.jail.overwrite == "never"
    assert model.accounting.enabled is False and model.accounting.in_cluster is None
    assert model.remediation.drain_reason_prefix == "soperator:"
    assert model.images.worker == "%s/worker:%s" % (DEFAULT_REGISTRY, DEFAULT_TAG)
    cpu, gpu = model.node_set("cpu"), model.node_set("gpu")
    assert (cpu.cpus, cpu.real_memory_mib, cpu.max_replicas, cpu.node_range) == (8, 32768, 2, "cpu-[0-1]")
    assert (gpu.max_replicas, gpu.node_range, gpu.gpus, str(gpu.gres[0])) == (8, "gpu-[0-7]", 8, "gpu:h100:8")
    # The validated documents are kept with defaults filled in (they become the CRs we write).
    assert model.cluster_spec["spec"]["login"]["replicas"] == 2
    assert model.node_set_specs["cpu"]["spec"]["maxUnavailable"] == 1


def test_no_partitions_means_one_default_partition_with_every_nodeset():
    docs = base_docs()
    del docs[0]["spec"]["partitions"]
    model = s.build_model(docs)
    assert [(p.name, p.node_sets, p.default) for p in model.partitions] == [("main", ("cpu", "gpu"), True)]


def test_accounting_defaults_to_in_cluster_database():
    docs = base_docs()
    docs[0]["spec"]["accounting"] = {"enabled": True}
    model = s.build_model(docs)
    assert model.accounting.in_cluster.storage == "20Gi" and model.accounting.external is None


def test_gres_gpus_fill_the_kubernetes_gpu_request():
    docs = base_docs()
    del docs[2]["spec"]["resources"]["nvidia.com/gpu"]
    assert s.build_model(docs).node_set("gpu").resources["nvidia.com/gpu"] == "8"


def test_input_is_not_mutated():
    docs = base_docs()
    before = copy.deepcopy(docs)
    s.build_model(docs)
    assert docs == before


# ---- one rule each -------------------------------------------------------------------------------------------------

def test_unknown_field_is_named():
    docs = base_docs()
    docs[0]["spec"]["login"] = {"replicas": 1, "replica": 2}
    (issues, dummy) = issues_of(docs)
    assert any(p == "SlurmCluster/demo spec.login.replica" and m.startswith("unknown field") for p, m in issues)


def test_wrong_type_is_named():
    docs = base_docs()
    docs[1]["spec"]["replicas"] = "2"
    assert ("NodeSet/cpu spec.replicas", "must be an integer, got string") in issues_of(docs)[0]


def test_boolean_is_not_an_integer():
    docs = base_docs()
    docs[1]["spec"]["replicas"] = True
    assert ("NodeSet/cpu spec.replicas", "must be an integer, got boolean") in issues_of(docs)[0]


def test_negative_replicas():
    docs = base_docs()
    docs[1]["spec"]["replicas"] = -1
    assert ("NodeSet/cpu spec.replicas", "must be >= 0, got -1") in issues_of(docs)[0]


def test_max_replicas_below_replicas():
    docs = base_docs()
    docs[2]["spec"]["maxReplicas"] = 0
    assert "NodeSet/gpu spec" in paths_of(docs)


def test_nodeset_in_no_partition_and_unknown_nodeset():
    docs = base_docs()
    docs[0]["spec"]["partitions"] = [{"name": "main", "nodeSets": ["gpu", "tpu"]}]
    paths = paths_of(docs)
    assert "NodeSet/cpu metadata.name" in paths
    assert "SlurmCluster/demo spec.partitions[0].nodeSets[1]" in paths


def test_duplicate_names():
    docs = base_docs()
    docs.append(copy.deepcopy(docs[1]))
    docs[0]["spec"]["partitions"].append({"name": "gpu", "nodeSets": ["cpu"]})
    issues, dummy = issues_of(docs)
    assert ("NodeSet/cpu metadata.name", "duplicate NodeSet name 'cpu'") in issues
    assert ("SlurmCluster/demo spec.partitions[2].name", "duplicate 'gpu' (already at index 1)") in issues


def test_unparsable_quantity():
    docs = base_docs()
    docs[1]["spec"]["resources"]["memory"] = "32 GB"
    assert 'NodeSet/cpu spec.resources.memory' in paths_of(docs)


def test_fractional_cpus_are_rejected():
    docs = base_docs()
    docs[1]["spec"]["resources"]["cpu"] = "1500m"
    assert "NodeSet/cpu spec.resources.cpu" in paths_of(docs)


def test_gpu_request_must_match_gres():
    docs = base_docs()
    docs[2]["spec"]["resources"]["nvidia.com/gpu"] = 4
    assert ('NodeSet/gpu spec.resources["nvidia.com/gpu"]') in paths_of(docs)


def test_managed_slurm_keys_are_refused():
    docs = base_docs()
    docs[0]["spec"]["slurmConfig"] = {"SlurmctldHost": "elsewhere", "MaxJobCount": 100000}
    issues, dummy = issues_of(docs)
    assert any(p == "SlurmCluster/demo spec.slurmConfig.SlurmctldHost" and "managed" in m for p, m in issues)


def test_jail_needs_exactly_one_volume_source():
    docs = base_docs()
    docs[0]["spec"]["jail"]["volume"] = {"size": "1Ti", "existingClaim": "jail"}
    assert "SlurmCluster/demo spec.jail.volume" in paths_of(docs)
    docs[0]["spec"]["jail"] = {}
    assert "SlurmCluster/demo spec.jail.volume" in paths_of(docs)


def test_two_databases_are_refused():
    docs = base_docs()
    docs[0]["spec"]["accounting"] = {"enabled": True, "database": {
        "inCluster": {}, "external": {"host": "db", "user": "slurm", "passwordSecret": {"name": "db"}}}}
    assert "SlurmCluster/demo spec.accounting.database" in paths_of(docs)


def test_bad_cidr_and_ssh_key():
    docs = base_docs()
    docs[0]["spec"]["login"] = {"service": {"sourceRanges": ["10.0.0.0/33"]}, "sshRootPublicKeys": ["hello"]}
    paths = paths_of(docs)
    assert "SlurmCluster/demo spec.login.service.sourceRanges[0]" in paths
    assert "SlurmCluster/demo spec.login.sshRootPublicKeys[0]" in paths


@pytest.mark.parametrize("name", ["all", "demo-login"])
def test_reserved_nodeset_names(name):
    docs = base_docs()
    docs[1]["metadata"]["name"] = name
    docs[0]["spec"]["partitions"][0]["nodeSets"][0] = name
    assert "NodeSet/%s metadata.name" % name in paths_of(docs)


def test_cluster_name_must_match():
    docs = base_docs()
    docs[1]["spec"]["clusterName"] = "other"
    assert "NodeSet/cpu spec.clusterName" in paths_of(docs)


def test_missing_or_second_cluster_document():
    assert ("", "the spec has no SlurmCluster document") in issues_of(base_docs()[1:])[0]
    docs = base_docs() + [copy.deepcopy(base_docs()[0])]
    assert any("exactly one SlurmCluster" in m for dummy, m in issues_of(docs)[0])


def test_wrong_kind_and_api_version():
    docs = base_docs()
    docs[1]["apiVersion"] = "slurm.nebius.ai/v1"
    docs.append({"kind": "Deployment", "metadata": {"name": "x"}})
    paths = paths_of(docs)
    assert "NodeSet/cpu apiVersion" in paths
    assert "Deployment/x kind" in paths


def test_all_errors_are_reported_at_once():
    docs = base_docs()
    docs[0]["spec"]["login"] = {"replicas": -3}
    docs[1]["spec"]["replicas"] = -1
    docs[2]["spec"]["resources"]["memory"] = "lots"
    dummy, err = issues_of(docs)
    assert len(err.issues) >= 3
    text = str(err)
    for path in ("SlurmCluster/demo spec.login.replicas", "NodeSet/cpu spec.replicas", "NodeSet/gpu spec.resources.memory"):
        assert path in text


def test_invalid_yaml():
    with pytest.raises(SpecError) as err:
        load_documents("kind: [unclosed")
    assert "not valid YAML" in str(err.value)


# ---- generated bad specs -----------------------------------------------------------------------------------------

def _object_paths(node, value, path=()):
    """Every (path, schema node) of an object in a validated doc, for mutation."""
    yield path, node, value
    if node.kind == "object" and isinstance(value, dict):
        for name, child in node.properties.items():
            if value.get(name) is not None:
                yield from _object_paths(child, value[name], path + (name,))


def _typed_leaves(doc_schema, doc):
    validated = doc_schema.validate(copy.deepcopy(doc), "", [])
    return [(p, n) for p, n, _v in _object_paths(doc_schema, validated)
            if n.kind in ("string", "integer", "boolean", "number", "object", "array", "map") and p]


def _dotted(path):
    return ".".join(path)


def _set(doc, path, value):
    cur = doc
    for key in path[:-1]:
        cur = cur.setdefault(key, {})
    cur[path[-1]] = value


WRONG = {"string": 42, "integer": "seven", "number": "fast", "boolean": "yes-ish", "object": ["a"],
         "array": {"a": 1}, "map": ["a"]}
EXPECT = {"string": "must be a string", "integer": "must be an integer", "number": "must be a number",
          "boolean": "must be a boolean", "object": "must be an object", "array": "must be a list",
          "map": "must be a mapping"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_wrong_types_name_the_field(data):
    docs = base_docs()
    which = data.draw(st.sampled_from([0, 1, 2]))
    schema = CLUSTER_DOCUMENT if which == 0 else NODESET_DOCUMENT
    leaves = [(p, n) for p, n in _typed_leaves(schema, docs[which]) if p[0] == "spec" or p == ("metadata", "name")]
    path, node = data.draw(st.sampled_from(leaves))
    _set(docs[which], path, WRONG[node.kind])
    label = "%s/%s" % (docs[which]["kind"], docs[which]["metadata"]["name"]) if path != ("metadata", "name") \
        else "document[%d]" % which
    issues, dummy = issues_of(docs)
    assert any(p == "%s %s" % (label, _dotted(path)) and m.startswith(EXPECT[node.kind]) for p, m in issues), issues


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.from_regex(r"\A[a-z][a-zA-Z]{0,12}\Z"))
def test_generated_unknown_fields_are_named(data, field):
    docs = base_docs()
    which = data.draw(st.sampled_from([0, 1, 2]))
    schema = CLUSTER_DOCUMENT if which == 0 else NODESET_DOCUMENT
    validated = schema.validate(copy.deepcopy(docs[which]), "", [])
    objects = [(p, n) for p, n, v in _object_paths(schema, validated) if n.kind == "object"]
    path, node = data.draw(st.sampled_from(objects))
    if field in node.properties:
        return
    cur = docs[which]
    for key in path:
        cur = cur.setdefault(key, {})
    cur[field] = 1
    label = "%s/%s" % (docs[which]["kind"], docs[which]["metadata"]["name"])
    expected = "%s %s" % (label, _dotted(path + (field,)))
    issues, dummy = issues_of(docs)
    assert any(p == expected and m.startswith("unknown field") for p, m in issues), (expected, issues)


@settings(max_examples=100, deadline=None)
@given(st.integers(max_value=-1), st.sampled_from([1, 2]))
def test_generated_negative_replicas(replicas, which):
    docs = base_docs()
    docs[which]["spec"]["replicas"] = replicas
    name = docs[which]["metadata"]["name"]
    assert ("NodeSet/%s spec.replicas" % name, "must be >= 0, got %d" % replicas) in issues_of(docs)[0]


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=12).filter(lambda t: not is_quantity(t)),
       st.sampled_from(["cpu", "memory"]))
def test_generated_bad_quantities(text, key):
    docs = base_docs()
    docs[1]["spec"]["resources"][key] = text
    assert "NodeSet/cpu spec.resources.%s" % key in paths_of(docs)


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"\A[a-z][a-z0-9]{0,10}\Z").filter(lambda n: n not in ("cpu", "gpu")))
def test_generated_unknown_partition_members(name):
    docs = base_docs()
    docs[0]["spec"]["partitions"][1]["nodeSets"].append(name)
    assert "SlurmCluster/demo spec.partitions[1].nodeSets[1]" in paths_of(docs)


@settings(max_examples=60, deadline=None)
@given(st.from_regex(r"\A[A-Za-z0-9_.-]{0,50}\Z"))
def test_generated_names_follow_dns_label_rules(name):
    docs = base_docs()
    docs[1]["metadata"]["name"] = name
    docs[0]["spec"]["partitions"][0]["nodeSets"][0] = name
    import re
    ok = re.match(DNS_LABEL, name) and len(name) <= MAX_NODESET_NAME and name != "all" \
        and not name.startswith("demo-")
    if ok:
        assert s.build_model(docs).node_set(name).node_range == "%s-[0-1]" % name
    else:
        assert any("metadata.name" in p for p in paths_of(docs))


@pytest.mark.parametrize("slurm_node, cpu, path", [
    ({"cpus": 6, "sockets": 2, "coresPerSocket": 2, "threadsPerCore": 2}, "8", "NodeSet/cpu spec.slurmNode.cpus"),
    ({"sockets": 2, "coresPerSocket": 4, "threadsPerCore": 2}, "12", "NodeSet/cpu spec.resources.cpu"),
    ({"coresPerSocket": 4}, "6", "NodeSet/cpu spec.resources.cpu"),       # 6 % 4: one socket, 6 matches none
])
def test_cpus_must_match_the_socket_layout(slurm_node, cpu, path):
    """Slurm resets CPUs that are none of Sockets, Sockets x Cores and Sockets x Cores x Threads (issue 35, 11)."""
    docs = base_docs()
    docs[1]["spec"]["slurmNode"] = slurm_node
    docs[1]["spec"]["resources"]["cpu"] = cpu
    found = dict(issues_of(docs)[0])
    assert list(found) == [path] and "Slurm would reset them" in found[path], found


@pytest.mark.parametrize("slurm_node, cpu", [
    ({"sockets": 2, "coresPerSocket": 4, "threadsPerCore": 2}, "16"),      # all threads
    ({"sockets": 2, "coresPerSocket": 4, "threadsPerCore": 2}, "8"),       # cores only
    ({"cpus": 2, "sockets": 2, "coresPerSocket": 4}, "64"),                # one per socket
    ({"coresPerSocket": 4, "threadsPerCore": 2}, "16"),                    # Slurm infers 2 sockets
])
def test_cpus_matching_the_socket_layout_are_taken(slurm_node, cpu):
    docs = base_docs()
    docs[1]["spec"]["slurmNode"] = slurm_node
    docs[1]["spec"]["resources"]["cpu"] = cpu
    s.build_model(docs)
