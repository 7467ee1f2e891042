# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one bounded wait of the collection: poll a probe until it says done, on a monotonic clock that tests inject.

kubernetes.core's waiter waits for Kubernetes objects only; ours also waits for Slurm nodes, jobs and local
processes, so it is written here once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError


class WaitTimeout(SoperatorError):
    """`what` was not reached within `timeout` seconds; `last` is the probe's last description of what is missing."""

    def __init__(self, what, timeout, last):
        self.what, self.timeout, self.last = what, timeout, last
        super(WaitTimeout, self).__init__("timed out after %ds waiting for %s; not ready: %s" % (timeout, what, last))


class Deadline(object):
    """A point `timeout` seconds from now on `clock` (monotonic unless a test gives another)."""

    def __init__(self, timeout, clock=time.monotonic):
        self.clock = clock
        self.started = clock()
        self.timeout = timeout

    def elapsed(self):
        return self.clock() - self.started

    def remaining(self):
        return max(0.0, self.timeout - self.elapsed())

    def expired(self):
        return self.elapsed() >= self.timeout


def wait_until(probe, what, timeout, poll=2.0, sleep=time.sleep, clock=time.monotonic, timeout_error=None):
    """Call probe() -> (done, text) every `poll` seconds until done; -> seconds waited, rounded to 0.1.

    The probe runs at least once, and once more at the deadline. At the deadline: the exception
    timeout_error(text) returns is raised, or WaitTimeout(what, timeout, text)."""
    deadline = Deadline(timeout, clock)
    while True:
        done, text = probe()
        if done:
            return round(deadline.elapsed(), 1)
        if deadline.expired():
            if timeout_error is not None:
                raise timeout_error(text)
            raise WaitTimeout(what, timeout, text)
        sleep(min(poll, max(deadline.remaining(), 0.01)))
