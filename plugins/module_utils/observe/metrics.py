# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the exporter reports, as pure functions: Slurm's answers (node records, squeue lines, sdiag text) and the
status records of the health checks and the remediation (observe/status.py) in, Prometheus metric families out.
Every label has bounded values: node, partition and check names come from the cluster's spec, states and pending
reasons from Slurm's own vocabularies, RPC types from slurmctld's message types, actions and outcomes from the
remediation's. Reason texts, check details, users and job ids never become labels.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import re
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    HAS_PROMETHEUS_CLIENT = True
except ImportError:  # only the exporter program builds metrics; the modules import this package for the rest
    CounterMetricFamily = GaugeMetricFamily = None
    HAS_PROMETHEUS_CLIENT = False

from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import NODE_NAME
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    RESUME_FAILED_REASON, RESUME_REQUESTED, SCALE_DOWN_REASON, UPGRADE_REASON)

MIB = 1024 * 1024

# squeue's format: partition(s), state, reason. '|' is not allowed in partition names (spec/names.py).
SQUEUE_JOBS = ("squeue", "--noheader", "--all", "--array", "--format=%P|%T|%r")
SDIAG = ("sdiag",)

# Our drain reasons: "<prefix> <tag><check> <detail>" (node/health_check.py, node/active_check.py), "<prefix>
# scale-down" (node removal), "<prefix> upgrade" (a rolling upgrade, slurm/rollout.py), or "<prefix> <what an admin
# wrote>" (slurm_drain). The kind label says which.
_OUR_TAGS = (("health:", "health_check"), ("check:", "active_check"))
_OUR_WORDS = frozenset([SCALE_DOWN_REASON, UPGRADE_REASON])
_CHECK_NAME = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9_.]{0,62}$")   # the spec's check names (and a bound)


@dataclass
class Snapshot:
    """One scrape's worth of Slurm: what the collector read, and how long each command took."""
    nodes: list = field(default_factory=list)                     # NodeRecord values (slurm/node_records.py)
    jobs: List[Tuple[str, str, str]] = field(default_factory=list)  # (partitions, state, reason) per job
    sdiag: Dict[str, object] = field(default_factory=dict)          # parse_sdiag()
    seconds: Dict[str, float] = field(default_factory=dict)         # command -> seconds
    errors: Dict[str, str] = field(default_factory=dict)            # command -> why it gave nothing
    jail: object = None                                             # os.statvfs of the jail, when it is given
    health: list = field(default_factory=list)                      # observe/status.py HealthResult values
    remediation: object = None                                      # the remediation record, when there is one
    status_skipped: object = None                                   # status files skipped (None: none read)


@functools.lru_cache(maxsize=1024)  # pure: thousands of nodes a scrape share a few reasons
def drain_labels(reason, prefix):
    """(owner, kind, check) of a drain reason: owner 'soperator' for ours (the prefix), else 'other'; kind
    health_check / active_check with the check's name, scale-down, upgrade, or manual (an admin's slurm_drain): never
    the free text of a reason."""
    if not prefix or not reason.startswith(prefix):
        return "other", "other", ""
    word = reason[len(prefix):].strip().split(" ", 1)[0]
    for tag, kind in _OUR_TAGS:
        if word.startswith(tag):
            name = word[len(tag):]
            return "soperator", kind, name if _CHECK_NAME.match(name) else "other"
    return "soperator", word if word in _OUR_WORDS else "manual", ""


