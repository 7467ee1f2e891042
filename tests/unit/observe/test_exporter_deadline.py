"""A scrape answers within its bound (issue 35, defect 7): the runner's deadline bounds every attempt of every
command, the exporter's reads stop at the first command the controller does not answer, and the collector gives the
runner READ_SHARE of the scrape timeout. tests/slurm/test_exporter_prometheus.py proves it with a real Prometheus and
a stopped slurmctld."""
import os

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.soperator.slurm.plugins.module_utils.observe import exporter
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    LocalTransport, SlurmCommandError, SlurmRunner, SlurmUnavailable, TransientError)


class Clock(object):
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


class Recording(object):
    """A transport that answers every command at once after `takes` seconds of the clock, recording the timeouts."""

    def __init__(self, clock, takes=0.0, answer=(0, "", "")):
        self.clock, self.takes, self.answer = clock, takes, answer
        self.timeouts = []

    def describe(self):
        return {"transport": "local"}

    def exec(self, argv, timeout):
        self.timeouts.append(timeout)
        self.clock.now += self.takes
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_each_attempt_gets_at_most_the_time_left_and_none_starts_after_the_deadline():
    clock = Clock()
    t = Recording(clock, takes=2.0)
    runner = SlurmRunner(t, retries=0, timeout=10, deadline=105.0, clock=clock)
    runner.run(["sinfo"])
    runner.run(["squeue"])
    assert t.timeouts == [5.0, 3.0]
    runner.run(["sdiag"])                                # 1 s left
    assert t.timeouts[-1] == 1.0
    with pytest.raises(SlurmUnavailable, match="no time left before the deadline"):
        runner.run(["scontrol", "ping"])
    assert len(t.timeouts) == 3                          # not started
    # without a deadline, the timeout as before
    t = Recording(clock)
    SlurmRunner(t, retries=0, timeout=10, clock=clock).run(["sinfo"])
    assert t.timeouts == [10]


def test_retries_stop_at_the_deadline():
    clock = Clock()
    t = Recording(clock, takes=3.0, answer=TransientError("sinfo did not finish"))
    runner = SlurmRunner(t, retries=5, retry_delay=0, timeout=10, deadline=107.0, clock=clock, sleep=lambda s: None)
    with pytest.raises(SlurmUnavailable, match="after 3 attempt.*no time left for another attempt"):
        runner.run(["sinfo"])
    assert t.timeouts == [7.0, 4.0, 1.0]


def test_a_command_that_hangs_ends_at_the_deadline(tmp_path):
    """A real process that does not answer (as a client of a stopped slurmctld) is ended at the deadline, whatever
    the per-command timeout."""
    import time
    t = LocalTransport(environ={"PATH": os.environ["PATH"]})
    pidfile = tmp_path / "pid"
    runner = SlurmRunner(t, retries=0, timeout=600, deadline=time.monotonic() + 0.5)
    with pytest.raises(SlurmUnavailable, match="did not finish within"):
        runner.run(["sh", "-c", "echo $$ > %s; exec sleep 600" % pidfile])
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):      # killed and reaped, not left behind
        os.kill(pid, 0)


class Runner(object):
    """Answers the exporter's reads as a runner does: `unanswered` commands raise SlurmUnavailable (the controller did
    not answer), `failing` ones SlurmCommandError; records what was run."""
    nodes_by_scontrol = False

    def __init__(self, unanswered=(), failing=()):
        self.unanswered, self.failing = unanswered, failing
        self.ran = []

    def run(self, argv, parse=None, check=True):
        self.ran.append(argv[0])
        if argv[0] in self.unanswered:
            raise SlurmUnavailable("the Slurm controller did not answer %s" % argv[0])
        if argv[0] in self.failing:
            raise SlurmCommandError("%s failed (rc=1): something else" % argv[0])
        raise AssertionError("not reached in these tests: %r" % (argv,))


def _scrape(runner, **kwargs):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter.SlurmCollector(lambda deadline: runner, **kwargs))
    samples = [s for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples]
    return dict(((s.name, s.labels.get("command")), s.value) for s in samples)


def test_reads_stop_at_the_first_command_the_controller_does_not_answer():
    runner = Runner(unanswered=("scontrol", "squeue", "sdiag"))
    values = _scrape(runner)
    assert runner.ran == ["scontrol"]                       # squeue and sdiag would wait for it again
    assert values[("soperator_slurm_up", None)] == 0
    assert [values[("soperator_slurm_exporter_command_failed", c)] for c in ("scontrol", "squeue", "sdiag")] == [1, 1, 1]
    assert [values[("soperator_slurm_exporter_command_seconds", c)] for c in ("squeue", "sdiag")] == [0, 0]


def test_a_command_that_fails_otherwise_does_not_stop_the_others():
    runner = Runner(failing=("scontrol", "squeue", "sdiag"))
    assert _scrape(runner)[("soperator_slurm_up", None)] == 0
    assert runner.ran == ["scontrol", "squeue", "sdiag"]


def test_the_collector_gives_the_runner_its_share_of_the_scrape_timeout():
    clock = Clock(50.0)
    deadlines = []

    def factory(deadline):
        deadlines.append(deadline)
        return Runner(unanswered=("scontrol",))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter.SlurmCollector(factory, clock=clock, scrape_timeout=4.0))
    generate_latest(registry)
    assert deadlines == [50.0 + exporter.READ_SHARE * 4.0] and exporter.READ_SHARE < 1


def test_the_scrape_timeout_must_be_a_positive_number_of_seconds(capsys):
    for bad in ("0", "-1", "nan", "inf", "10s"):
        with pytest.raises(SystemExit):
            exporter.main(["--port", "1", "--scrape-timeout", bad])
        assert "argument --scrape-timeout: " in capsys.readouterr().err
