"""A scrape answers within its bound (issue 35, defect 7): the runner's deadline bounds every attempt of every
command."""
import os

import pytest
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    LocalTransport, SlurmRunner, SlurmUnavailable, TransientError)


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
