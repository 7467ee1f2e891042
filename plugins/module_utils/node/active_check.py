# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Active health checks: one Slurm job per target node in the hidden checks partition; a failed result drains the
node with reason "<prefix> check:<name> <detail>" (when the check's drainOnFailure is on).

Python 3 standard library only, runnable as a program (the checks CronJob runs constants.ACTIVE_CHECK_PROGRAM):

    active-check [--config PATH] --check NAME [--nodes NODE,NODE] [--pending-timeout SECONDS]

The config is health.json (health_check.find_config); its "active" part lists the checks. Target nodes are the
check's NodeSets' nodes that Slurm lists and that are usable now: nodes that are down, not responding, drained (by
anyone) or running jobs are skipped and reported, never waited for. Every job is bounded: a job still pending after
--pending-timeout is cancelled (skipped), a running one is ended by its Slurm time limit. Only a job that ran and
failed drains its node, and never a node someone else drained in the meantime.

Prints one JSON object {"check", "results": [{"node", "result": pass|fail|skipped, "detail", "job"}], "drained"};
exit 0 when nothing failed, 1 when a node failed its check, 2 when the checks could not run. The last pass or fail of
each node is kept in health.json's statusDir as active/<check>.json (health_status.write_status; a skipped node keeps
its earlier result), where the exporter reads it; files of checks no longer configured are removed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import re
import sys
import time

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check as hc, health_status
    from ansible_collections.soperator.slurm.plugins.module_utils.node import nccl_probe
except ImportError:  # run as a program from an image or the local backend's bin/: the files lie beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import health_check as hc
    import health_status
    import nccl_probe

