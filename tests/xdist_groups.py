"""Which tests may run side by side under pytest-xdist (`make test`: `-n N --dist loadgroup`), and in what order they
are handed out.

The suites that start daemons spend most of their time waiting (on slurmd, pods, CronJobs, timeouts), so `make test`
runs them in parallel workers. What must stay together is one group, which one worker runs in order:
- tests/realnode: two groups (REALNODE_LANES), run by two workers that share the node (one per machine: kubelet,
  containerd, kube-proxy on this host; tests/realnode/conftest.py starts it once for both). Its files spend their time
  waiting on Slurm's timers and pods, so two lanes of them take about half the time of one; the lanes are balanced by
  the files' measured times (README, "CI time"), the 24.11 upgrade last in its lane (it waits for images-trixie).
- a file with a module- or class-scoped fixture (a local cluster, an API server's namespace, the images' podman
  cluster made once for its tests): a group of its own.
- any other test: no group; any worker takes it. A session-scoped fixture (tests/integration's control plane) is
  made once per worker that needs it.
The groups come from the node ids alone (GroupScheduling): xdist's own loadgroup reads `xdist_group` markers into the
node ids, which pytest 9.2 no longer lets a plugin rewrite (seen: every worker started its own real node). In a
worker the tests are sorted by SUITE_ORDER (longest first, so no long group starts last); with
`--no-loadscope-reorder` they are handed out in that order. Without xdist nothing here changes anything.
"""
import functools
import os
import re

import pytest

# Longest-running suites first (README's "CI time" says why).
SUITE_ORDER = ("realnode", "integration", "images", "slurm", "ansible", "unit")
_TESTS = os.path.dirname(os.path.abspath(__file__))
# The real node's lanes: a file named here runs in lane "a", any other in lane "b". Any file's pods fit the 2-CPU
# node beside any other's (tests/realnode/conftest.py). A file's time depends on what runs beside it: with
# test_identity_realnode.py in lane b (cold run of 56049ba) the lanes took 1,036 and 1,419 s, test_real_node.py 444 s
# last and mostly alone; with it in lane a (9f400d4, 9592c8f) 1,182 and 1,448-1,501 s, test_real_node.py 709-798 s
# beside lane a's files (README, "CI time").
REALNODE_LANES = {"a": ("test_exec_real.py", "test_exec_slurm_real.py", "test_identity_realnode.py",
                        "test_upgrade_realnode.py")}
_SHARED_FIXTURE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")


@functools.lru_cache(maxsize=None)
def _has_shared_fixture(path):
    """Whether a test file defines a fixture made once for several of its tests (read as text: the controller, which
    schedules, does not collect)."""
    try:
        with open(path) as f:
            return bool(_SHARED_FIXTURE.search(f.read()))
    except OSError:
        return True   # unknown: keep the file together


def _suite(path):
    rel = os.path.relpath(path, _TESTS).split(os.sep)
    return rel[0] if len(rel) > 1 else ""


def group_of(nodeid, rootdir):
    """The group of a test (by its node id, relative to rootdir), or None for a test any worker may take."""
    path = os.path.join(rootdir, nodeid.split("::", 1)[0])
    suite = _suite(path)
    if suite == "realnode":
        lane = "a" if os.path.basename(path) in REALNODE_LANES["a"] else "b"
        return os.path.join(_TESTS, "realnode", "lane-" + lane)
    if suite not in ("", "unit") and _has_shared_fixture(path):
        return path
    return None


def _rank(item):
    suite = _suite(str(item.fspath))
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_rank)   # stable: a file keeps its tests' order


def pytest_xdist_make_scheduler(config, log):
    """With --dist loadgroup: our groups (group_of) instead of xdist_group markers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling   # only where xdist runs the session

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return group_of(nodeid, str(config.rootpath)) or nodeid

    return GroupScheduling(config, log)


# pytest_xdist_make_scheduler is xdist's hook: declared by xdist, so only a plugin loaded with it may implement it.
pytest_xdist_make_scheduler = pytest.hookimpl(optionalhook=True)(pytest_xdist_make_scheduler)