def _split_gres(text):
    """'gpu:h100:8(S:0-1),nic:2' -> ['gpu:h100:8(S:0-1)', 'nic:2'] (commas inside parentheses kept)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


@functools.lru_cache(maxsize=256)   # pure: a scrape asks for the same few strings for thousands of nodes
def gpu_count(gres):
    """GPUs in a Gres or GresUsed string ('gpu:h100:8(S:0-1)', 'gpu:2', 'gpu:a100:0(IDX:N/A)')."""
    total = 0
    for item in _split_gres(gres or ""):
        words = item.split("(", 1)[0].split(":")
        if words[0] != "gpu":
            continue
        if len(words) > 1 and words[-1].isdigit():
            total += int(words[-1])
        elif len(words) <= 2:
            total += 1                   # 'gpu' or 'gpu:TYPE' alone: one
    return total


def pending_reason(reason):
    """squeue's reason without what makes it unbounded: 'ReqNodeNotAvail, UnavailableNodes:cpu-[1-3]' ->
    'ReqNodeNotAvail'."""
    head = re.split(r"[,:( ]", reason.strip(), 1)[0]
    return head if re.match(r"^[A-Za-z][A-Za-z0-9_]{0,63}$", head) else "Other"


def parse_squeue_jobs(text):
    """`squeue --format=%P|%T|%r` lines -> [(partition, state, reason)], one per partition a job may run in."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 3:
            raise ValueError("squeue: unexpected line %r" % line[:200])
        parts, state, reason = fields
        for part in parts.split(","):
            jobs.append((part.strip(), state.strip().lower(), reason.strip()))
    return jobs


_SDIAG_VALUE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 ()/_.-]*?):\s+(-?\d+)\s*$")
_SDIAG_RPC = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)\s*$")


def parse_sdiag(text):
    """sdiag's text (22.05 to 26.05) -> {"main": {...}, "backfill": {...}, "server": {...}, "rpc": {type: (count,
    total_us)}}: the numeric 'Name: value' lines of each section, and the RPC-by-message-type table."""
    out = {"server": {}, "main": {}, "backfill": {}, "rpc": {}}
    section = "server"
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Main schedule statistics"):
            section = "main"
        elif stripped.startswith("Backfilling stats"):
            section = "backfill"
        elif stripped.startswith("Remote Procedure Call statistics by message type"):
            section = "rpc"
        elif stripped.startswith("Remote Procedure Call statistics by user") or stripped.startswith("Pending RPC"):
            section = "ignored"
        elif section == "rpc":
            m = _SDIAG_RPC.match(line)
            if m:
                out["rpc"][m.group(1)] = (int(m.group(2)), int(m.group(4)))
        elif section in ("server", "main", "backfill"):
            m = _SDIAG_VALUE.match(line)
            if m:
                out[section][m.group(1).strip()] = int(m.group(2))
    return out


# sdiag line -> (metric, help, unit scale, counter?)
_SDIAG_METRICS = {
    "server": (
        ("Server thread count", "soperator_slurm_scheduler_threads", "slurmctld's server threads in use.", 1, False),
        ("Agent queue size", "soperator_slurm_scheduler_agent_queue_size", "RPCs queued for slurmctld's agents.", 1, False),
        ("DBD Agent queue size", "soperator_slurm_scheduler_dbd_agent_queue_size",
         "Messages queued for slurmdbd (grows while accounting is unreachable).", 1, False),
        ("Jobs submitted", "soperator_slurm_jobs_submitted", "Jobs submitted since sdiag's counters were reset.", 1, True),
        ("Jobs started", "soperator_slurm_jobs_started", "Jobs started since sdiag's counters were reset.", 1, True),
        ("Jobs completed", "soperator_slurm_jobs_completed", "Jobs completed since sdiag's counters were reset.", 1, True),
        ("Jobs canceled", "soperator_slurm_jobs_canceled", "Jobs canceled since sdiag's counters were reset.", 1, True),
        ("Jobs failed", "soperator_slurm_jobs_failed", "Jobs failed since sdiag's counters were reset.", 1, True),
    ),
    "main": (
        ("Last cycle", "soperator_slurm_scheduler_last_cycle_seconds", "Duration of the main scheduler's last cycle.",
         1e-6, False),
        ("Mean cycle", "soperator_slurm_scheduler_mean_cycle_seconds", "Mean duration of the main scheduler's cycles.",
         1e-6, False),
        ("Total cycles", "soperator_slurm_scheduler_cycles", "Main scheduler cycles.", 1, True),
        ("Last queue length", "soperator_slurm_scheduler_last_queue_length", "Jobs the main scheduler last looked at.",
         1, False),
    ),
    "backfill": (
        ("Total backfilled jobs (since last slurm start)", "soperator_slurm_backfill_jobs",
         "Jobs started by the backfill scheduler since slurmctld started.", 1, True),
        ("Last cycle", "soperator_slurm_backfill_last_cycle_seconds", "Duration of the backfill scheduler's last cycle.",
         1e-6, False),
        ("Total cycles", "soperator_slurm_backfill_cycles", "Backfill scheduler cycles.", 1, True),
        ("Last queue length", "soperator_slurm_backfill_last_queue_length", "Jobs the backfill scheduler last looked at.",
         1, False),
    ),
}


