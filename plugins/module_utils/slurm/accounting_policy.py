# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm accounts, users and QOS as declared (spec.accounting, spec/accounting.py), through sacctmgr on the one
Slurm runner (slurm/runner.py: a local process, or exec in the controller pod).

    result = apply(runner, "qos", [SlurmQos(...)], purge=False, check_mode=False)

One plan, from one parsable read (`sacctmgr -n -P show ...`) compared with what is declared: only the needed
`add` / `modify` (and, with purge, `delete`) commands. Check mode reports that plan; the real run executes it and
then reads everything back and plans again: a command sacctmgr accepted without doing it (it exits 0 when it
refuses an association) fails the run instead of passing for done. A field left out of an entry is left as Slurm
has it.

What we created: every account and QOS we add or change gets a Description that starts with spec/accounting.py's
MARKER ("soperator:"). Purge (opt-in) deletes only accounts and QOS so marked that are no longer declared, and
users' associations with such accounts; it never deletes anything while a job that would lose it is pending or
running: the whole run is refused before any command, naming the jobs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    SlurmError, SlurmOutputError, SlurmRunner, format_command)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.accounting import (
    ACCOUNT_LIMITS, DEFAULT_QOS, MARKER, QOS_LIMITS, ROOT_ACCOUNT, SlurmAccount, SlurmQos, SlurmUser, parse_tres,
    wall_minutes)

SACCTMGR = "sacctmgr"
KINDS = ("qos", "accounts", "users")
QOS_FIELDS = ["Name", "Description", "Priority", "Preempt", "PreemptMode"] + sorted(
    set(column for _kind, column in QOS_LIMITS.values()))
ASSOC_FIELDS = ["Account", "User", "ParentName", "Fairshare", "QOS", "DefaultQOS"] + sorted(
    set(column for _kind, column in ACCOUNT_LIMITS.values()))


class AccountingPlanError(SlurmError):
    """The declared entries cannot be applied to this cluster (a reference Slurm does not have, a purge that would
    take an account from running jobs): found before any command ran."""


def _show(runner: SlurmRunner, what: Sequence[str], fields: Sequence[str]) -> List[Dict[str, str]]:
    """Rows of `sacctmgr -n -P show <what> format=<fields>` as dicts."""
    argv = [SACCTMGR, "-n", "-P", "show"] + list(what) + ["format=%s" % ",".join(fields)]

    def parse(result):
        rows = []
        for line in result.stdout.splitlines():
            if not line.strip():
                continue
            cells = line.split("|")
            if len(cells) != len(fields):
                raise SlurmOutputError("%s printed %r: %d fields, expected %d" % (
                    format_command(argv), line, len(cells), len(fields)))
            rows.append(dict(zip(fields, cells)))
        return rows
    return runner.run(argv, parse=parse)[1] or []


def cluster_name(runner: SlurmRunner) -> str:
    """The ClusterName slurmctld runs with (associations are per cluster)."""
    def parse(result):
        m = re.search(r"^ClusterName\s*=\s*(\S+)", result.stdout, re.M)
        if not m:
            raise SlurmOutputError("scontrol show config printed no ClusterName")
        return m.group(1)
    return runner.run(["scontrol", "show", "config"], parse=parse)[1] or ""


# ------------------------------------------------------------------------------------------- values as compared

def _limit_value(kind: str, text: Optional[str]) -> Any:
    """A limit in comparable form: None for no limit (Slurm prints nothing; we write -1)."""
    if text is None or text.strip() in ("", "-1"):
        return {} if kind == "tres" else None
    if kind == "tres":
        return dict((k, v) for k, v in parse_tres(text).items() if v >= 0)
    if kind == "wall":
        minutes = wall_minutes(text if ":" in text or "-" in text else int(text))
        return None if minutes < 0 else minutes
    return int(text)


Change = Tuple[str, Optional[str], Optional[str]]       # field, as Slurm has it (None: new), as declared
AccountsRead = Tuple[Dict[str, str], Dict[Tuple[str, str], Dict[str, str]]]


