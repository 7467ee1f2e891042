"""Specs that explode (issue 35, class 6): YAML alias bombs, deep nesting, files that are not UTF-8 and values too large
for what Kubernetes stores are refused with the file and the place, before anything is written - never a
RecursionError, a codec error or gigabytes of output."""
import copy

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.spec import documents as d
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from specs import cluster_and_rest

HEAD, NODESET = cluster_and_rest("minimal")


def alias_bomb(levels=10, width=9):
    """The classic: each level a list of `width` aliases of the one before, in a free-form field (affinity)."""
    lines = ['  controller:', '      affinity:', '        l0: &l0 ["lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append('        l%d: &l%d [%s]' % (i, i, ", ".join(["*l%d" % (i - 1)] * width)))
    return HEAD + "\n".join(lines) + "\n" + NODESET


def refused(text, **kwargs):
    with pytest.raises(SpecError) as err:
        spec.build_model(d.load_documents(text, **kwargs))
    return err.value


def test_the_base_spec_is_valid():
    assert spec.build_model(d.load_documents(HEAD + NODESET)).name == "demo"


def test_alias_bomb_is_refused_with_its_field():
    err = refused(alias_bomb())
    [issue] = err.issues
    assert issue.path.startswith("SlurmCluster/demo spec.controller.affinity.l"), issue.path
    assert "expands to more than %d bytes" % d.MAX_DOCUMENT_BYTES in issue.message


def test_alias_bomb_in_status_is_refused():
    text = HEAD.replace("spec:\n", "status:\n  a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
        "  b%d: &b%d [%s]\n" % (i, i, ", ".join(["*%s" % ("a" if i == 0 else "b%d" % (i - 1))] * 8))
        for i in range(8)) + "spec:\n") + NODESET
    err = refused(text)
    assert err.issues[0].path.startswith("SlurmCluster/demo status.b"), err


def test_small_aliases_stay_accepted():
    """Aliases as people use them (a shared resources block) are fine: only the expanded size counts."""
    text = HEAD + NODESET.replace("resources: {cpu: \"2\", memory: 1Gi}", "resources: &r {cpu: \"2\", memory: 1Gi}")
    text += NODESET.replace("name: cpu", "name: cpu2").replace("resources: {cpu: \"2\", memory: 1Gi}",
                                                               "resources: &r2 {cpu: \"2\", memory: 1Gi}")
    assert len(spec.build_model(d.load_documents(text)).node_sets) == 2


@pytest.mark.parametrize("flow", [True, False])
def test_deep_nesting_is_refused_with_line_not_recursion_error(flow):
    depth = 20000
    if flow:
        value = "[" * depth + "]" * depth
        text = HEAD + "  controller: {affinity: {x: %s}}\n" % value + NODESET
    else:
        text = HEAD + "  controller:\n      affinity:\n        x:\n" + "".join(
            "%s- \n" % ("  " * i) for i in range(10, 10 + 400)) + NODESET
    err = refused(text)
    [issue] = err.issues
    assert "nested more than %d levels deep" % d.MAX_DEPTH in issue.message
    line = 6 if flow else 8 + d.MAX_DEPTH - 3         # where the 65th level opens
    assert ", line %d, column" % line in issue.message, issue.message


def test_yaml_errors_name_the_file(tmp_path):
    path = tmp_path / "deep.yml"
    path.write_text(HEAD + "  controller: {affinity: {x: %s}}\n" % ("[" * 100 + "]" * 100) + NODESET)
    with pytest.raises(SpecError) as err:
        d.documents_from(src=str(path))
    assert '"%s", line 6, column' % path in str(err.value)


def test_nesting_through_aliases_is_bounded_too():
    """Each level within MAX_DEPTH, but aliases stack them deeper."""
    levels = ["        n0: &n0 [%s]" % ("[" * 30 + "]" * 30)]
    for i in range(1, 4):
        levels.append("        n%d: &n%d [%s]" % (i, i, "[" * 30 + "*n%d" % (i - 1) + "]" * 30))
    text = HEAD + "  controller:\n      affinity:\n" + "\n".join(levels) + "\n" + NODESET
    err = refused(text)
    assert "nested more than" in err.issues[0].message
    assert err.issues[0].path.startswith("SlurmCluster/demo spec.controller.affinity.n")