def node_state_name(record):
    """The node's state as one lower-case word (sinfo's long names, without '*'): idle, mixed, allocated,
    draining, drained, down, fail, failing, completing, future, unknown..."""
    return record.state.lower()


def _gauge(name, doc, labels=None):
    return GaugeMetricFamily(name, doc, labels=labels or [])


def node_families(nodes, prefix):
    """Per node: state, reachability, drain (owner, kind, check), CPUs, memory and GPUs, total and allocated."""
    state = _gauge("soperator_slurm_node_state", "1 for the node's current state (sinfo's state name, lower case).",
                   ["node", "state"])
    responding = _gauge("soperator_slurm_node_responding", "0 when slurmctld marks the node NOT_RESPONDING.", ["node"])
    drain = _gauge("soperator_slurm_node_drain",
                   "1 for a drained or draining node: owner is soperator for our reason prefix, kind and check say "
                   "which of our mechanisms drained it (health_check, active_check, scale-down, ...).",
                   ["node", "owner", "kind", "check"])
    res = dict((key, _gauge(name, doc, ["node"])) for key, name, doc in (
        ("cpus", "soperator_slurm_node_cpus", "CPUs of the node."),
        ("cpus_alloc", "soperator_slurm_node_cpus_allocated", "CPUs of the node allocated to jobs."),
        ("mem", "soperator_slurm_node_memory_bytes", "Memory of the node (RealMemory)."),
        ("mem_alloc", "soperator_slurm_node_memory_allocated_bytes", "Memory of the node allocated to jobs."),
        ("gpus", "soperator_slurm_node_gpus", "GPUs of the node (its gpu GRES)."),
        ("gpus_alloc", "soperator_slurm_node_gpus_allocated", "GPUs of the node allocated to jobs."),
    ))
    for r in nodes:
        state.add_metric([r.name, node_state_name(r)], 1)
        responding.add_metric([r.name], 0 if "NOT_RESPONDING" in r.flags else 1)
        if r.drain:
            owner, kind, check = drain_labels(r.reason, prefix)
            drain.add_metric([r.name, owner, kind, check], 1)
        for key, value in (("cpus", r.cpus), ("cpus_alloc", r.alloc_cpus),
                           ("mem", None if r.real_memory is None else r.real_memory * MIB),
                           ("mem_alloc", None if r.alloc_memory is None else r.alloc_memory * MIB),
                           ("gpus", gpu_count(r.gres)), ("gpus_alloc", gpu_count(r.gres_used))):
            if value is not None:
                res[key].add_metric([r.name], value)
    return [state, responding, drain] + list(res.values())


# Ephemeral NodeSets' nodes by where power saving has them; resume_failed: DOWN with our ResumeFailProgram's reason.
POWER_STATES = ("powered_down", "powering_up", "powering_down", "resume_failed")


