"""Hostile specs: a corpus of bad specs (one defect per file under tests/specs/bad/, named *.spec since hostile YAML
is no lint target) fails validation with the field path, never another exception; property tests show that every
value validation accepts in a field that reaches a config file parses back from the rendered files as exactly that
value, with no extra line or key, and that values which would not read back are refused."""
import glob
import os
import re

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ansible_collections.soperator.slurm.plugins.module_utils.constants import IMAGES_SLURM_VERSION
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys as ck
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys_data as ckd
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_syntax as cs
from ansible_collections.soperator.slurm.plugins.module_utils.spec import cron, schema
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import CLUSTER_DOCUMENT, NODESET_DOCUMENT
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from slurm_conf_reader import parse_slurm_file
from specs import BAD, spec_text

BAD_SPECS = sorted(glob.glob(os.path.join(BAD, "*.spec")))


def expectation(path):
    """(field path, message fragment) from the file's `# expect:` and `# message:` lines."""
    with open(path) as f:
        first, second = f.readline(), f.readline()
    assert first.startswith("# expect: ") and second.startswith("# message: "), path
    return first[len("# expect: "):].rstrip("\n"), second[len("# message: "):].rstrip("\n")


def load_and_build(path):
    with open(path) as f:
        return spec.build_model(load_documents(f.read()))


def test_the_corpus_is_there():
    assert len(BAD_SPECS) >= 60


@pytest.mark.parametrize("path", BAD_SPECS, ids=[os.path.basename(p)[:-4] for p in BAD_SPECS])
def test_bad_spec_fails_with_its_field_path(path):
    field, fragment = expectation(path)
    try:
        load_and_build(path)
    except SpecError as e:
        matching = [i for i in e.issues if i.path == field and fragment in i.message]
        assert matching, "%s: no issue at %r with %r in:\n%s" % (os.path.basename(path), field, fragment, e)
        assert "%s: " % field in str(e)
    else:
        pytest.fail("%s was accepted" % os.path.basename(path))


def test_base_of_the_corpus_is_valid():
    """The documents the corpus files are made of are valid once the defect is gone: the defect is what fails."""
    with open(os.path.join(BAD, "slurmconfig-hash-truncates.spec")) as f:
        text = f.read()
    assert spec.build_model(load_documents(text.replace("#,", ","))).slurm_config == {
        "SchedulerParameters": "bf_interval=30,max_rpc_cnt=150"}


# --- the rules behind the corpus ------------------------------------------------------------------------------------

def _patterned_nodes():
    nodes, seen = [], set()

    def walk(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        nodes.append(node)
        for child in list(node.properties.values()) + [node.items, node.values, node.keys]:
            if child is not None:
                walk(child)

    walk(CLUSTER_DOCUMENT)
    walk(NODESET_DOCUMENT)
    return [x for x in nodes if x.pattern]


PATTERNS = sorted(set(x.pattern for x in _patterned_nodes()) | {cs.SLURM_VALUE_PATTERN})
SAMPLES = ["a", "a\n", "demo", "demo\n", "\ndemo", "1Gi", "1Gi\n", "main\n", "*/5 * * * *\n", "@daily\n",
           "gpu:h100:8\n", "ssh-ed25519 AAAA x\n", "x\r", "", "\n", "10.0.0.1\n", "a b", "a\x00"]


def test_patterns_match_whole_values():
    """Go's `$` (the API server) is the end of the text: every pattern in Python (compile_pattern) accepts exactly
    the strings the whole of which matches, so "demo\n" passes neither."""
    assert len(PATTERNS) > 15
    for pattern in PATTERNS:
        compiled = schema.compile_pattern(pattern)
        for sample in SAMPLES:
            whole = re.fullmatch("(?:%s)" % pattern[1:-1], sample) is not None
            assert bool(compiled.search(sample)) == whole, (pattern, sample)


@settings(max_examples=200, deadline=None)
@given(sample=st.text(max_size=12))
def test_patterns_match_whole_values_for_any_text(sample):
    for pattern in PATTERNS:
        whole = re.fullmatch("(?:%s)" % pattern[1:-1], sample) is not None
        assert bool(schema.compile_pattern(pattern).search(sample)) == whole, (pattern, sample)


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 3 * * 1-5", "0 0 1 JAN,jul *", "15,45 */2 1-31/3 * sun-sat",
                                      "@daily", "@hourly", "0 0 * * ?", "59 23 31 12 6", "5/15 * * * *"])
def test_cron_accepts(schedule):
    assert cron.schedule_problem(schedule) is None


