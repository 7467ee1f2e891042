"""Keys and values of the spec's free-form Slurm maps against the host's real Slurm parser (issue 35, defects 4, 5
and 11). scontrol reads the whole slurm.conf before any command and stops with "Unable to process configuration
file" on a key or a value it does not read, so `scontrol show hostnames` on a rendered file is the parser's verdict,
with no daemon. Shown: every typed value the spec takes parses; the values the issue found, which the spec now
refuses, make Slurm choke; the partition keys the generated table gives the host's release are the ones it reads;
a key only another release reads is left out of the host's file, which then loads."""
import dataclasses
import os
import pwd
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.soperator.slurm.plugins.module_utils.local import configs
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys as ck
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import slurm_line, slurm_word
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ci_skips import environmental
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_keys_data import KEYS
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from requires import skip_without

BASE = [{"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster",
         "metadata": {"name": "demo", "namespace": "hpc"}, "spec": {"jail": {"volume": {"size": "1Gi"}}}},
        {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet",
         "metadata": {"name": "cpu", "namespace": "hpc"},
         "spec": {"clusterName": "demo", "resources": {"cpu": "2", "memory": "1Gi"}}}]


@pytest.fixture(scope="module")
def host_release():
    skip_without(("scontrol", "slurmctld"))
    version = configs.host_slurm_version()
    assert version is not None
    return version


def _slurm_reads(directory, text):
    """(True, "") when the host's scontrol loads `text` as its slurm.conf, else (False, its errors)."""
    path = os.path.join(str(directory), "slurm.conf")
    with open(path, "w") as f:
        f.write(text)
    env = dict(os.environ, SLURM_CONF=path)
    done = subprocess.run([find_binary("scontrol"), "show", "hostnames", "n[1-2]"], env=env, timeout=60,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return done.returncode == 0 and done.stdout.split() == ["n1", "n2"], done.stderr


def _rendered(directory, model):
    """slurm.conf of `model` as a local cluster of the host's Slurm runs it (nothing is started)."""
    return local_slurm_configs(model, str(directory), 20000, user=pwd.getpwuid(os.getuid()).pw_name,
                               db_password="secret",
                               have_pmix=False)["slurm.conf"]


def _model(slurm_config=None, partition_config=None):
    import copy
    docs = copy.deepcopy(BASE)
    docs[0]["spec"]["slurmConfig"] = slurm_config or {}
    docs[0]["spec"]["partitions"] = [{"name": "main", "nodeSets": ["cpu"], "default": True,
                                      "config": partition_config or {}}]
    return spec.build_model(docs)


def _forced(slurm_config=None, partition_config=None):
    """A model holding values the spec refuses, made past it: what the renderer would write without the check."""
    model = _model()
    partition = dataclasses.replace(model.partitions[0], config=dict(partition_config or {}))
    return dataclasses.replace(model, slurm_config=dict(slurm_config or {}), partitions=(partition,))


def _refused(slurm_config=None, partition_config=None):
    try:
        _model(slurm_config, partition_config)
    except SpecError as e:
        return e.issues
    return None


def test_the_unconfigured_file_loads(tmp_path, host_release):
    assert _slurm_reads(tmp_path, _rendered(tmp_path, _model())) == (True, "")


# The issue's values (and kin): refused by the spec, and Slurm chokes on each.
CHOKES = [
    ({"SlurmdTimeout": "120 x"}, None, "is not a valid number"),
    ({"SlurmdTimeout": "65536"}, None, "greater than 65535"),
    ({"MaxJobCount": "lots"}, None, "not a valid number"),
    ({"AllowSpecResourcesUsage": "maybe"}, None, "not a valid option"),
    (None, {"MaxTime": "60=Nodes"}, 'Bad value "60=Nodes" for MaxTime'),
    (None, {"DefaultTime": "1:2:3:4"}, "DefaultTime"),
    (None, {"OverSubscribe": "sometimes"}, "OverSubscribe"),
    (None, {"State": "maybe"}, "State"),
    (None, {"Hidden": "Y"}, "not a valid option"),
    ({"MaxJobCount": 0}, None, "No jobs permitted"),
]


@pytest.mark.parametrize("slurm_config, partition_config, error", CHOKES)
def test_what_the_spec_refuses_slurm_chokes_on(tmp_path, host_release, slurm_config, partition_config, error):
    assert _refused(slurm_config, partition_config)
    reads, errors = _slurm_reads(tmp_path, _rendered(tmp_path, _forced(slurm_config, partition_config)))
    assert not reads and "Unable to process configuration file" in errors and error in errors, errors


@pytest.mark.parametrize("key, value", [("NodeName", "evil-[0-3]"), ("Include", "/etc/hosts")])
def test_line_keys_the_spec_refuses_in_a_partition_break_every_command(tmp_path, host_release, key, value):
    """The issue's smuggled keys: refused with their path, and what slurm.conf would be with them on the line (the
    renderer leaves a key the release does not read out even of a model made past the spec)."""
    issues = _refused(partition_config={key: value})
    assert [i.path for i in issues] == ["SlurmCluster/demo spec.partitions[0].config.%s" % key]
    text = _rendered(tmp_path, _forced(partition_config={key: value}))
    assert "does not read this key: %s=%s" % (key, value) in text and _slurm_reads(tmp_path, text) == (True, "")
    smuggled = text.replace("State=UP\n", "State=UP %s=%s\n" % (key, value))
    reads, errors = _slurm_reads(tmp_path, smuggled)
    assert not reads and "Unable to process configuration file" in errors, errors


TYPED = [("slurm.conf", "SlurmdTimeout"), ("slurm.conf", "MaxJobCount"), ("slurm.conf", "DefMemPerCPU"),
         ("slurm.conf", "AllowSpecResourcesUsage"), ("slurm.conf", "SchedulerTimeSlice"),
         ("partition", "MaxTime"), ("partition", "DefaultTime"), ("partition", "State"),
         ("partition", "OverSubscribe"), ("partition", "Hidden"), ("partition", "PriorityTier"),
         ("partition", "MaxNodes"), ("partition", "DefMemPerCPU")]
VALUES = st.one_of(
    st.integers(min_value=-3, max_value=2 ** 65),
    st.from_regex(r"[0-9]{1,7}(-[0-9]{1,3})?(:[0-9]{1,3}){0,3}", fullmatch=True),
    st.from_regex(r"(yes|no|true|false|up|down|drain|inactive|force|exclusive|unlimited|infinite|0|1)"
                  r"(:[0-9]{1,5})?", fullmatch=True).map(lambda s: s.upper() if len(s) % 2 else s),
    st.from_regex(r"[0-9]{1,6}[kK]", fullmatch=True),
    st.text(alphabet="0123456789:-=x kK.", min_size=1, max_size=8))


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(TYPED), value=VALUES)
def test_every_typed_value_the_spec_takes_slurm_reads(tmp_path, host_release, which, value):
    line_type, key = which
    config = {key: value}
    issues = _refused(config if line_type == "slurm.conf" else None, config if line_type == "partition" else None)
    if issues:
        return
    model = _model(config if line_type == "slurm.conf" else None, config if line_type == "partition" else None)
    assert _slurm_reads(tmp_path, _rendered(tmp_path, model)) == (True, ""), (key, value)