def power_word(record, prefix):
    """The node's POWER_STATES word, or "" for a node that is up (or not managed by power saving)."""
    if prefix and record.reason.startswith(prefix) \
            and record.reason[len(prefix):].strip().startswith(RESUME_FAILED_REASON):
        return "resume_failed"
    return record.power


def power_families(nodes, prefix):
    """Ephemeral NodeSets (their CLOUD nodes): per node its power state, per NodeSet the count of each (0s
    included, so an alert can compare)."""
    node_power = _gauge("soperator_slurm_node_power", "1 for a node power saving has powered down, is powering up "
                        "or down, or that did not come up when resumed (resume_failed).", ["node", "power"])
    counts = {}
    for r in nodes:
        word = power_word(r, prefix)
        if word:
            node_power.add_metric([r.name, word], 1)
        match = NODE_NAME.match(r.name)
        if r.cloud and match:
            per = counts.setdefault(match.group(1), dict((w, 0) for w in POWER_STATES))
            if word:
                per[word] += 1
    by_nodeset = _gauge("soperator_slurm_nodeset_power_nodes", "Nodes of an ephemeral NodeSet by power state.",
                        ["nodeset", "power"])
    for nodeset, per in sorted(counts.items()):
        for word in POWER_STATES:
            by_nodeset.add_metric([nodeset, word], per[word])
    return [node_power, by_nodeset]


def resume_requested_at(record, prefix):
    """When our ResumeProgram was asked to power the node up (the "<prefix> resume-requested <UNIX time>" it left in
    the node's Comment), or None."""
    words = record.comment[len(prefix):].split() if prefix and record.comment.startswith(prefix) else []
    if len(words) == 2 and words[0] == RESUME_REQUESTED and words[1].isdigit():
        return int(words[1])
    return None


def resume_families(nodes, prefix):
    """Per up node of an ephemeral NodeSet: seconds from the resume request to the start of the slurmd that
    registered (SlurmdStartTime), the last time power saving brought it up. Only when that slurmd started at or after
    the request: a node still powering up, or one whose resume failed, has none."""
    latency = _gauge("soperator_slurm_node_resume_seconds", "Seconds from Slurm's resume request (our ResumeProgram "
                     "ran) to the start of the node's slurmd that registered, for the node's last resume.",
                     ["nodeset", "node"])
    for r in nodes:
        match = NODE_NAME.match(r.name)
        requested = resume_requested_at(r, prefix)
        if r.cloud and match and requested is not None and not r.power and r.slurmd_start_time \
                and r.slurmd_start_time >= requested:
            latency.add_metric([match.group(1), r.name], r.slurmd_start_time - requested)
    return [latency]


def partition_families(nodes):
    """Per partition: nodes by state, CPUs, memory and GPUs total/allocated."""
    nodes_by_state, totals = {}, {}
    for r in nodes:
        for part in r.partitions:
            key = (part, node_state_name(r))
            nodes_by_state[key] = nodes_by_state.get(key, 0) + 1
            t = totals.setdefault(part, [0] * 6)
            t[0] += r.cpus or 0
            t[1] += r.alloc_cpus or 0
            t[2] += (r.real_memory or 0) * MIB
            t[3] += (r.alloc_memory or 0) * MIB
            t[4] += gpu_count(r.gres)
            t[5] += gpu_count(r.gres_used)
    fam_nodes = _gauge("soperator_slurm_partition_nodes", "Nodes of the partition by state.", ["partition", "state"])
    for (part, st), n in sorted(nodes_by_state.items()):
        fam_nodes.add_metric([part, st], n)
    sums = [_gauge(n, d, ["partition"]) for n, d in (
        ("soperator_slurm_partition_cpus", "CPUs of the partition's nodes."),
        ("soperator_slurm_partition_cpus_allocated", "Allocated CPUs of the partition's nodes."),
        ("soperator_slurm_partition_memory_bytes", "Memory (RealMemory) of the partition's nodes."),
        ("soperator_slurm_partition_memory_allocated_bytes", "Allocated memory of the partition's nodes."),
        ("soperator_slurm_partition_gpus", "GPUs of the partition's nodes."),
        ("soperator_slurm_partition_gpus_allocated", "Allocated GPUs of the partition's nodes."))]
    for part, values in sorted(totals.items()):
        for fam, value in zip(sums, values):
            fam.add_metric([part], value)
    return [fam_nodes] + sums


