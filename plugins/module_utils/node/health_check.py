# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Passive health checks of one Slurm node: Slurm's HealthCheckProgram.

Python 3 standard library only, no Ansible: the images install this file as constants.HEALTH_CHECK_PROGRAM, with
health_status.py beside it, and the local backend copies both under its state directory. Interface (the
remediation playbook relies on it):

    health-check [--config PATH] [--node NAME] [--check-only]

* The node is --node, else $SLURMD_NODENAME (slurmd sets it when it runs the program).
* The config (health.json, rendered by render/health_json.py) is --config, else
  $SOPERATOR_HEALTH_CONFIG, else dirname($SLURM_CONF)/health.json, else /etc/slurm/health.json.
* Default mode: run every enabled check at once (each with its own time limit, the whole run well under 10 s). A
  failure drains the node with reason "<prefix> health:<check> <detail>"; success resumes the node only when it is
  drained with a reason starting with "<prefix> health:". Any other drain is left alone. When the node's state
  cannot be read, nothing is changed and the exit code is 2 (fail closed).
* --check-only: no scontrol writes; prints {"node", "healthy", "failed": [{"check", "detail"}], "passed"} as JSON.
* Exit codes: 0 healthy, 1 unhealthy, 2 could not run.
* Default mode also records the run's result per check in health.json's "statusDir" (health_status.py: the
  exporter reads it); --check-only records nothing.

Parsing of nvidia-smi, dmesg and scontrol output is done by the pure functions below (tested on fixtures).
slurm/node_records.py has a fuller scontrol parser, but it imports the collection (and through it
slurm_syntax/hostlist.py and slurm/runner.py); this file must run alone in an image, so it keeps the few lines of
parsing it needs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node import health_status
except ImportError:  # run as a program from an image or the local backend's bin/: health_status.py lies beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import health_status

DEFAULT_CONFIG = "/etc/slurm/health.json"
CONFIG_ENV = "SOPERATOR_HEALTH_CONFIG"
HEALTH_TAG = "health:"
DEFAULT_TIMEOUT = 5.0
SCONTROL_TIMEOUT = 10.0
MAX_DETAIL = 160
# slurmd runs the program with only SLURMD_NODENAME in its environment.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_ERROR = 0, 1, 2


class HealthCheckError(Exception):
    """The program cannot run (config, node state): exit 2, change nothing."""


# ------------------------------------------------------------------------------------------------ pure parsing

def parse_gpu_list(text):
    """`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader` -> [{index, name, uuid, bus_id}].

    Raises ValueError on a line that does not have the four fields."""
    gpus = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            raise ValueError("unexpected nvidia-smi line: %s" % line.strip()[:120])
        gpus.append({"index": int(fields[0]), "name": fields[1], "uuid": fields[2], "bus_id": fields[3]})
    return gpus


def parse_nvidia_smi_q(text):
    """`nvidia-smi -q [-d ...]` text -> {bus id: nested dict of its sections}.

    The format is "Key : Value" lines and section titles, nested by indentation (4 spaces a level); each GPU starts
    with an unindented "GPU 00000000:07:00.0" line."""
    gpus = {}
    stack = []          # [(indent, dict)]
    for raw in (text or "").splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        if indent == 0:
            match = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)$", line)
            if match:
                section = {}
                gpus[match.group(1)] = section
                stack = [(0, section)]
            else:
                stack = []      # the log header (timestamp, driver version): not per GPU
            continue
        if not stack:
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and value.strip():
            parent[key] = value.strip()
        else:
            child = {}
            parent[key] = child
            stack.append((indent, child))
    return gpus


def _count(value):
    """An nvidia-smi counter: int, or None for N/A."""
    try:
        return int(str(value).split()[0])
    except (ValueError, IndexError):
        return None


