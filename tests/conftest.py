"""Make the repository importable as ansible_collections.soperator.slurm, the way Ansible loads it; under CI=true,
fail skips that are not environmental (tests/ci_skips.py); group the tests for pytest-xdist (`make test` runs the
suites that wait on daemons side by side, see xdist_groups.py)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = os.path.join(ROOT, "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# The hooks, by their names. pylint: disable=unused-import
from ci_skips import pytest_runtest_makereport  # noqa: E402,F401
from xdist_groups import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: E402,F401


def pytest_configure(config):
    """tests/cpu_use.py: a plugin of its own (its makereport hook beside ci_skips')."""
    import cpu_use
    if not config.pluginmanager.is_registered(cpu_use):
        config.pluginmanager.register(cpu_use, "soperator_cpu_use")