def job_families(jobs):
    """Per partition: jobs by state, pending jobs by (bounded) reason."""
    by_state, pending = {}, {}
    for part, st, reason in jobs:
        by_state[(part, st)] = by_state.get((part, st), 0) + 1
        if st == "pending":
            key = (part, pending_reason(reason))
            pending[key] = pending.get(key, 0) + 1
    fam_jobs = _gauge("soperator_slurm_partition_jobs", "Jobs (array tasks counted one by one) by partition and state.",
                      ["partition", "state"])
    for (part, st), n in sorted(by_state.items()):
        fam_jobs.add_metric([part, st], n)
    fam_pending = _gauge("soperator_slurm_partition_jobs_pending", "Pending jobs by partition and Slurm's pending reason.",
                         ["partition", "reason"])
    for (part, reason), n in sorted(pending.items()):
        fam_pending.add_metric([part, reason], n)
    return [fam_jobs, fam_pending]


def scheduler_families(sdiag):
    """sdiag's numbers (scheduler, backfill, job counters) and RPC statistics by message type."""
    out = []
    for section, rows in _SDIAG_METRICS.items():
        values = sdiag.get(section, {})
        for key, name, doc, scale, counter in rows:
            if key not in values:
                continue
            fam = CounterMetricFamily(name, doc) if counter else GaugeMetricFamily(name, doc)
            fam.add_metric([], values[key] * scale)
            out.append(fam)
    rpc = sdiag.get("rpc", {})
    calls = CounterMetricFamily("soperator_slurm_rpc_calls", "RPCs slurmctld handled, by message type.", labels=["type"])
    seconds = CounterMetricFamily("soperator_slurm_rpc_duration_seconds", "Time slurmctld spent in RPCs, by message type.",
                                  labels=["type"])
    for kind, (count, total_us) in sorted(rpc.items()):
        calls.add_metric([kind], count)
        seconds.add_metric([kind], total_us * 1e-6)
    return out + [calls, seconds]


def jail_families(statvfs):
    """Size and free space of the jail's filesystem (os.statvfs of the jail, as the exporter sees it)."""
    block = statvfs.f_frsize or statvfs.f_bsize
    size = _gauge("soperator_slurm_jail_filesystem_size_bytes", "Size of the filesystem holding the jail.")
    size.add_metric([], statvfs.f_blocks * block)
    avail = _gauge("soperator_slurm_jail_filesystem_avail_bytes", "Space of the jail's filesystem its users can still write.")
    avail.add_metric([], statvfs.f_bavail * block)
    return [size, avail]


def health_families(results, nodes):
    """The last result of each passive and active check per node (observe/status.py), for the nodes Slurm lists."""
    known = set(r.name for r in nodes)
    result = _gauge("soperator_slurm_health_check_last_result",
                    "Last result of a health check on a node: 1 passed, 0 failed (kind passive or active).",
                    ["node", "check", "kind"])
    when = _gauge("soperator_slurm_health_check_last_run_timestamp_seconds",
                  "When the health check last gave a result on the node (UNIX time).", ["node", "check", "kind"])
    for r in results:
        if r.node in known:
            result.add_metric([r.node, r.check, r.kind], 1 if r.passed else 0)
            when.add_metric([r.node, r.check, r.kind], r.time)
    return [result, when]


_OUTCOME = re.compile(r"^[a-z][a-z-]{0,31}$")     # slurm/remediation.py's node actions


