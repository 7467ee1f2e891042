"""The fixtures of the tests that run our modules against the real API server together with real Slurm daemons: a
pytest plugin, which a test module uses with `pytest_plugins = ("slurm_kube_fixtures",)` (helpers: slurm_kube.py).

- `local_cluster`: tests/slurm/conftest.py's fixture (a LocalCluster of real daemons, host Slurm; the modules reach it
  with slurm_transport=local), loaded from that file once. It stays tests/slurm's own: the tests there use it
  unchanged, and their conftest's comes first there.
- `namespaced`: slurm_kube.Namespaced - the test's own namespace, torn down at the end.
- `api`: slurm_kube.Api - the admin's clients of the real server.
"""
import importlib.util
import os
import sys

import pytest

from slurm_kube import Api, Namespaced
from slurm_specs import ROOT

_SLURM_CONFTEST = "soperator_tests_slurm_conftest"


def _slurm_fixtures():
    if _SLURM_CONFTEST not in sys.modules:
        slurm_tests = os.path.join(ROOT, "tests", "slurm")
        if slurm_tests not in sys.path:   # that conftest imports its helpers (local_helpers.py) by name
            sys.path.append(slurm_tests)
        spec = importlib.util.spec_from_file_location(_SLURM_CONFTEST,
                                                      os.path.join(ROOT, "tests", "slurm", "conftest.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[_SLURM_CONFTEST] = module
        spec.loader.exec_module(module)
    return sys.modules[_SLURM_CONFTEST]


local_cluster = _slurm_fixtures().local_cluster


@pytest.fixture
def namespaced(kubeconfig):
    ns = Namespaced(kubeconfig)
    try:
        yield ns
    finally:
        ns.teardown()


@pytest.fixture
def api(kubeconfig):
    clients = Api(kubeconfig)
    try:
        yield clients
    finally:
        clients.close()