def gpu_error_problems(gpus, max_uncorrectable=0):
    """Problems of parse_nvidia_smi_q() output: [str]. Empty when every GPU is fine.

    Volatile uncorrectable ECC errors over the limit (both the older "Double Bit" and the newer "DRAM/SRAM
    Uncorrectable" layouts), pages waiting for retirement, rows waiting for remapping, or a failed remapping."""
    problems = []
    for bus_id in sorted(gpus):
        gpu = gpus[bus_id]

        def section(parent, key):
            """A section, or {} where nvidia-smi prints "N/A" in its place (a feature the GPU lacks)."""
            value = parent.get(key)
            return value if isinstance(value, dict) else {}

        volatile = section(section(gpu, "ECC Errors"), "Volatile")
        uncorrectable = 0
        for key, value in volatile.items():
            if isinstance(value, dict):
                if key == "Double Bit":
                    uncorrectable += _count(value.get("Total")) or 0
            elif "Uncorrectable" in key:
                uncorrectable += _count(value) or 0
        if uncorrectable > max_uncorrectable:
            problems.append("%s: %d volatile uncorrectable ECC errors" % (bus_id, uncorrectable))
        retired = section(gpu, "Retired Pages")
        for key in ("Pending Page Blacklist", "Pending Page Retirement"):
            if str(retired.get(key, "")).lower() == "yes":
                problems.append("%s: retired pages pending (reset needed)" % bus_id)
        remapped = section(gpu, "Remapped Rows")
        if str(remapped.get("Pending", "")).lower() == "yes":
            problems.append("%s: row remapping pending (reset needed)" % bus_id)
        if str(remapped.get("Remapping Failure Occurred", "")).lower() == "yes":
            problems.append("%s: row remapping failed" % bus_id)
    return problems


_XID = re.compile(r"^\[\s*([0-9]+\.[0-9]+)\].*NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): ([0-9]+),(.*)$")


def parse_xids(dmesg_text):
    """Kernel log lines (`dmesg`, with its [seconds since boot] stamps) -> [(seconds, pci, xid, message)]."""
    events = []
    for line in (dmesg_text or "").splitlines():
        match = _XID.match(line.strip())
        if match:
            events.append((float(match.group(1)), match.group(2), int(match.group(3)), match.group(4).strip()))
    return events


def xid_problems(events, critical, since_seconds):
    """Critical XIDs logged at or after `since_seconds` (seconds since boot) -> [str]."""
    critical = set(critical)
    return ["%s: Xid %d (%s)" % (pci, xid, message.split(",")[-1].strip() or "no message")
            for stamp, pci, xid, message in events if xid in critical and stamp >= since_seconds]


def parse_meminfo(text):
    """/proc/meminfo -> {key: kB}."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            number = _count(value.strip())
            if number is not None:
                out[key.strip()] = number
    return out


_NODE_STATE = re.compile(r"(?:^| )State=(\S+)")


def parse_nodes(text):
    """`scontrol --oneliner show node [NODE]` -> {name: node state (see parse_node_line)}."""
    nodes = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("NodeName="):
            name = line.split()[0][len("NodeName="):]
            nodes[name] = _node_state(line, name)
    return nodes


def parse_node_line(text, node):
    """`scontrol --oneliner show node NODE` -> {"state": "IDLE", "flags": ["DRAIN"], "reason": "..."}.

    Raises HealthCheckError when the output does not describe exactly that node."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    mine = [ln for ln in lines if ln.startswith("NodeName=%s " % node)]
    if len(mine) != 1:
        raise HealthCheckError("scontrol did not describe node %s: %s" % (node, (text or "(no output)")[:200]))
    return _node_state(mine[0], node)


def _node_state(line, node):
    reason = ""
    cut = line.find(" Reason=")
    head = line
    if cut >= 0:
        head, reason = line[:cut], line[cut + len(" Reason="):]
        # "<text> [user@time]": the part in brackets is who set it and when.
        reason = re.sub(r" \[[^\]@]*@[^\]]*\]$", "", reason)
    match = _NODE_STATE.search(head)
    if not match:
        raise HealthCheckError("scontrol shows no State for node %s" % node)
    words = match.group(1).upper().split("+")
    return {"state": words[0].rstrip("*"), "flags": [w.rstrip("*") for w in words[1:] if w],
            "not_responding": match.group(1).endswith("*"), "reason": reason}


