"""Which tests may run side by side under pytest-xdist (`--dist loadgroup`), and in what order they are handed out.

The suites that start daemons spend most of their time waiting (on slurmd, pods, CronJobs, timeouts), so `make test`
runs them in parallel workers. What must stay together gets one xdist group, which one worker runs in order:
- tests/realnode: one group. The real node is one per machine (kubelet, containerd, kube-proxy on this host), and its
  session fixture starts it once for all four files.
- a file with a module-scoped fixture (a local cluster, an API server's namespace, the images' podman cluster made
  once for its tests): a group of its own.
- any other test: no group; any worker takes it. A session-scoped fixture (tests/integration's control plane) is
  made once per worker that needs it.
In an xdist worker the tests are sorted by SUITE_ORDER (longest first, so no long group starts last), and with
`--no-loadscope-reorder` xdist hands the groups out in that order. Without xdist the markers change nothing and the
order is pytest's.
"""
import os

import pytest

# Longest-running suites first (README's table of durations says why this order).
SUITE_ORDER = ("realnode", "integration", "images", "slurm", "ansible", "unit")
_TESTS = os.path.dirname(os.path.abspath(__file__))


def _suite_and_file(item):
    rel = os.path.relpath(str(item.fspath), _TESTS).split(os.sep)
    return (rel[0], rel[-1]) if len(rel) > 1 else ("", rel[0])


def _uses_a_module_fixture(item):
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d.scope in ("package", "module", "class") for fixture in defs for d in fixture)


def group_of(item):
    """The xdist group of a test item, or None for tests any worker may take."""
    suite, name = _suite_and_file(item)
    if suite == "realnode":
        return "realnode"
    if _uses_a_module_fixture(item):
        return "%s-%s" % (suite, name[:-3] if name.endswith(".py") else name)
    return None


def _rank(item):
    suite = _suite_and_file(item)[0]
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook, which reads the markers into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = group_of(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_rank)   # stable: a file keeps its tests' order
