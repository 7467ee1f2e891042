"""slurmctld failover on the local backend (spec.controller.replicas 2, the host's real slurmctld 22.05): the time from
stopping the primary slurmctld (SIGTERM, what a pod deletion sends) to the first successful `sbatch`, answered by the
backup. After each sample the primary is started again (ensure_started) and takes control back; the next sample
waits until the backup stands by again.

Without --timeout the cluster keeps our SlurmctldTimeout (30 s with a backup: spec/controller.py); the backup takes
control between SlurmctldTimeout and 4/3 of it after the primary's last answer. Prints the numbers; asserts nothing.
Needs root, the Slurm daemons and munge.

    python3 bench/bench_failover.py [--samples 3] [--timeout SECONDS]
"""
import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local import controllers  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402

LIMIT = 600
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: bench, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  controller: {replicas: 2, spool: {accessModes: [ReadWriteMany]}}
  slurmConfig: %s
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec: {clusterName: bench, replicas: 1, resources: {cpu: "1", memory: 1Gi}}
"""


def until(probe, what):
    started = time.monotonic()
    while time.monotonic() - started < LIMIT:
        if probe():
            return
        time.sleep(0.2)
    raise SystemExit("no %s within %d s" % (what, LIMIT))


def standbys(cluster):
    with open(os.path.join(cluster.state_dir, "log", "slurmctld.log")) as f:
        return f.read().count("slurmctld running in background mode")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--timeout", type=int, help="SlurmctldTimeout (default: ours, 30 s)")
    args = parser.parse_args()
    config = "{SlurmctldTimeout: %d}" % args.timeout if args.timeout else "{}"
    state_dir = tempfile.mkdtemp(prefix="bench-ha-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, build_model(load_documents(SPEC % config)), timeout=300)
    try:
        cluster.ensure_started()
        times = []
        for sample in range(args.samples):
            until(lambda n=sample + 1: standbys(cluster) == n, "backup standing by")
            pid = cluster.status()["processes"][controllers.PRIMARY]["pid"]
            stopped = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], timeout=LIMIT)
            times.append(time.monotonic() - stopped)
            print("sample %d: primary stopped -> sbatch answered by the backup: %.1f s" % (sample + 1, times[-1]),
                  flush=True)
            cluster.ensure_started()            # the primary again: it takes control back
        print("failover (SlurmctldTimeout %s): %.1f-%.1f s over %d samples"
              % (args.timeout or 30, min(times), max(times), len(times)))
    finally:
        cluster.stop(purge=True)
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