def _limit_changes(table: Dict[str, Tuple[str, str]], current_row: Dict[str, str],
                   desired: Iterable[Tuple[str, str]]) -> List[Change]:
    """[(set key, old text, new text for sacctmgr)] of the declared limits that differ."""
    out: List[Change] = []
    for key, value in desired:
        kind, column = table[key]
        try:
            now = _limit_value(kind, current_row.get(column))
        except ValueError as e:
            raise SlurmOutputError("sacctmgr printed %s=%r: %s" % (column, current_row.get(column), e))
        want = _limit_value(kind, value)
        if now == want:
            continue
        if kind == "tres":
            # The whole TRES value is declared: a TRES Slurm has beyond it is cleared with -1.
            text = ",".join([value] + ["%s=-1" % k for k in sorted(set(now) - set(parse_tres(value)))])
            out.append((key, current_row.get(column, ""), text))
        else:
            out.append((key, current_row.get(column, ""), value))
    return out


class Plan(object):
    """Modifying commands in order, one entry per object touched, the diff's lines, the objects purge removes."""

    def __init__(self) -> None:
        self.commands: List[List[str]] = []
        self.items: List[Dict[str, Any]] = []
        self.before: List[str] = []
        self.after: List[str] = []
        self.deletions: List[Tuple[str, Dict[str, Any]]] = []      # (what, squeue filter) for the job check

    def add(self, kind: str, name: str, action: str, changes: List[Change], argv_list: List[List[str]],
            before: Optional[str] = None, after: Optional[str] = None) -> None:
        self.items.append({"kind": kind, "name": name, "action": action,
                           "changes": dict((k, {"before": o, "after": n}) for k, o, n in changes)})
        self.commands.extend(argv_list)
        if before:
            self.before.append(before)
        if after:
            self.after.append(after)


def _line(kind, name, fields):
    return "%s %s: %s\n" % (kind, name, " ".join("%s=%s" % (k, v) for k, v in fields) or "-")


# ---------------------------------------------------------------------------------------------------------- QOS

def read_qos(runner: SlurmRunner) -> Dict[str, Dict[str, str]]:
    return dict((row["Name"], row) for row in _show(runner, ["qos"], QOS_FIELDS))


def plan_qos(current: Dict[str, Dict[str, str]], desired: Sequence[SlurmQos], purge: bool) -> Plan:
    plan = Plan()
    names = set(q.name for q in desired) | set(current)
    later: List[List[str]] = []
    for qos in desired:
        for ref in qos.preempt or ():
            if ref not in names:
                raise AccountingPlanError("qos %s: preempt names QOS %r, which Slurm does not have and is not "
                                          "declared" % (qos.name, ref))
        row = current.get(qos.name)
        fields: List[Tuple[str, Optional[str]]] = [("description", qos.description)]
        if qos.priority is not None:
            fields.append(("priority", str(qos.priority)))
        if qos.preempt_mode is not None:
            fields.append(("preemptmode", qos.preempt_mode))
        preempt = ",".join(sorted(qos.preempt)) if qos.preempt is not None else None
        if row is None:
            argv = [SACCTMGR, "-i", "add", "qos", qos.name] + ["%s=%s" % kv for kv in fields] + \
                ["%s=%s" % kv for kv in qos.limits]
            changes: List[Change] = [(k, None, v) for k, v in list(fields) + list(qos.limits)]
            cmds = [argv]
            if preempt:
                later.append([SACCTMGR, "-i", "modify", "qos", "where", "name=%s" % qos.name, "set",
                              "preempt=%s" % preempt])
                changes.append(("preempt", None, preempt))
            plan.add("qos", qos.name, "add", changes, cmds, after=_line("qos", qos.name, [(k, n) for k, _o, n
                                                                                          in changes]))
            continue
        now = {"description": row["Description"], "priority": row["Priority"], "preemptmode": row["PreemptMode"]}
        changes = [(k, now[k], v) for k, v in fields if now[k] != v]
        if preempt is not None and set(filter(None, row["Preempt"].split(","))) != set(qos.preempt or ()):
            changes.append(("preempt", row["Preempt"], preempt))
        changes += _limit_changes(QOS_LIMITS, row, qos.limits)
        if changes:
            argv = [SACCTMGR, "-i", "modify", "qos", "where", "name=%s" % qos.name, "set"] + \
                ["%s=%s" % (k, n) for k, _o, n in changes]
            plan.add("qos", qos.name, "modify", changes, [argv],
                     before=_line("qos", qos.name, [(k, o) for k, o, _n in changes]),
                     after=_line("qos", qos.name, [(k, n) for k, _o, n in changes]))
        else:
            plan.add("qos", qos.name, "none", [], [])
    plan.commands.extend(later)
    if purge:
        declared = set(q.name for q in desired)
        for name in sorted(current):
            if name in declared or name == DEFAULT_QOS or not current[name]["Description"].startswith(MARKER):
                continue
            plan.add("qos", name, "delete", [], [[SACCTMGR, "-i", "delete", "qos", "where", "name=%s" % name]],
                     before=_line("qos", name, [("description", current[name]["Description"])]))
            plan.deletions.append(("qos %s" % name, {"qos": name}))
    return plan


