# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Prometheus exporter: each scrape reads Slurm through the collection's one runner (scontrol show node,
squeue, sdiag: three commands, whatever the cluster's size) and answers with observe/metrics.py's families, written
by observe/exposition.py (prometheus_client's text, faster at thousands of nodes).

    python3 -m ansible_collections.soperator.slurm.plugins.module_utils.observe.exporter \\
        --port 9341 [--listen-address 127.0.0.1] [--slurm-conf PATH] [--reason-prefix 'soperator:'] \\
        [--status-dir DIR] [--remediation-record FILE]

Besides Slurm, each scrape reads the health checks' last results under --status-dir and the remediation record
--remediation-record (observe/status.py).

A scrape answers within --scrape-timeout (Prometheus' own, spec.observability.exporter.scrapeTimeout: one value):
its Slurm commands share a deadline, and the first one the controller does not answer before it ends the scrape's
Slurm reads with soperator_slurm_up 0. Why a deadline and not a cached last result: every scrape stays a fresh read
(a cache would show a resumed node as still drained), and Prometheus gets an answer it can alert on.

The local backend runs it next to the cluster's daemons; on Kubernetes the exporter Deployment runs it in the
runner image against the controller pod.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import os
import signal
import sys
import threading
import time

try:
    from prometheus_client import CollectorRegistry
except ImportError:  # the program needs it (requirements.txt); importing this file (local/exporter.py) does not
    CollectorRegistry = None

from ansible_collections.soperator.slurm.plugins.module_utils.observe import metrics, status
from ansible_collections.soperator.slurm.plugins.module_utils.observe.exposition import start_http_server
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import DEFAULT_REASON_PREFIX, read_node_table
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, LocalTransport, SlurmError, SlurmRunner, SlurmUnavailable)

# The share of the scrape timeout the reads may use; the rest is left for the reply to reach Prometheus.
READ_SHARE = 0.8


def read_snapshot(runner, clock=time.monotonic, jail=None, status_dir=None, remediation_record=None):
    """One scrape's reads. A command that fails is recorded in `errors` (the others still count); one the controller
    did not answer (in time) is the last: the commands after it are recorded as not run, rather than each waiting
    for a controller that is down. The status files are read as they are (a missing one gives no metrics, never an
    error)."""
    snap = metrics.Snapshot()
    if status_dir:
        snap.health, snap.status_skipped = status.read_health(status_dir)
    if remediation_record:
        snap.remediation = status.read_remediation(remediation_record)
    if jail:
        try:
            snap.jail = os.statvfs(jail)
        except OSError as e:
            snap.errors["statvfs"] = str(e)[:500]
    reads = (
        ("scontrol", lambda: list(read_node_table(runner).values()), "nodes"),
        ("squeue", lambda: runner.run(metrics.SQUEUE_JOBS, parse=lambda r: metrics.parse_squeue_jobs(r.stdout))[1],
         "jobs"),
        ("sdiag", lambda: runner.run(metrics.SDIAG, parse=lambda r: metrics.parse_sdiag(r.stdout))[1], "sdiag"),
    )
    unanswered = None
    for command, read, attr in reads:
        if unanswered:
            snap.errors[command] = "not run: %s did not answer" % unanswered
            snap.seconds[command] = 0.0
            continue
        start = clock()
        try:
            setattr(snap, attr, read())
        except SlurmUnavailable as e:
            snap.errors[command] = str(e)[:500]
            unanswered = command
        except (SlurmError, ValueError) as e:
            snap.errors[command] = str(e)[:500]
        snap.seconds[command] = clock() - start
    return snap


class SlurmCollector(object):
    """A prometheus_client collector: every scrape reads Slurm anew (no cache that could show a stale drain), with
    a runner of its own (a runner keeps the history of its commands). runner_factory(deadline) gives a runner whose
    commands all end by `deadline` (a `clock` value): READ_SHARE of scrape_timeout after the scrape began."""

    def __init__(self, runner_factory, prefix=DEFAULT_REASON_PREFIX, clock=time.monotonic, jail=None, status_dir=None,
                 remediation_record=None, scrape_timeout=10.0):
        self.runner_factory = runner_factory
        self.prefix = prefix
        self.clock = clock
        self.jail = jail
        self.status_dir = status_dir
        self.remediation_record = remediation_record
        self.scrape_timeout = scrape_timeout

    def collect(self):
        start = self.clock()
        runner = self.runner_factory(start + READ_SHARE * self.scrape_timeout)
        snap = read_snapshot(runner, self.clock, self.jail, self.status_dir, self.remediation_record)
        return iter(metrics.families(snap, self.prefix, self.clock() - start))


def build_registry(runner_factory, prefix=DEFAULT_REASON_PREFIX, jail=None, status_dir=None, remediation_record=None,
                   scrape_timeout=10.0):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SlurmCollector(runner_factory, prefix, jail=jail, status_dir=status_dir,
                                     remediation_record=remediation_record, scrape_timeout=scrape_timeout))
    return registry


