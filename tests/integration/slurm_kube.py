"""What the tests that run our modules against the real API server together with real Slurm daemons share (their
fixtures: slurm_kube_fixtures.py).

Their Kubernetes side is the cluster of conftest.py (kube-apiserver, the controllers and the scheduler, kwok nodes:
pods become Running and Ready, run nothing and cannot be exec'd into); their Slurm side is a local cluster of real
daemons (tests/slurm's `local_cluster` fixture, host Slurm), which the modules reach with slurm_transport=local.

- `Namespaced`: a test's own namespace soperator-it-<hex> and examples/small-cpu.yml in it; the cluster applied
  there is deleted at the end (state=absent, volumes purged; its cluster-scoped RBAC too) and then the namespace.
- `Api`: the admin's clients of the real server, with small readers; `until`, a bounded wait.
"""
import os
import time
import uuid

import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
# The claims of examples/small-cpu.yml: the jail and the controller's spool (its StatefulSet's claim template).
CLAIMS = ("small-jail", "spool-small-controller-0")
CR_GROUP, CR_VERSION = "slurm.soperator.dev", "v1alpha1"
BOUND = 180     # seconds: the longest any wait of these tests may take before the test fails


def small_docs(namespace):
    with open(SMALL) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    return docs


def module(module_name, check=False, diff=False, expect_failed=False, **args):
    """soperator.slurm.<module_name> through `ansible localhost -m`: its result."""
    return ansible_run.module(module_name, args, check=check, diff=diff, expect_failed=expect_failed)


def until(what, probe, timeout=BOUND, poll=0.5):
    """probe()'s first true value, polled; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, "gave up after %ss waiting for %s" % (timeout, what)
        time.sleep(poll)


def actions(result):
    return [(o["kind"], o["name"], o["action"]) for o in result.get("objects") or []]


class Api:
    """The admin's clients of the cluster under test (kubernetes package); close() at the end."""

    def __init__(self, kubeconfig):
        from kubernetes import client, config
        self.client = client
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def close(self):
        self.api.close()

    def _absent(self, call, *args):
        try:
            return call(*args)
        except self.client.exceptions.ApiException as e:
            if e.status == 404:
                return None
            raise

    def statefulset(self, name, namespace):
        return self._absent(self.apps.read_namespaced_stateful_set, name, namespace)

    def job(self, name, namespace):
        return self._absent(self.batch.read_namespaced_job, name, namespace)

    def pvc(self, name, namespace):
        return self._absent(self.core.read_namespaced_persistent_volume_claim, name, namespace)

    def pods(self, namespace, selector=None):
        """{name: pod} of the namespace's pods that are not being deleted."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return dict((p.metadata.name, p) for p in pods if p.metadata.deletion_timestamp is None)

    def custom_object(self, plural, name, namespace):
        return self._absent(self.custom.get_namespaced_custom_object, CR_GROUP, CR_VERSION, namespace, plural, name)

    def slurm_cluster(self, name, namespace):
        return self.custom_object("slurmclusters", name, namespace)

    def nodeset(self, name, namespace):
        return self.custom_object("nodesets", name, namespace)


def admin_user(kubeconfig):
    """The user our runs act as with this kubeconfig, as the audit log names it."""
    api = Api(kubeconfig)
    try:
        review = api.client.AuthenticationV1Api(api.api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        return review.status.user_info.username
    finally:
        api.close()


class Namespaced:
    """A namespace of this test's own and the small example in it: `docs()` gives fresh documents for it; the last
    documents given to `applied()` are torn down at the end."""

    def __init__(self, kubeconfig):
        self.kubeconfig = kubeconfig
        self.name = "soperator-it-%s" % uuid.uuid4().hex[:8]
        self.last = None
        self.torn_down = False

    def docs(self):
        return small_docs(self.name)

    def applied(self, docs):
        self.last = docs
        return docs

    def teardown(self):
        """Once (a fixture that needs the namespace gone before its own teardown calls it first)."""
        if self.torn_down:
            return
        self.torn_down = True
        if self.last is not None:
            module("slurm_cluster", expect_failed=None, state="absent", target="kubernetes", definition=self.last,
                   kubeconfig=self.kubeconfig, purge_volumes=True)
        api = Api(self.kubeconfig)
        try:
            api.core.delete_namespace(self.name)
        except api.client.exceptions.ApiException as e:
            if e.status != 404:
                raise
        finally:
            api.close()