# ----------------------------------------------------------------------------------------------------- accounts

def read_accounts(runner: SlurmRunner, cluster: str) -> AccountsRead:
    """({account: Description}, {(account, user): association row} of `cluster`)."""
    accounts = dict((row["Account"], row["Description"]) for row in
                    _show(runner, ["account"], ["Account", "Description"]))
    assocs = dict(((row["Account"], row["User"]), row) for row in
                  _show(runner, ["assoc", "where", "cluster=%s" % cluster], ASSOC_FIELDS))
    return accounts, assocs


def _tree_order(desired: Sequence[SlurmAccount]) -> List[SlurmAccount]:
    """Parents before their children (the spec refused cycles)."""
    by_name = dict((a.name, a) for a in desired)
    out: List[SlurmAccount] = []
    done: Set[str] = set()

    def visit(acct, depth=0):
        if acct.name in done or depth > len(desired):
            return
        if acct.parent in by_name:
            visit(by_name[acct.parent], depth + 1)
        done.add(acct.name)
        out.append(acct)
    for acct in desired:
        visit(acct)
    return out


def plan_accounts(current: AccountsRead, desired: Sequence[SlurmAccount], cluster: str, qos_names: Set[str],
                  purge: bool) -> Plan:
    accounts, assocs = current
    plan = Plan()
    declared = set(a.name for a in desired)
    for acct in _tree_order(desired):
        if acct.parent not in declared and (acct.parent, "") not in assocs:
            raise AccountingPlanError("account %s: its parent %r is neither declared nor an account of cluster %s"
                                      % (acct.name, acct.parent, cluster))
        for ref in list(acct.qos or ()) + ([acct.default_qos] if acct.default_qos else []):
            if ref not in qos_names:
                raise AccountingPlanError("account %s: Slurm has no QOS %r (slurm_qos adds QOS first)"
                                          % (acct.name, ref))
        fields: List[Tuple[str, Optional[str]]] = [("description", acct.description), ("parent", acct.parent)]
        if acct.fairshare is not None:
            fields.append(("fairshare", str(acct.fairshare)))
        if acct.qos is not None:
            fields.append(("qos", ",".join(sorted(acct.qos))))
        if acct.default_qos is not None:
            fields.append(("defaultqos", acct.default_qos))
        row = assocs.get((acct.name, ""))
        if row is None:
            changes: List[Change] = [(k, None, v) for k, v in list(fields) + list(acct.limits)]
            argv = [SACCTMGR, "-i", "add", "account", acct.name, "cluster=%s" % cluster] + \
                ["%s=%s" % (k, n) for k, _o, n in changes]
            plan.add("account", acct.name, "add", changes, [argv],
                     after=_line("account", acct.name, [(k, n) for k, _o, n in changes]))
            continue
        now = {"description": accounts.get(acct.name, ""), "parent": row["ParentName"],
               "fairshare": row["Fairshare"], "qos": ",".join(sorted(filter(None, row["QOS"].split(",")))),
               "defaultqos": row["DefaultQOS"]}
        changes = [(k, now[k], v) for k, v in fields if now[k] != v]
        changes += _limit_changes(ACCOUNT_LIMITS, row, acct.limits)
        if changes:
            argv = [SACCTMGR, "-i", "modify", "account", "where", "name=%s" % acct.name, "cluster=%s" % cluster,
                    "set"] + ["%s=%s" % (k, n) for k, _o, n in changes]
            plan.add("account", acct.name, "modify", changes, [argv],
                     before=_line("account", acct.name, [(k, o) for k, o, _n in changes]),
                     after=_line("account", acct.name, [(k, n) for k, _o, n in changes]))
        else:
            plan.add("account", acct.name, "none", [], [])
    if purge:
        ours = [name for (name, user) in assocs if not user and name not in declared and name != ROOT_ACCOUNT
                and accounts.get(name, "").startswith(MARKER)]
        parents = dict((name, assocs[(name, "")]["ParentName"]) for name in ours)

        def depth(name):
            d = 0
            while name in parents and d <= len(parents):
                name, d = parents[name], d + 1
            return d
        for name in sorted(ours, key=lambda n: (-depth(n), n)):          # children first
            plan.add("account", name, "delete", [], [[SACCTMGR, "-i", "delete", "account", "where",
                                                      "name=%s" % name, "cluster=%s" % cluster]],
                     before=_line("account", name, [("description", accounts[name])]))
            plan.deletions.append(("account %s" % name, {"accounts": name}))
    return plan