def test_one_huge_value_is_refused_with_its_path():
    text = HEAD + "  slurmConfig:\n    SchedulerParameters: %s\n" % ("x" * (2 << 20)) + NODESET
    err = refused(text)
    assert [i.path for i in err.issues] == ["SlurmCluster/demo spec.slurmConfig.SchedulerParameters"]


def test_definition_objects_are_bounded(tmp_path):
    """Ansible's definition (already objects): the same bounds, before validation recurses."""
    docs = d.load_documents(HEAD + NODESET)
    deep = []
    for _level in range(20000):
        deep = [deep]
    docs[0]["spec"]["controller"] = {"affinity": {"x": deep}}
    with pytest.raises(SpecError) as err:
        spec.build_model(d.documents_from(definition=docs))
    assert err.value.issues[0].path.startswith("SlurmCluster/demo spec.controller.affinity.x[0]")
    shared = ["lol"] * 10
    for _level in range(9):
        shared = [shared] * 10                # shares every level, as a YAML alias would
    docs[0]["spec"]["controller"] = {"affinity": {"x": shared}}
    with pytest.raises(SpecError) as err:
        d.documents_from(definition=docs)
    assert "expands to more than" in str(err.value)
    docs[0]["spec"]["controller"] = {}
    assert d.documents_from(definition=copy.deepcopy(docs)) == docs


def test_bounds_cost_is_bounded_by_the_limit():
    """A 10-level bomb would be ~10**10 values: the check stops at the limit (this returns at all)."""
    shared = ["lol"]
    for _level in range(30):
        shared = [shared] * 10
    with pytest.raises(SpecError):
        d.check_bounds([{"kind": "SlurmCluster", "metadata": {"name": "demo"}, "spec": {"x": shared}}])


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"])
def test_file_that_is_not_utf8_is_refused_naming_the_file(tmp_path, encoding):
    path = tmp_path / "spec.yml"
    text = HEAD.replace("demo", "d\u00e9mo") + NODESET
    path.write_bytes(text.encode(encoding))
    with pytest.raises(SpecError) as err:
        d.documents_from(src=str(path))
    message = str(err.value)
    assert str(path) in message and "UTF-8 only" in message, message


def test_utf8_file_with_or_without_bom_is_read(tmp_path):
    for bom in (b"", b"\xef\xbb\xbf"):
        path = tmp_path / "spec.yml"
        path.write_bytes(bom + (HEAD + NODESET).encode("utf-8"))
        assert spec.build_model(d.documents_from(src=str(path))).name == "demo"


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bomb.yml"
    path.write_text(alias_bomb())
    with pytest.raises(SpecError) as err:
        d.documents_from(src=str(path))
    assert str(path) in str(err.value) and "expands to more than" in str(err.value)


def test_oversized_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.yml"
    with open(str(path), "wb") as f:
        f.truncate(d.MAX_SPEC_FILE_BYTES + 10)
    with pytest.raises(SpecError) as err:
        d.documents_from(src=str(path))
    assert str(path) in str(err.value) and "larger than" in str(err.value)


def test_live_custom_resources_share_the_bounds():
    """kube/live.py's documents go through check_bounds too."""
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import live

    class Client:
        def __init__(self, objects):
            self.objects = objects

        def get(self, kind, name, namespace):
            return self.objects[0]

        def list(self, kind, namespace):
            return self.objects[1:]
    docs = d.load_documents(HEAD + NODESET)
    docs[0]["spec"]["slurmConfig"] = {"SchedulerParameters": "x" * (2 << 20)}
    with pytest.raises(SpecError) as err:
        live.cluster_documents(Client(docs), "demo", "slurm")
    assert err.value.issues[0].path == "SlurmCluster/demo spec.slurmConfig.SchedulerParameters"
