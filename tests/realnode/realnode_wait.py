"""The real-node tests' bounded wait: probe() -> (done, what it saw), polled every 2 s until done or `timeout`."""
import time


def wait(what, probe, timeout=180):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last and last[0]:
            return last
        time.sleep(2)
    raise AssertionError("timed out after %ss waiting for %s (last: %s)" % (timeout, what, last))
