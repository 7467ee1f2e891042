"""spec.accounting's accounts, users, QOS and scheduling policy (spec/accounting.py): what is refused, with field paths,
before any command; the model the modules apply; the slurm.conf lines, as Slurm's parser reads them back. Their
effect on real daemons: tests/slurm/test_local_accounting_policy.py."""
import pytest
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec import accounting as sa
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

from slurm_conf_reader import slurm_lines
from specs import spec_text

LABEL = "SlurmCluster/acctpol spec.accounting."


def docs(**accounting):
    documents = list(yaml.safe_load_all(spec_text("accounting-policy")))
    documents[0]["spec"]["accounting"].update(accounting)
    return documents


def issues_of(documents):
    with pytest.raises(SpecError) as e:
        spec.build_model(documents)
    return dict((i.path, i.message) for i in e.value.issues)


def test_the_shared_spec_builds_the_model_the_modules_apply():
    policy = spec.build_model(docs()).accounting.policy
    accounts = dict((a.name, a) for a in policy.accounts)
    assert accounts["high-share"] == sa.SlurmAccount("high-share", "science", "soperator: high-share", 3)
    assert accounts["small"].limits == (("GrpTRES", "cpu=1"), ("MaxJobs", "4"))
    assert accounts["science"].qos == ("normal", "urgent", "capped") and accounts["science"].default_qos == "normal"
    qos = dict((q.name, q) for q in policy.qos)
    assert qos["urgent"] == sa.SlurmQos("urgent", "soperator: jobs that may not wait", 100, ("normal",))
    assert qos["capped"].limits == (("MaxJobsPerUser", "5"), ("MaxWall", "1440"))
    users = dict((u.name, u) for u in policy.users)
    assert users["bin"] == sa.SlurmUser("bin", "high-share", ("high-share",))


def test_the_scheduling_policy_reaches_slurm_conf_as_written():
    text = render_slurm_configs(spec.build_model(docs()))["slurm.conf"]
    read = dict(line.split("=", 1) for line in slurm_lines(text) if "=" in line and " " not in line.strip())
    assert {k: read[k] for k in ("PriorityType", "PriorityDecayHalfLife", "PriorityCalcPeriod", "PriorityWeightFairshare",
                                 "PriorityWeightQOS", "PreemptType", "PreemptMode", "AccountingStorageEnforce")} == {
        "PriorityType": "priority/multifactor", "PriorityDecayHalfLife": "60", "PriorityCalcPeriod": "1",
        "PriorityWeightFairshare": "100000", "PriorityWeightQOS": "1000", "PreemptType": "preempt/qos",
        "PreemptMode": "REQUEUE", "AccountingStorageEnforce": "associations,limits,qos"}
    plain = render_slurm_configs(spec.build_model(docs(policy={})))["slurm.conf"]
    assert "Priority" not in plain and "Preempt" not in plain and "Enforce" not in plain


