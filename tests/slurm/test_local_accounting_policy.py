"""spec.accounting on real Slurm (slurmctld + slurmdbd + MariaDB of the local backend), issue 31.

One cluster for the whole file, brought up by playbooks/site.yml from tests/specs/accounting-policy.yml, which also
applies its QOS, accounts and users through slurm_qos / slurm_account / slurm_user. Shown: a re-run runs no sacctmgr
command; check mode lists the plan and changes nothing; bad input fails with field paths before any command; fair
share 1:3 orders the next jobs after an equal load; a QOS preempts (requeue) on a full cluster, as sacct shows; an
account's GrpTRES holds a job with AssocGrpCpuLimit until the first ends; afterok dependencies and a user's
reservation. Jobs run as the host's system users daemon and bin (root submits for them with --uid).
"""
import os
import shutil
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from local_helpers import JOB_WAIT, wait_job
from requires import ACCOUNTING, SLURM, skip_without
from waiting import wait_for

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "tests", "specs", "accounting-policy.yml")
TASKS = {"qos": "soperator.slurm.cluster : Apply the spec's Slurm QOS (spec.accounting.qos)",
         "accounts": "soperator.slurm.cluster : Apply the spec's Slurm accounts (spec.accounting.accounts)",
         "users": "soperator.slurm.cluster : Apply the spec's Slurm users (spec.accounting.users)"}
# PriorityCalcPeriod is 1 minute (Slurm's least): fair-share factors follow usage within two periods.
FAIRSHARE_WAIT = 200

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed")


def site(state, spec, *extra, expect_rc=0):
    out = ansible_run.playbook(os.path.join(ROOT, "playbooks", "site.yml"), "-e", "slurm_target=local",
                               "-e", "spec_file=%s" % spec, "-e", "state_dir=%s" % state, "-e", "login=false",
                               *extra, expect_rc=expect_rc)
    tasks = dict((t["task"]["name"], t["hosts"].get("localhost", {})) for t in out.json()["plays"][0]["tasks"])
    return tasks


@pytest.fixture(scope="module")
def cluster():
    """(LocalCluster, the first site.yml run's tasks)."""
    skip_without(SLURM + ACCOUNTING)
    state = tempfile.mkdtemp(prefix="sop-acct-", dir="/tmp")
    os.chmod(state, 0o755)
    try:
        first = site(state, SPEC)
        yield lb.LocalCluster(state), first
    finally:
        lb.LocalCluster(state).stop(purge=True)
        assert lb.LocalCluster(state).leftover_processes() == []


def run(c, *argv, check=True):
    return c.run(list(argv), timeout=60, check=check)


def sbatch(c, *args):
    return run(c, "sbatch", "--parsable", "-o", "/dev/null", *args).stdout.strip().split(";")[0]


def squeue(c, job, fmt):
    return run(c, "squeue", "-h", "-j", job, "-o", fmt).stdout.strip()


def assoc_rows(c):
    return sorted(run(c, "sacctmgr", "-n", "-P", "show", "assoc", "where", "cluster=acctpol",
                      "format=Account,User,ParentName,Fairshare,GrpTRES,MaxJobs,QOS").stdout.split())


def wait_idle(c):
    """No job left (the previous test's are cancelled): every test starts on an empty cluster."""
    run(c, "scancel", "--user=daemon")
    run(c, "scancel", "--user=bin")

    def queued():
        return run(c, "squeue", "-h", "-o", "%i").stdout.split()
    wait_for(queued, "the queue to empty", JOB_WAIT, poll=0.5, done=lambda jobs: not jobs)


def test_site_applies_the_spec_and_a_rerun_runs_no_sacctmgr_command(cluster, tmp_path):
    c, first = cluster
    assert first[TASKS["qos"]]["changed"] is True
    assert "sacctmgr -i modify qos where name=urgent set preempt=normal" in first[TASKS["qos"]]["commands"]
    assert any(cmd.startswith("sacctmgr -i add account high-share cluster=acctpol")
               for cmd in first[TASKS["accounts"]]["commands"])
    rows = assoc_rows(c)
    assert "high-share||science|3|||capped,normal,urgent" in rows
    assert "low-share|daemon||1|||capped,normal,urgent" in rows
    assert "small||root|1|cpu=1|4|normal" in rows
    conf = run(c, "scontrol", "show", "config").stdout
    for line in ("PriorityType            = priority/multifactor", "PreemptType             = preempt/qos",
                 "PreemptMode             = REQUEUE", "AccountingStorageEnforce = associations,limits,qos"):
        assert line in conf

    again = site(c.state_dir, SPEC)
    for task in TASKS.values():
        assert again[task]["changed"] is False and again[task]["commands"] == [], again[task]
        assert all(" -i " not in q for q in again[task]["queries"])
    assert assoc_rows(c) == rows

    # Check mode with a changed share lists the sacctmgr plan and changes nothing.
    with open(SPEC) as f:
        changed = f.read().replace("fairshare: 3", "fairshare: 5")
    spec = tmp_path / "changed.yml"
    spec.write_text(changed)
    planned = site(c.state_dir, str(spec), "--check", "--diff")
    task = planned[TASKS["accounts"]]
    assert task["changed"] is True
    assert task["commands"] == ["sacctmgr -i modify account where name=high-share cluster=acctpol set fairshare=5"]
    assert task["diff"] == {"before": "account high-share: fairshare=3\n", "after": "account high-share: fairshare=5\n"}
    assert assoc_rows(c) == rows


