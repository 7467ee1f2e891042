"""Apply a 4-nodeset, 1,024-worker cluster to the Kubernetes API emulator (tests/kube/emulator, real HTTP, the real
kubernetes client): the first run, then a no-op re-run. Prints wall time and requests (reads / writes) per run.

Target for the no-op re-run: 0 writes and at most one read per managed kind. The module's own start-up through
Ansible is not included (the backend runs in-process, as the module's main() does). Prints numbers only.
"""
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_render import documents  # noqa: E402
from emulator import KubeEmulator  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import (  # noqa: E402
    MANAGED_KINDS, KubeCluster)
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import (  # noqa: E402
    KubeClient, api_client_from_params)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402


def run_once(kubeconfig, model):
    client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), c.FIELD_MANAGER)
    started = time.perf_counter()
    # wait=True, as site.yml runs it: the status written at the end is the ready one, so a re-run has none to write
    result = KubeCluster(client, model, wait=True, wait_timeout=60, poll=0.2).present()
    return time.perf_counter() - started, result


def main():
    model = build_model(documents(1024))
    print("workers %d in %d nodesets; managed kinds %d (+ namespace, CRDs)" % (
        model.total_workers, len(model.node_sets), len(MANAGED_KINDS)))
    print("%-10s %-9s %-7s %-7s %-9s %s" % ("run", "wall s", "reads", "writes", "changed", "objects"))
    with KubeEmulator() as emu, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = emu.write_kubeconfig(os.path.join(tmp, "kubeconfig"))
        for label in ("first", "no-op", "no-op"):
            emu.reset_counts()
            seconds, result = run_once(kubeconfig, model)
            counts = emu.counts()
            print("%-10s %-9.3f %-7d %-7d %-9s %d" % (label, seconds, counts["reads"], counts["writes"],
                                                      result["changed"], len(result["objects"])))


if __name__ == "__main__":
    main()
