"""A fault-injecting HTTP proxy in front of a real kube-apiserver: what a real server cannot be made to do on demand
(answer 500/503/409/429, answer too late), for tests of the collection's retries and timeouts.

Ours rather than toxiproxy or mitmproxy: those are daemons with their own CA tooling and faults by connection; we
need faults by request (method and path), a record of every request, and nothing beyond the standard library.

- It listens on 127.0.0.1 on a port the kernel picks (bind to port 0: no race with other tests), in plain HTTP:
  nothing leaves the loopback and the clients need no CA of ours. write_kubeconfig() writes a kubeconfig for it.
- It forwards every request upstream over TLS as the user of the real kubeconfig (its client certificate or bearer
  token, read by the kubernetes package's own loader), so the API server and its audit log see that user. Answers
  are relayed as they come: a body with a Content-Length as is, any other (watch streams) chunk by chunk.
- fail_next(): the next `count` requests matching (method, path regex) are answered with a Kubernetes Status of that
  code; they never reach the server. delay_next(): they are held `seconds` and then forwarded (the server acts after
  the client gave up), or with after=True forwarded at once and their answer held (the write happens, the client
  never hears of it).
- requests: every request it saw, in order (method, path, query, the status it answered, the fault applied).
Connection upgrades (exec, port-forward) are refused with 501.
"""
import http.client
import http.server
import json
import re
import socket
import ssl
import threading
import urllib.parse

# Headers of one connection, not of the request (RFC 9110 7.6.1), and Host, which http.client sets for upstream.
HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host"))
# The reason a kube-apiserver gives with each code (metav1.StatusReason).
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


class Seen:
    """One request the proxy received. status: the injected status, else the server's (None until it answered, or
    when it was never forwarded); fault: None, "fail" or "delay"."""

    def __init__(self, method, path, query):
        self.method, self.path, self.query = method, path, query
        self.status = None
        self.fault = None

    def __repr__(self):
        query = "?" + urllib.parse.urlencode(self.query) if self.query else ""
        return "%s %s%s -> %s%s" % (self.method, self.path, query, self.status,
                                    " (%s)" % self.fault if self.fault else "")


class _Rule:
    def __init__(self, method, path, count, status=None, reason=None, message=None, seconds=0.0, after=False):
        self.method = method.upper() if method else None
        self.pattern = path
        self.path = re.compile(path)
        self.count = count
        self.status, self.reason, self.message = status, reason, message
        self.seconds, self.after = seconds, after

    def matches(self, method, path):
        return self.count > 0 and self.method in (None, method) and self.path.search(path) is not None

    def __repr__(self):
        what = "fail %s" % self.status if self.status else "delay %ss" % self.seconds + (" after" if self.after else "")
        return "%s %s %s (%d left)" % (what, self.method or "*", self.pattern, self.count)