@pytest.mark.parametrize("schedule", ["every 5 minutes", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *",
                                      "* * 0 * *", "* * 32 * *", "* * * 13 *", "* * * * 7", "*/0 * * * *",
                                      "5-1 * * * *", "1,,2 * * * *", "*-5 * * * *", "1-2-3 * * * *", "+5 * * * *",
                                      "TZ=UTC * * * * *", "@every 1h", "@Daily", " @daily", "* * * foo *",
                                      "1/2/3 * * * *", "0 0 * * mon-sund"])
def test_cron_refuses(schedule):
    assert cron.schedule_problem(schedule) is not None


def test_free_form_value_pattern_is_the_python_rule():
    """The CRD's SLURM_VALUE_PATTERN (Go) and value_problem (Python) accept exactly the same strings."""
    pattern = schema.compile_pattern(cs.SLURM_VALUE_PATTERN)
    for code in range(0, 256):
        for text in (chr(code), "a%sb" % chr(code), "%s" % chr(code) * 2):
            assert (cs.value_problem(text) is None) == bool(pattern.search(text)), repr(text)


# --- property tests ------------------------------------------------------------------------------------------------

BASE_CLUSTER, BASE_NODESET = load_documents(spec_text("minimal"))

# Any text at all (control characters, '#', quotes, '=', backslashes, non-ASCII), biased towards the dangerous ones.
ANY_TEXT = st.text(alphabet=st.one_of(st.sampled_from(list(' \t\n\r\0#"\'\\=,:;[]()-_.*/+%$')),
                                      st.characters(max_codepoint=0x7f), st.characters()), min_size=0, max_size=30)
# Printable ASCII (where '#', quotes and backslashes hide among valid characters), valid values, and any text.
VALUES = st.one_of(ANY_TEXT, st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
                   st.from_regex(r"[ !\x24-\[\]-~]{1,20}", fullmatch=True))


def names(pattern):
    """Names valid for `pattern`, the same with a hostile tail, and any text."""
    valid = st.from_regex(pattern, fullmatch=True)
    return st.one_of(valid, valid, st.tuples(valid, st.sampled_from(["\n", " x", "#", "\x00", "\r"])).map("".join),
                     ANY_TEXT)


KEYS = st.text(alphabet=st.sampled_from(list("abcXYZ_09 =#.\n")), min_size=1, max_size=8)
HYPOTHESIS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model_or_issues(cluster_spec=None, nodeset_spec=None, nodeset_name="cpu"):
    import copy
    cluster, node_set = copy.deepcopy(BASE_CLUSTER), copy.deepcopy(BASE_NODESET)
    cluster["spec"].update(cluster_spec or {})
    node_set["spec"].update(nodeset_spec or {})
    node_set["metadata"]["name"] = nodeset_name
    try:
        return spec.build_model([cluster, node_set]), None
    except SpecError as e:
        return None, e.issues


def _all_pairs(files):
    return dict((name, parse_slurm_file(text)) for name, text in files.items()
                if name.endswith(".conf") and name != "plugstack.conf")


def _baseline():
    model, dummy = _model_or_issues()
    return _all_pairs(render_slurm_configs(model))


BASELINE = None


def _check_only_change(files, file_name, key, value, where=None):
    """Parsed back, `file_name` holds `key` with exactly `value` (in the line `where` picks), and every file
    holds the same lines and keys as the baseline rendering, but that one key."""
    global BASELINE
    if BASELINE is None:
        BASELINE = _baseline()
    parsed = _all_pairs(files)
    assert sorted(parsed) == sorted(BASELINE)
    for name, lines in parsed.items():
        base = BASELINE[name]
        if name != file_name:
            assert lines == base, name
            continue
        lines = [[(k, v) for k, v in line if k.lower() != key.lower()] for line in lines]
        lines = [line for line in lines if line]
        base = [[(k, v) for k, v in line if k.lower() != key.lower()] for line in base]
        base = [line for line in base if line]
        assert lines == base, "%s: other lines or keys changed" % name
    found = [v for line in parsed[file_name] for k, v in line if k == key and (where is None or where(line))]
    assert found == [str(value)], (file_name, key, found, value)


# Values of typed keys too: numbers, times and words, valid and not.
TYPED_VALUES = st.one_of(VALUES, st.integers(min_value=-5, max_value=2 ** 33),
                         st.from_regex(r"[0-9]{1,6}([-:][0-9]{1,3}){0,3}|UNLIMITED|0x1f|010|1[kK]", fullmatch=True))


