"""The exporter's own writer of the exposition (observe/exposition.py) answers byte for byte what prometheus_client
would: every family of a full scrape, in each format Prometheus negotiates, through the HTTP server too; whatever the
writer does not cover is left to the library."""
import gzip
import os
import urllib.request
import wsgiref.util

import pytest
from prometheus_client import CollectorRegistry, exposition as library
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.openmetrics import exposition as library_om

from ansible_collections.soperator.slurm.plugins.module_utils.observe import exposition, metrics, status
from ansible_collections.soperator.slurm.plugins.module_utils.observe import remediation_record as rr
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import NodeRecord

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PREFIX = "soperator:"
MANY = 50

# What Prometheus 2 and 3 ask for by default, and other forms a client may send.
ACCEPTS = [
    None,
    "text/plain;version=0.0.4",
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,"
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.4,application/openmetrics-text;"
    "version=0.0.1;q=0.3,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.2,text/plain;version=0.0.4;q=0.1,*/*;q=0.1",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/plain;version=1.0.0;escaping=underscores",
    "application/openmetrics-text",
    "application/openmetrics-text;version=1.0.0;escaping=dots",     # the library's: it rewrites classic names
    "text/plain;version=1.0.0;escaping=values",
]


def _registry(families):
    class Fixed(object):
        def collect(self):
            return iter(families)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    return registry


def _scrape():
    """Every family one scrape can give: nodes of each kind (drained by us, by an admin, CLOUD nodes powered down,
    resumed, failed to resume), jobs, sdiag, the jail, health results and the remediation record."""
    nodes = [NodeRecord("gpu-%d" % i, "MIXED", (), partitions=("main", "gpu"), cpus=8, alloc_cpus=i % 8,
                        real_memory=4096, alloc_memory=512 * (i % 3), gres="gpu:h100:8(S:0-1)",
                        gres_used="gpu:h100:%d(IDX:0)" % (i % 8), slurmd_start_time=1795000000 + i)
             for i in range(MANY)]
    nodes += [
        NodeRecord("cpu-0", "IDLE", ("DRAIN",), "soperator: health:gpu 7 of 8 GPUs", partitions=("main",), cpus=4),
        NodeRecord("cpu-1", "IDLE", ("DRAIN", "NOT_RESPONDING"), 'admin: "cabling" \\ rack\nB', partitions=("main",)),
        NodeRecord("cpu-2", "DOWN", ("NOT_RESPONDING",), "soperator: scale-down", partitions=("main",)),
        NodeRecord("burst-0", "IDLE", ("CLOUD", "POWERED_DOWN"), partitions=("burst",)),
        NodeRecord("burst-1", "IDLE", ("CLOUD",), partitions=("burst",), comment="soperator: resume-requested 100",
                   slurmd_start_time=117),
        NodeRecord("burst-2", "DOWN", ("CLOUD", "POWERED_DOWN"), "soperator: resume-failed", partitions=("burst",)),
    ]
    with open(os.path.join(FIXTURES, "sdiag-22.05.txt")) as f:
        sdiag = metrics.parse_sdiag(f.read())
    record = rr.updated(None, {"actions": {"replace": {"success": 1, "failure": 0}}, "errors": [],
                               "nodes": [{"name": "gpu-1", "action": "replaced"}]}, 100.0)
    snap = metrics.Snapshot(
        nodes=nodes, jobs=[("main", "pending", "Priority"), ("gpu", "running", "None")] * 3, sdiag=sdiag,
        seconds={"scontrol": 0.25, "squeue": 0.012, "sdiag": 0.003}, jail=os.statvfs("/"),
        health=[status.HealthResult("passive", "gpu-1", "gpu", False, 1795000000.5),
                status.HealthResult("active", "cpu-0", "nccl", True, 1795000001)],
        remediation=record, status_skipped=1)
    return metrics.families(snap, PREFIX, 0.3)


def _odd_families():
    """Families the writer must escape or leave to the library: quotes, backslashes and newlines in label values and
    help texts, floats Go writes in its own way, a unit, a timestamp, a counter with its creation time, a histogram."""
    odd = GaugeMetricFamily("odd_values", 'help with "quotes", a \\ and a\nnewline', labels=["a", "b"])
    for i, value in enumerate([0, -0.0, 0.5, 1e10, 123456789, 1.5e-7, float("inf"), float("-inf"), float("nan"),
                               True, 2 ** 60, -3]):
        odd.add_metric(['v"%d' % i, "x\\y\nz"], value)
    plain = CounterMetricFamily("plain_counter", "a counter", labels=["z", "a"])
    plain.add_metric(["1", "2"], 3)
    unlabelled = GaugeMetricFamily("plain_gauge", "one value", value=7)
    unit = GaugeMetricFamily("with_unit_seconds", "a unit", value=1, unit="seconds")
    stamped = GaugeMetricFamily("stamped", "a timestamp", labels=["n"])
    stamped.add_metric(["a"], 1, timestamp=1795000000.25)
    created = CounterMetricFamily("created", "a creation time", labels=["n"], created=1795000000)
    created.add_metric(["a"], 4, created=1795000000)
    histogram = HistogramMetricFamily("histo", "a histogram", buckets=[("1.0", 2), ("+Inf", 3)], sum_value=4)
    return [odd, plain, unlabelled, unit, stamped, created, histogram]


@pytest.mark.parametrize("families", [_scrape, _odd_families], ids=["scrape", "odd"])
def test_the_writer_writes_what_the_library_writes(families):
    registry = _registry(families())
    assert exposition.write(registry) == library.generate_latest(registry)
    assert exposition.write(registry, openmetrics=True) == library_om.generate_latest(registry)


def test_the_writer_itself_writes_every_family_of_a_scrape():
    for metric in _scrape():
        for openmetrics in (False, True):
            assert exposition._family(metric, openmetrics, {}, {}) is not None, metric.name


def _wsgi(app, accept, encoding=None, method="GET", query=""):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": "/metrics", "QUERY_STRING": query}
    wsgiref.util.setup_testing_defaults(environ)
    if accept is not None:
        environ["HTTP_ACCEPT"] = accept
    if encoding:
        environ["HTTP_ACCEPT_ENCODING"] = encoding
    seen = {}

    def start_response(code, headers):
        seen["code"], seen["headers"] = code, headers
    body = b"".join(app(environ, start_response))
    return seen["code"], sorted(seen["headers"]), body


@pytest.mark.parametrize("accept", ACCEPTS)
def test_each_negotiated_format_is_the_librarys(accept):
    registry = _registry(_scrape() + _odd_families())
    ours, theirs = exposition.make_app(registry), library.make_wsgi_app(registry)
    assert _wsgi(ours, accept) == _wsgi(theirs, accept)
    code, headers, body = _wsgi(ours, accept, encoding="gzip, deflate")
    assert (code, headers) == _wsgi(theirs, accept, encoding="gzip")[:2]
    assert gzip.decompress(body) == _wsgi(theirs, accept)[2]
    for method, query in (("HEAD", ""), ("OPTIONS", ""), ("GET", "name[]=soperator_slurm_up")):
        assert _wsgi(ours, accept, method=method, query=query) == _wsgi(theirs, accept, method=method, query=query)


def test_the_server_answers_prometheus():
    registry = _registry(_scrape())
    server, thread = exposition.start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        request = urllib.request.Request("http://127.0.0.1:%d/metrics" % server.server_port,
                                         headers={"Accept": ACCEPTS[2]})
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0;")
            assert reply.read() == library_om.generate_latest(registry)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
