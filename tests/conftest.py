"""Make the repository importable as ansible_collections.soperator.slurm, the way Ansible loads it; under CI=true,
fail skips that are not environmental (tests/ci_skips.py)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = os.path.join(ROOT, "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from ci_skips import pytest_runtest_makereport  # noqa: E402,F401  (the hook, by its name) pylint: disable=unused-import
