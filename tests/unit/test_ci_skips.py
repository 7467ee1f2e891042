"""tests/ci_skips.py: under CI=true a plain skip fails and an environmental one stays a skip (a real pytest run)."""
import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = """
import pytest
from ci_skips import environmental

def test_plain():
    pytest.skip("a tool is missing")

@pytest.mark.skip(reason=environmental("no cluster here"))
def test_environmental():
    pass

def test_passes():
    pass
"""


def _run(tmp_path, ci):
    (tmp_path / "test_cases.py").write_text(CASES)
    env = dict(os.environ, PYTHONPATH=TESTS)
    env.pop("CI", None)
    if ci:
        env["CI"] = "true"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_skips", "-p", "no:cacheprovider", "-rA", "-q",
                           str(tmp_path / "test_cases.py")], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout


def test_under_ci_a_plain_skip_fails_and_an_environmental_one_does_not(tmp_path):
    rc, out = _run(tmp_path, ci=True)
    assert rc == 1, out
    assert "FAILED test_cases.py::test_plain" in out and "not environmental: Skipped: a tool is missing" in out, out
    assert "SKIPPED" in out and "no cluster here" in out and "1 failed, 1 passed, 1 skipped" in out, out


def test_outside_ci_skips_stay_skips(tmp_path):
    rc, out = _run(tmp_path, ci=False)
    assert rc == 0 and "1 passed, 2 skipped" in out, out
