"""tests/xdist_groups.py: which tests share an xdist worker. The real node's files form two lanes (two workers
share the node), every one of its files in exactly one."""
import os

import xdist_groups

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)


def _realnode_files():
    return sorted(f for f in os.listdir(os.path.join(TESTS, "realnode")) if f.startswith("test_") and f.endswith(".py"))


def test_the_real_nodes_files_run_in_two_lanes_the_upgrade_in_lane_a():
    groups = dict((name, xdist_groups.group_of("tests/realnode/%s::test_x" % name, ROOT))
                  for name in _realnode_files())
    assert set(groups.values()) == {os.path.join(TESTS, "realnode", "lane-a"),
                                    os.path.join(TESTS, "realnode", "lane-b")}
    assert groups["test_upgrade_realnode.py"].endswith("lane-a")
    # every file named for lane a exists: a renamed file would silently move to lane b
    assert set(xdist_groups.REALNODE_LANES["a"]) <= set(groups)
