"""The HTTP side: an aiohttp app that routes Kubernetes API paths to the store, and KubeEmulator, which runs it on
its own event loop in a background thread and gives tests direct access to the store, request records and fault
injection."""
import asyncio
import json
import secrets
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Optional

import yaml
from aiohttp import web

from . import errors as E
from . import podexec
from .store import Options, Store

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "emulator", "gitTreeState": "clean",
           "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3", "compiler": "gc",
           "platform": "linux/amd64"}
PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json", "application/apply-patch+yaml")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
OPTIONS_KIND = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions", "DELETE": "DeleteOptions"}


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict
    verb: str
    kind: Optional[str]
    dry_run: bool
    status: Optional[int] = None
    subresource: str = ""
    namespace: Optional[str] = None
    name: Optional[str] = None
    field_manager: Optional[str] = None
    content_type: Optional[str] = None


@dataclass
class _Rule:
    method: Optional[str]
    path_contains: Optional[str]
    count: int
    status: int = 500
    reason: Optional[str] = None
    message: Optional[str] = None
    retry_after: Optional[int] = None
    seconds: float = 0.0
    after: bool = False
    used: int = field(default=0)

    def matches(self, method, path):
        if self.count <= 0:
            return False
        if self.method and self.method.upper() != method.upper():
            return False
        if self.path_contains and self.path_contains not in path:
            return False
        return True


class _Route(object):
    """What a request path names."""

    def __init__(self, rt=None, namespace=None, name=None, subresource="", document=None, text=None):
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.document = document
        self.text = text


def _json_pairs(pairs, duplicates):
    seen = {}
    for k, v in pairs:
        if k in seen:
            duplicates.append(k)
        seen[k] = v
    return seen


