"""The CPU each test used, as the junit property `cpu_seconds`: the pytest process's own user and system time plus
that of the children it waited for (the Ansible runs, the commands, the daemons a fixture stopped), from its setup's
start to its teardown's end. tools/ci_summary.py adds them up by file: what a CI run's CPU goes to, where wall time
(workers side by side, tests waiting on daemons) cannot say. A daemon stopped in a later teardown counts there.
"""
import resource

import pytest

PROPERTY = "cpu_seconds"


def _cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_START] = _cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and _START in item.stash:
        # before the report is made from the item: the property goes into the teardown's report, and the junit XML
        item.user_properties.append((PROPERTY, "%.2f" % (_cpu() - item.stash[_START])))
    yield


_START = pytest.StashKey[float]()
