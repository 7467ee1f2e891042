"""tools/ci_summary.py: the stage table .ci/run ends with, with each stage's CPU time and the machine's use."""
import os

import pytest
from repo_root import load_script


@pytest.fixture(name="summary")
def fixture_summary():
    return load_script("ci_summary", "tools", "ci_summary.py")


def test_stage_rows_carry_the_cpu_that_bash_times_printed(tmp_path, summary):
    (tmp_path / "times").write_text("k8s-build 5 1772 0 20m1.500s 2m0.250s\n"
                                    "deps 0 5 0\n"
                                    "test-node 2410 1495 2 1m0.000s 0m30.000s\n")
    rows = summary.stages(str(tmp_path))
    assert rows == [("deps", 0, 5, 0, None), ("k8s-build", 5, 1772, 0, 1321.75),
                    ("test-node", 2410, 1495, 2, 90.0)]


def test_the_machine_busy_share_leaves_out_idle_and_iowait(tmp_path, summary):
    hertz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal
    (tmp_path / "cpu-start").write_text("cpu  %s 0 0\n" % " ".join(str(v * hertz) for v in (10, 0, 5, 100, 1, 0, 0, 0)))
    (tmp_path / "cpu-end").write_text("cpu  %s 0 0\n" % " ".join(str(v * hertz) for v in (70, 10, 25, 130, 11, 1, 1, 2)))
    assert summary.machine_busy(str(tmp_path)) == (60 + 10 + 20 + 1 + 1 + 2, 60 + 10 + 20 + 30 + 10 + 1 + 1 + 2)
    (tmp_path / "cpu-end").unlink()
    assert summary.machine_busy(str(tmp_path)) is None


def test_the_table_prints_cpu_minutes_and_the_machine_line(tmp_path, summary, capsys):
    (tmp_path / "times").write_text("lint 0 60 0 0m45.000s 0m15.000s\n")
    (tmp_path / "cpu-start").write_text("cpu  0 0 0 0 0 0 0 0\n")
    hertz = os.sysconf("SC_CLK_TCK")
    (tmp_path / "cpu-end").write_text("cpu  %d 0 0 %d 0 0 0 0\n" % (90 * hertz, 30 * hertz))
    assert summary.main(str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "lint                   start   0:00  took   1:00  CPU   1.0 min" in out
    assert "the machine: 1.5 of 2.0 CPU minutes busy (75%" in out


def test_the_cpu_of_each_test_is_added_up_by_file(tmp_path, summary, capsys):
    (tmp_path / "times").write_text("test-kube 0 60 0 0m45.000s 0m15.000s\n")
    (tmp_path / "test-kube.xml").write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.integration.test_a" name="t1" time="5"><properties>'
        '<property name="cpu_seconds" value="30.50" /></properties></testcase>'
        '<testcase classname="tests.integration.test_a" name="t2" time="5"><properties>'
        '<property name="cpu_seconds" value="29.50" /></properties></testcase>'
        '<testcase classname="tests.integration.test_b" name="t1" time="50"><properties>'
        '<property name="cpu_seconds" value="1.00" /></properties></testcase>'
        '<testcase classname="tests.integration.test_c" name="t1" time="1" />'
        '</testsuite></testsuites>')
    assert summary.main(str(tmp_path)) == 0
    out = capsys.readouterr().out
    cpu = out[out.index("used the most CPU"):]
    assert "1.0 CPU minutes in all" in cpu
    assert cpu.splitlines()[1:3] == ["       60  tests/integration/test_a.py", "        1  tests/integration/test_b.py"]
    assert "tests: 4 passed, 0 failed, 0 skipped" in out


def test_the_cpu_reference_of_the_start_is_printed_when_there(tmp_path, summary, capsys):
    (tmp_path / "times").write_text("lint 0 60 0 0m45.000s 0m15.000s\n")
    assert summary.cpu_reference(str(tmp_path)) is None
    (tmp_path / "cpu-ref").write_text("Traceback (most recent call last):\n")
    assert summary.cpu_reference(str(tmp_path)) is None
    (tmp_path / "cpu-ref").write_text("cpu-ref 0.812 s (python 0.402, zlib 0.410)\n")
    summary.main(str(tmp_path))
    assert "the CPU's speed at the start: cpu-ref 0.812 s (python 0.402, zlib 0.410)" in capsys.readouterr().out


def test_the_cpu_reference_prints_its_line(monkeypatch, capsys):
    cpu_ref = load_script("cpu_ref", "tools", "cpu_ref.py")
    assert cpu_ref.best_of(lambda: None, runs=2) >= 0
    assert cpu_ref.python_loop(13) == sum((i * 7) % 13 for i in range(13))
    # the line cpu_reference() reads back: the workloads' best times (stood in for here) and their sum
    monkeypatch.setattr(cpu_ref, "best_of", {cpu_ref.python_loop: 0.221, cpu_ref.compress: 0.108}.get)
    cpu_ref.main()
    assert capsys.readouterr().out == "cpu-ref 0.329 s (python 0.221, zlib 0.108)\n"