def health_reason_prefix(prefix):
    return "%s %s" % (prefix, HEALTH_TAG)


def drain_reason(prefix, check, detail):
    text = "%s%s %s" % (health_reason_prefix(prefix), check, one_line(detail))
    return text[:MAX_DETAIL + len(prefix) + 16].rstrip()


def plan_action(node_state, prefix, failed):
    """What to do with the node: ("drain", reason), ("resume", None) or (None, why).

    failed: [{"check", "detail"}] of this run. Only drains whose reason starts with "<prefix> health:" are ours."""
    ours = health_reason_prefix(prefix)
    drained = "DRAIN" in node_state["flags"]
    reason = node_state["reason"]
    if failed:
        wanted = drain_reason(prefix, failed[0]["check"], failed[0]["detail"])
        if drained and not reason.startswith(ours):
            return None, "already drained by someone else (%s)" % (reason or "no reason")
        if drained and reason == wanted:
            return None, "already drained for this"
        return "drain", wanted
    if drained and reason.startswith(ours):
        return "resume", None
    return None, "healthy" if not drained else "drained by someone else: left alone"


# ------------------------------------------------------------------------------------------------ running things

def _env():
    env = dict(os.environ)
    env.setdefault("PATH", DEFAULT_PATH)
    env["LC_ALL"] = "C"
    return env


