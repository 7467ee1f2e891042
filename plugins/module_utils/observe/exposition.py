# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exporter's HTTP answer: prometheus_client's server, content negotiation and gzip, with the text of the
formats Prometheus asks for (text 0.0.4 and 1.0.0, OpenMetrics 1.0.0) written here for gauge and counter families.

Why our own writer (issue 32): prometheus_client formats every sample through its general escaping path; a scrape of
5,000 nodes holds 40,000 samples, and that took 0.2 s (text) and 0.55 s (OpenMetrics, what Prometheus asks for) of a
scrape whose goal is 0.5 s in all. This one works out a family's label names once and each distinct number once. Its
output is the library's, byte for byte (tests/unit/observe/test_exposition.py compares them); whatever it does not
cover - other metric types, units, timestamps, exemplars, names outside Prometheus' classic character set, other
escapings or versions, `name[]` filters - is written by the library itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import gzip
import re
import socket
import threading
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

try:
    from prometheus_client import exposition as _text
    from prometheus_client.openmetrics import exposition as _om
    from prometheus_client.utils import floatToGoString
except ImportError:  # only the exporter program serves metrics (requirements.txt)
    _text = _om = floatToGoString = None

# Prometheus' classic names (prometheus_client/validation.py): every escaping writes them unchanged.
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The escapings that write classic names as they are (DOTS doubles their underscores: the library's).
_PLAIN_ESCAPINGS = ("underscores", "allow-utf-8")
_SAMPLE_SUFFIX = {"gauge": "", "counter": "_total"}


def _escape(text):
    """A label value (both formats) or an OpenMetrics HELP text: backslash, newline and double quote escaped."""
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _OneFamily(object):
    """A registry of one family, for the library to write a family this module does not cover."""

    def __init__(self, metric):
        self.metric = metric

    def collect(self):
        return iter([self.metric])


def _sample_lines(metric, numbers, escaped):
    """The sample lines of a gauge or counter family, or None when one of its samples is not the plain kind this
    module writes (the library writes that family). `numbers` and `escaped` remember what a scrape wrote already:
    thousands of nodes share a few values, and each node's name comes back in every per-node family."""
    name = metric.name + _SAMPLE_SUFFIX[metric.type]
    lines, keys, ordered, line = [], None, (), ""
    for sample in metric.samples:
        if sample.name != name or sample.timestamp is not None or sample.exemplar is not None \
                or getattr(sample, "native_histogram", None) is not None:
            return None
        value = sample.value
        # Ints only: 0.0 and -0.0 are equal keys but are not written alike; a bool is written as a float of it.
        if isinstance(value, int) and not isinstance(value, bool):
            text = numbers.get(value)
            if text is None:
                text = numbers[value] = floatToGoString(value)
        else:
            text = floatToGoString(value)
        labels = sample.labels
        if labels.keys() != keys:
            # A family's samples share their label names: their order, and the line's format, are worked out once.
            keys = set(labels)
            if not all(isinstance(k, str) and _LABEL_NAME.match(k) for k in keys):
                return None
            ordered = tuple(sorted(keys))
            line = "%s{" + ",".join('%s="%%s"' % k for k in ordered) + "} %s\n" if ordered else "%s %s\n"
        parts = [name]
        for key in ordered:
            label = labels[key]
            text_of = escaped.get(label)
            if text_of is None:
                if not isinstance(label, str):
                    return None
                text_of = escaped[label] = _escape(label)
            parts.append(text_of)
        parts.append(text)
        lines.append(line % tuple(parts))
    return lines


def _family(metric, openmetrics, numbers, escaped):
    """One family's text in the format, or None where the library must write it."""
    if metric.type not in _SAMPLE_SUFFIX or metric.unit or not _METRIC_NAME.match(metric.name):
        return None
    lines = _sample_lines(metric, numbers, escaped)
    if lines is None:
        return None
    if openmetrics:
        head = "# HELP %s %s\n# TYPE %s %s\n" % (metric.name, _escape(metric.documentation), metric.name, metric.type)
    else:
        # The text format names a counter's family by its samples' name and does not escape '"' in HELP.
        name = metric.name + _SAMPLE_SUFFIX[metric.type]
        head = "# HELP %s %s\n# TYPE %s %s\n" % (
            name, metric.documentation.replace("\\", r"\\").replace("\n", r"\n"), name, metric.type)
    return head + "".join(lines)


def write(registry, openmetrics=False):
    """The registry's families in the text format (0.0.4; 1.0.0 with classic names is the same text) or
    OpenMetrics 1.0.0: bytes identical to prometheus_client's generate_latest."""
    out, numbers, escaped = [], {}, {}
    for metric in registry.collect():
        text = _family(metric, openmetrics, numbers, escaped)
        if text is None:
            one = _OneFamily(metric)
            text = (_om.generate_latest(one).decode("utf-8")[:-len("# EOF\n")] if openmetrics
                    else _text.generate_latest(one).decode("utf-8"))
        out.append(text)
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode("utf-8")


def _our_writer(encoder):
    """Our writer for the library's choice of encoder, or None when the library must write the answer: only the
    plain text and OpenMetrics 1.0.0 encoders, with an escaping that leaves classic names as they are."""
    func = getattr(encoder, "func", encoder)
    keywords = getattr(encoder, "keywords", {}) or {}
    if keywords.get("escaping", "underscores") not in _PLAIN_ESCAPINGS:
        return None
    if func is _text.generate_latest and set(keywords) <= set(["escaping"]):
        return functools.partial(write, openmetrics=False)
    if func is _om.generate_latest and set(keywords) <= set(["escaping", "version"]) \
            and keywords.get("version", "1.0.0") == "1.0.0":
        return functools.partial(write, openmetrics=True)
    return None


def answer(registry, accept_header, accept_encoding_header=None):
    """(Content-Type, body, gzipped) of a metrics request, or None where the library must answer it."""
    encoder, content_type = _text.choose_encoder(accept_header)
    writer = _our_writer(encoder)
    if writer is None:
        return None
    body = writer(registry)
    if _text.gzip_accepted(accept_encoding_header):
        return content_type, gzip.compress(body), True
    return content_type, body, False


def make_app(registry):
    """A WSGI app: GET of any path but /favicon.ico answered by `answer`; everything else by the library's app."""
    library_app = _text.make_wsgi_app(registry)

    def app(environ, start_response):
        if environ["REQUEST_METHOD"] == "GET" and environ.get("PATH_INFO") != "/favicon.ico" \
                and "name[]" not in parse_qs(environ.get("QUERY_STRING", "")):
            reply = answer(registry, environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"))
            if reply is not None:
                content_type, body, gzipped = reply
                headers = [("Content-Type", content_type)] + ([("Content-Encoding", "gzip")] if gzipped else [])
                start_response("200 OK", headers)
                return [body]
        return library_app(environ, start_response)
    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """Log no request (as prometheus_client's server)."""


def start_http_server(port, addr="0.0.0.0", registry=None):
    """Serve `registry` on addr:port from a daemon thread -> (server, thread), as prometheus_client's
    start_http_server does (a thread per request; IPv6 addresses too)."""
    family, _type, _proto, _name, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM,
                                                                flags=socket.AI_PASSIVE)[0]

    class Server(_text.ThreadingWSGIServer):
        address_family = family

    server = make_server(sockaddr[0], port, make_app(registry), Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever)
    thread.daemon = True
    thread.start()
    return server, thread