def remediation_families(record):
    """The remediation record (observe/remediation_record.py): passes and their steps by result, the last pass."""
    runs = CounterMetricFamily("soperator_slurm_remediation_runs", "Remediation passes, by result (failure: a "
                               "node's remediation failed, or the pass could not run).", labels=["result"])
    for res, n in sorted(record["runs"].items()):
        runs.add_metric([res], n)
    actions = CounterMetricFamily("soperator_slurm_remediation_actions", "Remediation steps by action (replace, "
                                  "recheck, resume) and result (success, failure).", labels=["action", "result"])
    for action, counts in sorted(record["actions"].items()):
        for res, n in sorted(counts.items()):
            actions.add_metric([action, res], n)
    out = [runs, actions]
    last = record.get("lastRun")
    if last:
        for name, doc, value in (
                ("soperator_slurm_remediation_last_run_timestamp_seconds", "When the last remediation pass ended.",
                 last["time"]),
                ("soperator_slurm_remediation_last_run_success", "1 when the last remediation pass succeeded.",
                 1 if last["success"] else 0)):
            fam = _gauge(name, doc)
            fam.add_metric([], value)
            out.append(fam)
        nodes = _gauge("soperator_slurm_remediation_last_run_nodes", "Nodes out of service in the last remediation "
                       "pass, by what it did with them (replaced, resumed, left-drained, skipped-foreign, ...).",
                       ["outcome"])
        for outcome, n in sorted(last["nodes"].items()):
            if _OUTCOME.match(outcome):
                nodes.add_metric([outcome], n)
        out.append(nodes)
    if record.get("lastSuccessTime"):
        fam = _gauge("soperator_slurm_remediation_last_success_timestamp_seconds",
                     "When a remediation pass last succeeded.")
        fam.add_metric([], record["lastSuccessTime"])
        out.append(fam)
    return out


def exporter_families(snapshot, scrape_seconds):
    """soperator_slurm_up, and what the scrape cost: per command, and in all."""
    up = _gauge("soperator_slurm_up", "1 when every Slurm command of the scrape answered within the scrape's time.")
    up.add_metric([], 0 if snapshot.errors else 1)
    failed = _gauge("soperator_slurm_exporter_command_failed", "1 when the command gave no usable answer this scrape "
                    "(or was not run: an earlier one's controller did not answer).", ["command"])
    took = _gauge("soperator_slurm_exporter_command_seconds", "How long the command took this scrape.", ["command"])
    for command, seconds in sorted(snapshot.seconds.items()):
        took.add_metric([command], seconds)
        failed.add_metric([command], 1 if command in snapshot.errors else 0)
    total = _gauge("soperator_slurm_exporter_scrape_seconds", "How long the whole scrape took.")
    total.add_metric([], scrape_seconds)
    out = [up, failed, took, total]
    if snapshot.status_skipped is not None:
        skipped = _gauge("soperator_slurm_exporter_status_files_skipped",
                         "Health check status files this scrape could not use (unreadable, not a record).")
        skipped.add_metric([], snapshot.status_skipped)
        out.append(skipped)
    return out


def families(snapshot, prefix, scrape_seconds):
    """Every family of one scrape. A command that failed gives no families at all, rather than zeros that would
    read as an empty cluster or an empty queue."""
    out = exporter_families(snapshot, scrape_seconds)
    if "scontrol" not in snapshot.errors:
        out += node_families(snapshot.nodes, prefix) + partition_families(snapshot.nodes)
        out += power_families(snapshot.nodes, prefix) + resume_families(snapshot.nodes, prefix)
        out += health_families(snapshot.health, snapshot.nodes)
    if "squeue" not in snapshot.errors:
        out += job_families(snapshot.jobs)
    if "sdiag" not in snapshot.errors:
        out += scheduler_families(snapshot.sdiag)
    if snapshot.jail is not None:
        out += jail_families(snapshot.jail)
    if snapshot.remediation is not None:
        out += remediation_families(snapshot.remediation)
    return out