def test_bad_values_are_refused_with_their_field_paths():
    found = issues_of(docs(
        accounts=[{"name": "Physics"}, {"name": "a", "parent": "b", "limits": {"GrpTRES": "cpu=-2", "MaxJobs": -3,
                                                                               "MaxWall": "1:00:30"}},
                  {"name": "b", "parent": "a"}, {"name": "c", "limits": {"GrpTRES": "gpu=1x"}},
                  {"name": "d", "limits": {"MaxTRESPerJob": "cpu=2G,cpu=1"}}, {"name": "root"},
                  {"name": "e", "qos": ["nope"], "defaultQos": "normal"}],
        users=[{"name": "carol", "defaultAccount": "ghost"}, {"name": "dave", "defaultAccount": "a",
                                                              "accounts": ["b"]}],
        qos=[{"name": "loop", "preempt": ["loop"]}, {"name": "x,y"}, {"name": "z", "description": "Capital"}]))
    assert "lowercase" in found[LABEL + "accounts[0].name"]
    assert found[LABEL + "accounts[1].limits.GrpTRES"] == \
        "cpu=-2: the count must be a whole number >= 0 (or -1: no limit)"
    assert found[LABEL + "accounts[1].limits.MaxJobs"] == "must be >= -1, got -3"
    assert "whole minutes" in found[LABEL + "accounts[1].limits.MaxWall"]
    assert found[LABEL + "accounts[1].parent"] == "accounts form a cycle: a -> b -> a"
    assert found[LABEL + "accounts[3].limits.GrpTRES"] == "gpu=1x: the count must be a whole number >= 0 (or -1: no limit)"
    assert "only mem takes a unit" in found[LABEL + "accounts[4].limits.MaxTRESPerJob"]
    assert "root is Slurm's own account" in found[LABEL + "accounts[5].name"]
    assert found[LABEL + "accounts[6].qos[0]"].startswith("unknown QOS 'nope'")
    assert found[LABEL + "accounts[6].defaultQos"] == "'normal' is not in its qos list"
    assert found[LABEL + "users[0].defaultAccount"].startswith("unknown account 'ghost'")
    assert found[LABEL + "users[1].defaultAccount"] == "'a' is not in its accounts"
    assert found[LABEL + "qos[0].preempt[0]"] == "a QOS cannot preempt itself"
    assert "commas" in found[LABEL + "qos[1].name"]
    assert "lowercases" in found[LABEL + "qos[2].description"]


def test_policy_rules_across_fields():
    documents = docs(enabled=False)
    documents[0]["spec"]["slurmConfig"] = {"PreemptMode": "CANCEL", "priorityweightage": 5}
    found = issues_of(documents)
    assert found[LABEL + "qos"] == "needs accounting.enabled: true (slurmdbd holds them)"
    assert found[LABEL + "policy.enforce"] == "needs accounting.enabled: true"
    assert found["SlurmCluster/acctpol spec.slurmConfig.PreemptMode"] == "is set by spec.accounting.policy.preemption"
    assert found["SlurmCluster/acctpol spec.slurmConfig.priorityweightage"] == \
        "is set by spec.accounting.policy.priority"
    found = issues_of(docs(policy={"preemption": {"type": "qos", "mode": "off"}}, qos=[
        {"name": "q", "preemptMode": "off"}]))
    # slurmctld refuses PreemptMode=OFF beside a PreemptType; sacctmgr stores a QOS's "off" as "cluster"
    assert found[LABEL + "policy.preemption.mode"] == "must be one of cancel, requeue, got 'off'"
    assert found[LABEL + "qos[0].preemptMode"] == "must be one of cluster, cancel, requeue, got 'off'"
    found = issues_of(docs(policy={"enforce": ["associations"], "preemption": {"type": "qos"}}))
    assert found[LABEL + "policy.enforce"] == "QOS are given: enforce needs qos too"
    assert found[LABEL + "policy.preemption.mode"] == "is required"


@pytest.mark.parametrize("text, minutes", [("90", 90), ("01:30:00", 90), ("1-00:00", 1440), ("1-02:00:00", 1560),
                                           ("2-3", 51 * 60), (45, 45), (-1, -1)])
def test_wall_minutes(text, minutes):
    assert sa.wall_minutes(text) == minutes


def test_tres_are_canonical():
    assert sa.tres_text(sa.parse_tres("mem=4G,cpu=2,gres/gpu=1")) == "cpu=2,gres/gpu=1,mem=4096M"
    assert sa.parse_tres("mem=-1") == {"mem": -1}
    with pytest.raises(ValueError, match="not a whole number of MiB"):
        sa.parse_tres("mem=1K")


def test_a_module_list_is_checked_alone_references_left_to_the_plan():
    entries = sa.module_entries("accounts", [{"name": "a", "parent": "elsewhere"}])
    assert entries == [{"name": "a", "parent": "elsewhere"}]
    with pytest.raises(SpecError) as e:
        sa.module_entries("users", [{"name": "u"}, "x"])
    assert [i.path for i in e.value.issues] == ["users[0].defaultAccount", "users[1]"]
