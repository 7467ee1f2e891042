"""The tests' one bounded wait: the collection's own (plugins/module_utils/wait.py wait_until), failing the test.

Import it by name from any folder (tests/conftest.py puts tests/ on sys.path): `from waiting import wait_for`.
"""
import time

from ansible_collections.soperator.slurm.plugins.module_utils.wait import wait_until


def wait_for(probe, what, timeout, poll=0.5, done=bool, sleep=time.sleep, clock=time.monotonic):
    """Call probe() every `poll` seconds until done(value) (by default: a true value); return that value.

    After `timeout` seconds (the probe runs once more then) the test fails with "timed out after <timeout>s waiting
    for <what> (last: <the probe's last value>)", so the message says what was seen instead."""
    last = []

    def step():
        value = probe()
        last[:] = [value]
        return done(value), value

    wait_until(step, what, timeout, poll=poll, sleep=sleep, clock=clock, timeout_error=lambda value: AssertionError(
        "timed out after %ss waiting for %s (last: %r)" % (timeout, what, value)))
    return last[0]


class FakeClock:
    """A monotonic clock for wait_until and wait_for in unit tests: sleep() records the seconds and moves it on."""

    def __init__(self, now=100.0):
        self.now = now
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
