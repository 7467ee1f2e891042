"""What the emulator tests still here share, moved from test_slurm_cluster_kube.py when that file went to the real
API server (tests/integration/test_slurm_cluster_real.py): the example specs and slurm_cluster through
`ansible localhost -m`. Goes with the emulator."""
import os

import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
CR = "slurm.soperator.dev/v1alpha1"


def module(module_name, check=False, diff=False, expect_failed=False, **args):
    """soperator.slurm.<module_name> with `args` through `ansible localhost -m`; its result."""
    return ansible_run.module(module_name, args, check=check, diff=diff, expect_failed=expect_failed)


def spec_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]
