"""tests/waiting.py, the tests' one bounded wait: it returns the probe's value and fails the test naming what it
waited for and what it last saw. On an injected clock: no real sleeping, no timing thresholds."""
import pytest

from waiting import FakeClock, wait_for


def test_returns_the_first_true_value():
    clock = FakeClock()
    answers = iter([None, "", "RUNNING"])
    assert wait_for(lambda: next(answers), "a job", 60, poll=2, sleep=clock.sleep, clock=clock) == "RUNNING"
    assert clock.sleeps == [2, 2]


def test_done_decides_and_the_value_is_returned_as_the_probe_gave_it():
    clock = FakeClock()
    answers = iter(["PENDING", "RUNNING"])
    assert wait_for(lambda: next(answers), "job 7 to run", 60, done=lambda s: s == "RUNNING", sleep=clock.sleep,
                    clock=clock) == "RUNNING"


def test_fails_the_test_with_what_and_the_last_value():
    clock = FakeClock()
    seen = iter(["PENDING", "PENDING", "CONFIGURING", "CONFIGURING"])
    with pytest.raises(AssertionError) as e:
        wait_for(lambda: next(seen), "job 7 to run", 3, poll=1.5, done=lambda s: s == "RUNNING", sleep=clock.sleep,
                 clock=clock)
    assert str(e.value) == "timed out after 3s waiting for job 7 to run (last: 'CONFIGURING')"
    assert clock.sleeps == [1.5, 1.5]
