"""Ephemeral workers on the local backend (real slurmctld and slurmd, Slurm's own power saving): how long from
`sbatch -N2` on a powered-down NodeSet to the job RUNNING and COMPLETED, and from the job's end to both workers
powered down and their slurmds gone.

examples/ephemeral-cpu.yml with suspendTime 10 s (Slurm looks for idle nodes every 10 s, so the idle -> gone time
is suspendTime plus up to that interval). Each sample waits until the previous nodes are powered down and
SuspendTimeout has passed. Prints the numbers; asserts nothing. Needs the Slurm daemons and munge.

    python3 bench/bench_ephemeral.py [--samples 3]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402

SUSPEND_TIME, SUSPEND_TIMEOUT, RESUME_TIMEOUT = 10, 10, 120
LIMIT = 600


def model():
    with open(os.path.join(ROOT, "examples", "ephemeral-cpu.yml")) as f:
        text = f.read()
    text = text.replace("suspendTime: 300", "suspendTime: %d\n    suspendTimeout: %d" % (SUSPEND_TIME, SUSPEND_TIMEOUT))
    return build_model(load_documents(text.replace("resumeTimeout: 300", "resumeTimeout: %d" % RESUME_TIMEOUT)))


def until(probe, what):
    started = time.monotonic()
    while time.monotonic() - started < LIMIT:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit("no %s within %d s" % (what, LIMIT))


def job_state(cluster, job):
    out = cluster.run(["squeue", "-h", "-j", job, "-o", "%T"], timeout=30, check=False).stdout.strip()
    return out or "GONE"


def powered_down(cluster, names):
    nodes = json.loads(cluster.run(["sinfo", "--json"], timeout=30).stdout)["nodes"]
    flags = dict((n["name"], n.get("state_flags") or []) for n in nodes)
    return all("POWERED_DOWN" in flags[n] for n in names)


def ephemeral_slurmds(cluster):
    return [n for n in cluster.status()["processes"] if n.startswith("slurmd-burst-")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    state_dir = tempfile.mkdtemp(prefix="bench-eph-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, model(), timeout=300)
    try:
        cluster.ensure_started()
        rows = []
        for sample in range(args.samples):
            submitted = time.monotonic()
            job = cluster.run(["sbatch", "--parsable", "-p", "burst", "-N2", "-o", "/dev/null", "--wrap",
                               "srun true"], timeout=30).stdout.strip()
            until(lambda: job_state(cluster, job) in ("RUNNING", "COMPLETING", "GONE"), "job %s running" % job)
            running = time.monotonic() - submitted
            until(lambda: job_state(cluster, job) == "GONE", "job %s done" % job)
            ended = time.monotonic()
            done = ended - submitted
            ran = [n[len("slurmd-"):] for n in ephemeral_slurmds(cluster)]
            until(lambda: powered_down(cluster, ran) and not ephemeral_slurmds(cluster), "%s powered down" % ran)
            gone = time.monotonic() - ended
            rows.append((running, done, gone))
            print("sample %d: submit -> running %.1f s, submit -> done %.1f s, job end -> 2 workers gone %.1f s"
                  % (sample + 1, running, done, gone), flush=True)
            time.sleep(SUSPEND_TIMEOUT + 1)        # Slurm resumes a node only after SuspendTimeout
        best = [min(r[i] for r in rows) for i in range(3)]
        worst = [max(r[i] for r in rows) for i in range(3)]
        print("submit -> running on a powered-down NodeSet: %.1f-%.1f s; job end -> workers gone (suspendTime %d s): "
              "%.1f-%.1f s (%d samples)" % (best[0], worst[0], SUSPEND_TIME, best[2], worst[2], len(rows)))
    finally:
        cluster.stop(purge=True)
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
