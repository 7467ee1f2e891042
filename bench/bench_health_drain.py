"""Time from fault injection to DRAINED: the passive health check (HealthCheckProgram) on a real local cluster.

Starts a local cluster (munged, slurmctld, 2 slurmd) with HealthCheckInterval=10 and a custom check that fails while
a fault file for its node exists. Each sample: at a random moment, create the fault file for cpu-1, poll
`scontrol show node` every 0.1 s until cpu-1 is DRAIN with our "health:" reason, record the seconds; remove the
file and wait until the program resumes the node. Prints every sample and the median. Target: <= interval + 5 s
(slurmd runs the program once per interval, so a sample lies between the run time of the checks and interval + that).
Asserts nothing.
Needs the Slurm daemons and munge (Debian: slurmctld slurmd slurm-client munge).
"""
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))   # tests/specs: the spec texts tests share

from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check as hc  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import ports_needed  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port  # noqa: E402
from specs import spec_text  # noqa: E402

INTERVAL = 10
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "5"))
LIMIT = 3 * INTERVAL + 30


def node(cluster):
    return hc.parse_node_line(cluster.run(["scontrol", "--oneliner", "show", "node", "cpu-1"], timeout=15).stdout,
                              "cpu-1")


def wait(cluster, predicate, what):
    deadline = time.monotonic() + LIMIT
    while not predicate(node(cluster)):
        if time.monotonic() > deadline:
            raise SystemExit("gave up after %ss waiting for cpu-1 to be %s" % (LIMIT, what))
        time.sleep(0.1)
    return time.monotonic()


def main():
    faults = tempfile.mkdtemp(prefix="sop-bf-", dir="/tmp")
    state = tempfile.mkdtemp(prefix="sop-hb-", dir="/tmp")
    os.chmod(faults, 0o755)
    os.chmod(state, 0o755)
    model = build_model(load_documents(spec_text("health-faults", cluster="hbench", workers=2, interval=INTERVAL,
                                                 faults=faults)))
    cluster = lb.LocalCluster(state, model, base_port=find_free_base_port(ports_needed(model), start=30000))
    fault = os.path.join(faults, "fault-cpu-1")
    samples = []
    try:
        cluster.ensure_started()
        for i in range(SAMPLES):
            # Inject at a random point of slurmd's interval, not right after the run that resumed the node.
            time.sleep(random.uniform(0, INTERVAL))
            start = time.monotonic()
            open(fault, "w").close()
            end = wait(cluster, lambda n: "DRAIN" in n["flags"] and " health:fault-file " in n["reason"], "DRAINED")
            samples.append(end - start)
            print("sample %d: fault -> DRAINED in %.2f s" % (i + 1, samples[-1]), flush=True)
            os.unlink(fault)
            wait(cluster, lambda n: "DRAIN" not in n["flags"], "resumed")
    finally:
        cluster.stop(purge=True)
        shutil.rmtree(faults, ignore_errors=True)
    print("HealthCheckInterval=%d s: median %.2f s, min %.2f s, max %.2f s over %d samples (target <= %d s)"
          % (INTERVAL, statistics.median(samples), min(samples), max(samples), len(samples), INTERVAL + 5))


if __name__ == "__main__":
    main()
