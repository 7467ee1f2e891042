"""One exporter scrape of a large cluster (real slurmctld): seconds, and the share spent in Slurm commands.

`python3 bench/bench_exporter.py [--nodes 1000] [--nodesets 1] [--profile] [--library]`. Starts a local cluster (munged,
slurmctld, 2 slurmd) whose NodeSets (n, then n1, n2, ...) define --nodes nodes between them, the 2 slurmd in the
first; the others are taken out of FUTURE as DOWN (drained by us, as bench_drain does), a few more drained by a
health check and by an admin, and 200 jobs queued, so scontrol, squeue and sdiag answer for a full cluster. Then scrapes the exporter's
registry in process as the HTTP server does (observe/exposition.py; the server adds nothing Slurm-related) SCRAPES
times in the text format, then SCRAPES times in OpenMetrics (what Prometheus asks for), and prints the median and
worst scrape, the median per command, the Slurm share and the size of the exposition; --profile adds cProfile's top
functions over the text scrapes; --library then scrapes as often with prometheus_client's own writers (what the
exporter ran before its own writer), to compare on the same cluster. Goal: a scrape under 0.5 s (issue 32: 5,000
nodes in 4 NodeSets). Asserts nothing.
Needs the Slurm daemons and munge (Debian: slurmctld slurmd slurm-client munge).
"""
import argparse
import cProfile
import copy
import os
import pstats
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))   # tests/specs: the spec texts tests share

from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics  # noqa: E402

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.observe import exporter, exposition, metrics  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (  # noqa: E402
    LocalTransport, SlurmRunner)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary  # noqa: E402
from specs import cluster_and_rest  # noqa: E402

JOBS = 200
SCRAPES = 20
RUNNING = 2


def documents(nodes, nodesets):
    """The cluster and its NodeSets: `nodes` split evenly, the RUNNING slurmd in the first; {nodeset: its size}."""
    cluster, rest = cluster_and_rest("loopback-nodes", cluster="benchexp", replicas=RUNNING, nodes=nodes // nodesets,
                                     slurm_config="{SlurmdTimeout: 600}")
    docs = load_documents(cluster + "  healthChecks: {passive: {interval: 0}}\n" + rest)
    first = docs[1]
    for i in range(1, nodesets):
        one = copy.deepcopy(first)
        one["metadata"]["name"] = "n%d" % i
        one["spec"]["replicas"] = 0
        docs.append(one)
    return docs, dict((d["metadata"]["name"], d["spec"]["maxReplicas"]) for d in docs[1:])


class TimedCollector(exporter.SlurmCollector):
    """The exporter's collector, keeping each scrape's snapshot (its per-command seconds)."""

    def collect(self):
        start = self.clock()
        self.last = exporter.read_snapshot(self.runner_factory(start + exporter.READ_SHARE * self.scrape_timeout),
                                           self.clock)
        return iter(metrics.families(self.last, self.prefix, self.clock() - start))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--nodesets", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the scrapes")
    parser.add_argument("--library", action="store_true", help="also scrape with prometheus_client's writers")
    args = parser.parse_args()
    docs, sizes = documents(args.nodes, args.nodesets)
    nodes = sum(sizes.values())
    for name in ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sdiag", "sbatch"):
        try:
            find_binary(name)
        except LocalClusterError as e:
            raise SystemExit("bench_exporter needs real Slurm: %s" % e)
    state_dir = tempfile.mkdtemp(prefix="sop-bench-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, build_model(docs), timeout=300)
    try:
        cluster.ensure_started()
        slurm_conf = cluster.env()["SLURM_CONF"]
        for nodeset, size in sizes.items():
            first = 10 if nodeset == "n" else 0
            cluster.run(["scontrol", "update", "NodeName=%s-[%d-%d]" % (nodeset, first, size - 1), "State=DOWN",
                         "Reason=soperator: not started"], timeout=120)
        cluster.run(["scontrol", "update", "NodeName=n-[2-5]", "State=DRAIN",
                     "Reason=soperator: health:gpu 7 of 8 GPUs"], timeout=60)
        cluster.run(["scontrol", "update", "NodeName=n-[6-9]", "State=DRAIN", "Reason=admin: cabling"], timeout=60)
        for _job in range(JOBS):
            cluster.run(["sbatch", "--hold", "-o", "/dev/null", "--wrap", "true"], timeout=30)

        collector = TimedCollector(lambda deadline: SlurmRunner(LocalTransport(slurm_conf=slurm_conf), retries=0,
                                                                timeout=30, deadline=deadline))
        registry = exporter.CollectorRegistry(auto_describe=False)
        registry.register(collector)
        writers = [("text", exposition.write), ("openmetrics", lambda r: exposition.write(r, openmetrics=True))]
        if args.library:
            writers += [("text, prometheus_client's writer", generate_latest),
                        ("openmetrics, prometheus_client's writer", generate_openmetrics)]
        exposition.write(registry)           # warm: the first sinfo after a start is slower
        profile = cProfile.Profile() if args.profile else None
        for label, write in writers:
            totals, cpu, per_command, size = [], [], {}, 0
            for _scrape in range(SCRAPES):
                if profile and label == "text":
                    profile.enable()
                started, started_cpu = time.perf_counter(), time.process_time()
                size = len(write(registry))
                totals.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
                if profile:
                    profile.disable()
                for command, seconds in collector.last.seconds.items():
                    per_command.setdefault(command, []).append(seconds)
                if collector.last.errors:
                    raise SystemExit("a scrape failed: %s" % collector.last.errors)
            median = statistics.median(totals)
            slurm = sum(statistics.median(v) for v in per_command.values())
            if label == "text":
                print("cluster: %d nodes in %d NodeSets (%d drained or down), %d pending jobs; %d scrapes each" % (
                    nodes, len(sizes), nodes - RUNNING, JOBS, SCRAPES))
            print("%s scrape: median %.3f s, worst %.3f s (goal < 0.5 s); exposition %d bytes" % (
                label, median, max(totals), size))
            print("  the exporter's own CPU (parse, families, exposition; not the commands): median %.3f s" % (
                statistics.median(cpu)))
            for command, values in sorted(per_command.items()):
                print("  %-7s median %.3f s (with its parsing)" % (command, statistics.median(values)))
            print("  Slurm commands: %.0f%% of the median scrape" % (100.0 * slurm / median))
        if profile:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    finally:
        cluster.stop(purge=True)


if __name__ == "__main__":
    main()