def test_bad_input_names_field_paths_and_runs_nothing(cluster):
    c, _first = cluster
    before = assoc_rows(c)
    bad = [{"name": "Physics", "limits": {"GrpTRES": "cpu=-2", "MaxJobs": -5}},
           {"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]
    out = ansible_run.module("soperator.slurm.slurm_account", {"accounts": bad, "slurm_conf": c.layout.slurm_conf},
                             expect_failed=True)
    paths = sorted(e["path"] for e in out["errors"])
    assert paths == ["accounts[0].limits.GrpTRES", "accounts[0].limits.MaxJobs", "accounts[0].name",
                     "accounts[1].parent"], out["errors"]
    assert "queries" not in out and "commands" not in out
    qos = ansible_run.module("soperator.slurm.slurm_qos",
                             {"qos": [{"name": "x", "preempt": ["x"]}], "slurm_conf": c.layout.slurm_conf},
                             expect_failed=True)
    assert qos["errors"] == [{"path": "qos[0].preempt[0]", "message": "a QOS cannot preempt itself"}]
    assert assoc_rows(c) == before


def test_purge_refuses_an_account_with_jobs_naming_them(cluster):
    c, _first = cluster
    wait_idle(c)
    job = sbatch(c, "--uid=daemon", "-A", "small", "--wrap", "sleep 300")
    wait_job(c, job, ("RUNNING",))
    keep = [{"name": "science"}, {"name": "low-share", "parent": "science"},
            {"name": "high-share", "parent": "science"}]
    out = ansible_run.module("soperator.slurm.slurm_account", {"accounts": keep, "purge": True,
                                                               "slurm_conf": c.layout.slurm_conf}, expect_failed=True)
    assert "account small: %s (RUNNING, user daemon)" % job in out["msg"]
    assert out["changed"] is False
    assert "small||root|1|cpu=1|4|normal" in assoc_rows(c)
    run(c, "scancel", job)


def _fairshare(c, job):
    """sprio's weighted fair-share factor of a pending job; None until sprio lists it."""
    line = run(c, "sprio", "-h", "-n", "-j", job, "-o", "%F", check=False).stdout.strip()
    try:
        return float(line)
    except ValueError:
        return None


def test_fair_share_1_to_3_starts_the_lower_usage_account_first(cluster):
    c, _first = cluster
    wait_idle(c)
    # The load: one CPU each, side by side; bin's account a little more (12 s against 10 s), so that only its 3
    # shares against 1 can put it first (with equal loads two tied accounts would be ordered by chance, and a run
    # with shares 1:1 could pass too; with these it fails).
    loads = [sbatch(c, "--uid=%s" % user, "--wrap", "sleep %d" % secs) for user, secs in (("daemon", 10), ("bin", 12))]
    for job in loads:
        assert wait_job(c, job) == "COMPLETED"
    # root's job holds the whole cluster while the next job of each waits; each needs the whole cluster too, so
    # only one of them can start when it ends.
    blocker = sbatch(c, "-N2", "--wrap", "sleep 300")
    wait_job(c, blocker, ("RUNNING",))
    low = sbatch(c, "--uid=daemon", "-N2", "--wrap", "sleep 30")
    high = sbatch(c, "--uid=bin", "-N2", "--wrap", "sleep 30")
    # Once the decay thread took the usage in: bin's account (3 shares) used 1.2 times what daemon's (1 share) did,
    # so its level fair share is 2.5 times daemon's; sprio shows its factor higher.
    factors = wait_for(lambda: (_fairshare(c, low), _fairshare(c, high)), "fair-share factors to differ",
                       FAIRSHARE_WAIT, poll=2, done=lambda f: None not in f and f[1] > f[0])
    assert factors[1] > factors[0]
    order = run(c, "squeue", "-h", "--sort=-p", "-t", "PD", "-o", "%i").stdout.split()
    assert order.index(high) < order.index(low)
    run(c, "scancel", blocker)
    assert wait_job(c, high, ("RUNNING",)) == "RUNNING"
    assert squeue(c, low, "%T") == "PENDING"
    run(c, "scancel", low, high)


def test_urgent_qos_preempts_and_requeues_a_running_job(cluster):
    c, _first = cluster
    wait_idle(c)
    victim = sbatch(c, "--uid=bin", "-N2", "--wrap", "sleep 300")
    wait_job(c, victim, ("RUNNING",))
    urgent = sbatch(c, "--uid=bin", "-N1", "--qos=urgent", "--wrap", "sleep 2")
    assert wait_job(c, urgent, ("COMPLETED",)) == "COMPLETED"

    def records():
        out = run(c, "sacct", "-X", "-n", "-P", "-D", "-j", "%s,%s" % (victim, urgent),
                  "-o", "JobID,QOS,State,Start,End").stdout.split()
        return [line.split("|") for line in out]
    # Both records with their QOS names: once, under a cold CI run's load, sacct printed the urgent job's QOS as
    # "Unknown" (sacct's word for a QOS id missing from the list slurmdbd sends; why, not established). A name that
    # never comes still fails the wait, with the rows seen.
    rows = wait_for(records, "sacct to record the preemption with both QOS", JOB_WAIT, poll=1,
                    done=lambda rs: any(r[0] == victim and r[2] == "PREEMPTED" and r[1] == "normal" for r in rs)
                    and any(r[0] == urgent and r[2] == "COMPLETED" and r[1] == "urgent" for r in rs))
    preempted = [r for r in rows if r[0] == victim and r[2] == "PREEMPTED"][0]
    started = [r for r in rows if r[0] == urgent and r[2] == "COMPLETED"][0]
    assert preempted[1] == "normal" and started[1] == "urgent", rows
    assert preempted[4] <= started[3]           # the victim ended as the preemptor started (same second or before)
    # requeued (PreemptMode=REQUEUE): the victim is back in the queue, then runs again
    assert wait_job(c, victim, ("RUNNING", "PENDING")) in ("RUNNING", "PENDING")
    run(c, "scancel", victim)


def test_grp_tres_limit_holds_a_job_until_the_first_ends(cluster):
    c, _first = cluster
    wait_idle(c)
    first = sbatch(c, "--uid=daemon", "-A", "small", "--wrap", "sleep 4")
    wait_job(c, first, ("RUNNING",))
    second = sbatch(c, "--uid=daemon", "-A", "small", "--wrap", "true")
    wait_for(lambda: squeue(c, second, "%T %r"), "the second job to wait on its account's limit", JOB_WAIT,
             poll=0.5, done=lambda s: s == "PENDING AssocGrpCpuLimit")
    assert wait_job(c, first) == "COMPLETED"
    assert wait_job(c, second) == "COMPLETED"          # ran once under the limit


def test_afterok_dependency(cluster):
    c, _first = cluster
    wait_idle(c)
    ok = sbatch(c, "--uid=bin", "--wrap", "sleep 3")
    after = sbatch(c, "--uid=bin", "--dependency=afterok:%s" % ok, "--wrap", "true")
    assert squeue(c, after, "%T %r") == "PENDING Dependency"
    assert wait_job(c, ok) == "COMPLETED"
    assert wait_job(c, after) == "COMPLETED"
    failed = sbatch(c, "--uid=bin", "--wrap", "false")
    never = sbatch(c, "--uid=bin", "--dependency=afterok:%s" % failed, "--wrap", "true")
    assert wait_job(c, failed) == "FAILED"
    wait_for(lambda: squeue(c, never, "%T %r"), "the dependent job to be never satisfied", JOB_WAIT, poll=0.5,
             done=lambda s: s == "PENDING DependencyNeverSatisfied")
    run(c, "scancel", never)


def test_reservation_for_a_user(cluster):
    c, _first = cluster
    wait_idle(c)
    run(c, "scontrol", "create", "reservation", "ReservationName=daemons", "Users=daemon", "Nodes=cpu-1",
        "StartTime=now", "Duration=10")
    try:
        job = sbatch(c, "--uid=daemon", "--reservation=daemons", "--wrap", "true")
        assert wait_job(c, job) == "COMPLETED"
        assert run(c, "sacct", "-X", "-n", "-P", "-j", job, "-o", "NodeList").stdout.split()[0] == "cpu-1"
        refused = run(c, "sbatch", "--uid=bin", "--reservation=daemons", "-o", "/dev/null", "--wrap", "true",
                      check=False)
        assert refused.returncode != 0 and "Access denied" in refused.stderr
        assert "Users=daemon " in run(c, "scontrol", "show", "reservation", "daemons").stdout
    finally:
        run(c, "scontrol", "delete", "ReservationName=daemons")
