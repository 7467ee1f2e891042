# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster's accounting policy: `spec.accounting.accounts`, `.users`, `.qos` (what sacctmgr holds) and
`.policy` (the scheduling policy slurm.conf holds: priority/multifactor weights, preemption, enforcement). One place
for their schema, their rules across entries, and their model; slurm/accounting_policy.py applies the first three
with sacctmgr, render/slurm_conf.py writes the fourth.

Every value is checked before any command runs: names Slurm would refuse or change (sacctmgr lowercases names and
descriptions and splits at commas), TRES strings, negative limits (-1 is Slurm's "no limit"), an account that is its
own ancestor, a QOS that preempts itself. The modules slurm_account / slurm_user / slurm_qos take the same entries.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import (
    Arr, Bool, Int, IntOrStr, Node, Obj, SpecError, SpecIssue, Str)

# What sacctmgr keeps as given: lowercase (it lowercases names), no comma (it splits lists there), no quote, space or
# '|' (its parsable output's separator).
NAME = r"^[a-z0-9_][-a-z0-9_.]*$"
NAME_HELP = "is not a Slurm name Slurm keeps as written: lowercase letters, digits, '_', '-' and '.' (sacctmgr " \
            "lowercases names and splits them at commas)"
MAX_NAME = 64
DESCRIPTION = r"^[-a-z0-9 _.,:;/()+@#]*$"
DESCRIPTION_HELP = "may hold only lowercase letters, digits, spaces and -_.,:;/()+@# (sacctmgr lowercases it; " \
                   "quotes and '|' do not survive)"
# Every account and QOS we create carries this at the start of its Description: purge removes only those.
MARKER = "soperator:"
ROOT_ACCOUNT = "root"
DEFAULT_QOS = "normal"
UINT32_MAX = 2 ** 32 - 1
# TRES: cpu=4,mem=16G,node=2,gres/gpu=8,license/foo=1. -1 clears one TRES's limit.
TRES_NAME = re.compile(r"^([a-z]+)(/[a-z0-9_.:-]+)?$")
TRES_SCALE = {"": 1, "K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
ADMIN_LEVELS = ["None", "Operator", "Administrator"]
# Slurm 22.05 stores a QOS PreemptMode "off" as "cluster" (it would never read back): not offered.
PREEMPT_MODES = ["cluster", "cancel", "requeue"]
ENFORCE = ["associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps"]

# The limits each kind takes: spec key (sacctmgr's `set` name) -> (value kind, the `show` column).
ACCOUNT_LIMITS = {"GrpTRES": ("tres", "GrpTRES"), "GrpJobs": ("count", "GrpJobs"),
                  "GrpSubmitJobs": ("count", "GrpSubmit"), "MaxJobs": ("count", "MaxJobs"),
                  "MaxSubmitJobs": ("count", "MaxSubmit"), "MaxWall": ("wall", "MaxWall"),
                  "MaxTRESPerJob": ("tres", "MaxTRES")}
QOS_LIMITS = {"GrpTRES": ("tres", "GrpTRES"), "GrpJobs": ("count", "GrpJobs"),
              "GrpSubmitJobs": ("count", "GrpSubmit"), "MaxTRESPerUser": ("tres", "MaxTRESPU"),
              "MaxJobsPerUser": ("count", "MaxJobsPU"), "MaxSubmitJobsPerUser": ("count", "MaxSubmitPU"),
              "MaxWall": ("wall", "MaxWall"), "MaxTRESPerJob": ("tres", "MaxTRES")}


def parse_tres(text: str) -> Dict[str, int]:
    """'cpu=2,mem=4G' -> {'cpu': 2, 'mem': 4096} (memory in MiB, as Slurm counts it). ValueError names the item."""
    out: Dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not TRES_NAME.match(name):
            raise ValueError("%r is not <tres>=<count> (cpu=4, mem=16G, gres/gpu=8)" % item)
        if name in out:
            raise ValueError("%s is given twice" % name)
        m = re.match(r"^(-1|\d{1,18})([KMGTP]?)$", value)
        if not m:
            raise ValueError("%s=%s: the count must be a whole number >= 0 (or -1: no limit)" % (name, value))
        if m.group(2) and name not in ("mem", "vmem"):
            raise ValueError("%s=%s: only mem takes a unit" % (name, value))
        count = int(m.group(1))
        scaled = count * TRES_SCALE[m.group(2)] if count >= 0 else -1
        if scaled != int(scaled):
            raise ValueError("%s=%s is not a whole number of MiB" % (name, value))
        out[name] = int(scaled)
    return out


def tres_text(tres: Dict[str, int]) -> str:
    """The canonical form we write: sorted, memory in MiB with its unit."""
    return ",".join("%s=%s" % (k, ("%dM" % v if k in ("mem", "vmem") and v >= 0 else v)) for k, v in sorted(tres.items()))


def wall_minutes(value: Any) -> int:
    """MaxWall as minutes: an int, or Slurm's [days-]hours:minutes[:seconds] / minutes text. ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < -1:
            raise ValueError("must be >= 0 minutes (or -1: no limit), got %d" % value)
        return value
    m = SLURM_TIME.match(str(value))
    if not m:
        raise ValueError("%r is not minutes or [days-]hours:minutes[:seconds]" % (value,))
    days, first, second, third = m.groups()
    if second is None and days is None:
        return int(first)                                   # "90": minutes
    hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
    if days is not None and second is None:
        minutes = 0                                         # "1-2": days-hours
    if seconds:
        raise ValueError("%r: Slurm keeps MaxWall in whole minutes" % (value,))
    return (int(days or 0) * 24 + hours) * 60 + minutes


def _problem(parse):
    def check(value):
        try:
            parse(value)
        except ValueError as e:
            return str(e)
        return None
    return check


def _limits(table, what):
    props: Dict[str, Node] = {}
    for key, (kind, _column) in sorted(table.items()):
        if kind == "tres":
            props[key] = Str("%s %s as TRES (cpu=4,mem=16G,gres/gpu=8); a TRES at -1 has no limit." % (what, key),
                             checks=[_problem(parse_tres)], max_length=1024)
        elif kind == "count":
            props[key] = Int("%s %s (-1: no limit)." % (what, key), minimum=-1, maximum=UINT32_MAX)
        else:
            props[key] = IntOrStr("%s %s: minutes or [days-]hours:minutes (-1: no limit)." % (what, key),
                                  checks=[_problem(wall_minutes)])
    return Obj("Slurm limits (sacctmgr's names). A limit left out is left as Slurm has it; -1 removes it.", props,
               optional=True)


def _name(description):
    return Str(description, pattern=NAME, pattern_help=NAME_HELP, max_length=MAX_NAME)


def _description():
    return Str("Description; Slurm shows it after %r, which marks what this collection created." % MARKER,
               pattern=DESCRIPTION, pattern_help=DESCRIPTION_HELP, max_length=200)


ACCOUNT = Obj("A Slurm account and its association in this cluster.", {
    "name": _name("Account name."),
    "parent": _name("Parent account (default root)."),
    "description": _description(),
    "fairshare": Int("Fairshare: the account's shares among its siblings.", minimum=0, maximum=UINT32_MAX),
    "limits": _limits(ACCOUNT_LIMITS, "The account's"),
    "qos": Arr(_name(""), "QOS its jobs may use (default: inherited from the parent)."),
    "defaultQos": _name("Its default QOS (one of qos)."),
}, required=("name",))
USER = Obj("A Slurm user (the Unix user name) and its associations.", {
    "name": Str("User name.", pattern=r"^[a-z_][-a-z0-9_.]*$", max_length=MAX_NAME,
                pattern_help="is not a user name Slurm keeps as written (lowercase letters, digits, '_', '-', '.')"),
    "defaultAccount": _name("Its default account."),
    "accounts": Arr(_name(""), "Accounts it may charge (default: defaultAccount)."),
    "adminLevel": Str("Slurm AdminLevel.", enum=ADMIN_LEVELS),
}, required=("name", "defaultAccount"))
QOS = Obj("A Slurm QOS.", {
    "name": _name("QOS name."),
    "description": _description(),
    "priority": Int("Priority (the QOS factor of priority/multifactor).", minimum=0, maximum=UINT32_MAX),
    "preempt": Arr(_name(""), "QOS whose jobs this QOS's jobs may preempt (PreemptType=preempt/qos)."),
    "preemptMode": Str("PreemptMode for jobs it preempts (cluster: slurm.conf's).", enum=PREEMPT_MODES),
    "limits": _limits(QOS_LIMITS, "The QOS's"),
}, required=("name",))


def accounting_fields() -> Dict[str, Node]:
    """The keys spec.accounting gains (fields.py's ACCOUNTING)."""
    return {
        "accounts": Arr(ACCOUNT, "Slurm accounts (a tree through parent), applied with sacctmgr by site.yml "
                                 "(soperator.slurm.slurm_account).", default=[], unique_key="name"),
        "users": Arr(USER, "Slurm users and their accounts (soperator.slurm.slurm_user).", default=[],
                     unique_key="name"),
        "qos": Arr(QOS, "Slurm QOS (soperator.slurm.slurm_qos).", default=[], unique_key="name"),
        "policy": Obj("The scheduling policy in slurm.conf.", {
            "priority": Obj("PriorityType=priority/multifactor with these weights (absent: Slurm's default, "
                            "priority/basic).", dict({
                                "weight%s" % k: Int("PriorityWeight%s." % k, minimum=0, maximum=UINT32_MAX)
                                for k in ("Age", "Fairshare", "JobSize", "Partition", "QOS")}, **{
                                "decayHalfLife": Int("PriorityDecayHalfLife in minutes (0: no decay).", minimum=0,
                                                     maximum=UINT32_MAX // 60),
                                "calcPeriod": Int("PriorityCalcPeriod in minutes.", minimum=1, maximum=UINT32_MAX // 60),
                                "maxAge": Int("PriorityMaxAge in minutes.", minimum=0, maximum=UINT32_MAX // 60),
                                "favorSmall": Bool("PriorityFavorSmall."),
                            }), optional=True),
            "preemption": Obj("PreemptType and PreemptMode.", {
                "type": Str("preempt/<type>.", enum=["qos", "partition_prio"]),
                # OFF: Slurm refuses it beside a PreemptType ("PreemptType and PreemptMode values incompatible");
                # SUSPEND needs GANG (time slicing), not offered.
                "mode": Str("PreemptMode: what happens to a preempted job.", enum=["cancel", "requeue"]),
            }, optional=True, required=("type", "mode")),
            "enforce": Arr(Str(enum=ENFORCE), "AccountingStorageEnforce."),
        }),
    }


@dataclass(frozen=True)
class SlurmAccount:
    name: str
    parent: str = ROOT_ACCOUNT
    description: Optional[str] = None       # as Slurm shows it, with MARKER
    fairshare: Optional[int] = None
    limits: Tuple[Tuple[str, str], ...] = ()    # sacctmgr `set` key and canonical value, sorted
    qos: Optional[Tuple[str, ...]] = None
    default_qos: Optional[str] = None


@dataclass(frozen=True)
class SlurmUser:
    name: str
    default_account: str
    accounts: Tuple[str, ...] = ()
    admin_level: Optional[str] = None


@dataclass(frozen=True)
class SlurmQos:
    name: str
    description: Optional[str] = None
    priority: Optional[int] = None
    preempt: Optional[Tuple[str, ...]] = None
    preempt_mode: Optional[str] = None
    limits: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SchedulingPolicy:
    """slurm.conf's scheduling keys, in the order written; empty: none of them."""
    settings: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AccountingPolicy:
    accounts: Tuple[SlurmAccount, ...] = ()
    users: Tuple[SlurmUser, ...] = ()
    qos: Tuple[SlurmQos, ...] = ()
    scheduling: SchedulingPolicy = field(default_factory=SchedulingPolicy)


def marked(description: Optional[str], name: str) -> str:
    return "%s %s" % (MARKER, description or name)


def _canonical_limits(limits, table):
    out = []
    for key in sorted(limits or {}):
        value = limits[key]
        if value is None:
            continue
        kind = table[key][0]
        if kind == "tres":
            out.append((key, tres_text(parse_tres(value))))
        elif kind == "wall":
            out.append((key, str(wall_minutes(value))))
        else:
            out.append((key, str(value)))
    return tuple(out)


def account_model(entry: Dict[str, Any]) -> SlurmAccount:
    return SlurmAccount(entry["name"], entry.get("parent") or ROOT_ACCOUNT, marked(entry.get("description"),
                                                                                   entry["name"]),
                        entry.get("fairshare"), _canonical_limits(entry.get("limits"), ACCOUNT_LIMITS),
                        tuple(entry["qos"]) if entry.get("qos") is not None else None, entry.get("defaultQos"))


def user_model(entry: Dict[str, Any]) -> SlurmUser:
    accounts = list(entry.get("accounts") or [])
    if entry["defaultAccount"] not in accounts:
        accounts.insert(0, entry["defaultAccount"])
    return SlurmUser(entry["name"], entry["defaultAccount"], tuple(accounts), entry.get("adminLevel"))


def qos_model(entry: Dict[str, Any]) -> SlurmQos:
    return SlurmQos(entry["name"], marked(entry.get("description"), entry["name"]), entry.get("priority"),
                    tuple(entry["preempt"]) if entry.get("preempt") is not None else None, entry.get("preemptMode"),
                    _canonical_limits(entry.get("limits"), QOS_LIMITS))


def scheduling_model(policy: Dict[str, Any]) -> SchedulingPolicy:
    settings: List[Tuple[str, str]] = []
    priority = policy.get("priority")
    if priority is not None:
        settings.append(("PriorityType", "priority/multifactor"))
        for key, conf in (("decayHalfLife", "PriorityDecayHalfLife"), ("calcPeriod", "PriorityCalcPeriod"),
                          ("maxAge", "PriorityMaxAge")):
            if priority.get(key) is not None:
                settings.append((conf, str(priority[key])))
        if priority.get("favorSmall") is not None:
            settings.append(("PriorityFavorSmall", "YES" if priority["favorSmall"] else "NO"))
        for key in sorted(k for k in priority if k.startswith("weight")):
            if priority[key] is not None:
                settings.append(("PriorityWeight%s" % key[len("weight"):], str(priority[key])))
    preemption = policy.get("preemption")
    if preemption is not None:
        settings.append(("PreemptType", "preempt/%s" % preemption["type"]))
        settings.append(("PreemptMode", preemption["mode"].upper()))
    if policy.get("enforce"):
        settings.append(("AccountingStorageEnforce", ",".join(policy["enforce"])))
    return SchedulingPolicy(tuple(settings))


def policy_model(accounting: Dict[str, Any]) -> AccountingPolicy:
    """The model of a validated spec.accounting."""
    return AccountingPolicy(tuple(account_model(a) for a in accounting["accounts"]),
                            tuple(user_model(u) for u in accounting["users"]),
                            tuple(qos_model(q) for q in accounting["qos"]),
                            scheduling_model(accounting["policy"]))


# ------------------------------------------------------------------------------------------------ rules across entries

def parent_cycles(accounts: Sequence[Dict[str, Any]]) -> List[List[str]]:
    """Each cycle of the parent links once, as [a, b, ..., a], starting at its first account in list order."""
    parent = dict((a["name"], a.get("parent") or ROOT_ACCOUNT) for a in accounts
                  if isinstance(a, dict) and isinstance(a.get("name"), str))
    cycles, seen = [], set()
    for start in parent:
        path: List[str] = []
        node = start
        while node in parent and node not in path and node not in seen:
            path.append(node)
            node = parent[node]
        if node in path:
            cycles.append(path[path.index(node):] + [node])
        seen.update(path)
    return cycles


def entry_issues(prefix: str, accounts: Sequence[Any], users: Sequence[Any], qos: Sequence[Any],
                 closed: bool) -> List[SpecIssue]:
    """Rules across entries. `closed`: every account and QOS referred to must be listed (a spec); else (a module's
    list) a reference may name one that Slurm already has, which the plan checks."""
    issues = []
    accounts = [a for a in accounts if isinstance(a, dict)]
    users = [u for u in users if isinstance(u, dict)]
    qos = [q for q in qos if isinstance(q, dict)]
    account_names = set(a.get("name") for a in accounts) | {ROOT_ACCOUNT}
    qos_names = set(q.get("name") for q in qos) | {DEFAULT_QOS}

    def ref(path, value, known, what):
        if closed and isinstance(value, str) and value not in known:
            issues.append(SpecIssue(path, "unknown %s %r (known: %s)" % (what, value, ", ".join(sorted(known)))))

    index = dict((a.get("name"), i) for i, a in enumerate(accounts))
    for i, acct in enumerate(accounts):
        path = "%saccounts[%d]" % (prefix, i)
        if acct.get("name") == ROOT_ACCOUNT:
            issues.append(SpecIssue(path + ".name", "root is Slurm's own account: give its children instead"))
        ref(path + ".parent", acct.get("parent"), account_names, "account")
        for j, name in enumerate(acct.get("qos") or []):
            ref("%s.qos[%d]" % (path, j), name, qos_names, "QOS")
        if acct.get("defaultQos") is not None and acct.get("qos") is not None \
                and acct["defaultQos"] not in acct["qos"]:
            issues.append(SpecIssue(path + ".defaultQos", "%r is not in its qos list" % acct["defaultQos"]))
    for cycle in parent_cycles(accounts):
        issues.append(SpecIssue("%saccounts[%d].parent" % (prefix, index[cycle[0]]),
                                "accounts form a cycle: %s" % " -> ".join(cycle)))
    for i, user in enumerate(users):
        path = "%susers[%d]" % (prefix, i)
        ref(path + ".defaultAccount", user.get("defaultAccount"), account_names, "account")
        for j, name in enumerate(user.get("accounts") or []):
            ref("%s.accounts[%d]" % (path, j), name, account_names, "account")
        if user.get("accounts") and user.get("defaultAccount") not in user["accounts"]:
            issues.append(SpecIssue(path + ".defaultAccount", "%r is not in its accounts" % user.get("defaultAccount")))
    for i, item in enumerate(qos):
        path = "%sqos[%d]" % (prefix, i)
        for j, name in enumerate(item.get("preempt") or []):
            if name == item.get("name"):
                issues.append(SpecIssue("%s.preempt[%d]" % (path, j), "a QOS cannot preempt itself"))
            else:
                ref("%s.preempt[%d]" % (path, j), name, qos_names, "QOS")
    return issues


# slurm.conf keys spec.accounting.policy writes; spec.slurmConfig may not set them beside it.
POLICY_KEYS = {"priority": ("PriorityType", "PriorityDecayHalfLife", "PriorityCalcPeriod", "PriorityMaxAge",
                            "PriorityFavorSmall", "PriorityWeightAge", "PriorityWeightFairshare",
                            "PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightQOS"),
               "preemption": ("PreemptType", "PreemptMode"), "enforce": ("AccountingStorageEnforce",)}


def accounting_issues(label: str, spec: Any) -> List[SpecIssue]:
    """spec.accounting's rules across fields, and with spec.slurmConfig, of a SlurmCluster (validated document)."""
    accounting = spec.get("accounting") if isinstance(spec, dict) else None
    if not isinstance(accounting, dict):
        return []
    prefix = "%s spec.accounting." % label
    issues = entry_issues(prefix, accounting.get("accounts") or [], accounting.get("users") or [],
                          accounting.get("qos") or [], closed=True)
    policy: Dict[str, Any] = accounting["policy"] if isinstance(accounting.get("policy"), dict) else {}
    if not accounting.get("enabled"):
        for key in ("accounts", "users", "qos"):
            if accounting.get(key):
                issues.append(SpecIssue(prefix + key, "needs accounting.enabled: true (slurmdbd holds them)"))
        for key in ("preemption", "enforce"):
            if policy.get(key) and not (key == "preemption" and policy[key].get("type") == "partition_prio"):
                issues.append(SpecIssue(prefix + "policy." + key, "needs accounting.enabled: true"))
    if (accounting.get("qos") or any(a.get("qos") for a in accounting.get("accounts") or [] if isinstance(a, dict))) \
            and accounting.get("enabled") and "qos" not in (policy.get("enforce") or []) and policy.get("enforce"):
        issues.append(SpecIssue(prefix + "policy.enforce", "QOS are given: enforce needs qos too"))
    config = spec.get("slurmConfig") if isinstance(spec.get("slurmConfig"), dict) else {}
    lowered = dict((k.lower(), k) for k in config if isinstance(k, str))
    for part, keys in sorted(POLICY_KEYS.items()):
        if not policy.get(part):
            continue
        for key in keys:
            if key.lower() in lowered:
                issues.append(SpecIssue("%s spec.slurmConfig.%s" % (label, lowered[key.lower()]),
                                        "is set by spec.accounting.policy.%s" % part))
    return issues


def module_entries(kind: str, entries: Any, node: Optional[Node] = None) -> List[Dict[str, Any]]:
    """A module's list of entries (kind: accounts, users or qos) validated as spec.accounting's are: SpecError
    with field paths such as accounts[1].limits.GrpTRES."""
    node = node or {"accounts": ACCOUNT, "users": USER, "qos": QOS}[kind]
    issues: List[SpecIssue] = []
    if not isinstance(entries, list):
        raise SpecError([SpecIssue(kind, "must be a list")])
    Arr(node, unique_key="name").validate(entries, kind, issues)
    lists: Dict[str, List[Any]] = {"accounts": [], "users": [], "qos": []}
    lists[kind] = entries
    issues += entry_issues("", lists["accounts"], lists["users"], lists["qos"], closed=False)
    if issues:
        raise SpecError(issues)
    return entries
