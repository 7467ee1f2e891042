"""Registration storm: N real slurmd (the local backend: one `slurmd -D -N <node>` each) started at once join one real
slurmctld; how long until every node is idle, and how slurmctld answers meanwhile.

A local cluster whose NodeSet can hold N nodes starts with 1 running; then the NodeSet is scaled to N in one run of
the backend, which starts the N-1 new slurmd without waiting for any (as pods would come up). From that moment:

* a prober runs RPCs against slurmctld in a loop (`sinfo -h -o %D`: one node-info RPC each) and
  records each one's wall time: the latency users see while the nodes register;
* sinfo is polled until all N nodes are idle;
* sdiag afterwards: RPCs by message type (count, average and total time, as slurmctld counts them).

Prints the numbers; asserts nothing. Last line: `registered N nodes in S s; max RPC latency L s`.
By default slurm.conf is what we render, the size-aware settings (render/size.py, above 256 nodes) included;
`--slurm-defaults` leaves those and TreeWidth to Slurm (TreeWidth=50 is 22.05's default) to compare.
`--slurm-config KEY=VALUE` (repeatable) adds slurmConfig settings. The slurmd start one after the other (the backend);
"after the last start" is the part that is slurmctld's alone. Stops everything it started (the backend: by pid).
Needs the Slurm daemons and munge (Debian: slurmctld slurmd slurm-client munge). More than 4 slurmd: run it under
the machine's heavy-run lock where one is kept.

    python3 bench/bench_registration.py --nodes 64 [--slurm-defaults] [--slurm-config TreeWidth=64]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))   # tests/specs: the spec texts tests share

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.render import size  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from specs import spec_text  # noqa: E402


def model(nodes, replicas, config):
    settings = dict(SlurmdTimeout=600, **config)
    text = spec_text("loopback-nodes", cluster="storm", nodes=nodes, replicas=replicas,
                     slurm_config="{%s}" % ", ".join("%s: %s" % (k, v) for k, v in sorted(settings.items())))
    return build_model(load_documents(text))


class Prober(threading.Thread):
    """sinfo in a loop against slurmctld; the wall time of each call."""

    def __init__(self, env):
        super().__init__(daemon=True)
        self.env, self.times, self.failed, self.stop = env, [], 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            started = time.perf_counter()
            proc = subprocess.run(["sinfo", "-h", "-o", "%D"], env=self.env, capture_output=True, timeout=120,
                                  check=False)
            self.times.append(time.perf_counter() - started)
            self.failed += proc.returncode != 0
            self.stop.wait(0.1)


def since_last_slurmd_start(cluster):
    """Seconds since the newest slurmd started, from the start times (clock ticks since boot) the backend records."""
    ticks = max(r["start_time"] for n, r in cluster.daemons.records().items() if n.startswith("slurmd-"))
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - ticks / float(os.sysconf("SC_CLK_TCK"))


def size_lines(cluster):
    keys = ("TreeWidth=", "SchedulerParameters=", "SlurmctldParameters=")
    with open(cluster.layout.slurm_conf) as f:
        return [line.strip() for line in f if line.startswith(keys)]


def idle_count(cluster):
    nodes = cluster.sinfo_nodes()
    return sum(1 for n in nodes if n["state"] == "idle" and not n["state_flags"]), len(nodes)


def sdiag_rpcs(cluster):
    """[(message type, count, average us, total us)] from sdiag's 'Remote Procedure Call statistics by message
    type', the busiest first."""
    out = cluster.run(["sdiag"], timeout=60).stdout
    rows, inside = [], False
    for line in out.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            inside = True
            continue
        if inside and not line.strip():
            if rows:
                break
            continue
        if inside and "count:" in line:
            name = line.split("(")[0].strip()
            fields = dict(part.strip().split(":", 1) for part in line.split(")", 1)[1].split() if ":" in part)
            rows.append((name, int(fields["count"]), int(fields["ave_time"]), int(fields["total_time"])))
    return sorted(rows, key=lambda r: -r[3])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--slurm-config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--slurm-defaults", action="store_true",
                        help="leave TreeWidth and render/size.py's settings to Slurm")
    parser.add_argument("--timeout", type=float, default=900, help="bound on the wait for every node idle")
    args = parser.parse_args()
    config = dict(item.split("=", 1) for item in args.slurm_config)
    if args.slurm_defaults:
        size.with_size_settings = lambda sections, _model, _target: sections
        config.setdefault("TreeWidth", "50")
    for name in ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "sdiag"):
        try:
            find_binary(name)
        except LocalClusterError as e:
            raise SystemExit("bench_registration needs real Slurm: %s" % e)
    state_dir = tempfile.mkdtemp(prefix="sop-storm-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, model(args.nodes, 1, config), timeout=300)
    try:
        cluster.ensure_started()
        env = dict(os.environ, **cluster.env())
        cluster.run(["sdiag", "--reset"], timeout=60, check=False)
        prober = Prober(env)
        prober.start()
        started = time.perf_counter()
        cluster.ensure_started(model(args.nodes, args.nodes, config))
        spawned = time.perf_counter() - started
        deadline = started + args.timeout
        idle, listed = idle_count(cluster)
        while idle < args.nodes:
            if time.perf_counter() > deadline:
                raise SystemExit("only %d of %d nodes idle after %.0f s" % (idle, args.nodes, args.timeout))
            time.sleep(0.2)
            idle, listed = idle_count(cluster)
        took = time.perf_counter() - started
        after_last = since_last_slurmd_start(cluster)
        prober.stop.set()
        prober.join(130)
        rpcs = sdiag_rpcs(cluster)
        times = sorted(prober.times)
        print("slurmConfig: %s (and SlurmdTimeout=600)" % (
            ", ".join("%s=%s" % kv for kv in sorted(config.items())) or "none"))
        print("slurm.conf: %s" % " ".join(size_lines(cluster)))
        print("%d slurmd started by one backend run in %.1f s; all %d nodes idle %.1f s after the run began, %.1f s "
              "after the last slurmd started" % (args.nodes - 1, spawned, listed, took, after_last))
        print("sinfo while registering: %d calls, %d failed; median %.3f s, p95 %.3f s, max %.3f s" % (
            len(times), prober.failed, times[len(times) // 2], times[int(len(times) * 0.95)], times[-1]))
        print("sdiag, RPCs by type (busiest first): %s" % "; ".join(
            "%s count %d ave %.1f ms" % (name, count, ave / 1000.0) for name, count, ave, dummy in rpcs[:6]))
        print("registered %d nodes in %.1f s; max RPC latency %.3f s" % (args.nodes, took, times[-1]))
    finally:
        cluster.stop(purge=True)
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