def run_command(argv, timeout, env=None, stdin_text=None, shell=False):
    """(rc, stdout, stderr); rc None when it timed out (its whole process group is killed)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or _env(),
                                universal_newlines=True, start_new_session=True, shell=shell)
    except OSError as e:
        return 127, "", str(e)
    try:
        out, err = proc.communicate(stdin_text, timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return None, "", "timed out after %ss" % timeout


def one_line(text):
    """Text as one line of printable characters: it becomes a Slurm drain reason, which slurmctld stores as given
    (a line break splits `scontrol show node`, a NUL cannot even be passed to scontrol)."""
    return " ".join("".join(ch if ord(ch) >= 0x20 and ord(ch) != 0x7f else " " for ch in str(text or "")).split())


def _short(text):
    return one_line(text)[:MAX_DETAIL]


# What a GPU node whose container has no NVIDIA driver reports (README, "GPU workers"): nvidia-smi, like libcuda, is
# the node's, mounted in by the NVIDIA container toolkit; without it there is no GPU to check.
NO_GPU = "no GPU: nvidia-smi is not in the container (the node's NVIDIA container toolkit mounts the driver in; " \
         "the pod needs nvidia.com/gpu)"


def check_gpu_count(expected, timeout):
    rc, out, err = run_command(["nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id", "--format=csv,noheader"],
                               timeout)
    if rc == 127:
        return NO_GPU
    if rc != 0:
        return "nvidia-smi failed: %s" % _short(err or out or "rc %s" % rc)
    try:
        gpus = parse_gpu_list(out)
    except ValueError as e:
        return str(e)
    if len(gpus) != expected:
        return "%d GPUs visible, GRES expects %d" % (len(gpus), expected)
    return None


def check_gpu_errors(settings, timeout):
    rc, out, err = run_command(["nvidia-smi", "-q", "-d", "ECC,PAGE_RETIREMENT,ROW_REMAPPER"], timeout)
    if rc != 0:
        return "nvidia-smi -q failed: %s" % _short(err or out or "rc %s" % rc)
    problems = gpu_error_problems(parse_nvidia_smi_q(out), settings.get("maxVolatileUncorrectable", 0))
    critical = settings.get("criticalXids") or []
    if critical:
        rc, log, err = run_command(["dmesg"], timeout)
        if rc != 0:
            return "cannot read the kernel log for XIDs: %s" % _short(err or "rc %s" % rc)
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        problems += xid_problems(parse_xids(log), critical, uptime - settings.get("xidWindowSeconds", 600))
    return "; ".join(problems) or None


def check_disk(paths, min_free_percent):
    problems = []
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError as e:
            problems.append("%s: %s" % (path, e.strerror))
            continue
        if not st.f_blocks:
            continue
        free = 100.0 * st.f_bavail / st.f_blocks
        if free < min_free_percent:
            problems.append("%s: %.1f%% free, needs %d%%" % (path, free, min_free_percent))
    return "; ".join(problems) or None


def check_memory(min_available_mib):
    with open("/proc/meminfo") as f:
        info = parse_meminfo(f.read())
    if "MemAvailable" not in info:
        return "no MemAvailable in /proc/meminfo"
    available = info["MemAvailable"] // 1024
    if available < min_available_mib:
        return "%d MiB available, needs %d MiB" % (available, min_available_mib)
    return None


def check_munge(socket_path, timeout):
    extra = ["--socket=%s" % socket_path] if socket_path else []
    rc, credential, err = run_command(["munge", "-n"] + extra, timeout)
    if rc != 0:
        return "munge -n failed: %s" % _short(err or "rc %s" % rc)
    rc, out, err = run_command(["unmunge"] + extra, timeout, stdin_text=credential)
    if rc != 0:
        return "unmunge failed: %s" % _short(err or out or "rc %s" % rc)
    return None


def check_custom(command, node, timeout):
    env = _env()
    env["SLURMD_NODENAME"] = node
    rc, out, err = run_command(command, timeout, env=env, shell=True)
    if rc is None:
        return "timed out after %ss" % timeout
    if rc != 0:
        return "exit %d: %s" % (rc, _short(err or out))
    return None


# ------------------------------------------------------------------------------------------------ status records
# The records themselves: health_status.py.

def record_status(config, kind, name, record):
    """write_status into the config's statusDir: None when written (or when the config names no statusDir), else
    why not. A record that cannot be written never changes what the checks decided."""
    directory = config.get("statusDir")
    if not directory:
        return None
    try:
        health_status.write_status(directory, kind, name, record)
    except (OSError, health_status.StatusError) as e:
        return "cannot record the result in %s: %s" % (directory, _short(str(e)))
    return None


# ------------------------------------------------------------------------------------------------ config, node

def find_config(path=None, environ=None):
    environ = os.environ if environ is None else environ
    if path:
        return path
    if environ.get(CONFIG_ENV):
        return environ[CONFIG_ENV]
    if environ.get("SLURM_CONF"):
        return os.path.join(os.path.dirname(environ["SLURM_CONF"]), "health.json")
    return DEFAULT_CONFIG


def load_config(path):
    try:
        with open(path) as f:
            config = json.load(f)
    except (IOError, OSError, ValueError) as e:
        raise HealthCheckError("cannot read the health check config %s: %s" % (path, e))
    if not isinstance(config, dict) or not config.get("drainReasonPrefix") or \
            not isinstance(config.get("passive"), dict):
        raise HealthCheckError("%s is not a health check config (no drainReasonPrefix/passive)" % path)
    return config


def node_set_of(config, node):
    """The NodeSet entry of health.json a node belongs to (node names are <nodeset>-<ordinal>), or {}."""
    match = re.match(r"^(.+)-(0|[1-9][0-9]*)$", node)
    if not match:
        return {}
    return (config.get("nodeSets") or {}).get(match.group(1)) or {}


def checks_for(config, node):
    """[(name, callable returning a problem or None, timeout)] of the enabled checks for this node."""
    passive = config["passive"]
    timeout = float(config.get("checkTimeoutSeconds", DEFAULT_TIMEOUT))
    checks = []
    expected_gpus = int(node_set_of(config, node).get("gpus", 0))
    if passive.get("gpu") and expected_gpus > 0:
        checks.append(("gpu", lambda: check_gpu_count(expected_gpus, timeout), timeout))
        settings = passive.get("gpuErrors") or {}
        checks.append(("gpu-errors", lambda: check_gpu_errors(settings, timeout), 2 * timeout))
    disk = passive.get("disk") or {}
    if disk.get("paths"):
        checks.append(("disk", lambda: check_disk(disk["paths"], disk.get("minFreePercent", 0)), timeout))
    memory = passive.get("memory") or {}
    if memory.get("enabled"):
        checks.append(("memory", lambda: check_memory(memory.get("minAvailableMiB", 0)), timeout))
    munge = passive.get("munge") or {}
    if munge.get("enabled"):
        checks.append(("munge", lambda: check_munge(munge.get("socket"), timeout), 2 * timeout))
    for custom in passive.get("custom") or []:
        limit = float(custom.get("timeoutSeconds", timeout))
        checks.append((custom["name"], lambda c=custom, t=limit: check_custom(c["command"], node, t), limit))
    return checks


def run_checks(config, node):
    """Every check at once, each in its own thread with its own limit. -> (failed, passed)."""
    checks = checks_for(config, node)
    results = {}

    def run(name, func):
        try:
            results[name] = func()
        except Exception as e:  # a check that breaks is a failed check, never a passed one
            results[name] = "check error: %s" % _short(str(e))

    threads = []
    for name, func, limit in checks:
        thread = threading.Thread(target=run, args=(name, func), daemon=True)
        thread.start()
        threads.append((name, thread, limit))
    started = time.monotonic()
    for name, thread, limit in threads:
        thread.join(max(0.0, started + limit + 1.0 - time.monotonic()))
    failed, passed = [], []
    for name, thread, limit in threads:
        if name not in results:
            failed.append({"check": name, "detail": "did not finish within %ss" % limit})
        elif results[name]:
            failed.append({"check": name, "detail": _short(results[name])})
        else:
            passed.append(name)
    return failed, passed


def read_node(node):
    rc, out, err = run_command(["scontrol", "--oneliner", "show", "node", node], SCONTROL_TIMEOUT)
    if rc != 0:
        raise HealthCheckError("scontrol show node %s failed: %s" % (node, _short(err or out or "rc %s" % rc)))
    return parse_node_line(out, node)


def update_node(node, state, reason=None):
    argv = ["scontrol", "update", "NodeName=%s" % node, "State=%s" % state]
    if reason:
        argv.append("Reason=%s" % reason)
    rc, out, err = run_command(argv, SCONTROL_TIMEOUT)
    if rc != 0:
        raise HealthCheckError("%s failed: %s" % (" ".join(argv[:4]), _short(err or out or "rc %s" % rc)))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="health-check", description="Passive health checks of a Slurm node.")
    parser.add_argument("--config", help="health.json (default: see the module documentation)")
    parser.add_argument("--node", help="Slurm node name (default: $SLURMD_NODENAME)")
    parser.add_argument("--check-only", action="store_true", help="print the result as JSON; change nothing")
    args = parser.parse_args(argv)
    node = args.node or os.environ.get("SLURMD_NODENAME")
    try:
        if not node:
            raise HealthCheckError("no node: pass --node or set SLURMD_NODENAME")
        config = load_config(find_config(args.config))
        prefix = config["drainReasonPrefix"]
        failed, passed = run_checks(config, node)
        result = {"node": node, "healthy": not failed, "failed": failed, "passed": passed}
        if not args.check_only:
            record = health_status.passive_record(node, failed, passed)
            problem = record_status(config, health_status.PASSIVE, node, record)
            if problem:
                result["statusError"] = problem
            # Read again right before acting: the checks took seconds, an admin may have drained it meanwhile.
            state = read_node(node)
            action, detail = plan_action(state, prefix, failed)
            if action == "drain":
                update_node(node, "DRAIN", detail)
            elif action == "resume":
                update_node(node, "RESUME")
            result["action"] = action or "none"
            if action is None:
                result["why"] = detail
    except HealthCheckError as e:
        sys.stdout.write(json.dumps({"node": node, "error": str(e)}) + "\n")
        return EXIT_ERROR
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return EXIT_HEALTHY if not failed else EXIT_UNHEALTHY


if __name__ == "__main__":
    raise SystemExit(main())
