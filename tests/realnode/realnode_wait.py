"""The real-node tests' bounded wait: probe() -> (done, what it saw), polled every 2 s until done or `timeout`
(tests/waiting.py's); returns the probe's last answer."""
from waiting import wait_for


def wait(what, probe, timeout=180, poll=2):
    return wait_for(probe, what, timeout, poll=poll, done=lambda last: bool(last and last[0]))
