"""Under CI=true a skipped test fails, unless its skip is environmental.

CI installs everything the suite needs (make deps), so a skip there means a test that silently did not run.
A skip that depends on what only some machines have (a real cluster through KUBECONFIG) says so with
environmental(reason). tests/conftest.py loads this hook; `pytest -p ci_skips` loads it anywhere.
"""
import os

import pytest

MARK = "[environmental]"


def environmental(reason):
    """A skip reason CI accepts."""
    return "%s %s" % (MARK, reason)


def _reason(report):
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    return str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _reason(report)
    if MARK not in reason:
        report.outcome = "failed"
        report.longrepr = "skipped under CI=true, and the skip is not environmental: %s" % reason
