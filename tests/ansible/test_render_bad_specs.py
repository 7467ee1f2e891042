"""Bad specs from tests/specs/bad through the real render playbook: the play fails naming the field, with no
Python traceback, and nothing is written to render_dest."""
import os
import shutil

import pytest

import ansible_run
from specs import BAD

# One of each kind: config injection, a Slurm bound, a crash before (huge number), a YAML trap, a cross-document
# rule, a Kubernetes bound.
CASES = ["slurmconfig-newline-adds-nodes", "db-user-newline-plugindir", "quantity-exponent-huge",
         "int-5000-digits", "duplicate-yaml-key", "topology-cycle", "cron-weekday-7", "slurmconfig-cred-none",
         "annotations-over-256k"]

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed")


@pytest.mark.parametrize("case", CASES)
def test_bad_spec_fails_the_play_before_any_write(tmp_path, case):
    path = os.path.join(BAD, case + ".spec")
    with open(path) as f:
        field = f.readline()[len("# expect: "):].rstrip("\n")
    dest = tmp_path / "out"
    dest.mkdir()
    done = ansible_run.playbook("render.yml", "-e", "spec_file=%s" % path, "-e", "render_dest=%s" % dest,
                                expect_rc=2, timeout=300)
    output = done.stdout + done.stderr
    task = done.result()
    assert task["failed"]
    assert field + ": " in task["msg"], task["msg"]
    # fail_json, not a crash: no Python traceback anywhere (ansible-core puts "(traceback unavailable)" in
    # `exception` of every fail_json result).
    assert "Traceback (most recent call last)" not in output and "module_stderr" not in task
    assert task.get("exception") in (None, "(traceback unavailable)"), task.get("exception")
    assert list(dest.iterdir()) == []
