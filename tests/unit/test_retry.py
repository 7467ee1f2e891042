"""The one retry schedule (plugins/module_utils/retry.py) and its two users: the Kubernetes client retries what the
server may answer differently next time and nothing else; the Slurm runner's schedule is the same one. Sleeps are
recorded, never slept."""
import json

import pytest
from kubernetes.client.exceptions import ApiException

from ansible_collections.soperator.slurm.plugins.module_utils import retry
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, KubeError, NotFound
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmRunner, SlurmUnavailable


def test_schedule_sleeps_a_growing_delay_between_attempts_only():
    sleeps = []
    assert list(retry.Retry(3, 0.5, sleeps.append)) == [1, 2, 3, 4]
    assert sleeps == [0.5, 1.0, 1.5]


def test_no_retries_is_one_attempt_without_sleep():
    sleeps = []
    assert list(retry.Retry(0, 5.0, sleeps.append)) == [1] and sleeps == []


def test_stopping_early_sleeps_no_more():
    sleeps = []
    for attempt in retry.Retry(5, 1.0, sleeps.append):
        if attempt == 2:
            break
    assert sleeps == [1.0]


def test_negative_retries_are_refused():
    with pytest.raises(ValueError, match="retries must be >= 0"):
        retry.Retry(-1, 1.0)


class Response(object):
    def __init__(self, status, body):
        self.status, self.data = status, json.dumps(body).encode()
        self.reason = "reason %d" % status

    def read(self):
        return self.data


class ScriptedApi(object):
    """The two calls of the kubernetes >= 35 ApiClient that KubeClient._send makes, answering from a script: a
    (status, body) pair, or an exception to raise (a connection error)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = 0

    def param_serialize(self, method, path, **kwargs):
        return (method, path)

    def call_api(self, *request, **kwargs):
        self.sent += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Response(*answer)

    def response_deserialize(self, response, types):
        e = ApiException(status=response.status, reason=response.reason)
        e.body = response.data
        raise e


def status(code, reason, message):
    return (code, {"kind": "Status", "code": code, "reason": reason, "message": message})


def client(answers, retries=3):
    sleeps = []
    return KubeClient(ScriptedApi(answers), "test", retries=retries, retry_delay=1.0, sleep=sleeps.append), sleeps


def test_kube_client_retries_an_overloaded_server_then_succeeds():
    c, sleeps = client([status(503, "ServiceUnavailable", "busy"), status(429, "TooManyRequests", "slow down"),
                        (200, {"kind": "Pod", "metadata": {"name": "p"}})])
    assert c.get("Pod", "p", "ns")["metadata"]["name"] == "p"
    assert sleeps == [1.0, 2.0] and c.api.sent == 3 and c.calls["reads"] == 3


def test_kube_client_gives_up_after_every_attempt_and_says_so():
    c, sleeps = client([status(500, "InternalError", "etcd down")] * 3, retries=2)
    with pytest.raises(KubeError) as e:
        c.get("Pod", "p", "ns")
    assert (e.value.status, e.value.attempts, sleeps) == (500, 3, [1.0, 2.0])
    assert str(e.value) == "read Pod ns/p: 500 InternalError: etcd down (gave up after 3 attempts)"


def test_kube_client_connection_errors_are_retried():
    c, sleeps = client([ConnectionRefusedError(111, "Connection refused"), (200, {"kind": "Pod"})])
    assert c.get("Pod", "p", "ns") == {"kind": "Pod"} and sleeps == [1.0]


def test_kube_client_does_not_retry_what_another_try_would_not_change():
    c, sleeps = client([status(422, "Invalid", "spec.replicas: must be >= 0")])
    with pytest.raises(KubeError) as e:
        c.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns"}})
    assert str(e.value).endswith("422 Invalid: spec.replicas: must be >= 0") and sleeps == [] and c.api.sent == 1
    c, sleeps = client([status(404, "NotFound", "no pod")])
    with pytest.raises(NotFound):
        c._call("GET", "/api/v1/namespaces/ns/pods/p", "read Pod ns/p")
    assert sleeps == [] and c.api.sent == 1


def test_kube_client_retries_a_conflict_only_where_asked():
    conflict = status(409, "Conflict", "the object has been modified")
    c, sleeps = client([conflict])
    with pytest.raises(KubeError, match="409 Conflict"):
        c._call("PUT", "/api/v1/namespaces/ns/configmaps/x", "replace ConfigMap ns/x")
    assert c.api.sent == 1 and sleeps == []
    c, sleeps = client([conflict, (200, {"kind": "ConfigMap"})])
    assert c._call("PATCH", "/api/v1/namespaces/ns/configmaps/x", "apply ConfigMap ns/x",
                   retry_conflict=True) == ({"kind": "ConfigMap"}, 200)
    assert sleeps == [1.0]


class Unanswered(object):
    """A transport whose controller never answers."""

    def __init__(self):
        self.calls = 0

    def describe(self):
        return {"transport": "local"}

    def exec(self, argv, timeout):
        self.calls += 1
        return 1, "", "Unable to contact slurm controller (connect failure)"


def test_slurm_runner_uses_the_same_schedule():
    sleeps = []
    t = Unanswered()
    runner = SlurmRunner(t, retries=2, retry_delay=2.0, sleep=sleeps.append)
    with pytest.raises(SlurmUnavailable, match="after 3 attempt"):
        runner.run(["scontrol", "ping"])
    assert t.calls == 3 and sleeps == [2.0, 4.0]
    assert runner.retries == 2


def test_defaults_live_in_one_place():
    assert SlurmRunner(Unanswered()).retry.retries == retry.SLURM_RETRIES
    assert SlurmRunner(Unanswered()).retry.delay == retry.SLURM_RETRY_DELAY
    c = KubeClient(ScriptedApi([]), "test")
    assert (c.retries, c.retry_delay) == (retry.KUBE_RETRIES, retry.KUBE_RETRY_DELAY)
