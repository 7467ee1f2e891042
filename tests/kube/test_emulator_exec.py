"""pods/<name>/exec of the API emulator, driven by the real `kubernetes.stream.stream` (websocket, channel
protocols), and the collection's KubernetesTransport over it."""
import json
import os

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import V4_CHANNEL_PROTOCOL, WSClient, get_websocket_url

from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, SlurmCommandError, SlurmRunner, SlurmUnavailable, TransientError, _exec_status_rc)
from emulator.podexec import ExecStartError

NS = "default"


def pod(name="p", containers=("c",), node="n1"):
    spec = {"containers": [{"name": c, "image": "img:1"} for c in containers]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def running_pod(emulator, name="p", containers=("c",)):
    emulator.put_object(pod(name, containers))
    emulator.set_status("v1", "Pod", name, NS, {"phase": "Running"}, manager="kubelet")


@pytest.fixture
def core(kube):
    import kubernetes
    return kubernetes.client.CoreV1Api(kube.api)


def run(core, command, name="p", container=None, stdin=None, **kw):
    """Exec through the real client; -> (stdout, stderr, raw error channel, client's returncode)."""
    args = dict(command=command, stdout=True, stderr=True, stdin=stdin is not None, tty=False, _preload_content=False)
    if container:
        args["container"] = container
    args.update(kw)
    resp = stream(core.connect_get_namespaced_pod_exec, name, NS, **args)
    try:
        if stdin is not None:
            resp.write_stdin(stdin)
            resp.close_channel(0)
        resp.run_forever(timeout=30)
        assert not resp.is_open(), "the emulator did not end the exec"
        out, err = resp.read_stdout(), resp.read_stderr()
        status = resp.peek_channel(3)
        reason = json.loads(status).get("reason")
        # the client's own reading of the exit code (it only understands Success and NonZeroExitCode)
        returncode = resp.returncode if reason in (None, "NonZeroExitCode") else None
        return out, err, status, returncode
    finally:
        resp.close()


def _proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def transport(core, name="p", container="c"):
    return KubernetesTransport(NS, name, container=container, core_v1=core)


def test_stdout_stderr_and_exit_codes_as_the_client_reads_them(emulator, core):
    running_pod(emulator)
    handler = emulator.exec_locally()
    for rc in (0, 1, 3):
        out, err, status, returncode = run(core, ["sh", "-c", "echo out; echo err >&2; exit %d" % rc])
        assert (out, err) == ("out\n", "err\n")
        assert returncode == rc
        assert _exec_status_rc(status) == (rc, "")
        if rc == 0:
            assert json.loads(status) == {"metadata": {}, "status": "Success"}
        else:
            # the python client offers v5 first: the API server's stream translator answers
            assert json.loads(status) == {
                "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                "message": "command terminated with non-zero exit code: command terminated with exit code %d" % rc,
                "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}
    assert handler.calls[0] == (NS, "p", "c", ["sh", "-c", "echo out; echo err >&2; exit 0"])
    # the transport the modules use reads the same
    assert transport(core).exec(["sh", "-c", "printf x; printf y >&2; exit 3"], 10) == (3, "x", "y")
    # arguments travel one by one: spaces and quotes are not split or interpreted
    assert transport(core).exec(["printf", "%s|", "a b", "'c'"], 10) == (0, "a b|'c'|", "")


def test_v4_when_the_client_offers_only_v4(emulator, kubeconfig):
    running_pod(emulator)
    emulator.exec_locally()
    from emu_helpers import KubeClient
    client = KubeClient(kubeconfig)
    try:
        url = get_websocket_url(emulator.url + "/api/v1/namespaces/%s/pods/p/exec" % NS, [
            ("command", ["sh", "-c", "echo hi; exit 4"]), ("stdout", "true"), ("stderr", "true")])
        ws = WSClient(client.configuration, url, {"authorization": "Bearer " + emulator.token,
                                                  "sec-websocket-protocol": V4_CHANNEL_PROTOCOL}, True)
        try:
            assert ws.subprotocol == V4_CHANNEL_PROTOCOL
            ws.run_forever(timeout=30)
            assert ws.read_stdout() == "hi\n"
            status = json.loads(ws.read_channel(3))
        finally:
            ws.close()
    finally:
        client.close()
    # over v4 the kubelet's own Status reaches the client (containerd's exit error in the message)
    assert status["message"] == ("command terminated with non-zero exit code: error executing command "
                                 "[sh -c echo hi; exit 4], exit code 4")
    assert status["details"] == {"causes": [{"reason": "ExitCode", "message": "4"}]}


def test_stdin_until_the_client_closes_it(emulator, core):
    running_pod(emulator)
    emulator.exec_locally()
    assert run(core, ["tr", "a-z", "A-Z"], stdin="hello\n")[0] == "HELLO\n"
    assert run(core, ["sh", "-c", "wc -c; exit 2"], stdin=b"\x00\xff\n")[0::3] == ("3\n", 2)
    # without stdin the command reads an empty stdin
    assert transport(core).exec(["wc", "-c"], 10) == (0, "0\n", "")


def test_large_output_arrives_whole(emulator, core):
    running_pod(emulator)
    emulator.exec_locally()
    rc, out, err = transport(core).exec(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"], 30)
    assert (rc, len(out), set(out)) == (0, 300000, {"x"})


def test_missing_pod_is_a_404_and_not_retried(emulator, core):
    with pytest.raises(ApiException) as info:
        stream(core.connect_get_namespaced_pod_exec, "nope", NS, command=["true"], stdout=True, stderr=True,
               stdin=False, tty=False)
    # the client's websocket path reports the refused upgrade with status 0 and the handshake in the reason
    assert info.value.status == 0 and "Handshake status 404" in info.value.reason
    assert '"message": "pods \\"nope\\" not found"' in info.value.reason
    emulator.reset_counts()
    runner = SlurmRunner(transport(core, "nope"), retries=3, sleep=lambda s: None)
    with pytest.raises(SlurmCommandError, match='404 pods "nope" not found'):
        runner.run(["sinfo", "--json"])
    assert [r.status for r in emulator.requests if r.subresource == "exec"] == [404]


def test_container_name_errors(emulator, core):
    running_pod(emulator, containers=("a", "b"))
    emulator.exec_locally()
    for container, message in ((None, "a container name must be specified for pod p, choose one of: [a b]"),
                               ("nope", "container nope is not valid for pod p")):
        with pytest.raises(ApiException) as info:
            run(core, ["true"], container=container)
        assert "Handshake status 400" in info.value.reason and message in info.value.reason
    with pytest.raises(SlurmCommandError, match="400 container nope is not valid for pod p"):
        transport(core, container="nope").exec(["true"], 10)
    assert run(core, ["echo", "b"], container="b")[0] == "b\n"


def test_pod_that_is_not_running(emulator, core):
    emulator.exec_locally()
    emulator.put_object(pod("pending", node=None))
    with pytest.raises(ApiException) as info:
        run(core, ["true"], name="pending")
    assert "Handshake status 400" in info.value.reason and "pod pending does not have a host" in info.value.reason
    # scheduled, container not started: over v5 the upgrade succeeds and the kubelet's refusal comes as a Status
    emulator.put_object(pod("starting"))
    out, err, status, unused = run(core, ["true"], name="starting")
    assert json.loads(status)["message"] == ('Internal error occurred: Internal error occurred: unable to upgrade '
                                             'connection: container not found ("c")')
    assert _exec_status_rc(status)[0] is None
    # the transport retries it (a controller pod that is restarting), then gives up
    emulator.reset_counts()
    runner = SlurmRunner(transport(core, "starting"), retries=2, sleep=lambda s: None)
    with pytest.raises(SlurmUnavailable, match="container not found"):
        runner.run(["sinfo"])
    assert len([r for r in emulator.requests if r.subresource == "exec"]) == 3


def test_no_handler_fails_like_a_missing_binary(emulator, core):
    running_pod(emulator)
    out, err, status, unused = run(core, ["scontrol", "ping"])
    body = json.loads(status)
    assert body["reason"] == "InternalError" and body["code"] == 500
    assert 'exec: \\"scontrol\\": executable file not found in $PATH' in json.dumps(body["message"])
    with pytest.raises(SlurmCommandError, match="executable file not found"):
        SlurmRunner(transport(core), retries=3, sleep=lambda s: None).run(["scontrol", "ping"])
    # a handler may say the same for programs it does not have

    def cannot_start(*unused):
        raise ExecStartError('exec: "x": permission denied')
    emulator.set_exec_handler(cannot_start)
    assert "permission denied" in json.loads(run(core, ["x"])[2])["message"]


def test_injected_failure_of_the_upgrade_is_retried(emulator, core):
    running_pod(emulator)
    emulator.exec_locally()
    emulator.fail_next(503, path_contains="/exec")
    runner = SlurmRunner(transport(core), retries=2, sleep=lambda s: None)
    result, unused = runner.run(["echo", "ok"])
    assert (result.rc, result.stdout, result.attempts) == (0, "ok\n", 2)


def test_a_command_that_runs_too_long_is_ended_and_killed(emulator, core, tmp_path):
    running_pod(emulator)
    emulator.exec_timeout = 1
    emulator.exec_locally()
    pidfile = tmp_path / "pid"
    out, err, status, unused = run(core, ["sh", "-c", "sleep 30 & echo $$ $! > %s; wait" % pidfile])
    assert "did not end within 1s" in json.loads(status)["message"]
    shell, child = [int(p) for p in pidfile.read_text().split()]
    with pytest.raises(ProcessLookupError):
        os.kill(shell, 0)
    # the shell's child went with it (gone, or a zombie waiting for init)
    assert not os.path.exists("/proc/%d" % child) or _proc_state(child) == "Z"
    with pytest.raises(TransientError, match="did not finish within 1s"):
        transport(core).exec(["sleep", "30"], 1)


def test_discovery_lists_pods_exec(kube):
    resources = dict((r["name"], r) for r in kube.call("GET", "/api/v1")["resources"])
    assert resources["pods/exec"]["verbs"] == ["create", "get"]
    assert resources["pods/exec"]["kind"] == "PodExecOptions"


def test_requests_are_recorded_with_the_rbac_verb(emulator, core):
    running_pod(emulator)
    emulator.exec_locally()
    emulator.reset_counts()
    run(core, ["true"])
    record = [r for r in emulator.requests if r.subresource == "exec"][0]
    assert (record.method, record.verb, record.kind, record.name, record.status) == ("GET", "get", "Pod", "p", 101)


def test_a_plain_request_without_the_upgrade_is_refused(emulator, kube):
    running_pod(emulator)
    emulator.exec_locally()
    for method in ("GET", "POST"):
        with pytest.raises(ApiException) as info:
            kube.call(method, "/api/v1/namespaces/%s/pods/p/exec" % NS,
                      query={"command": "true", "stdout": "true"})
        assert info.value.status == 400
        assert json.loads(info.value.body)["message"] == "Upgrade request required"
    assert emulator.exec_handler.calls == []