def _refused_for_its_value(line_type, key, value):
    """Why the file's parser would not read `value` back as written or as the key's type, or None."""
    return cs.value_problem(value) or ck.value_type_problem(line_type, key, value)


@HYPOTHESIS
@given(key=st.sampled_from(["SlurmdTimeout", "MailProg", "SchedulerParameters", "Prolog"]), value=TYPED_VALUES)
def test_slurm_config_value_reads_back_or_is_refused(key, value):
    model, issues = _model_or_issues({"slurmConfig": {key: value}})
    event("refused" if model is None else "accepted")
    if model is None:
        assert [i.path for i in issues] == ["SlurmCluster/demo spec.slurmConfig.%s" % key], issues
        assert _refused_for_its_value("slurm.conf", key, value) is not None
        return
    assert _refused_for_its_value("slurm.conf", key, value) is None
    _check_only_change(render_slurm_configs(model), "slurm.conf", key, value)


# Text keys the images' Slurm reads (render_slurm_configs' default target; the others are left out for it).
CGROUP_TEXT_KEYS = sorted(entry[0] for entry in ckd.KEYS["cgroup.conf"].values()
                          if entry[1] == "string" and ck.read_by("cgroup.conf", entry[0], IMAGES_SLURM_VERSION))


@HYPOTHESIS
@given(key=st.one_of(KEYS, st.sampled_from(CGROUP_TEXT_KEYS), st.sampled_from(CGROUP_TEXT_KEYS).map(str.lower)),
       value=st.text(alphabet="abc=1", min_size=1, max_size=5))
def test_slurm_config_key_is_a_cgroup_key_or_refused(key, value):
    model, issues = _model_or_issues({"cgroupConfig": {key: value}})
    event("refused" if model is None else "accepted")
    if model is None:
        assert issues and all(i.path.startswith("SlurmCluster/demo spec.cgroupConfig") for i in issues), issues
        assert re.match(r"[A-Za-z][A-Za-z0-9_]*\Z", key) is None or key.lower() not in ckd.KEYS["cgroup.conf"]
        return
    assert key.lower() in ckd.KEYS["cgroup.conf"]
    _check_only_change(render_slurm_configs(model), "cgroup.conf", key, value)


@HYPOTHESIS
@given(value=TYPED_VALUES)
def test_partition_config_value_reads_back_or_is_refused(value):
    model, issues = _model_or_issues({"partitions": [{"name": "main", "nodeSets": ["cpu"], "default": True,
                                                      "config": {"MaxTime": value}}]})
    event("refused" if model is None else "accepted")
    if model is None:
        assert [i.path for i in issues] == ["SlurmCluster/demo spec.partitions[0].config.MaxTime"], issues
        assert _refused_for_its_value("partition", "MaxTime", value) is not None
        return
    assert _refused_for_its_value("partition", "MaxTime", value) is None
    files = render_slurm_configs(model)
    _check_only_change(files, "slurm.conf", "MaxTime", value, where=lambda line: line[0] == ("PartitionName", "main"))


@HYPOTHESIS
@given(value=TYPED_VALUES)
def test_mpi_config_value_reads_back_or_is_refused(value):
    model, issues = _model_or_issues({"mpi": {"config": {"PMIxTimeout": value}}})
    event("refused" if model is None else "accepted")
    if model is None:
        assert [i.path for i in issues] == ["SlurmCluster/demo spec.mpi.config.PMIxTimeout"], issues
        assert _refused_for_its_value("mpi.conf", "PMIxTimeout", value) is not None
        return
    assert _refused_for_its_value("mpi.conf", "PMIxTimeout", value) is None
    _check_only_change(render_slurm_configs(model), "mpi.conf", "PMIxTimeout", value)