# A value of each partition key's type the host's parser takes without anything else configured.
PARTITION_VALUES = {"uint16": "1", "uint32": "1", "uint64": "1", "boolean": "NO", "float": "1.5", "long": "1"}
PARTITION_TEXT_VALUES = {"maxtime": "60", "defaulttime": "60", "state": "UP", "oversubscribe": "NO",
                         "shared": "NO", "preemptmode": "OFF", "selecttypeparameters": "CR_Core",
                         "overtimelimit": "1", "suspendtime": "INFINITE", "tresbillingweights": "CPU=1.0",
                         "cpubind": "none", "nodes": "n1", "alternate": "other", "qos": "normal"}


def _minimal(words):
    nodes = slurm_line("slurm.conf", [("NodeName", "n[1-2]"), ("CPUs", "1"), ("State", "FUTURE")])
    return "ClusterName=keys\nSlurmctldHost=localhost\n%s\n%s\n" % (nodes, " ".join(words))


def test_partition_keys_of_the_host_release_are_those_it_reads(tmp_path, host_release):
    """Every partition key the generated table gives the host's release loads; every key only other releases read
    is an unrecognized key to it."""
    base = [slurm_word("slurm.conf", "PartitionName", "p"), slurm_word("slurm.conf", "Nodes", "n[1-2]")]
    taken, unknown = [], []
    for low, (key, kind, dummy, dummy2) in sorted(KEYS["partition"].items()):
        if low in ("partitionname", "nodes"):
            continue
        value = PARTITION_TEXT_VALUES.get(low) or PARTITION_VALUES.get(kind, "x")
        reads, errors = _slurm_reads(tmp_path, _minimal(base + [slurm_word("slurm.conf", key, value)]))
        if ck.read_by("partition", key, host_release):
            taken.append((key, reads, errors))
        else:
            unknown.append((key, reads, "unrecognized key: %s" % key in errors))
    assert taken and all(reads for dummy, reads, dummy2 in taken), [t for t in taken if not t[1]]
    assert unknown and all(not reads and named for dummy, reads, named in unknown), unknown