# -------------------------------------------------------------------------------------------------------- users

UsersRead = Tuple[Dict[str, Dict[str, str]], Dict[str, str], Dict[Tuple[str, str], Dict[str, str]]]


def read_users(runner: SlurmRunner, cluster: str) -> UsersRead:
    """({user: row}, {account: Description}, {(account, user): association row} of `cluster`)."""
    users = dict((row["User"], row) for row in _show(runner, ["user"], ["User", "DefaultAccount", "AdminLevel"]))
    accounts, assocs = read_accounts(runner, cluster)
    return users, accounts, assocs


def plan_users(current: UsersRead, desired: Sequence[SlurmUser], cluster: str, purge: bool) -> Plan:
    users, accounts, assocs = current
    plan = Plan()
    known_accounts = set(a for a, u in assocs if not u)
    for user in desired:
        for ref in user.accounts:
            if ref not in known_accounts:
                raise AccountingPlanError("user %s: Slurm has no account %r in cluster %s (slurm_account adds "
                                          "accounts first)" % (user.name, ref, cluster))
        have = set(a for a, u in assocs if u == user.name)
        missing = [a for a in user.accounts if a not in have]
        row = users.get(user.name)
        changes: List[Change] = []
        cmds: List[List[str]] = []
        if missing:
            argv = [SACCTMGR, "-i", "add", "user", user.name, "cluster=%s" % cluster,
                    "account=%s" % ",".join(missing)]
            if row is None:
                argv.append("defaultaccount=%s" % user.default_account)
                if user.admin_level is not None:
                    argv.append("adminlevel=%s" % user.admin_level)
            cmds.append(argv)
            changes.append(("accounts", ",".join(sorted(have)) or None, ",".join(sorted(have | set(missing)))))
        if row is not None:
            sets = []
            if row["DefaultAccount"] != user.default_account:
                sets.append(("defaultaccount", row["DefaultAccount"], user.default_account))
            if user.admin_level is not None and row["AdminLevel"] != user.admin_level:
                sets.append(("adminlevel", row["AdminLevel"], user.admin_level))
            if sets:
                cmds.append([SACCTMGR, "-i", "modify", "user", "where", "name=%s" % user.name, "set"] +
                            ["%s=%s" % (k, n) for k, _o, n in sets])
                changes += sets
        else:
            changes.append(("defaultaccount", None, user.default_account))
            if user.admin_level is not None:
                changes.append(("adminlevel", None, user.admin_level))
        action = "add" if row is None else ("modify" if cmds else "none")
        plan.add("user", user.name, action, changes, cmds,
                 before=_line("user", user.name, [(k, o) for k, o, _n in changes]) if row is not None and cmds
                 else None,
                 after=_line("user", user.name, [(k, n) for k, _o, n in changes]) if cmds else None)
    if purge:
        wanted = set((a, u.name) for u in desired for a in u.accounts)
        for (account, name) in sorted(assocs):
            if not name or (account, name) in wanted or not accounts.get(account, "").startswith(MARKER):
                continue
            plan.add("user", name, "delete", [("accounts", account, None)],
                     [[SACCTMGR, "-i", "delete", "user", "where", "name=%s" % name, "account=%s" % account,
                       "cluster=%s" % cluster]],
                     before=_line("user", name, [("account", account)]))
            plan.deletions.append(("user %s in account %s" % (name, account), {"users": name, "accounts": account}))
    return plan