class FaultProxy:
    """start(), then point clients at write_kubeconfig(path); stop() ends every connection it holds."""

    def __init__(self, kubeconfig, context=None):
        from kubernetes import client, config
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        url = urllib.parse.urlsplit(cfg.host)
        self.upstream = (url.scheme, url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self._tls = None
        if url.scheme == "https":
            self._tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
            if not cfg.verify_ssl:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
            if cfg.cert_file:
                self._tls.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._authorization = cfg.get_api_key_with_prefix("authorization")   # "Bearer ...", or None
        self._rules = []
        self._seen = []
        self._lock = threading.Lock()
        self._sockets = set()        # open connections, both sides: closed by stop()
        self._stopping = threading.Event()
        self._server = None
        self._thread = None
        self.port = None
        self.kubeconfig = None

    # --- what tests call ------------------------------------------------------------------------------------

    def fail_next(self, status, method=None, path=".", count=1, reason=None, message=None):
        """Answer the next `count` requests matching `method` (None: any) and the regex `path` (searched in the
        URL path, without the query) with a Status of this code; they never reach the server."""
        with self._lock:
            self._rules.append(_Rule(method, path, count, status=status, reason=reason or REASONS.get(status),
                                     message=message or "injected by the test's fault proxy"))

    def delay_next(self, seconds, method=None, path=".", count=1, after=False):
        """Hold the next `count` matching requests `seconds` before forwarding them; after=True: forward them at
        once and hold their answer instead."""
        with self._lock:
            self._rules.append(_Rule(method, path, count, seconds=seconds, after=after))

    @property
    def requests(self):
        with self._lock:
            return list(self._seen)

    def mark(self):
        """A position in .requests: matching(since=mark) sees only the requests after it."""
        with self._lock:
            return len(self._seen)

    def matching(self, method=None, path=".", since=0):
        """The requests seen (after the mark `since`) with this method (None: any) whose path matches the regex."""
        pattern = re.compile(path)
        return [r for r in self.requests[since:] if method in (None, r.method) and pattern.search(r.path)]

    def unconsumed(self):
        """The rules with requests still to take."""
        with self._lock:
            return [r for r in self._rules if r.count > 0]

    # --- life ---------------------------------------------------------------------------------------------

    def start(self):
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="fault-proxy-%d" % self.port, daemon=True)
        self._thread.start()
        return self

    def write_kubeconfig(self, path):
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fault-proxy",
            "clusters": [{"name": "fault-proxy", "cluster": {"server": "http://127.0.0.1:%d" % self.port}}],
            # No credentials: the proxy adds the real kubeconfig's upstream.
            "users": [{"name": "fault-proxy", "user": {}}],
            "contexts": [{"name": "fault-proxy", "context": {"cluster": "fault-proxy", "user": "fault-proxy"}}],
        }
        with open(path, "w") as f:
            json.dump(config, f, indent=1)   # JSON is YAML: every client reads it
        self.kubeconfig = path
        return path

    def stop(self):
        """Stop listening, end held requests and close every open connection (a watch stream included)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- for the handler ----------------------------------------------------------------------------------

    def _arrived(self, seen):
        """Record a request; -> the rule it takes (one count of it), or None."""
        with self._lock:
            self._seen.append(seen)
            for rule in self._rules:
                if rule.matches(seen.method, seen.path):
                    rule.count -= 1
                    return rule
        return None

    def _track(self, sock, open_):
        with self._lock:
            (self._sockets.add if open_ else self._sockets.discard)(sock)

    def _connect(self):
        scheme, host, port = self.upstream
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, context=self._tls, timeout=None)
        return http.client.HTTPConnection(host, port, timeout=None)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive and chunked answers, as clients expect of an API server
    proxy = None                    # the FaultProxy (set by FaultProxy.start)

    def log_message(self, format, *args):   # pylint: disable=redefined-builtin
        pass                                 # quiet: tests read .requests

    def setup(self):
        super().setup()
        self.proxy._track(self.connection, True)

    def finish(self):
        self.proxy._track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    def _handle(self):
        url = urllib.parse.urlsplit(self.path)
        seen = Seen(self.command, url.path, dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True)))
        try:
            body = self._read_body()
            if self.headers.get("Upgrade"):
                seen.status = self._status(501, "NotImplemented", "the fault proxy does not upgrade connections")
                self.close_connection = True
                return
            rule = self.proxy._arrived(seen)
            if rule is not None and rule.status:
                seen.fault = "fail"
                seen.status = self._status(rule.status, rule.reason, rule.message)
                return
            hold = 0.0
            if rule is not None:
                seen.fault = "delay"
                if not rule.after and self.proxy._stopping.wait(rule.seconds):
                    self.close_connection = True     # stopped while holding it: never forwarded
                    return
                hold = rule.seconds if rule.after else 0.0
            self._forward(body, hold, seen)
        except (OSError, http.client.HTTPException):
            # the client went away (a timeout), or the proxy is stopping: nothing more to say on this connection
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass   # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _status(self, code, reason, message):
        """Answer with a Kubernetes Status, as the API server would; -> the code."""
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason, "code": code}).encode()
        self.send_response_only(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if code == 429:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(body)
        return code

    def _forward(self, body, hold, seen):
        headers = dict((k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP)
        headers.pop("Authorization", None)
        if self.proxy._authorization:
            headers["Authorization"] = self.proxy._authorization
        conn = self.proxy._connect()     # one upstream connection per request: no stale keep-alive to handle
        try:
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                self.proxy._track(conn.sock, True)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                seen.status = self._status(503, "ServiceUnavailable", "fault proxy: upstream: %s" % e)
                return
            seen.status = resp.status     # the server's answer, whether or not the client is still there for it
            if hold and self.proxy._stopping.wait(hold):
                self.close_connection = True
                return
            self.send_response_only(resp.status, resp.reason)
            no_body = self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200
            chunked = resp.getheader("Content-Length") is None and not no_body
            for name, value in resp.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while not no_body:
                data = resp.read1(65536) if chunked else resp.read(65536)
                if not data:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        finally:
            if conn.sock is not None:
                self.proxy._track(conn.sock, False)
            conn.close()
