# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way this collection runs Slurm commands (scontrol, sinfo, squeue, sacctmgr).

A SlurmRunner runs an argv through a transport and records every command it ran:

* LocalTransport: exec on this host; SLURM_CONF comes from the option or the environment (the local backend exports
  it). Runs with LC_ALL=C so messages are parsable.
* KubernetesTransport: exec into the controller pod ``<cluster>-controller-0`` (container ``slurmctld``) through the
  Kubernetes API's exec stream (the kubernetes python client, authenticated by kubernetes.core's auth options). A
  command that runs past its timeout is ended in the pod as well (coreutils' timeout), as the local one is. When
  that pod is gone or its container is not running, the standby pods (``<cluster>-controller-1``: a backup
  controller, spec.controller.replicas 2) are tried in order: their slurm.conf lists both controllers, so a client
  there reaches whichever is in control.

Commands are argv lists, never shell strings: a reason with spaces or quotes reaches Slurm as one argument on both
transports. A controller that does not answer is retried a bounded number of times (``retries``, with a growing
delay), then reported as SlurmUnavailable; any other failure is reported at once. Nothing here decides whether a
result means success: callers parse and verify (fail closed).

Why not community.general's CmdRunner: it resolves the binary on the local host (get_bin_path) and runs it through
AnsibleModule.run_command, which rules out the Kubernetes transport and gives no timeout; this runner keeps its shape
(a fixed argv builder per call, the commands reported back, as containers.podman does) over both transports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex
import subprocess
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeVar

from ansible_collections.soperator.slurm.plugins.module_utils.retry import SLURM_RETRIES, SLURM_RETRY_DELAY, Retry

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

# stderr (or kube exec error) texts of a controller that cannot be reached: worth a retry. Everything else fails at
# once. From Slurm 22.05's slurm_errno.c / the client commands, and munge's client errors.
UNAVAILABLE_PATTERNS = re.compile(
    r"Unable to contact slurm controller|Socket timed out on send/recv|Zero Bytes were transmitted or received"
    r"|Connection refused|Communication connection failure|Transport endpoint is not connected"
    r"|backup controller in standby|Slurm controller not responding|Unable to establish controller machine"
    r"|Munge (?:encode|decode) failed|Failed to access .*munge",
    re.I)


# Slurm's clients read and print times in their own time zone: ours are UTC wherever they run (a reservation's
# StartTime we write is the one we read back). POSIX form, so no zoneinfo file is needed in the image.
SLURM_TZ = "UTC0"


class SlurmError(SoperatorError):
    """Base of every failure of a Slurm operation. ``commands`` lists the commands run so far."""

    def __init__(self, msg: str, commands: Optional[Iterable[str]] = None, **details: Any) -> None:
        super(SlurmError, self).__init__(msg)
        self.msg = msg
        self.commands = list(commands or [])
        self.details = details


class SlurmUnavailable(SlurmError):
    """The controller (or the pod that hosts it) did not answer, after every retry."""


class SlurmCommandError(SlurmError):
    """A Slurm command failed for a reason that a retry would not fix."""


class SlurmOutputError(SlurmError):
    """A Slurm command succeeded but printed something we cannot parse: never guessed at."""


class TransientError(SoperatorError):
    """Raised by a transport or a parse callback: the attempt failed in a way a retry may fix."""


class CommandResult(object):
    __slots__ = ("argv", "rc", "stdout", "stderr", "attempts", "seconds")

    def __init__(self, argv: Iterable[str], rc: Optional[int], stdout: str, stderr: str, attempts: int = 1,
                 seconds: float = 0.0) -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.attempts = attempts
        self.seconds = seconds

    @property
    def cmd(self) -> str:
        return format_command(self.argv)


def format_command(argv: Iterable[object]) -> str:
    """The argv as a copy-pasteable shell line (what the modules report)."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def _secs(seconds):
    """A timeout as people write it: 20, 0.2, 7.83 (a deadline's share is a fraction)."""
    return "%.3g" % seconds if seconds < 100 else "%d" % seconds


def looks_unavailable(text: str) -> bool:
    return bool(text) and bool(UNAVAILABLE_PATTERNS.search(text))


class LocalTransport(object):
    """Run Slurm commands on this host."""

    name = "local"

    def __init__(self, slurm_conf: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> None:
        self.slurm_conf = slurm_conf
        env = dict(os.environ if environ is None else environ)
        if slurm_conf:
            env["SLURM_CONF"] = slurm_conf
        env["LC_ALL"] = "C"
        env["LANG"] = "C"
        env["TZ"] = SLURM_TZ
        self.env = env

    def describe(self) -> Dict[str, Any]:
        return {"transport": self.name, "slurm_conf": self.env.get("SLURM_CONF")}

    def exec(self, argv: Sequence[str], timeout: float) -> Tuple[int, str, str]:
        conf = self.env.get("SLURM_CONF")
        if conf and not os.path.isfile(conf):
            # Slurm's clients retry a missing config for 60 s and then fail; say what is wrong instead.
            raise SlurmCommandError("slurm.conf %s (slurm_conf, or SLURM_CONF of the environment) %s" % (
                conf, "is not a file" if os.path.exists(conf) else "does not exist"))
        try:
            proc = subprocess.run(list(argv), env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            # what it printed before it was stopped usually says why (e.g. a config it could not read)
            said = (e.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            last = ": %s" % said[-1] if said else ""
            raise TransientError("%s did not finish within %ss%s" % (argv[0], _secs(timeout), last))
        except (OSError, ValueError) as e:
            # A missing scontrol (or a NUL in an argument) is a setup problem, not a controller that is down: no retry.
            raise SlurmCommandError("cannot run %s: %s" % (argv[0], e))
        return (proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


def _exec_status_rc(error_text):
    """The exit code from the Kubernetes exec error channel (a v1.Status as JSON/YAML); None if it carries none."""
    import json
    if not error_text:
        return None, ""
    try:
        status = json.loads(error_text)
    except ValueError:
        try:
            import yaml
            status = yaml.safe_load(error_text)
        except Exception:  # pylint: disable=broad-except
            return None, error_text
    if not isinstance(status, dict):
        return None, error_text
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message")), ""
            except (TypeError, ValueError):
                pass
    return None, status.get("message") or error_text


# A container that is not running (yet, or any more): the kubelet refuses the stream; over the v5 protocol the API
# server reports that on the error channel after the upgrade. Worth a retry, like a controller that does not answer.
CONTAINER_NOT_RUNNING = re.compile(r"container not found|unable to upgrade connection", re.I)


def _exec_refusal(e):
    """(HTTP status, message) of an exec the API server refused before the upgrade. The kubernetes client's
    websocket path raises ApiException(status=0) whose reason is websocket-client's
    "Handshake status 404 Not Found -+-+- {headers} -+-+- {body}"."""
    import json
    status = getattr(e, "status", None)
    reason = str(getattr(e, "reason", "") or e)
    m = re.match(r"Handshake status (\d{3})", reason)
    if not status and m:
        status = int(m.group(1))
    message = reason
    if m:
        body = reason.rsplit(" -+-+- ", 1)[-1]
        try:
            message = json.loads(body).get("message") or body
        except (ValueError, AttributeError):
            message = body.strip() or reason
    return status, message


# A command we stopped waiting for goes on running in the pod: closing the exec stream does not stop it (neither the
# kubelet nor containerd signals an exec'd process whose client went away), and a retry would run a second copy beside
# it. So coreutils' timeout (in every image we exec into) ends it there too, shortly after the client gave up - later
# than the client's own deadline, so the client's reading ("did not finish", retried) stays the one that counts: TERM
# to the command's whole process group, then KILL to what ignored it.
POD_TIMEOUT_GRACE = 1
POD_KILL_AFTER = 2


def pod_time_limit(timeout: float) -> List[str]:
    """The argv prefix that ends a command in the pod POD_TIMEOUT_GRACE seconds after `timeout`."""
    limit = ("%.3f" % (max(timeout, 0) + POD_TIMEOUT_GRACE)).rstrip("0").rstrip(".")
    return ["timeout", "--kill-after=%d" % POD_KILL_AFTER, limit]


class _PodUnreachable(SlurmError):
    """This pod cannot run the command now (gone, its container not running, exec refused): try a standby pod."""

    def __init__(self, msg: str, transient: bool) -> None:
        SlurmError.__init__(self, msg)
        self.transient = transient


class KubernetesTransport(object):
    """Run Slurm commands in the controller pod through the Kubernetes exec API (`standby_pods`: tried in order
    when `pod` cannot run the command; `pod` then names the one that last ran one)."""

    name = "kubernetes"

    def __init__(self, namespace: str, pod: str, container: str = "slurmctld", slurm_conf: Optional[str] = None,
                 core_v1: Any = None, core_v1_factory: Optional[Callable[[], Any]] = None,
                 stream_func: Optional[Callable[..., Any]] = None, standby_pods: Sequence[str] = ()) -> None:
        self.namespace = namespace
        self.pod = pod
        self.pods = [pod] + [p for p in standby_pods if p != pod]
        self.container = container
        self.slurm_conf = slurm_conf
        self._core_v1 = core_v1
        self._core_v1_factory = core_v1_factory
        self._stream = stream_func

    def describe(self) -> Dict[str, Any]:
        return {"transport": self.name, "namespace": self.namespace, "pod": self.pod, "container": self.container,
                "slurm_conf": self.slurm_conf}

    @property
    def core_v1(self) -> Any:
        if self._core_v1 is None:
            if self._core_v1_factory is None:
                raise SlurmCommandError("no Kubernetes client configured for the kubernetes transport")
            self._core_v1 = self._core_v1_factory()
        return self._core_v1

    def _stream_func(self):
        if self._stream is None:
            try:
                from kubernetes.stream import stream
            except ImportError as e:
                raise SlurmCommandError("transport=kubernetes needs the kubernetes python client: %s" % e)
            self._stream = stream
        return self._stream

    def exec(self, argv: Sequence[str], timeout: float) -> Tuple[int, str, str]:
        unreachable = []
        for pod in self.pods:
            try:
                result = self._exec_in(pod, argv, timeout)
            except _PodUnreachable as e:
                unreachable.append(e)
                continue
            self.pod = pod
            return result
        text = "; ".join(str(e) for e in unreachable)
        if any(e.transient for e in unreachable):
            raise TransientError(text)
        # No such pod / container, or no right to exec: retrying will not help.
        raise SlurmCommandError(text)

    def _exec_in(self, pod: str, argv: Sequence[str], timeout: float) -> Tuple[int, str, str]:
        command = ["env"] + (["SLURM_CONF=%s" % self.slurm_conf] if self.slurm_conf else []) + \
            ["LC_ALL=C", "TZ=%s" % SLURM_TZ] + list(argv)
        command = pod_time_limit(timeout) + command
        stream = self._stream_func()
        try:
            from kubernetes.client.exceptions import ApiException
        except ImportError:  # pragma: no cover - only with a fake client
            ApiException = ()  # noqa: N806
        try:
            resp = stream(self.core_v1.connect_get_namespaced_pod_exec, pod, self.namespace,
                          command=command, container=self.container, stdin=False, stdout=True, stderr=True,
                          tty=False, _preload_content=False)
        except ApiException as e:  # pylint: disable=catching-non-exception
            status, message = _exec_refusal(e)
            text = "exec into pod %s/%s failed: %s %s" % (self.namespace, pod, status, message)
            if status in (404, 400, 401, 403):
                raise _PodUnreachable(text, transient=False)
            raise TransientError(text)
        except Exception as e:  # pylint: disable=broad-except
            # websocket / connection errors from the client: the API server or the pod is not reachable now.
            raise TransientError("exec into pod %s/%s failed: %s" % (self.namespace, pod, e))
        try:
            # WSClient buffers every frame until the command ends or the timeout passes (a timeout of 0 would
            # mean no limit to run_forever, so it gets the smallest one).
            resp.run_forever(timeout=max(timeout, 0.001))
            if resp.is_open():
                raise TransientError("%s did not finish within %ss in pod %s/%s"
                                     % (argv[0], _secs(timeout), self.namespace, pod))
            stdout, stderr = resp.read_stdout(), resp.read_stderr()
            # Ours, not WSClient.returncode: that raises on a Failure without an exit code (container not running,
            # no such binary), where we keep the server's message.
            rc, problem = _exec_status_rc(resp.read_channel(3))
        finally:
            try:
                resp.close()
            except Exception:  # pylint: disable=broad-except
                pass
        if rc is None and CONTAINER_NOT_RUNNING.search(problem or ""):
            raise _PodUnreachable("exec into pod %s/%s failed: %s" % (self.namespace, pod, problem), transient=True)
        if rc is None:
            # The exec itself failed (no such binary, a runtime error): no exit code of a Slurm command.
            raise SlurmCommandError("exec of %s in pod %s/%s failed: %s"
                                    % (argv[0], self.namespace, pod, problem or "no exit status"))
        return rc, stdout or "", stderr or ""


class Transport(Protocol):
    """What SlurmRunner runs commands through: LocalTransport, KubernetesTransport (and the tests' scripted ones)."""

    def describe(self) -> Dict[str, Any]:
        """Where commands run, as the modules report it: {"transport": ..., ...}."""

    def exec(self, argv: Sequence[str], timeout: float) -> Tuple[int, str, str]:
        """(rc, stdout, stderr) of argv, ended after `timeout` seconds; TransientError when a retry may help,
        SlurmError when it would not."""


T = TypeVar("T")


class SlurmRunner(object):
    """Runs Slurm commands through a transport with bounded retries; remembers every command it ran.

    ``timeout`` bounds each attempt; ``deadline`` (a time.monotonic() value, optional) bounds them all: an attempt gets
    at most the time left, and none starts once it has passed (the exporter's scrape, observe/exporter.py)."""

    def __init__(self, transport: Transport, retries: int = SLURM_RETRIES, retry_delay: float = SLURM_RETRY_DELAY,
                 timeout: float = 60, sleep: Callable[[float], object] = time.sleep, deadline: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.retry = Retry(retries, retry_delay, sleep)
        self.transport = transport
        self.timeout = timeout
        self.deadline = deadline
        self.clock = clock
        self.history: List[CommandResult] = []          # CommandResult of every command run, in order
        self.nodes_by_scontrol = False  # nodes.read_sinfo: this Slurm's sinfo --json lists groups, not nodes

    @property
    def retries(self) -> int:
        return self.retry.retries

    @property
    def commands(self) -> List[str]:
        return [r.cmd for r in self.history]

    def describe(self) -> Dict[str, Any]:
        return self.transport.describe()

    def run(self, argv: Iterable[object], parse: Optional[Callable[[CommandResult], T]] = None,
            check: bool = True) -> Tuple[CommandResult, Optional[T]]:
        """Run argv; return (CommandResult, parsed).

        ``parse(result)`` turns the output into a value; it may raise TransientError (retry) or SlurmError (fail now).
        With check=True a non-zero exit fails (after retries when the controller looks unavailable); with
        check=False the caller gets the result whatever the exit code, unless the controller never answered.
        """
        args = [str(a) for a in argv]
        attempts = self.retry.attempts
        problem = None
        started = self.clock()
        for attempt in self.retry:
            timeout = self.timeout
            if self.deadline is not None:
                timeout = min(timeout, self.deadline - self.clock())
                if timeout <= 0:
                    attempts = attempt - 1
                    problem = "%s; no time left for another attempt" % problem if problem else \
                        "not run: no time left before the deadline"
                    break
            try:
                rc, out, err = self.transport.exec(args, timeout)
            except TransientError as e:
                problem = str(e)
                continue
            except SlurmError as e:
                e.commands = self.commands + [format_command(args)]
                raise
            result = CommandResult(args, rc, out, err, attempt, self.clock() - started)
            if rc != 0 and looks_unavailable(err + "\n" + out):
                problem = (err or out).strip()
                continue
            if rc != 0 and check:
                self.history.append(result)
                raise SlurmCommandError("%s failed (rc=%d): %s" % (result.cmd, rc, (err or out).strip()),
                                        self.commands, rc=rc, stdout=out, stderr=err)
            try:
                parsed = parse(result) if parse else None
            except TransientError as e:
                problem = str(e)
                continue
            except SlurmError as e:
                self.history.append(result)
                e.commands = self.commands
                raise
            self.history.append(result)
            return result, parsed
        self.history.append(CommandResult(args, None, "", problem or "", attempts, self.clock() - started))
        raise SlurmUnavailable(
            "the Slurm controller did not answer %s after %d attempt(s) over %.0fs (%s): %s"
            % (format_command(args), attempts, self.clock() - started, _where(self.transport), problem),
            self.commands)


def _where(transport):
    info = transport.describe()
    if info["transport"] == "kubernetes":
        return "pod %s/%s" % (info["namespace"], info["pod"])
    return "local, SLURM_CONF=%s" % (info.get("slurm_conf") or "default")
