"""The collection's Kubernetes exec transport (runner.KubernetesTransport, under SlurmRunner) against the real
kube-apiserver, kubelet and containerd: plain pods of the controller image, no Slurm. What our client makes of what
the real server and node answer - exit codes, output, refusals, retries - counted in the API server's audit log.

What the emulator's exec tests checked of the emulator itself (its channel protocols, discovery, plain requests)
is not here: a real server is the judge of that now.
"""
import json

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import args as module_args
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    KubernetesTransport, SlurmCommandError, SlurmRunner, SlurmUnavailable, TransientError)
from realnode_audit import Audit
from waiting import wait_for

NS = "exec-real"


def _pod(name, image, containers, **spec):
    # tini as PID 1 reaps what it inherits, as in our images: an ended process is gone, not a zombie.
    spec = dict({"containers": [{"name": c, "image": image, "imagePullPolicy": "Never",
                                 "command": ["tini", "--", "sleep", "infinity"]} for c in containers],
                 "terminationGracePeriodSeconds": 0}, **spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _status(node, name):
    return json.loads(node.kubectl("-n", NS, "get", "pod", name, "-o", "json").stdout)["status"]


def _until(what, probe, timeout=120):
    wait_for(probe, what, timeout)


@pytest.fixture(scope="module")
def pods(real_node, tmp_path_factory):
    """p: containers a and b, running; pending: never scheduled; starting: its container c waits behind an init
    container that runs until /tmp/go exists in it."""
    image = [r for r in real_node.info["real_node"]["images"] if "/controller:" in r][0]
    init = {"name": "init", "image": image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.2; done"]}
    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
             _pod("p", image, ("a", "b")),
             _pod("pending", image, ("c",), nodeSelector={"soperator.dev/no-such-node": "x"}),
             _pod("starting", image, ("c",), initContainers=[init])]
    manifest = tmp_path_factory.mktemp("exec") / "pods.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    real_node.kubectl("apply", "-f", str(manifest))
    try:
        real_node.kubectl("-n", NS, "wait", "--for=condition=Ready", "pod/p", "--timeout=120s", timeout=150)
        _until("the init container of pod starting running", lambda: "running" in (
            _status(real_node, "starting").get("initContainerStatuses") or [{}])[0].get("state", {}))
        yield real_node
    finally:
        real_node.kubectl("delete", "namespace", NS, "--wait=true", timeout=180, check=False)


@pytest.fixture(scope="module")
def core(real_node):
    """A CoreV1Api built the way the modules build it (kubernetes.core's auth options)."""
    return module_args._core_v1_factory({"kubeconfig": real_node.kubeconfig})()


@pytest.fixture(scope="module")
def audit(real_node):
    return Audit(real_node.info["audit_log"], NS)


def _transport(core, pod="p", container="a", **kw):
    return KubernetesTransport(NS, pod, container=container, core_v1=core, **kw)


def _no_sleep(seconds):
    pass


def test_exit_codes_stdout_and_stderr_as_the_transport_reads_them(pods, core, audit):
    mark = audit.mark()
    t = _transport(core)
    for rc in (0, 1, 3):
        assert t.exec(["sh", "-c", "echo out; echo err >&2; exit %d" % rc], 10) == (rc, "out\n", "err\n")
    # arguments travel one by one: spaces, quotes, $ and an empty one are neither split nor interpreted
    assert t.exec(["printf", "%s|", "a b", "'c'", "$HOME", ""], 10) == (0, "a b|'c'|$HOME||", "")
    # slurm_conf reaches the command's environment, with the C locale
    conf = _transport(core, slurm_conf="/etc/slurm/other.conf")
    assert conf.exec(["sh", "-c", "echo $SLURM_CONF $LC_ALL"], 10) == (0, "/etc/slurm/other.conf C\n", "")
    execs = audit.execs(mark)
    assert [(e.pod, e.container, e.code) for e in execs] == [("p", "a", 101)] * 5, execs
    assert execs[3].argv == ["printf", "%s|", "a b", "'c'", "$HOME", ""]
    assert execs[4].argv == ["sh", "-c", "echo $SLURM_CONF $LC_ALL"]
    # every command in the C locale and UTC (Slurm prints and reads times in its client's zone)
    assert execs[3].env == {"LC_ALL": "C", "TZ": "UTC0"}
    assert execs[4].env == {"SLURM_CONF": "/etc/slurm/other.conf", "LC_ALL": "C", "TZ": "UTC0"}


def test_a_command_that_reads_stdin_gets_its_end_at_once(pods, core):
    # the transport opens no stdin: a command that reads it ends instead of waiting for the timeout
    t = _transport(core)
    assert t.exec(["cat"], 10) == (0, "", "")
    assert t.exec(["wc", "-c"], 10) == (0, "0\n", "")


def test_large_output_arrives_whole(pods, core):
    out = "".join("%d\n" % i for i in range(1, 300001))       # 2 MB
    err = "".join("%d\n" % i for i in range(1, 100001))
    assert _transport(core).exec(["sh", "-c", "seq 1 300000; seq 1 100000 >&2"], 60) == (0, out, err)


def test_a_missing_pod_is_a_404_and_not_retried(pods, core, audit):
    mark = audit.mark()
    runner = SlurmRunner(_transport(core, "nope"), retries=3, sleep=_no_sleep)
    with pytest.raises(SlurmCommandError, match='exec into pod exec-real/nope failed: 404 pods "nope" not found'):
        runner.run(["sinfo", "--json"])
    assert [(e.pod, e.code) for e in audit.execs(mark)] == [("nope", 404)]


def test_container_name_errors_are_not_retried(pods, core, audit):
    for container, message in ((None, "400 a container name must be specified for pod p, choose one of: [a b]"),
                               ("nope", "400 container nope is not valid for pod p")):
        mark = audit.mark()
        runner = SlurmRunner(_transport(core, container=container), retries=2, sleep=_no_sleep)
        with pytest.raises(SlurmCommandError) as info:
            runner.run(["true"])
        assert message in str(info.value)
        assert [(e.container, e.code) for e in audit.execs(mark)] == [(container, 400)]
    assert _transport(core, container="b").exec(["echo", "b"], 10) == (0, "b\n", "")


def test_a_pod_without_a_node_is_refused_at_once(pods, core, audit):
    mark = audit.mark()
    runner = SlurmRunner(_transport(core, "pending", "c"), retries=2, sleep=_no_sleep)
    with pytest.raises(SlurmCommandError, match="400 pod pending does not have a host assigned"):
        runner.run(["true"])
    assert len(audit.execs(mark)) == 1


def test_a_container_not_started_yet_is_retried_until_it_runs(pods, core, audit):
    """The kubelet refuses the upgrade (500, container not found) while the container has not started - a
    controller pod that is restarting: retried, reported as unavailable when it never starts, run once it does."""
    mark = audit.mark()
    runner = SlurmRunner(_transport(core, "starting", "c"), retries=1, sleep=_no_sleep)
    with pytest.raises(SlurmUnavailable, match=r'after 2 attempt\(s\).*container not found \("c"\)'):
        runner.run(["echo", "ok"])
    assert len(audit.execs(mark, pod="starting")) == 2

    def start_it(seconds):
        """The runner's pause before its retry: the init container ends, and c runs."""
        pods.kubectl("-n", NS, "exec", "starting", "-c", "init", "--", "touch", "/tmp/go")
        _until("container c of pod starting running", lambda: "running" in (
            _status(pods, "starting").get("containerStatuses") or [{}])[0].get("state", {}))
    runner = SlurmRunner(_transport(core, "starting", "c"), retries=2, sleep=start_it)
    result, unused = runner.run(["echo", "ok"])
    assert (result.rc, result.stdout, result.attempts) == (0, "ok\n", 2)


def test_a_missing_program_fails_at_once(pods, core, audit):
    mark = audit.mark()
    runner = SlurmRunner(_transport(core), retries=3, sleep=_no_sleep)
    with pytest.raises(SlurmCommandError, match="no-such-program.*(No such file or directory|not found)"):
        runner.run(["no-such-program", "ping"])
    assert len(audit.execs(mark)) == 1


def test_a_command_that_runs_too_long_is_ended_in_the_pod_too(pods, core):
    """The client stops waiting at the timeout; closing the stream does not stop the command on a real node, so the
    transport has it ended there as well - the shell and the child it started, not left beside a retry."""
    t = _transport(core)
    with pytest.raises(TransientError, match="sh did not finish within 2s in pod exec-real/p"):
        t.exec(["sh", "-c", "sleep 300 & echo $$ $! > /tmp/too-long; wait"], 2)
    pids = t.exec(["cat", "/tmp/too-long"], 10)[1].split()
    assert len(pids) == 2
    alive = ["sh", "-c", "for p in %s; do [ -e /proc/$p ] && echo $p; done; true" % " ".join(pids)]
    _until("the shell and its sleep ended in the pod (still there: %s)" % pids,
           lambda: t.exec(alive, 10)[1].split() == [], timeout=60)
