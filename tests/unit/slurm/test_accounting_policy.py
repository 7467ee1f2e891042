"""slurm/accounting_policy.py: the sacctmgr plan from what `sacctmgr -n -P show` printed (rows as Slurm 22.05 prints
them) and the run around it: check mode runs only reads, a real run reads back, purge is refused while jobs would
lose what it deletes. The commands against real daemons: tests/slurm/test_local_accounting_policy.py."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import accounting_policy as ap
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError, SlurmRunner
from ansible_collections.soperator.slurm.plugins.module_utils.spec import accounting as sa

QOS_ROWS = ["normal|Normal QOS default|0||cluster||||||||",
            "high|soperator: high|100|low,normal|requeue|7||cpu=2,mem=4G|||||01:30:00",
            "old|soperator: old|0||cluster||||||||",
            "theirs|made by hand|0||cluster||||||||"]


def qos_rows(lines):
    return dict((r["Name"], r) for r in (dict(zip(ap.QOS_FIELDS, line.split("|"))) for line in lines))


def qos(*entries):
    return [sa.qos_model(e) for e in sa.module_entries("qos", list(entries))]


def accounts(*entries):
    return [sa.account_model(e) for e in sa.module_entries("accounts", list(entries))]


def assoc(account, user="", parent="", fairshare="1", qos_list="normal", default_qos="", **limits):
    row = dict((f, "") for f in ap.ASSOC_FIELDS)
    row.update(Account=account, User=user, ParentName=parent, Fairshare=fairshare, QOS=qos_list,
               DefaultQOS=default_qos, **limits)
    return (account, user), row


def test_qos_plan_adds_then_links_preemption_and_is_empty_when_all_match():
    assert ap.QOS_FIELDS == ["Name", "Description", "Priority", "Preempt", "PreemptMode", "GrpJobs", "GrpSubmit",
                             "GrpTRES", "MaxJobsPU", "MaxSubmitPU", "MaxTRES", "MaxTRESPU", "MaxWall"]
    plan = ap.plan_qos(qos_rows(QOS_ROWS[:1]), qos({"name": "top", "preempt": ["low"], "priority": 9},
                                                   {"name": "low"}), purge=False)
    assert [ap.format_command(c) for c in plan.commands] == [
        "sacctmgr -i add qos top 'description=soperator: top' priority=9",
        "sacctmgr -i add qos low 'description=soperator: low'",
        "sacctmgr -i modify qos where name=top set preempt=low"]
    same = qos({"name": "high", "priority": 100, "preempt": ["normal", "low"], "preemptMode": "requeue",
                "limits": {"GrpTRES": "mem=4096M,cpu=2", "GrpJobs": 7, "MaxWall": 90}})
    assert ap.plan_qos(qos_rows(QOS_ROWS + ["low|soperator: low|0||cluster||||||||"]), same, False).commands == []


def test_qos_plan_modifies_only_what_differs_and_clears_a_tres_left_out():
    plan = ap.plan_qos(qos_rows(QOS_ROWS), qos({"name": "high", "priority": 100, "preempt": [],
                                                "limits": {"GrpTRES": "cpu=2", "MaxWall": -1}}), purge=False)
    assert [ap.format_command(c) for c in plan.commands] == [
        "sacctmgr -i modify qos where name=high set preempt= GrpTRES=cpu=2,mem=-1 MaxWall=-1"]
    assert plan.before == ["qos high: preempt=low,normal GrpTRES=cpu=2,mem=4G MaxWall=01:30:00\n"]


def test_qos_purge_deletes_only_ours_and_never_normal():
    plan = ap.plan_qos(qos_rows(QOS_ROWS), [], purge=True)
    assert [ap.format_command(c) for c in plan.commands] == ["sacctmgr -i delete qos where name=high",
                                                             "sacctmgr -i delete qos where name=old"]
    assert plan.deletions == [("qos high", {"qos": "high"}), ("qos old", {"qos": "old"})]


def test_qos_preempting_an_unknown_qos_is_refused_before_any_command():
    with pytest.raises(ap.AccountingPlanError, match="preempt names QOS 'ghost'"):
        ap.plan_qos(qos_rows(QOS_ROWS), qos({"name": "x", "preempt": ["ghost"]}), purge=False)


def test_account_plan_adds_parents_first_and_compares_limits_as_slurm_prints_them():
    current = ({"root": "default root account", "phys": "soperator: phys"},
               dict([assoc("root"), assoc("phys", parent="root", fairshare="3", GrpTRES="cpu=1,mem=1500M",
                                          MaxWall="1-02:00:00", MaxJobs="2")]))
    plan = ap.plan_accounts(current, accounts(
        {"name": "chem", "parent": "lab", "fairshare": 1}, {"name": "lab"},
        {"name": "phys", "fairshare": 3, "limits": {"GrpTRES": "mem=1500M,cpu=1", "MaxWall": "1-02:00",
                                                    "MaxJobs": 2}}), "c1", set(), purge=False)
    assert [ap.format_command(c) for c in plan.commands] == [
        "sacctmgr -i add account lab cluster=c1 'description=soperator: lab' parent=root",
        "sacctmgr -i add account chem cluster=c1 'description=soperator: chem' parent=lab fairshare=1"]
    assert [(i["name"], i["action"]) for i in plan.items] == [("lab", "add"), ("chem", "add"), ("phys", "none")]


def test_account_plan_refuses_unknown_parent_and_qos():
    current = ({"root": ""}, dict([assoc("root")]))
    with pytest.raises(ap.AccountingPlanError, match="parent 'nowhere'"):
        ap.plan_accounts(current, accounts({"name": "a", "parent": "nowhere"}), "c1", set(), False)
    with pytest.raises(ap.AccountingPlanError, match="no QOS 'gold'"):
        ap.plan_accounts(current, accounts({"name": "a", "qos": ["gold"]}), "c1", {"normal"}, False)


def test_account_purge_deletes_ours_children_first():
    current = ({"root": "", "a": "soperator: a", "b": "soperator: b", "hand": "by hand"},
               dict([assoc("root"), assoc("a", parent="root"), assoc("b", parent="a"), assoc("hand", parent="root"),
                     assoc("a", user="alice")]))
    plan = ap.plan_accounts(current, [], "c1", set(), purge=True)
    assert [ap.format_command(c) for c in plan.commands] == [
        "sacctmgr -i delete account where name=b cluster=c1", "sacctmgr -i delete account where name=a cluster=c1"]


def test_user_plan_adds_associations_before_changing_the_default():
    current = ({"alice": {"User": "alice", "DefaultAccount": "a", "AdminLevel": "None"}},
               {"a": "soperator: a", "b": "soperator: b"},
               dict([assoc("a"), assoc("b"), assoc("a", user="alice"), assoc("b", user="bob")]))
    users = [sa.user_model(e) for e in sa.module_entries("users", [
        {"name": "alice", "defaultAccount": "b", "accounts": ["a", "b"], "adminLevel": "Operator"},
        {"name": "carol", "defaultAccount": "a"}])]
    plan = ap.plan_users(current, users, "c1", purge=True)
    assert [ap.format_command(c) for c in plan.commands] == [
        "sacctmgr -i add user alice cluster=c1 account=b",
        "sacctmgr -i modify user where name=alice set defaultaccount=b adminlevel=Operator",
        "sacctmgr -i add user carol cluster=c1 account=a defaultaccount=a",
        "sacctmgr -i delete user where name=bob account=b cluster=c1"]
    with pytest.raises(ap.AccountingPlanError, match="no account 'z'"):
        ap.plan_users(current, [sa.SlurmUser("x", "z", ("z",))], "c1", purge=False)


class Sacctmgr(object):
    """Answers reads from `state` (the rows sacctmgr would print), records every command; `effective`: whether a
    modifying command changes the state (sacctmgr exits 0 also when it refuses)."""

    def __init__(self, qos_lines, effective=True, squeue=""):
        self.lines = list(qos_lines)
        self.effective = effective
        self.squeue = squeue
        self.ran = []

    def describe(self):
        return {"transport": "local"}

    def exec(self, argv, timeout):
        self.ran.append(" ".join(argv))
        if argv[:4] == ["sacctmgr", "-n", "-P", "show"]:
            return 0, "".join(line + "\n" for line in self.lines), ""
        if argv[0] == "squeue":
            return 0, self.squeue, ""
        if self.effective and argv[2:4] == ["add", "qos"]:
            self.lines.append("%s|soperator: %s|0||cluster||||||||" % (argv[4], argv[4]))
        return 0, "", ""


def test_check_mode_runs_only_reads_and_a_run_reads_back():
    slurm = Sacctmgr(QOS_ROWS[:1])
    result = ap.apply(SlurmRunner(slurm), "qos", qos({"name": "new"}), check_mode=True)
    assert result["changed"] and result["commands"] == ["sacctmgr -i add qos new 'description=soperator: new'"]
    assert all(" -i " not in cmd for cmd in slurm.ran)
    result = ap.apply(SlurmRunner(slurm), "qos", qos({"name": "new"}))
    assert [c for c in slurm.ran if " -i " in c] == ["sacctmgr -i add qos new description=soperator: new"]
    assert slurm.ran[-1].startswith("sacctmgr -n -P show qos")          # read back
    assert ap.apply(SlurmRunner(slurm), "qos", qos({"name": "new"}))["changed"] is False


def test_a_command_sacctmgr_accepts_without_effect_fails_the_run():
    slurm = Sacctmgr(QOS_ROWS[:1], effective=False)
    with pytest.raises(SlurmError, match="does not show their effect: sacctmgr -i add qos new"):
        ap.apply(SlurmRunner(slurm), "qos", qos({"name": "new"}))


def test_purge_is_refused_naming_the_jobs_before_any_command():
    slurm = Sacctmgr(QOS_ROWS, squeue="17|RUNNING|alice\n18|PENDING|bob\n")
    with pytest.raises(ap.AccountingPlanError, match=r"qos high: 17 \(RUNNING, user alice\), 18 \(PENDING, user bob\)"):
        ap.apply(SlurmRunner(slurm), "qos", [], purge=True)
    assert [c for c in slurm.ran if " -i " in c] == []


def test_a_spec_gives_the_controller_pod_of_the_kubernetes_transport():
    import os
    from ansible_collections.soperator.slurm.plugins.module_utils import args
    from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
    from ansible_collections.soperator.slurm.plugins.module_utils.slurm import accounting_setup
    spec = os.path.join(os.path.dirname(__file__), "..", "..", "specs", "accounting-policy.yml")
    params = dict(args.merged_spec({}, *accounting_setup.SHARED))
    params = dict((k, v.get("default")) for k, v in params.items())
    params.update(transport="kubernetes", src=spec, definition=None, users=None)
    desired, model = accounting_setup.entries(params, "users")
    assert [u.name for u in desired] == ["daemon", "bin"]
    where = args.runner_from_params(accounting_setup.connection_params(params, model)).describe()
    assert (where["namespace"], where["pod"], where["container"]) == ("slurm", "acctpol-controller-0", "slurmctld")
    with pytest.raises(SoperatorError, match="needs namespace and cluster_name"):
        accounting_setup.connection_params(dict(params, src=None), None)
