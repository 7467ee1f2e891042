"""The real-cluster suite runs only when KUBECONFIG names a cluster to use; it says so loudly when it skips."""
import os

import pytest

from ci_skips import environmental

REASON = environmental("KUBECONFIG is not set: the real-cluster integration suite (tests/integration) is SKIPPED; "
                       "set KUBECONFIG to run it against a real Kubernetes cluster")


def pytest_report_header(config):
    if not os.environ.get("KUBECONFIG"):
        return "integration: " + REASON
    return "integration: against the cluster of KUBECONFIG=%s" % os.environ["KUBECONFIG"]


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KUBECONFIG"):
        return
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=REASON))


def pytest_terminal_summary(terminalreporter):
    if not os.environ.get("KUBECONFIG"):
        terminalreporter.write_line("SKIPPED the real-cluster integration suite: " + REASON, yellow=True, bold=True)
