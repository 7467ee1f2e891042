"""One exporter scrape of a 1,000-node cluster (real slurmctld): seconds, and the share spent in Slurm commands.

Starts a local cluster (munged, slurmctld, 2 slurmd) whose NodeSet defines 1,000 nodes; the 998 without slurmd are
taken out of FUTURE as DOWN (drained by us, as bench_drain does), a few more drained by a health check and by an
admin, and 200 jobs queued, so sinfo, squeue and sdiag answer for a full cluster. Then scrapes the exporter's
registry in process (the HTTP server adds nothing Slurm-related) SCRAPES times and prints the median and worst
scrape, the median per command, the Slurm share and the size of the exposition. Goal: a scrape under 0.5 s.
Asserts nothing. Needs the Slurm daemons and munge (Debian: slurmctld slurmd slurm-client munge).
"""
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))   # tests/specs: the spec texts tests share

from prometheus_client import generate_latest  # noqa: E402

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.observe import exporter, metrics  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (  # noqa: E402
    LocalTransport, SlurmRunner)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary  # noqa: E402
from specs import cluster_and_rest  # noqa: E402

NODES = 1000
JOBS = 200
SCRAPES = 20
CLUSTER, NODESETS = cluster_and_rest("loopback-nodes", cluster="benchexp", replicas=2, nodes=NODES,
                                     slurm_config="{SlurmdTimeout: 600}")
SPEC = CLUSTER + "  healthChecks: {passive: {interval: 0}}\n" + NODESETS


class TimedCollector(exporter.SlurmCollector):
    """The exporter's collector, keeping each scrape's snapshot (its per-command seconds)."""

    def collect(self):
        start = self.clock()
        self.last = exporter.read_snapshot(self.runner_factory(start + exporter.READ_SHARE * self.scrape_timeout),
                                           self.clock)
        return iter(metrics.families(self.last, self.prefix, self.clock() - start))


def main():
    for name in ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sdiag", "sbatch"):
        try:
            find_binary(name)
        except LocalClusterError as e:
            raise SystemExit("bench_exporter needs real Slurm: %s" % e)
    state_dir = tempfile.mkdtemp(prefix="sop-bench-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, build_model(load_documents(SPEC)), timeout=120)
    try:
        cluster.ensure_started()
        slurm_conf = cluster.env()["SLURM_CONF"]
        cluster.run(["scontrol", "update", "NodeName=n-[10-%d]" % (NODES - 1), "State=DOWN",
                     "Reason=soperator: not started"], timeout=60)
        cluster.run(["scontrol", "update", "NodeName=n-[2-5]", "State=DRAIN",
                     "Reason=soperator: health:gpu 7 of 8 GPUs"], timeout=60)
        cluster.run(["scontrol", "update", "NodeName=n-[6-9]", "State=DRAIN", "Reason=admin: cabling"], timeout=60)
        for _job in range(JOBS):
            cluster.run(["sbatch", "--hold", "-o", "/dev/null", "--wrap", "true"], timeout=30)

        collector = TimedCollector(lambda deadline: SlurmRunner(LocalTransport(slurm_conf=slurm_conf), retries=0,
                                                                timeout=30, deadline=deadline))
        registry = exporter.CollectorRegistry(auto_describe=False)
        registry.register(collector)
        generate_latest(registry)            # warm: the first sinfo after a start is slower
        totals, per_command, size = [], {}, 0
        for _scrape in range(SCRAPES):
            started = time.perf_counter()
            size = len(generate_latest(registry))
            totals.append(time.perf_counter() - started)
            for command, seconds in collector.last.seconds.items():
                per_command.setdefault(command, []).append(seconds)
            if collector.last.errors:
                raise SystemExit("a scrape failed: %s" % collector.last.errors)
        median = statistics.median(totals)
        slurm = sum(statistics.median(v) for v in per_command.values())
        print("cluster: %d nodes (%d drained or down), %d pending jobs; %d scrapes" % (NODES, NODES - 2, JOBS, SCRAPES))
        print("scrape: median %.3f s, worst %.3f s (goal < 0.5 s); exposition %d bytes" % (median, max(totals), size))
        for command, values in sorted(per_command.items()):
            print("  %-7s median %.3f s" % (command, statistics.median(values)))
        print("Slurm commands: %.0f%% of the median scrape" % (100.0 * slurm / median))
    finally:
        cluster.stop(purge=True)


if __name__ == "__main__":
    main()