CHECK_TAG = "check:"
POLL_SECONDS = 2.0
PENDING_TIMEOUT = 300.0
STORAGE_TEST_MIB = 512
GPU_BURN_MAX_SECONDS = 300
BUSY_STATES = ("ALLOCATED", "MIXED", "COMPLETING")
FAILED_JOB_STATES = ("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
PASS, FAIL, SKIPPED = "pass", "fail", "skipped"


# ------------------------------------------------------------------------------------------------ pure parsing

def parse_all_reduce_perf(text):
    """nccl-tests `all_reduce_perf` output -> {"sizes": [(bytes, out-of-place busbw, in-place busbw)],
    "avg_busbw": float or None, "wrong": int, "out_of_bounds": int or None} (bandwidths in GB/s)."""
    sizes, wrong, avg, out_of_bounds = [], 0, None, None
    for line in (text or "").splitlines():
        stripped = line.strip()
        match = re.match(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", stripped)
        if match:
            avg = float(match.group(1))
            continue
        match = re.match(r"^#\s*Out of bounds values\s*:\s*([0-9]+)", stripped)
        if match:
            out_of_bounds = int(match.group(1))
            continue
        fields = stripped.split()
        # size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong (root since nccl-tests 2.10)
        if stripped.startswith("#") or len(fields) not in (12, 13) or not fields[0].isdigit():
            continue
        try:
            sizes.append((int(fields[0]), float(fields[-6]), float(fields[-2])))
        except ValueError:
            continue
        for count in (fields[-5], fields[-1]):
            if count.isdigit():
                wrong += int(count)
    return {"sizes": sizes, "avg_busbw": avg, "wrong": wrong, "out_of_bounds": out_of_bounds}


def evaluate_all_reduce(text, min_busbw):
    """None when the run is good, else why not. The threshold applies to the largest message size (the bandwidth
    the links sustain); the average over all sizes is reported alongside."""
    result = parse_all_reduce_perf(text)
    if not result["sizes"]:
        return "no all_reduce_perf results in the output"
    if result["wrong"] or result["out_of_bounds"]:
        return "%d wrong values" % (result["wrong"] or result["out_of_bounds"])
    size, out_of_place, in_place = result["sizes"][-1]
    peak = max(out_of_place, in_place)
    if min_busbw is not None and peak < min_busbw:
        avg = result["avg_busbw"]
        return "busbw %.1f GB/s at %d B below %s GB/s (avg %s)" % (
            peak, size, _num(min_busbw), "%.1f" % avg if avg is not None else "n/a")
    return None


_DD = re.compile(r"copied, ([0-9.]+) s, ([0-9.]+) ([kMGT]?)B/s")
_SCALE_TO_MB = {"": 1e-6, "k": 1e-3, "M": 1.0, "G": 1e3, "T": 1e6}


def parse_dd_speeds(text):
    """Output of the storage job (markers "write:" / "read:" before each dd) -> {"write": MB/s, "read": MB/s}.
    The last dd summary after a marker counts (the read falls back to a cached read where O_DIRECT fails)."""
    speeds, current = {}, None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped in ("write:", "read:"):
            current = stripped[:-1]
            continue
        match = _DD.search(stripped)
        if match and current:
            speeds[current] = float(match.group(2)) * _SCALE_TO_MB[match.group(3)]
    return speeds


def evaluate_storage(text, min_write, min_read):
    speeds = parse_dd_speeds(text)
    problems = []
    for what, limit in (("write", min_write), ("read", min_read)):
        if what not in speeds:
            problems.append("no %s speed in the output" % what)
        elif limit is not None and speeds[what] < limit:
            problems.append("%s %.1f MB/s below %s MB/s" % (what, speeds[what], _num(limit)))
    return "; ".join(problems) or None


# nccl-probe's first line: its output, not all_reduce_perf's
PROBE_LINE = re.compile(r"^nccl: [0-9]", re.M)


def evaluate_nccl_probe(text, min_busbw):
    """nccl-probe's output (node/nccl_probe.py) -> a problem, or None. Its bus bandwidth is 0 on one GPU by definition:
    there it proves NCCL and CUDA work and the limit is not applied."""
    result = nccl_probe.parse(text)
    if "no-gpu" in result:
        return "no GPU: %s" % result["no-gpu"]
    reduce = result.get("all-reduce")
    if reduce is None:
        errors = [ln.strip() for ln in (text or "").splitlines() if ln.startswith("error:")]
        return (errors[0] if errors else "no all-reduce result in nccl-probe's output")[:hc.MAX_DETAIL]
    if reduce["wrong"]:
        return "all-reduce over %d GPUs returned %d wrong values" % (reduce["gpus"], reduce["wrong"])
    if min_busbw is not None and reduce["gpus"] > 1 and reduce["busbw"] < min_busbw:
        return "bus bandwidth %.1f GB/s below %s GB/s" % (reduce["busbw"], _num(min_busbw))
    return None


def evaluate_gpu_burn(text):
    faulty = [ln.strip() for ln in (text or "").splitlines() if "FAULTY" in ln]
    if faulty:
        return "; ".join(faulty)[:hc.MAX_DETAIL]
    if not re.search(r"GPU [0-9]+: OK", text or ""):
        return "no GPU reported OK"
    return None


def _num(value):
    return ("%d" % value) if float(value).is_integer() else str(value)


def job_script(check, gpus, output_dir):
    """The batch script of one check run (pass/fail is decided by its exit code and, for the measuring types, by
    evaluating its output here)."""
    kind = check["type"]
    if kind == "sbatch":
        return check["script"]
    lines = ["#!/bin/bash", "set -o pipefail", "export LC_ALL=C"]
    if kind == "gpuBurn":
        seconds = max(10, min(GPU_BURN_MAX_SECONDS, check["timeoutSeconds"] // 2))
        lines.append("gpu_burn %d" % seconds)
    elif kind == "ncclAllReduce":
        # nccl-tests where the jail has it; else our probe (node/nccl_probe.py, in the GPU jail as nccl-probe)
        lines += ["if command -v all_reduce_perf >/dev/null; then",
                  "    all_reduce_perf -b 512M -e 8G -f 2 -g %d" % max(1, gpus),
                  "else",
                  "    nccl-probe --gpus %d" % max(1, gpus),
                  "fi"]
    elif kind == "storage":
        lines += [
            'f="%s/storage-$SLURM_JOB_ID.bin"' % output_dir,
            "trap 'rm -f \"$f\"' EXIT",
            "echo write:",
            'dd if=/dev/zero of="$f" bs=1M count=%d conv=fdatasync 2>&1 || exit 1' % STORAGE_TEST_MIB,
            "echo read:",
            # O_DIRECT keeps the page cache out of the number; filesystems without it get a cached read.
            'dd if="$f" of=/dev/null bs=1M iflag=direct 2>&1 || dd if="$f" of=/dev/null bs=1M 2>&1 || exit 1',
        ]
    else:
        raise ValueError("unknown check type %r" % kind)
    return "\n".join(lines) + "\n"


def evaluate_output(check, text):
    kind = check["type"]
    if kind == "ncclAllReduce":
        if PROBE_LINE.search(text or ""):
            return evaluate_nccl_probe(text, check.get("minBusBandwidthGBs"))
        return evaluate_all_reduce(text, check.get("minBusBandwidthGBs"))
    if kind == "storage":
        return evaluate_storage(text, check.get("minWriteMBs"), check.get("minReadMBs"))
    if kind == "gpuBurn":
        return evaluate_gpu_burn(text)
    return None


def parse_job(text):
    """`scontrol --oneliner show job ID` -> {"state": "COMPLETED", "exit_code": 0, "signal": 0}, or None."""
    state = re.search(r"(?:^| )JobState=(\S+)", text or "")
    if not state:
        return None
    code = re.search(r"(?:^| )ExitCode=([0-9]+):([0-9]+)", text)
    return {"state": state.group(1), "exit_code": int(code.group(1)) if code else None,
            "signal": int(code.group(2)) if code else None}


def check_reason(prefix, name, detail):
    text = "%s %s%s %s" % (prefix, CHECK_TAG, name, hc.one_line(detail))
    return text[:hc.MAX_DETAIL + len(prefix) + 16].rstrip()


def skip_reason(node_state):
    """Why a node is not a target now, or None."""
    if node_state["not_responding"] or node_state["state"] in ("DOWN", "FUTURE", "UNKNOWN"):
        return "not in service (%s)" % node_state["state"]
    power = [f for f in node_state["flags"] if f.startswith("POWER")]
    if power:
        # a job on it would power up a worker only to check it (ephemeral NodeSets)
        return "power saving (%s)" % "+".join(power)
    if "DRAIN" in node_state["flags"] or "FAIL" in node_state["flags"]:
        return "drained (%s)" % (node_state["reason"] or "no reason")
    if node_state["state"] in BUSY_STATES or "COMPLETING" in node_state["flags"]:
        return "busy (%s)" % node_state["state"]
    return None


def node_set_name(node):
    match = re.match(r"^(.+)-(0|[1-9][0-9]*)$", node)
    return match.group(1) if match else None


# ------------------------------------------------------------------------------------------------ running

def _scontrol(argv):
    rc, out, err = hc.run_command(["scontrol", "--oneliner"] + argv, hc.SCONTROL_TIMEOUT)
    if rc != 0:
        raise hc.HealthCheckError("scontrol %s failed: %s" % (" ".join(argv), hc._short(err or out or "rc %s" % rc)))
    return out


def submit(check, node, partition, script, output_dir):
    minutes = max(1, -(-int(check["timeoutSeconds"]) // 60))
    argv = ["sbatch", "--parsable", "--partition=%s" % partition, "--nodelist=%s" % node, "--nodes=1",
            "--exclusive", "--time=%d" % minutes, "--job-name=soperator-check-%s" % check["name"],
            "--output=%s/%s-%%j.out" % (output_dir, check["name"]), "--chdir=%s" % output_dir]
    rc, out, err = hc.run_command(argv, hc.SCONTROL_TIMEOUT, stdin_text=script)
    if rc != 0:
        raise hc.HealthCheckError("sbatch for %s failed: %s" % (node, hc._short(err or out or "rc %s" % rc)))
    return out.strip().split(";", 1)[0]


def _read_output(read_dir, check, job):
    """The job's output, removed once read (the report keeps the verdict; the jail keeps no pile of old outputs)."""
    path = os.path.join(read_dir, "%s-%s.out" % (check["name"], job))
    try:
        with open(path) as f:
            text = f.read()
    except (IOError, OSError):
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    return text


def wait_jobs(jobs, check, read_dir, pending_timeout, clock=time.monotonic, sleep=time.sleep):
    """{node: job id} -> {node: (result, detail)}. Bounded: pending past `pending_timeout` is cancelled; running
    past the check's time limit plus a minute is cancelled too (Slurm normally ends it first)."""
    started = clock()
    run_limit = float(check["timeoutSeconds"]) + 60.0
    running_since = {}
    results = {}
    while len(results) < len(jobs):
        for node, job in sorted(jobs.items()):
            if node in results:
                continue
            info = parse_job(hc.run_command(["scontrol", "--oneliner", "show", "job", job], hc.SCONTROL_TIMEOUT)[1])
            if info is None:
                results[node] = (SKIPPED, "job %s vanished before its result was read" % job)
                continue
            state = info["state"]
            if state == "COMPLETED":
                problem = None
                if check["type"] != "sbatch":
                    text = _read_output(read_dir, check, job)
                    if text is None:        # doubt: no verdict, no drain
                        results[node] = (SKIPPED, "job %s: output unreadable" % job)
                        continue
                    problem = evaluate_output(check, text)
                results[node] = (FAIL, problem) if problem else (PASS, "job %s" % job)
            elif state in FAILED_JOB_STATES:
                detail = "timed out" if state == "TIMEOUT" else "exit %s" % info["exit_code"]
                results[node] = (FAIL, "%s (job %s %s)" % (detail, job, state))
            elif state in ("CANCELLED", "PREEMPTED"):
                results[node] = (SKIPPED, "job %s %s" % (job, state))
            elif state == "PENDING":
                if clock() - started > pending_timeout:
                    hc.run_command(["scancel", job], hc.SCONTROL_TIMEOUT)
                    results[node] = (SKIPPED, "job %s did not start within %ss" % (job, pending_timeout))
            else:
                since = running_since.setdefault(node, clock())
                if clock() - since > run_limit:
                    hc.run_command(["scancel", job], hc.SCONTROL_TIMEOUT)
                    results[node] = (FAIL, "job %s ran past its time limit" % job)
        if len(results) < len(jobs):
            sleep(POLL_SECONDS)
    return results


def drain_failed(node, prefix, name, detail):
    """Drain unless someone (or something of ours with another reason) already holds the node. -> drained?"""
    state = hc.parse_node_line(_scontrol(["show", "node", node]), node)
    if "DRAIN" in state["flags"] or "FAIL" in state["flags"]:
        return False
    hc.update_node(node, "DRAIN", check_reason(prefix, name, detail))
    return True


def active_record(name, previous, targets, results, now=None):
    """The check's status record: this run's pass or fail per node, a node skipped now keeping its earlier result,
    nodes no longer targets left out."""
    now = round(time.time() if now is None else now, 3)
    before = (previous or {}).get("nodes")
    nodes = dict((n, v) for n, v in (before if isinstance(before, dict) else {}).items() if n in targets)
    for r in results:
        if r["result"] in (PASS, FAIL):
            nodes[r["node"]] = {"result": r["result"], "time": now, "detail": r.get("detail") or "",
                                "job": r.get("job") or ""}
    return {"version": health_status.STATUS_VERSION, "kind": health_status.ACTIVE, "check": name, "nodes": nodes}


def record_results(config, name, targets, results):
    """Write the check's status record and remove the records of checks no longer configured. -> None, or why it
    could not."""
    directory = config.get("statusDir")
    if not directory:
        return None
    previous = health_status.read_status(directory, health_status.ACTIVE, name)
    problem = hc.record_status(config, health_status.ACTIVE, name, active_record(name, previous, targets, results))
    if problem:
        return problem
    configured = set(ch["name"] for ch in (config.get("active") or {}).get("checks") or [])
    try:
        dfd = health_status.open_status_dir(os.path.join(directory, health_status.ACTIVE), create=False)
    except (OSError, health_status.StatusError):
        return None
    try:
        for entry in os.listdir(dfd):
            if entry.endswith(".json") and not entry.startswith(".") and entry[:-5] not in configured:
                os.unlink(entry, dir_fd=dfd)           # never follows a link
    except OSError as e:
        return "cannot remove old status records in %s: %s" % (directory, e)
    finally:
        os.close(dfd)
    return None


def run(config, name, only_nodes=None, pending_timeout=PENDING_TIMEOUT):
    active = config.get("active") or {}
    checks = dict((ch["name"], ch) for ch in active.get("checks") or [])
    if name not in checks:
        raise hc.HealthCheckError("no active check named %r in the config" % name)
    check = checks[name]
    partition = active.get("partition")
    # outputDir is the jobs' view (inside the jail on the workers); outputRoot is where this program finds the jail
    # (the CronJob mounts it): the workers' /tmp is their own, the jail is the one filesystem both sides share.
    output_dir = active.get("outputDir") or "/tmp"
    read_dir = (active.get("outputRoot") or "").rstrip("/") + output_dir
    prefix = config["drainReasonPrefix"]
    node_sets = config.get("nodeSets") or {}
    wanted = set(check.get("nodeSets") or node_sets)
    states = hc.parse_nodes(_scontrol(["show", "node"]))
    targets = sorted(n for n in states if node_set_name(n) in wanted and (not only_nodes or n in only_nodes))
    results, jobs = [], {}
    os.makedirs(read_dir, exist_ok=True)
    for node in targets:
        why = skip_reason(states[node])
        if why:
            results.append({"node": node, "result": SKIPPED, "detail": why})
            continue
        gpus = int((node_sets.get(node_set_name(node)) or {}).get("gpus", 0))
        jobs[node] = submit(check, node, partition, job_script(check, gpus, output_dir), output_dir)
    drained = []
    for node, (result, detail) in sorted(wait_jobs(jobs, check, read_dir, pending_timeout).items()):
        results.append({"node": node, "result": result, "detail": detail, "job": jobs[node]})
        if result == FAIL and check.get("drainOnFailure", True) and drain_failed(node, prefix, name, detail):
            drained.append(node)
    results.sort(key=lambda r: r["node"])
    report = {"check": name, "results": results, "drained": drained}
    problem = record_results(config, name, targets, results)
    if problem:
        report["statusError"] = problem
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="active-check", description="Run one active health check.")
    parser.add_argument("--config", help="health.json (default: as health-check finds it)")
    parser.add_argument("--check", required=True, help="name of the active check")
    parser.add_argument("--nodes", help="comma-separated node names (default: every node of its NodeSets)")
    parser.add_argument("--pending-timeout", type=float, default=PENDING_TIMEOUT,
                        help="cancel a check job still pending after this many seconds")
    args = parser.parse_args(argv)
    try:
        config = hc.load_config(hc.find_config(args.config))
        only = set(n for n in (args.nodes or "").split(",") if n) or None
        report = run(config, args.check, only, args.pending_timeout)
    except hc.HealthCheckError as e:
        sys.stdout.write(json.dumps({"check": args.check, "error": str(e)}) + "\n")
        return hc.EXIT_ERROR
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    return hc.EXIT_UNHEALTHY if any(r["result"] == FAIL for r in report["results"]) else hc.EXIT_HEALTHY


if __name__ == "__main__":
    raise SystemExit(main())
