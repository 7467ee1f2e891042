"""The spec's free-form Slurm maps (slurmConfig, partitions[].config, cgroupConfig, mpi.config): only keys Slurm reads
on that line, none we own, none twice in another case, and values of typed keys as Slurm parses them; every
offending key is reported at its own path (issue 35, defects 4, 5 and 11). tests/slurm/test_config_values.py shows
the same values against the host's real Slurm parser."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

CLUSTER = "SlurmCluster/demo spec."


def docs(**cluster_spec):
    spec = {"jail": {"volume": {"size": "1Gi"}}}
    spec.update(cluster_spec)
    return [{"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "SlurmCluster",
             "metadata": {"name": "demo", "namespace": "hpc"}, "spec": spec},
            {"apiVersion": "slurm.soperator.dev/v1alpha1", "kind": "NodeSet",
             "metadata": {"name": "cpu", "namespace": "hpc"},
             "spec": {"clusterName": "demo", "resources": {"cpu": "2", "memory": "1Gi"}}}]


def issues(**cluster_spec):
    """{path: message} of every issue (the test fails when the spec is accepted)."""
    with pytest.raises(SpecError) as err:
        s.build_model(docs(**cluster_spec))
    return dict((i.path, i.message) for i in err.value.issues)


def partition(config):
    return {"partitions": [{"name": "main", "nodeSets": ["cpu"], "default": True, "config": config}]}


# --- 4: keys a line does not read, or that we own --------------------------------------------------------------

@pytest.mark.parametrize("key, value", [("NodeName", "evil-[0-3]"), ("Include", "/etc/evil.conf"),
                                        ("NodeSet", "x"), ("SlurmctldHost", "evil"), ("MaxTimes", "60")])
def test_partition_config_takes_only_partition_keys(key, value):
    found = issues(**partition({"MaxTime": "60", key: value}))
    assert list(found) == [CLUSTER + "partitions[0].config." + key], found
    assert "partition line" in found[CLUSTER + "partitions[0].config." + key]


def test_partition_config_suggests_the_key_meant():
    found = issues(**partition({"MaxTimes": "60"}))
    assert "did you mean MaxTime?" in found[CLUSTER + "partitions[0].config.MaxTimes"]


@pytest.mark.parametrize("key", ["Nodes", "PartitionName", "default"])
def test_partition_config_refuses_keys_we_own(key):
    found = issues(**partition({key: "x"}))
    assert "is managed by soperator.slurm" in found[CLUSTER + "partitions[0].config." + key]


def test_every_owned_and_unknown_key_is_reported_not_only_the_first():
    found = issues(slurmConfig={"SlurmctldHost": "evil", "AuthType": "auth/none", "Include": "/x",
                                "NoSuchKey": "1", "MaxJobCount": "100"},
                   cgroupConfig={"CgroupMountpoint": "/sys/fs/cgroup", "Include": "/x", "Bogus": "1"},
                   mpi={"config": {"PMIxTimeout": "300", "NodeName": "x"}})
    assert sorted(found) == sorted(CLUSTER + p for p in (
        "slurmConfig.SlurmctldHost", "slurmConfig.AuthType", "slurmConfig.Include", "slurmConfig.NoSuchKey",
        "cgroupConfig.Include", "cgroupConfig.Bogus", "mpi.config.NodeName"))
    assert "managed" in found[CLUSTER + "slurmConfig.SlurmctldHost"]
    assert "not a key of slurm.conf" in found[CLUSTER + "slurmConfig.NoSuchKey"]
    assert "not a key of cgroup.conf" in found[CLUSTER + "cgroupConfig.Bogus"]
    assert "not a key of mpi.conf" in found[CLUSTER + "mpi.config.NodeName"]


def test_keys_of_any_supported_release_are_taken():
    """A key only newer (or only older) releases read is still a key of the range the collection supports."""
    s.build_model(docs(slurmConfig={"MetricsType": "metrics/openmetrics", "GetEnvTimeout": "2"},
                       cgroupConfig={"ConstrainKmemSpace": "no", "SystemdTimeout": "1000"},
                       **partition({"PowerDownOnIdle": "NO", "Hidden": "YES"})))


# --- 5: keys that differ only in case ---------------------------------------------------------------------------

def test_keys_differing_only_in_case_are_refused():
    found = issues(slurmConfig={"SlurmdTimeout": "120", "slurmdtimeout": "300"},
                   cgroupConfig={"ConstrainCores": "yes", "CONSTRAINCORES": "no"},
                   mpi={"config": {"PMIxTimeout": "1", "pmixtimeout": "2"}},
                   **partition({"MaxTime": "60", "maxtime": "120"}))
    assert sorted(found) == sorted(CLUSTER + p for p in (
        "slurmConfig.slurmdtimeout", "cgroupConfig.CONSTRAINCORES", "mpi.config.pmixtimeout",
        "partitions[0].config.maxtime"))
    assert "same key as 'SlurmdTimeout'" in found[CLUSTER + "slurmConfig.slurmdtimeout"]


def test_owned_keys_are_refused_in_any_case():
    found = issues(slurmConfig={"sLuRmCtLdHoSt": "evil"}, **partition({"NODES": "evil-[0-3]"}))
    assert "managed" in found[CLUSTER + "slurmConfig.sLuRmCtLdHoSt"]
    assert "managed" in found[CLUSTER + "partitions[0].config.NODES"]


# --- 11: values of typed keys -----------------------------------------------------------------------------------

REFUSED = [
    ("slurmConfig", "SlurmdTimeout", "120 x"),       # the issue's: strtoul stops at the space
    ("slurmConfig", "SlurmdTimeout", "65536"),       # uint16
    ("slurmConfig", "SlurmdTimeout", -1),
    ("slurmConfig", "SlurmdTimeout", "010"),         # strtoul(.., 0) reads octal: 8, not 10
    ("slurmConfig", "SlurmdTimeout", "0x10"),
    ("slurmConfig", "MaxJobCount", "4294967296"),    # uint32
    ("slurmConfig", "DefMemPerCPU", "lots"),         # uint64
    ("slurmConfig", "AllowSpecResourcesUsage", "maybe"),
    ("slurmConfig", "MaxJobCount", 0),               # slurmctld: "No jobs permitted", a fatal parse error
    ("slurmConfig", "MaxJobCount", "0k"),
    ("slurmConfig", "SchedulerTimeSlice", "4"),      # silently replaced by the default (30)
    ("partition", "MaxTime", "60=Nodes"),            # the issue's
    ("partition", "MaxTime", "1-2-3"),
    ("partition", "MaxTime", "1:2:3:4"),
    ("partition", "MaxTime", "99999999"),            # beyond time_str2secs' int in seconds
    ("partition", "DefaultTime", "soon"),
    ("partition", "State", "UPPER"),                 # Slurm matches UP by prefix: not the value written
    ("partition", "OverSubscribe", "YES:1"),         # Slurm ignores YES below 2 and uses NO
    ("partition", "OverSubscribe", "sometimes"),
    ("partition", "Hidden", "Y"),
    ("partition", "PriorityTier", "70000"),
    ("cgroupConfig", "ConstrainCores", "enabled"),
    ("cgroupConfig", "AllowedRAMSpace", "lots"),
    ("cgroupConfig", "AllowedRAMSpace", "1e-50"),    # strtof underflows (ERANGE)
    ("mpi", "PMIxTimeout", "5m"),
]
ACCEPTED = [
    ("slurmConfig", "SlurmdTimeout", "120"), ("slurmConfig", "SlurmdTimeout", 65535),
    ("slurmConfig", "SlurmdTimeout", "INFINITE"), ("slurmConfig", "MaxJobCount", "64k"),
    ("slurmConfig", "AllowSpecResourcesUsage", "yes"), ("slurmConfig", "SchedulerParameters", "bf_interval=30"),
    ("partition", "MaxTime", "60"), ("partition", "MaxTime", "1-00:00:00"), ("partition", "MaxTime", "UNLIMITED"),
    ("partition", "MaxTime", "2:30"), ("partition", "DefaultTime", "1-12"), ("partition", "State", "drain"),
    ("partition", "OverSubscribe", "FORCE:4"), ("partition", "OverSubscribe", "EXCLUSIVE"),
    ("partition", "Hidden", "YES"), ("cgroupConfig", "AllowedRAMSpace", "98.5"),
    ("cgroupConfig", "ConstrainSwapSpace", "no"), ("mpi", "PMIxTimeout", 300),
]


def _spec_with(where, key, value):
    if where == "partition":
        return partition({key: value}), CLUSTER + "partitions[0].config." + key
    if where == "mpi":
        return {"mpi": {"config": {key: value}}}, CLUSTER + "mpi.config." + key
    return {where: {key: value}}, CLUSTER + where + "." + key


@pytest.mark.parametrize("where, key, value", REFUSED)
def test_typed_values_slurm_would_not_read_are_refused(where, key, value):
    spec, path = _spec_with(where, key, value)
    found = issues(**spec)
    assert list(found) == [path], found
    assert repr(value) in found[path]


@pytest.mark.parametrize("where, key, value", ACCEPTED)
def test_typed_values_slurm_reads_are_taken(where, key, value):
    spec, dummy = _spec_with(where, key, value)
    s.build_model(docs(**spec))


def test_a_release_beyond_the_table_reads_what_its_nearest_known_release_reads():
    """A newer Slurm than the table knows must not get files with every key left out (nor an older one)."""
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys as ck
    assert ck.read_by("slurm.conf", "ClusterName", (27, 5)) and ck.read_by("slurm.conf", "MetricsType", (27, 5))
    assert ck.read_by("partition", "MaxTime", (21, 8)) and not ck.read_by("partition", "PowerDownOnIdle", (21, 8))
    assert not ck.read_by("slurm.conf", "NoSuchKey", (26, 5))
