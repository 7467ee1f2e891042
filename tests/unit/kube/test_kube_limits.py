"""What Kubernetes stores (issue 35, class 6): a spec whose rendered objects Kubernetes would refuse for their size -
a ConfigMap over 1 MiB, an object over etcd's request limit - is refused before the first write, naming the spec field
that made it that large."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_limits import (
    MAX_OBJECT_BYTES, check_kube_sizes, size_issues)
from ansible_collections.soperator.slurm.plugins.module_utils.spec import documents as d
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

from specs import cluster_and_rest

HEAD, NODESET = cluster_and_rest("minimal")


def _with_custom_checks(*sizes):
    checks = "".join('      - {name: c%d, command: "%s"}\n' % (i, "x" * size) for i, size in enumerate(sizes))
    return HEAD + "  healthChecks:\n    passive:\n      custom:\n" + checks + NODESET


def test_config_map_over_a_mebibyte_is_refused_naming_the_field():
    """Each document within etcd's limit, but the configs ConfigMap (health.json) over the API server's 1 MiB."""
    model = spec.build_model(d.load_documents(_with_custom_checks(500 << 10, 700 << 10)))
    with pytest.raises(SpecError) as err:
        check_kube_sizes(model)
    [issue] = err.value.issues
    assert issue.path == "SlurmCluster/demo spec.healthChecks.passive.custom[1].command", issue
    assert "the data of ConfigMap demo-slurm-configs would be" in issue.message
    assert "at most %d" % (1 << 20) in issue.message
    check_kube_sizes(spec.build_model(d.load_documents(_with_custom_checks(300 << 10, 300 << 10))))


class _RecordingClient:
    """Any request is recorded; a write fails the test."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append(name)
            if name not in ("get", "list"):
                pytest.fail("%s before the size check" % name)
            return None if name == "get" else []
        return call


def test_kube_present_refuses_before_the_first_write():
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
    from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster
    model = spec.build_model(d.load_documents(_with_custom_checks(500 << 10, 700 << 10)))
    client = _RecordingClient()
    with pytest.raises(BackendError) as err:
        KubeCluster(client, model).present()
    assert "spec.healthChecks.passive.custom[1].command" in str(err.value)
    assert client.calls == []


def test_any_object_over_etcds_limit_names_the_value_it_holds():
    docs = d.load_documents(HEAD + NODESET)
    big = "y" * (MAX_OBJECT_BYTES + 10)
    docs[1]["spec"]["features"] = [big]
    obj = {"kind": "StatefulSet", "metadata": {"name": "demo-cpu"}, "spec": {"template": {"x": big}}}
    [issue] = size_issues([obj], docs)
    assert issue.path == "NodeSet/cpu spec.features[0]"
    assert "StatefulSet demo-cpu would be" in issue.message and "etcd takes at most" in issue.message
    [issue] = size_issues([obj], d.load_documents(HEAD + NODESET))
    assert issue.path == "" and "no single spec value is the cause" in issue.message
    assert size_issues([{"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v" * 1000}}], docs) == []


def test_slurm_cluster_writes_no_manifest_kubernetes_would_refuse(tmp_path):
    """The module, state=rendered: the size check and the file checks fail it with the field path or the file, and
    dest is not created."""
    import ansible_run
    dest = tmp_path / "out"
    src = tmp_path / "spec.yml"
    src.write_text(_with_custom_checks(500 << 10, 700 << 10))
    failed = ansible_run.module("slurm_cluster", {"state": "rendered", "src": str(src), "dest": str(dest)},
                                expect_failed=True)
    assert [e["path"] for e in failed["errors"]] == ["SlurmCluster/demo spec.healthChecks.passive.custom[1].command"]
    utf16 = tmp_path / "spec16.yml"
    utf16.write_bytes((HEAD + NODESET).encode("utf-16"))
    failed = ansible_run.module("slurm_cluster", {"state": "rendered", "src": str(utf16), "dest": str(dest)},
                                expect_failed=True)
    assert "spec file %s is UTF-16-encoded" % utf16 in failed["msg"], failed["msg"]
    assert not dest.exists()
