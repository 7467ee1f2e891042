"""What a test needs of this machine, and its skip when that is missing: the one copy (import it by name from any
folder; tests/conftest.py puts tests/ on sys.path)."""
import shutil

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary

# Daemons and clients every local cluster needs; accounting adds slurmdbd and MariaDB (checked per spec).
SLURM = ("munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "scancel", "srun", "sbatch")
ACCOUNTING = ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacctmgr", "sacct")
REST = ("slurmrestd",)       # spec.rest (Debian: slurmrestd, and the JWT plugin of slurm-wlm-jwt-plugin)
SBIN = "/usr/sbin:/sbin"


def skip_without(binaries):
    """Skip unless the local backend finds every binary (find_binary: PATH and Slurm's install dirs)."""
    missing = []
    for name in binaries:
        try:
            find_binary(name)
        except LocalClusterError as e:
            missing.append(str(e))
    if missing:
        pytest.skip("real Slurm needed: " + "; ".join(missing))


def missing_programs(programs):
    """The programs found neither on PATH nor in the sbin folders (sshd, unshare: root's PATH has them)."""
    return [p for p in programs if shutil.which(p) is None and shutil.which(p, path=SBIN) is None]
