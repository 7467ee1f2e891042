"""Fixtures for tests against real Slurm daemons (the local backend).

`local_cluster` is a factory: `local_cluster("examples/small-cpu.yml")` (a path, or the spec's YAML text) builds the
model, starts a LocalCluster and returns it. Every cluster it made is stopped and purged when the test ends, pass or
fail; its logs are copied to the test's tmp_path first. A test skips when the Slurm/munge binaries are missing.
"""
import os
import shutil
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import ports_needed
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port
from local_helpers import DRAIN_TIMEOUT, TIMEOUT, load_model
from requires import ACCOUNTING, SLURM, skip_without


@pytest.fixture
def local_cluster(tmp_path):
    """Factory: local_cluster(spec_text_or_path, model=None, start=True, **LocalCluster kwargs) -> LocalCluster."""
    made = []

    def make(spec_or_path=None, model=None, start=True, **kwargs):
        if model is None:
            model = load_model(spec_or_path)
        skip_without(SLURM + (ACCOUNTING if model.accounting.enabled else ()))
        # A short path under /tmp, not tmp_path itself: slurmstepd's unix sockets live in the spool directory and
        # sun_path holds 108 bytes. tmp_path/state points at it while the test runs.
        state = tempfile.mkdtemp(prefix="sop-", dir="/tmp")
        os.chmod(state, 0o755)
        try:
            os.symlink(state, str(tmp_path / ("state-%d" % len(made))))
        except OSError:
            pass
        kwargs.setdefault("timeout", TIMEOUT)
        # Each test process searches its own port range: two processes (parallel runs, helpers) probing the same
        # range can both find a base free before either binds it.
        if "base_port" not in kwargs:
            kwargs["base_port"] = find_free_base_port(ports_needed(model),
                                                      start=20000 + (os.getpid() % 100) * 100)
        kwargs.setdefault("drain_timeout", DRAIN_TIMEOUT)
        cluster = lb.LocalCluster(state, model, **kwargs)
        made.append(cluster)
        if start:
            cluster.ensure_started()
        return cluster

    yield make

    errors = []
    for i, cluster in enumerate(made):
        logs = os.path.join(cluster.state_dir, "log")
        if os.path.isdir(logs):
            shutil.copytree(logs, str(tmp_path / ("logs-%d" % i)), dirs_exist_ok=True)
        try:
            cluster.stop(purge=True)
        except Exception as e:  # keep tearing down the others; report at the end
            errors.append("%s: %s" % (cluster.state_dir, e))
    if errors:
        pytest.fail("local cluster teardown failed: " + "\n".join(errors))
