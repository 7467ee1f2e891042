# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one retry schedule of the collection, and what is worth a retry: the Kubernetes client (kube/client.py) and the
Slurm runner (slurm/runner.py) both try a call up to 1 + retries times, waiting delay * n before the n-th retry.

Each caller decides what is retriable (an HTTP status here, a Slurm client's message in slurm/runner.py); this
module owns the numbers. Why not a library (tenacity, urllib3's Retry): the runner's attempts share a deadline and
both callers count and report their attempts, and the collection's module_utils may only need what a target has.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from typing import Callable, Iterator

# Kubernetes API calls: worth another try when the server or something in front of it is overloaded or restarting.
KUBE_RETRY_STATUSES = frozenset([429, 500, 502, 503, 504])
# ... and, for a server-side apply, when the write raced another (409 Conflict).
KUBE_CONFLICT_STATUS = 409
KUBE_RETRIES = 3
KUBE_RETRY_DELAY = 1.0

# Slurm commands: a controller that does not answer (slurm/runner.py's UNAVAILABLE_PATTERNS say which messages).
SLURM_RETRIES = 3
SLURM_RETRY_DELAY = 2.0


class Retry(object):
    """Up to 1 + `retries` attempts; before attempt n (n >= 2) it sleeps `delay` * (n - 1) seconds."""

    def __init__(self, retries: int, delay: float, sleep: Callable[[float], object] = time.sleep) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.retries = retries
        self.delay = delay
        self.sleep = sleep

    @property
    def attempts(self) -> int:
        """How many attempts at most."""
        return self.retries + 1

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before attempt number `attempt` (1-based; 0 before the first)."""
        return self.delay * max(attempt - 1, 0)

    def __iter__(self) -> Iterator[int]:
        """Attempt numbers 1 .. attempts, sleeping the backoff before each but the first. The caller breaks out (or
        returns) when an attempt succeeds or fails for good; when the loop ends, every attempt was spent."""
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                self.sleep(self.backoff(attempt))
            yield attempt