def test_a_key_another_release_reads_is_left_out_for_the_host(tmp_path, host_release):
    newer = [key for key, kind, first, dummy in KEYS["partition"].values()
             if kind == "boolean" and first > tuple(host_release)]
    if not newer:
        pytest.skip(environmental("the host's Slurm reads every boolean partition key of the supported releases"))
    model = _model(partition_config={newer[0]: "NO"})       # the spec takes it: a key of a supported release
    text = _rendered(tmp_path, model)
    assert "does not read this key: %s=NO" % newer[0] in text
    assert _slurm_reads(tmp_path, text) == (True, "")
    reads, errors = _slurm_reads(tmp_path, text.replace("State=UP\n", "State=UP %s=NO\n" % newer[0]))
    assert not reads and "unrecognized key: %s" % newer[0] in errors     # what writing it would have done


LAYOUT_KEYS = ("sockets", "coresPerSocket", "threadsPerCore")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cpus=st.integers(min_value=1, max_value=64),
       layout=st.tuples(*[st.one_of(st.none(), st.integers(min_value=1, max_value=8)) for dummy in LAYOUT_KEYS]))
def test_the_spec_takes_a_cpu_layout_exactly_when_slurm_keeps_its_cpus(tmp_path, host_release, cpus, layout):
    """A NodeSet's CPUs against Sockets/CoresPerSocket/ThreadsPerCore: refused exactly when slurm.conf's reader
    would not keep the CPUs as written (it says "Resetting CPUs"); a refused one is rendered from a model made
    past the spec to show that."""
    import copy
    docs = copy.deepcopy(BASE)
    docs[1]["spec"]["resources"]["cpu"] = str(cpus)
    docs[1]["spec"]["slurmNode"] = dict((k, v) for k, v in zip(LAYOUT_KEYS, layout) if v is not None)
    try:
        model, refused = spec.build_model(docs), False
    except SpecError as e:
        assert [i.path for i in e.issues] == ["NodeSet/cpu spec.resources.cpu"], e
        docs[1]["spec"]["slurmNode"] = {}
        made = spec.build_model(docs)
        model, refused = dataclasses.replace(made, node_sets=(dataclasses.replace(
            made.node_sets[0], sockets=layout[0], cores_per_socket=layout[1], threads_per_core=layout[2]),)), True
    reads, errors = _slurm_reads(tmp_path, _rendered(tmp_path, model))
    assert reads and ("Resetting CPUs" in errors) == refused, (cpus, layout, errors)


def test_slurm_conf_keys_of_the_host_release_are_those_it_recognizes(tmp_path, host_release):
    """Every slurm.conf key the generated table gives the host's release is a key its parser knows (whatever it then
    makes of the value "1"), and every key only other releases read is an unrecognized key to it."""
    wrong = []
    for key, dummy, dummy2, dummy3 in KEYS["slurm.conf"].values():
        reads, errors = _slurm_reads(tmp_path, _minimal([]) + slurm_word("slurm.conf", key, "1") + "\n")
        unknown = "unrecognized key: %s" % key in errors
        if unknown == ck.read_by("slurm.conf", key, host_release):
            wrong.append((key, reads, errors.strip().splitlines()[:1]))
    assert not wrong, wrong


def test_the_size_aware_settings_of_a_large_cluster_load(tmp_path, host_release):
    # render/size.py (issue 32): past 256 nodes, only the words the host's release names; the file still loads
    import copy
    from ansible_collections.soperator.slurm.plugins.module_utils.render import size
    docs = copy.deepcopy(BASE)
    docs[1]["spec"].update(replicas=1, maxReplicas=1000)
    text = _rendered(tmp_path, spec.build_model(docs))
    words = [word for key, word, dummy in size.size_words(1000, host_release)]
    assert "max_rpc_cnt=100" in words
    for key, word, dummy in size.size_words(1000, host_release):
        assert [line for line in text.splitlines() if line.startswith(key + "=") and word in line], word
    if tuple(host_release) < size.WORD_SINCE["conmgr_max_connections"]:
        assert "conmgr_max_connections" not in text
    assert _slurm_reads(tmp_path, text) == (True, "")