def _transport(args):
    """Local Slurm clients, or exec into the controller pod with the pod's ServiceAccount (the Deployment's)."""
    if not args.kubernetes_namespace:
        return LocalTransport(slurm_conf=args.slurm_conf)
    if not args.controller_pod:
        raise SystemExit("--kubernetes-namespace needs --controller-pod")
    from kubernetes import client, config      # only the Kubernetes mode needs the client
    config.load_incluster_config()
    core_v1 = client.CoreV1Api()
    return KubernetesTransport(args.kubernetes_namespace, args.controller_pod, container=args.controller_container,
                               slurm_conf=args.slurm_conf, core_v1=core_v1, standby_pods=args.standby_pod or ())


def _positive(text):
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description="Prometheus exporter of a Slurm cluster (soperator.slurm)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--listen-address", default="127.0.0.1")
    parser.add_argument("--slurm-conf", help="slurm.conf of the cluster (default: $SLURM_CONF, then Slurm's own)")
    parser.add_argument("--reason-prefix", default=DEFAULT_REASON_PREFIX,
                        help="our drain reason prefix: tells our drains from others'")
    parser.add_argument("--kubernetes-namespace", help="run the Slurm commands in the controller pod of this "
                        "namespace (in-cluster credentials) instead of locally")
    parser.add_argument("--controller-pod", help="with --kubernetes-namespace: the pod that runs slurmctld")
    parser.add_argument("--standby-pod", action="append", help="a backup controller's pod (repeatable): runs the "
                        "commands when --controller-pod is gone or its container is not running")
    parser.add_argument("--controller-container", default="slurmctld")
    parser.add_argument("--jail", help="the jail's path: its filesystem's size and free space are reported")
    parser.add_argument("--status-dir", help="where the health checks record their last results (health.json's "
                        "statusDir, as this process sees it)")
    parser.add_argument("--remediation-record", help="the remediation record file (observe/remediation_record.py)")
    parser.add_argument("--scrape-timeout", type=_positive, default=10.0,
                        help="seconds: Prometheus' scrape timeout for this exporter; a scrape answers within it")
    args = parser.parse_args(argv)
    # No retries: a scrape answers now or says soperator_slurm_up 0; Prometheus scrapes again anyway.
    transport = _transport(args)

    def runner(deadline):
        return SlurmRunner(transport, retries=0, timeout=args.scrape_timeout, deadline=deadline)
    server, thread = start_http_server(args.port, addr=args.listen_address,
                                       registry=build_registry(runner, args.reason_prefix, args.jail,
                                                               args.status_dir, args.remediation_record,
                                                               args.scrape_timeout))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sys.stdout.write("serving http://%s:%d/metrics\n" % (args.listen_address, args.port))
    sys.stdout.flush()
    while not stop.wait(3600):
        pass
    server.shutdown()
    thread.join(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