class KubeEmulator(object):
    """An emulated Kubernetes 1.32 API server on http://127.0.0.1:<port> (see the package docstring)."""

    def __init__(self, simulate_controllers=True, simulate_pods=False, token=None):
        self.store = Store(simulate_controllers=simulate_controllers, simulate_pods=simulate_pods)
        self.token = token or secrets.token_hex(16)
        self.requests = []
        self._internal_errors = []
        self._rules = []
        self._delays = []
        self._rules_lock = threading.Lock()
        self._loop = None
        self._thread = None
        self._runner = None
        self.port = None
        self.exec_handler = None   # pods/exec: see set_exec_handler
        self.exec_timeout = 60.0   # seconds an exec may wait for its stdin or run before the emulator ends it

    # -- lifecycle ------------------------------------------------------------------------------------------------
    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure = []

        def run():
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                app = web.Application(client_max_size=64 * 1024 * 1024)
                app.router.add_route("*", "/{tail:.*}", self._handle)
                # In-flight requests (open watches, held requests) get a moment at stop(), not aiohttp's 60 s.
                self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
                loop.run_until_complete(self._runner.setup())
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                loop.run_until_complete(site.start())
                self.port = site._server.sockets[0].getsockname()[1]
            except Exception as e:  # reported to start()'s caller
                failure.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        ready.wait(60)
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self):
        if self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(60)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def write_kubeconfig(self, path, namespace=None):
        context = {"cluster": "emulator", "user": "emulator"}
        if namespace:
            context["namespace"] = namespace
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "emulator", "preferences": {},
                  "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
                  "users": [{"name": "emulator", "user": {"token": self.token}}],
                  "contexts": [{"name": "emulator", "context": context}]}
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        return path

    # -- requests, faults -----------------------------------------------------------------------------------------
    def counts(self):
        out = {"reads": 0, "writes": 0, "dry_run_writes": 0, "discovery": 0}
        for r in list(self.requests):
            if r.verb == "discovery":
                out["discovery"] += 1
            elif r.verb in ("get", "list", "watch"):
                out["reads"] += 1
            elif r.verb in WRITE_VERBS:
                out["dry_run_writes" if r.dry_run else "writes"] += 1
        return out

    def reset_counts(self):
        del self.requests[:]

    def fail_next(self, status=500, method=None, path_contains=None, count=1, reason=None, message=None,
                  retry_after=None):
        """The next `count` matching requests fail with a Status of this code (429 carries Retry-After)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        with self._rules_lock:
            self._rules.append(_Rule(method, path_contains, count, status, reason, message, retry_after))

    def delay_next(self, seconds, method=None, path_contains=None, count=1, after=False):
        """Hold the next `count` matching requests `seconds` before handling them (after=True: handle, then hold
        the response, so the write happens even if the client gives up)."""
        with self._rules_lock:
            self._delays.append(_Rule(method, path_contains, count, seconds=seconds, after=after))

    def _take(self, rules, method, path):
        with self._rules_lock:
            for rule in rules:
                if rule.matches(method, path):
                    rule.count -= 1
                    return rule
        return None

    # -- direct store access --------------------------------------------------------------------------------------
    def get(self, api_version, kind, name, namespace=None):
        with self.store.lock:
            rt = self.store.rt_for(api_version, kind)
            obj = self.store.objects.get(self.store._key(rt, namespace, name))
            return self.store.out(rt, obj) if obj is not None else None

    def list(self, api_version, kind, namespace=None):
        with self.store.lock:
            rt = self.store.rt_for(api_version, kind)
            return [self.store.out(rt, o) for k, o in sorted(self.store.objects.items())
                    if k[0] == rt.group and k[1] == rt.plural and (namespace is None or k[2] == namespace)]

    def put_object(self, obj, manager=None):
        """Store an object as a create would (defaults, validation, metadata), no request recorded. Replaces an
        existing one. With `manager`, its fields are owned by that Update manager; without, by nobody (like an
        object created before server-side apply tracking)."""
        return self.store.seed(obj, manager=manager)

    def set_status(self, api_version, kind, name, namespace, status, manager="kube-controller-manager"):
        with self.store.lock:
            rt = self.store.rt_for(api_version, kind)
            return self.store.set_status(rt, namespace, name, status, manager=manager)

    def delete_object(self, api_version, kind, name, namespace=None):
        """Remove an object at once (finalizers ignored). Returns whether it existed."""
        with self.store.lock:
            rt = self.store.rt_for(api_version, kind)
            key = self.store._key(rt, namespace, name)
            if key not in self.store.objects:
                return False
            self.store.remove_internal(rt, key)
            return True

    def set_pod_log(self, namespace, name, text):
        with self.store.lock:
            self.store.pod_logs[(namespace, name)] = text

    def set_job_outcome(self, namespace, name, outcome):
        """What the simulated Job controller reports: "Complete" (default), "Failed", or "Running"."""
        with self.store.lock:
            self.store.job_outcomes[(namespace, name)] = outcome

    def set_exec_handler(self, handler):
        """What `pods/<name>/exec` runs: handler(namespace, pod, container, argv, stdin_bytes) -> (rc, stdout_bytes,
        stderr_bytes), called in a worker thread once stdin has ended (at once without stdin); it may raise
        podexec.ExecStartError("<runtime message>") for a process that cannot start. None: every command fails as
        in a container without that binary."""
        self.exec_handler = handler
        return handler

    def exec_locally(self, env=None, programs=None, timeout=None, cwd=None):
        """Run exec'd commands as real processes on this host (podexec.LocalExec): `env` is their environment,
        `programs` maps in-container program paths to local files. Returns the handler (its `calls` list records
        every command)."""
        return self.set_exec_handler(podexec.LocalExec(env=env, programs=programs, cwd=cwd,
                                                       timeout=self.exec_timeout if timeout is None else timeout))

    def record_internal_error(self, text):
        self._internal_errors.append(text)

    @property
    def resource_version(self):
        return self.store.rv

    @property
    def internal_errors(self):
        """Emulator bugs met while serving (answered as 500s) and objects a simulated controller could not create."""
        return list(self._internal_errors) + list(self.store.controller_errors)

    # -- HTTP -----------------------------------------------------------------------------------------------------
    async def _handle(self, request):
        path = request.path
        query = dict((k, request.query.getall(k)[-1]) for k in request.query)
        dry_values = request.query.getall("dryRun", [])
        record = RequestRecord(request.method, path, query, "", None, bool(dry_values),
                               field_manager=query.get("fieldManager"),
                               content_type=request.headers.get("Content-Type"))
        self.requests.append(record)
        request[podexec.RECORD_KEY] = record
        try:
            route = self._route(path)
            record.verb = self._verb(request, route)
            if route.rt is not None:
                record.kind = route.rt.kind
                record.namespace, record.name, record.subresource = route.namespace, route.name, route.subresource
            self._authenticate(request, path)
            await request.read()  # the whole request arrives before any delay, as for a real server
            delay = self._take(self._delays, request.method, path)
            if delay is not None and not delay.after:
                await asyncio.sleep(delay.seconds)
            rule = self._take(self._rules, request.method, path)
            if rule is not None:
                raise self._injected(rule)
            if request.method in OPTIONS_KIND and route.rt is not None:
                for v in dry_values:
                    if v != "All":
                        errs = [E.not_supported("dryRun", v, ["All"])]
                        raise E.options_invalid(OPTIONS_KIND[request.method], errs)
            response = await self._dispatch(request, route, query, bool(dry_values))
            record.dry_run = record.dry_run or request.get("emulator.dry_run", False)
            if delay is not None and delay.after:
                await asyncio.sleep(delay.seconds)
        except E.ApiError as e:
            response = self._error(e)
        except Exception as e:  # an emulator bug: report it as the real server would a panic, and remember it
            self._internal_errors.append("%s %s: %s\n%s" % (request.method, path, e, traceback.format_exc()))
            response = self._error(E.internal("emulator error: %s" % e))
        record.status = response.status
        return response

    def _authenticate(self, request, path):
        header = request.headers.get("Authorization")
        if header is None and path in PUBLIC_PATHS:
            return  # anonymous access to public info, as the real server allows
        if header != "Bearer " + self.token:
            raise E.ApiError(401, "Unauthorized", "Unauthorized")

    def _injected(self, rule):
        reason = rule.reason or E.REASONS.get(rule.status, "")
        message = rule.message or "injected failure (%d %s)" % (rule.status, reason)
        headers = {}
        details = None
        if rule.retry_after is not None:
            headers["Retry-After"] = str(rule.retry_after)
            details = {"retryAfterSeconds": rule.retry_after}
        return E.ApiError(rule.status, reason, message, details, headers)

    def _error(self, e):
        resp = web.json_response(e.status(), status=e.code)
        for k, v in e.headers.items():
            resp.headers[k] = v
        return resp

    def _verb(self, request, route):
        if route.text is not None:
            return "health"  # /healthz, /livez, /readyz: neither a read nor discovery
        if route.document is not None:
            return "discovery"
        m = request.method
        if m == "GET":
            if route.name is None:
                return "watch" if request.query.get("watch") in ("true", "1") else "list"
            return "get"
        return {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if route.name else "deletecollection"}.get(m, m.lower())

    def _route(self, path):
        reg = self.store.registry
        parts = [p for p in path.split("/") if p]
        with self.store.lock:
            if not parts:
                return _Route(document={"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz"]})
            if parts == ["version"]:
                return _Route(document=VERSION)
            if parts[0] in ("healthz", "livez", "readyz") and len(parts) == 1:
                return _Route(text="ok")
            if parts == ["api"]:
                return _Route(document={"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%s" % self.port}]})
            if parts == ["apis"]:
                return _Route(document=reg.api_group_list())
            if parts[0] == "api" and len(parts) >= 2:
                group, version, rest = "", parts[1], parts[2:]
            elif parts[0] == "apis" and len(parts) >= 2:
                if len(parts) == 2:
                    versions = dict(reg.groups()).get(parts[1])
                    if not versions:
                        raise E.NOT_FOUND_PATH
                    doc = dict(reg.api_group(parts[1], versions), kind="APIGroup", apiVersion="v1")
                    return _Route(document=doc)
                group, version, rest = parts[1], parts[2], parts[3:]
            else:
                raise E.NOT_FOUND_PATH
            if not rest:
                doc = reg.resource_list(group, version)
                if doc is None:
                    raise E.NOT_FOUND_PATH
                return _Route(document=doc)
            namespace = None
            if rest[0] == "namespaces" and len(rest) >= 3:
                inner = reg.by_path(group, version, rest[2])
                if inner is not None and inner.namespaced:
                    namespace, rest = rest[1], rest[2:]
                elif group != "" or rest[2] not in ("status", "finalize"):
                    raise E.NOT_FOUND_PATH
            rt = reg.by_path(group, version, rest[0])
            if rt is None or len(rest) > 3:
                raise E.NOT_FOUND_PATH
            if namespace is not None and not rt.namespaced:
                raise E.NOT_FOUND_PATH
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else ""
            if sub and not ((sub == "status" and rt.status) or (sub == "scale" and rt.scale)
                            or (sub == "log" and rt.log) or (sub == "exec" and rt.exec_)):
                raise E.NOT_FOUND_PATH
            if rt.namespaced and name is not None and namespace is None:
                raise E.NOT_FOUND_PATH
            return _Route(rt=rt, namespace=namespace, name=name, subresource=sub)

    async def _body(self, request, patch=False):
        raw = await request.read()
        ctype = (request.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if patch and ctype not in PATCH_TYPES:
            raise E.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                             "accepted media types include: application/json-patch+json, "
                             "application/merge-patch+json, application/apply-patch+yaml, "
                             "application/strategic-merge-patch+json")
        if not patch and ctype not in ("application/json", "application/yaml", "*/*", ""):
            raise E.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                             "accepted media types include: application/json, application/yaml, "
                             "application/vnd.kubernetes.protobuf")
        duplicates = []
        if not raw.strip():
            return ctype, None, duplicates
        try:
            if ctype in ("application/yaml", "application/apply-patch+yaml"):
                body = yaml.safe_load(raw.decode("utf-8"))
            else:
                body = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda p: _json_pairs(p, duplicates))
        except (ValueError, yaml.YAMLError) as e:
            if ctype == "application/apply-patch+yaml":
                raise E.bad_request("error decoding YAML: %s" % e)
            raise E.bad_request("couldn't get version/kind; json parse error: %s" % e)
        return ctype, body, duplicates

    def _options(self, query, dry_run, method):
        fv = query.get("fieldValidation", "Warn") or "Warn"
        if fv not in ("Ignore", "Warn", "Strict"):
            raise E.options_invalid(OPTIONS_KIND.get(method, "CreateOptions"), [E.not_supported(
                "fieldValidation", fv, ["Ignore", "Warn", "Strict"])])
        force = query.get("force")
        if force not in (None, "true", "false", "1", "0", "True", "False"):
            raise E.bad_request("invalid value for force: %s" % force)
        manager = query.get("fieldManager")
        if manager is not None and (len(manager) > 128 or any(not ch.isprintable() for ch in manager)):
            raise E.options_invalid(OPTIONS_KIND.get(method, "CreateOptions"), [E.invalid(
                "fieldManager", manager, "must consist of printable characters and be at most 128 characters")])
        return Options(dry_run=dry_run, field_manager=manager, field_validation=fv,
                       force=force in ("true", "1", "True"), propagation_policy=query.get("propagationPolicy"))

    async def _dispatch(self, request, route, query, dry_run):
        if route.text is not None:
            return web.Response(text=route.text, content_type="text/plain")
        if route.document is not None:
            if request.method != "GET":
                raise E.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
            return web.json_response(route.document)
        store, rt, ns, name, sub = self.store, route.rt, route.namespace, route.name, route.subresource
        method = request.method
        if sub == "exec":
            return await podexec.ExecSession(self, request, rt, ns, name).serve()
        ua = request.headers.get("User-Agent")
        opts = self._options(query, dry_run, method)
        if method == "GET":
            if name is None:
                if query.get("watch") in ("true", "1"):
                    return await self._watch(request, rt, ns, query)
                return web.json_response(store.list(rt, ns, query.get("labelSelector"), query.get("fieldSelector"),
                                                    query.get("limit"), query.get("continue")))
            if sub == "scale":
                return web.json_response(store.get_scale(rt, ns, name))
            if sub == "log":
                return self._log(rt, ns, name, query)
            return web.json_response(store.get(rt, ns, name))
        if method == "POST" and name is None:
            if rt.namespaced and ns is None:
                raise E.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                          "resource")
            unused, body, dups = await self._body(request)
            warnings = self._duplicates(dups, opts)
            result = store.create(rt, ns, body, opts, ua)
            return self._result(result, warnings)
        if method == "PUT" and name is not None and sub != "log":
            unused, body, dups = await self._body(request)
            warnings = self._duplicates(dups, opts)
            result = store.update(rt, ns, name, body, opts, ua, sub)
            return self._result(result, warnings)
        if method == "PATCH" and name is not None and sub != "log":
            ctype, body, dups = await self._body(request, patch=True)
            warnings = self._duplicates(dups, opts)
            if body is None:
                raise E.bad_request("the body of the request was empty")
            result = store.patch(rt, ns, name, ctype, body, opts, ua, sub)
            return self._result(result, warnings)
        if method == "DELETE" and not sub:
            body = (await self._body(request))[1]
            if isinstance(body, dict) and body.get("dryRun"):
                if body["dryRun"] != ["All"]:
                    raise E.options_invalid("DeleteOptions", [E.not_supported("dryRun", body["dryRun"], ["All"])])
                opts.dry_run = True
                request["emulator.dry_run"] = True
            if name is None:
                return web.json_response(store.delete_collection(rt, ns, opts, query.get("labelSelector"),
                                                                 query.get("fieldSelector")))
            return self._result(store.delete(rt, ns, name, opts, body))
        raise E.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _duplicates(self, dups, opts):
        if not dups:
            return []
        if opts.field_validation == "Strict":
            raise E.bad_request("strict decoding error: " + ", ".join('duplicate field "%s"' % d for d in dups))
        return [] if opts.field_validation == "Ignore" else ['duplicate field "%s"' % d for d in dups]

    def _result(self, result, warnings=()):
        resp = web.json_response(result.body, status=result.code)
        for w in list(warnings) + list(result.warnings):
            resp.headers.add("Warning", '299 - %s' % json.dumps(w))
        return resp

    def _log(self, rt, ns, name, query):
        self.store.get(rt, ns, name)
        text = self.store.pod_logs.get((ns, name), "")
        tail = query.get("tailLines")
        if tail:
            lines = text.splitlines(True)
            text = "".join(lines[-int(tail):]) if int(tail) > 0 else ""
        return web.Response(text=text, content_type="text/plain")

    async def _watch(self, request, rt, ns, query):
        """Watch: initial ADDED events (no resourceVersion, or "0") then changes, one JSON object per line."""
        from . import selectors
        store = self.store
        lreqs = selectors.parse_label_selector(query.get("labelSelector"))
        freqs = selectors.parse_field_selector(query.get("fieldSelector"), rt.kind)
        timeout = float(query.get("timeoutSeconds") or 1800)
        rv = query.get("resourceVersion")
        with store.lock:
            if rv in (None, "", "0"):
                initial = [(store.rv, "ADDED", k, o) for k, o in sorted(store.objects.items())]
                since = store.rv
            else:
                try:
                    since = int(rv)
                except ValueError:
                    raise E.bad_request("invalid resource version: %s" % rv)
                if store.events and since < store.events[0][0] - 1:
                    # Older than the retained history: the client must list again, as with a compacted etcd.
                    raise E.ApiError(410, "Expired", "too old resource version: %s (%s)" % (since, store.events[0][0]))
                initial = []
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)

        def wanted(key, obj):
            if key[0] != rt.group or key[1] != rt.plural or (ns and key[2] != ns):
                return False
            return selectors.label_match(lreqs, (obj.get("metadata") or {}).get("labels")) and \
                selectors.field_match(freqs, obj)

        async def send(type_, obj):
            line = json.dumps({"type": type_, "object": store.out(rt, obj)}) + "\n"
            await resp.write(line.encode())

        try:
            for unused, type_, key, obj in initial:
                if wanted(key, obj):
                    await send(type_, obj)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with store.lock:
                    events = [e for e in store.events if e[0] > since]
                for ev_rv, type_, key, obj in events:
                    since = max(since, ev_rv)
                    if wanted(key, obj):
                        await send(type_, obj)
                await asyncio.sleep(0.02)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp
