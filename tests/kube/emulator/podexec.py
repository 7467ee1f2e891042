"""`pods/<name>/exec` over a websocket, as a 1.32 API server and kubelet (containerd) serve it to a client that
offers the channel protocols (the python `kubernetes` client offers `v5.channel.k8s.io,v4.channel.k8s.io`).

The emulator runs no container: what a command does is the test's exec handler's business
(KubeEmulator.set_exec_handler / exec_locally). Without a handler every command fails the way a container without
the binary does. See the README's "Pod exec" section for what is and is not emulated.
"""
import asyncio
import json
import os
import signal
import subprocess

from aiohttp import WSMsgType, web

from . import errors as E

V4 = "v4.channel.k8s.io"
V5 = "v5.channel.k8s.io"
PROTOCOLS = (V5, V4)
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
STREAM_CLOSE = 255          # v5: [255, channel] closes that channel
FRAME = 32 * 1024           # output is sent in frames of at most this size, as the runtime's pipe reads do
# where server.py leaves the request's RequestRecord
RECORD_KEY = web.RequestKey("emulator.record", object) if hasattr(web, "RequestKey") else "emulator.record"


class ExecStartError(Exception):
    """Raised by an exec handler: the runtime could not start the process (no such binary...). The text is the
    runtime's own (e.g. `exec: "x": executable file not found in $PATH`)."""


def go_bool(values):
    """A query parameter as the API server converts it to a bool (runtime.Convert_Slice_string_To_bool)."""
    if not values:
        return False
    return not (values[0] == "0" or values[0].lower() == "false")


def not_found_text(program):
    """runc's words for a program that is not in the container."""
    if "/" in program:
        return 'exec: "%s": stat %s: no such file or directory' % (program, program)
    return 'exec: "%s": executable file not found in $PATH' % program


def success():
    return {"metadata": {}, "status": "Success"}


def exit_failure(argv, rc, protocol):
    """The non-zero exit Status. Over v4 the kubelet's (containerd's exit error in the message); over v5 the API
    server's stream translator re-encodes the exit error client-go decoded from the kubelet."""
    if protocol == V5:
        inner = "command terminated with exit code %d" % rc
    else:
        inner = "error executing command [%s], exit code %d" % (" ".join(argv), rc)
    return {"metadata": {}, "status": "Failure", "message": "command terminated with non-zero exit code: " + inner,
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}


def internal_error(text, protocol):
    """apierrors.NewInternalError(err) as JSON; over v5 the translator wraps the kubelet's message once more."""
    status = {"metadata": {}, "status": "Failure", "message": "Internal error occurred: %s" % text,
              "reason": "InternalError", "details": {"causes": [{"message": text}]}, "code": 500}
    if protocol == V5:
        outer = status["message"]
        status["message"] = "Internal error occurred: %s" % outer
        status["details"] = {"causes": [{"message": outer}]}
    return status


def start_failure(message, exec_id="emulated"):
    return ('error executing command in container: failed to exec in container: failed to start exec "%s": OCI '
            'runtime exec failed: exec failed: unable to start container process: %s: unknown' % (exec_id, message))


def _container_names(containers):
    return " ".join(c.get("name", "") for c in containers or [])


def pick_container(pod, name, container):
    """The container an exec targets, or the API server's 400 (streamLocation)."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not container:
        if len(containers) == 1:
            return containers[0]["name"]
        if not containers:
            raise E.bad_request("a container name must be specified for pod %s" % name)
        text = "a container name must be specified for pod %s, choose one of: [%s]" % (
            name, _container_names(containers))
        if spec.get("initContainers"):
            text += " or one of the init containers: [%s]" % _container_names(spec["initContainers"])
        raise E.bad_request(text)
    every = containers + (spec.get("initContainers") or []) + (spec.get("ephemeralContainers") or [])
    if not any(c.get("name") == container for c in every):
        raise E.bad_request("container %s is not valid for pod %s" % (container, name))
    return container


def container_running(pod, container):
    """The kubelet finds only running containers: a pod that is not Running (or whose container is not)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if cs.get("name") == container:
            return "running" in (cs.get("state") or {})
    return True   # no status for it (a test's hand-made pod): the phase decides


class LocalExec(object):
    """An exec handler that runs argv as a real process on this host: `env` is its whole environment (default:
    this process's), `programs` maps in-container paths to local ones ({"/opt/x/bin/tool": "/tmp/.../tool"})."""

    def __init__(self, env=None, programs=None, timeout=60.0, cwd=None):
        self.env = dict(os.environ if env is None else env)
        self.programs = dict(programs or {})
        self.timeout = timeout
        self.cwd = cwd
        self.calls = []    # (namespace, pod, container, argv) of every command run

    def __call__(self, namespace, pod, container, argv, stdin):
        self.calls.append((namespace, pod, container, list(argv)))
        local = [self.programs.get(argv[0], argv[0])] + list(argv[1:])
        try:
            proc = subprocess.Popen(local, env=self.env, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise ExecStartError(not_found_text(argv[0]))
        except PermissionError:
            raise ExecStartError('exec: "%s": permission denied' % argv[0])
        try:
            out, err = proc.communicate(stdin or b"", timeout=self.timeout)
        except subprocess.TimeoutExpired:
            # the whole process group: a shell's children must not outlive the test
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        rc = proc.returncode
        return (128 - rc if rc < 0 else rc), out, err    # killed by a signal: the shell-style 128+N


def no_handler(namespace, pod, container, argv, stdin):
    raise ExecStartError(not_found_text(argv[0]))


class ExecSession(object):
    """One exec request: checks before the upgrade, then the websocket exchange."""

    def __init__(self, emulator, request, rt, namespace, name):
        self.emu = emulator
        self.request = request
        self.rt = rt
        self.namespace = namespace
        self.name = name

    def _options(self):
        q = self.request.query
        return (q.getall("command", []), (q.getall("container", [""]) or [""])[-1],
                go_bool(q.getall("stdin", [])), go_bool(q.getall("stdout", [])), go_bool(q.getall("stderr", [])),
                go_bool(q.getall("tty", [])))

    async def serve(self):
        request = self.request
        if request.method not in ("GET", "POST"):
            raise E.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                      "resource")
        argv, container, stdin, stdout, stderr, tty = self._options()
        pod = self.emu.store.get(self.rt, self.namespace, self.name)     # 404 pods "x" not found
        container = pick_container(pod, self.name, container)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise E.bad_request("Upgrade request required")
        if tty:
            raise E.bad_request("emulator: exec with tty=true is not emulated")
        if not (stdin or stdout or stderr):
            raise E.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        if not argv:
            raise E.bad_request("you must specify at least one command for the container")
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        protocol = next((p for p in offered if p in PROTOCOLS), None)
        if protocol is None:
            # the emulator speaks only the binary v4/v5 channel protocols (not channel.k8s.io, base64, SPDY)
            raise E.ApiError(403, "Forbidden", "emulator: requested protocol(s) are not supported: %s; supports %s"
                             % (offered, list(PROTOCOLS)))
        running = container_running(pod, container)
        if not running and not (pod.get("spec") or {}).get("nodeName"):
            raise E.bad_request("pod %s does not have a host assigned" % self.name)
        refusal = 'container not found ("%s")' % container
        if not running and protocol == V4:
            # the kubelet refuses the upgrade; the API server's proxy passes its plain-text answer on
            return web.Response(status=500, text=refusal, content_type="text/plain")
        ws = web.WebSocketResponse(protocols=(protocol,), timeout=5.0, autoclose=True, max_msg_size=0)
        await ws.prepare(request)
        request[RECORD_KEY].status = 101    # upgraded: the record says so while the exchange goes on
        reader = None
        try:
            if not running:
                # v5 goes through the API server's stream translator: upgraded first, then the kubelet refuses
                await self._status(ws, internal_error("unable to upgrade connection: " + refusal, protocol))
                return ws
            # an empty frame on the lowest writable channel tells the client the streams are ready
            await ws.send_bytes(bytes([STDOUT if stdout else STDERR if stderr else ERROR]))
            stdin_buf = bytearray()
            stdin_done = asyncio.Event()
            if not stdin:
                stdin_done.set()
            gone = asyncio.Event()
            reader = asyncio.ensure_future(self._read(ws, protocol, stdin, stdin_buf, stdin_done, gone))
            timeout = self.emu.exec_timeout
            try:
                await asyncio.wait_for(stdin_done.wait(), timeout)
            except asyncio.TimeoutError:
                await self._status(ws, internal_error("emulator: stdin was not closed within %ss" % timeout,
                                                      protocol))
                return ws
            if gone.is_set() and stdin:
                return ws        # the client went away before its stdin ended: nothing to run for anyone
            await self._run(ws, protocol, container, argv, bytes(stdin_buf) if stdin else b"", stdout, stderr)
        except ConnectionResetError:
            pass         # the client left before the end: what the command printed goes nowhere
        finally:
            if reader is not None:
                reader.cancel()
                try:
                    await reader
                except (asyncio.CancelledError, Exception):
                    pass
            await ws.close()
        return ws

    async def _run(self, ws, protocol, container, argv, stdin_bytes, stdout, stderr):
        handler = self.emu.exec_handler or no_handler
        loop = asyncio.get_running_loop()
        timeout = self.emu.exec_timeout
        call = loop.run_in_executor(None, handler, self.namespace, self.name, container, list(argv), stdin_bytes)
        try:
            rc, out, err = await asyncio.wait_for(call, timeout + 5)
        except ExecStartError as e:
            await self._status(ws, internal_error(start_failure(str(e)), protocol))
            return
        except (asyncio.TimeoutError, subprocess.TimeoutExpired):
            await self._status(ws, internal_error("emulator: the command did not end within %ss" % timeout,
                                                  protocol))
            return
        except Exception as e:  # a test's handler is broken: fail the test, tell the client
            self.emu.record_internal_error("exec handler for %s/%s %s: %r" % (self.namespace, self.name, argv, e))
            await self._status(ws, internal_error("emulator: the exec handler failed: %s" % e, protocol))
            return
        if stdout:
            await self._send(ws, STDOUT, out)
        if stderr:
            await self._send(ws, STDERR, err)
        await self._status(ws, success() if rc == 0 else exit_failure(argv, rc, protocol))

    async def _send(self, ws, channel, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        for i in range(0, len(data or b""), FRAME):
            await ws.send_bytes(bytes([channel]) + data[i:i + FRAME])

    async def _status(self, ws, status):
        await ws.send_bytes(bytes([ERROR]) + json.dumps(status, separators=(",", ":")).encode())

    async def _read(self, ws, protocol, stdin, stdin_buf, stdin_done, gone):
        """Frames from the client: stdin (channel 0) while it is open, v5 close signals; resize and other channels
        are read and dropped. A malformed close signal ends the connection, as the real server's read loop does."""
        try:
            async for msg in ws:
                if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                    continue
                data = msg.data.encode("utf-8") if isinstance(msg.data, str) else msg.data
                if not data:
                    continue
                if protocol == V5 and data[0] == STREAM_CLOSE:
                    if len(data) != 2:
                        break
                    if data[1] == STDIN:
                        stdin_done.set()
                    continue
                if data[0] == STDIN and stdin and not stdin_done.is_set():
                    stdin_buf.extend(data[1:])
        finally:
            gone.set()
            stdin_done.set()
