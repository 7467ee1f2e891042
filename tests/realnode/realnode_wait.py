"""The real-node tests' bounded wait: probe() -> (done, what it saw), polled every 2 s until done or `timeout`
(tests/waiting.py's); returns the probe's last answer. `context`, when given, is called once on a timeout and its
answer joins the failure message (e.g. the daemons' log lines: too costly to read at every poll)."""
from waiting import wait_for


def wait(what, probe, timeout=180, poll=2, context=None):
    try:
        return wait_for(probe, what, timeout, poll=poll, done=lambda last: bool(last and last[0]))
    except AssertionError as e:
        if context is None:
            raise
        raise AssertionError("%s\n--- context:\n%s" % (e, context())) from None