@HYPOTHESIS
@given(feature=names(r"[A-Za-z0-9_.]{1,12}"), partition=names(r"[A-Za-z0-9_][-A-Za-z0-9_.]{0,12}"),
       switch=names(r"[A-Za-z0-9_][-A-Za-z0-9_.]{0,12}"), nodeset=names(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?"))
def test_names_read_back_or_are_refused(feature, partition, switch, nodeset):
    """Names that reach node, partition, gres and topology lines: accepted ones parse back exactly; a refused one
    is reported at its own path."""
    model, issues = _model_or_issues(
        {"partitions": [{"name": partition, "nodeSets": [nodeset], "default": True}],
         "topology": {"enabled": True, "switches": [{"name": switch, "nodeSets": [nodeset]}]}},
        {"features": [feature], "gres": ["gpu:t4:1"], "resources": {"cpu": "2", "memory": "1Gi",
                                                                    "nvidia.com/gpu": 1}}, nodeset_name=nodeset)
    event("refused" if model is None else "accepted")
    if model is None:
        assert issues
        return
    files = render_slurm_configs(model)
    parsed = _all_pairs(files)
    nodes = [dict(line) for line in parsed["slurm.conf"] if line[0][0] == "NodeName"]
    assert nodes == [{"NodeName": "%s-0" % nodeset, "State": "FUTURE", "CPUs": "2", "RealMemory": "1024",
                      "Gres": "gpu:t4:1", "Feature": feature, "Weight": "1"}]
    parts = [dict(line) for line in parsed["slurm.conf"] if line[0] == ("PartitionName", partition)]
    assert len(parts) == 1 and parts[0]["Nodes"] in (nodeset, "%s-0" % nodeset)
    assert [dict(line) for line in parsed["topology.conf"]] == [{"SwitchName": switch, "Nodes": "%s-0" % nodeset}]
    assert [dict(line)["NodeName"] for line in parsed["gres.conf"]] == ["%s-0" % nodeset]


@HYPOTHESIS
@given(host=names(r"[A-Za-z0-9:]([-A-Za-z0-9_.:]{0,20}[A-Za-z0-9_.])?"),
       user=names(r"[A-Za-z0-9_][-A-Za-z0-9_.]{0,10}"), database=names(r"[A-Za-z0-9_]{1,10}"))
def test_external_database_reads_back_or_is_refused(host, user, database):
    external = {"host": host, "user": user, "database": database, "passwordSecret": {"name": "db"}}
    model, issues = _model_or_issues({"accounting": {"enabled": True, "database": {"external": external}}})
    event("refused" if model is None else "accepted")
    if model is None:
        assert issues and all(i.path.startswith("SlurmCluster/demo spec.accounting.database.external.")
                              for i in issues), issues
        return
    lines = parse_slurm_file(render_slurm_configs(model)["slurmdbd.conf"])
    assert all(len(line) == 1 for line in lines)
    settings_ = dict(line[0] for line in lines)
    assert len(settings_) == len(lines) == 11
    assert (settings_["StorageHost"], settings_["StorageUser"], settings_["StorageLoc"]) == (host, user, database)


@HYPOTHESIS
@given(name=names(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?"), namespace=names(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?"),
       domain=names(r"[a-z0-9]([-a-z0-9]{0,5}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,5}[a-z0-9])?){0,2}"))
def test_cluster_names_read_back_or_are_refused(name, namespace, domain):
    import copy
    cluster, node_set = copy.deepcopy(BASE_CLUSTER), copy.deepcopy(BASE_NODESET)
    cluster["metadata"].update(name=name, namespace=namespace)
    cluster["spec"]["clusterDomain"] = domain
    node_set["metadata"]["namespace"] = namespace
    node_set["spec"]["clusterName"] = name
    try:
        model = spec.build_model([cluster, node_set])
    except SpecError:
        event("refused")
        return
    event("accepted")
    conf = dict(line[0] for line in parse_slurm_file(render_slurm_configs(model)["slurm.conf"]) if len(line) == 1)
    assert conf["ClusterName"] == name
    assert conf["SlurmctldHost"] == "%s-controller-0(%s-controller-0.%s-controller.%s.svc.%s)" % (
        name, name, name, namespace, domain)


# --- sshd_config: the one writer refuses what sshd would read differently -----------------------------------------

def sshd_words(text):
    out = []
    for line in text.split("\n"):
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.split())
    return out


@HYPOTHESIS
@given(jail=names(r"[-a-z0-9_./]{1,20}"), keys=names(r"[-a-z0-9_./]{1,20}"), env=names(r"[-a-z0-9_./=]{1,20}"))
def test_sshd_config_reads_back_or_is_refused(jail, keys, env):
    try:
        text = render_sshd_config("/" + jail, "/etc/ssh/keys", "/" + keys, set_env={"SLURM_CONF": env},
                                  notes=[jail])
    except cs.ConfigSyntaxError:
        event("refused")
        return
    event("accepted")
    words = sshd_words(text)
    lines = text.split("\n")
    assert lines.count("# %s" % jail if jail else "#") >= 1
    by_key = dict((w[0], w[1:]) for w in words)
    assert by_key["ChrootDirectory"] == [("/" + jail).rstrip("/") or "/"]
    assert by_key["SetEnv"] == ["SLURM_CONF=%s" % env]
    for word in [w for line in words for w in line]:
        assert not set(word) & set("\"'\\#") and word.isprintable()
    assert len(words) == len([x for x in lines if x.strip() and not x.startswith("#")])