# ---------------------------------------------------------------------------------------------------- the run

def active_jobs(runner: SlurmRunner, filters: Dict[str, str]) -> List[str]:
    """Pending, running, suspended or completing jobs that `filters` (squeue options: accounts, qos, users)
    select, as 'JOBID (STATE, user USER)'."""
    argv = ["squeue", "-h", "-t", "PD,R,S,CG,CF,RQ,RS,SO,ST", "-o", "%i|%T|%u"] + \
        ["--%s=%s" % (k, v) for k, v in sorted(filters.items())]
    out = runner.run(argv)[0].stdout
    jobs = []
    for line in out.splitlines():
        cells = line.strip().split("|")
        if len(cells) == 3:
            jobs.append("%s (%s, user %s)" % tuple(cells))
    return jobs


def _read(runner, kind, cluster):
    if kind == "qos":
        return read_qos(runner)
    if kind == "accounts":
        return read_accounts(runner, cluster)
    return read_users(runner, cluster)


def _plan(runner, kind, current, desired, cluster, purge):
    if kind == "qos":
        return plan_qos(current, desired, purge)
    if kind == "accounts":
        qos_names = set(read_qos(runner)) if any(a.qos or a.default_qos for a in desired) else set()
        return plan_accounts(current, desired, cluster, qos_names, purge)
    return plan_users(current, desired, cluster, purge)


def _known_tres(runner: SlurmRunner) -> Set[str]:
    rows = _show(runner, ["tres"], ["Type", "Name"])
    return set(r["Type"] + ("/" + r["Name"] if r["Name"] else "") for r in rows)


def _check_tres(runner, kind, desired):
    """A TRES Slurm does not track makes sacctmgr refuse the whole command: found before any command."""
    wanted = []
    for item in desired:
        for key, value in getattr(item, "limits", ()):
            if "TRES" in key:
                wanted += [(item.name, key, name) for name in parse_tres(value)]
    if not wanted:
        return
    known = _known_tres(runner)
    for name, key, tres in wanted:
        if tres not in known:
            raise AccountingPlanError(
                "%s %s: %s names TRES %r, which this cluster does not track (known: %s; AccountingStorageTRES adds "
                "others)" % (kind, name, key, tres, ", ".join(sorted(known))))


def apply(runner: SlurmRunner, kind: str, desired: Sequence[Any], purge: bool = False, check_mode: bool = False,
          cluster: Optional[str] = None) -> Dict[str, Any]:
    """Bring Slurm's `kind` (qos, accounts, users) to `desired`; the module's result."""
    if kind != "qos" and not cluster:
        cluster = cluster_name(runner)
    _check_tres(runner, kind, desired)
    current = _read(runner, kind, cluster)
    plan = _plan(runner, kind, current, desired, cluster, purge)
    refused = []
    for what, filters in plan.deletions:
        jobs = active_jobs(runner, filters)
        if jobs:
            refused.append("%s: %s" % (what, ", ".join(jobs)))
    result: Dict[str, Any] = {
        "changed": bool(plan.commands), "cluster": cluster,
        "commands": [format_command(argv) for argv in plan.commands],
        "items": plan.items, "diff": {"before": "".join(plan.before), "after": "".join(plan.after)},
    }
    if refused:
        raise AccountingPlanError("purge refused, nothing was changed: jobs pending or running would lose what it "
                                  "deletes: %s" % "; ".join(refused), result=dict(result, changed=False))
    if check_mode or not plan.commands:
        return result
    done: List[str] = []
    for argv in plan.commands:
        try:
            runner.run(argv)
        except SlurmError as e:
            raise SlurmError(str(e), result=dict(result, commands=done + [format_command(argv)]))
        done.append(format_command(argv))
    again = _plan(runner, kind, _read(runner, kind, cluster), desired, cluster, purge)
    if again.commands:
        raise SlurmError("sacctmgr accepted these commands but Slurm does not show their effect: %s"
                         % "; ".join(format_command(a) for a in again.commands), result=result)
    return result
