"""What the tests that run our modules against the real API server together with real Slurm daemons share (their
fixtures: slurm_kube_fixtures.py).

Their Kubernetes side is the cluster of conftest.py (kube-apiserver, the controllers and the scheduler, kwok nodes:
pods become Running and Ready, run nothing and cannot be exec'd into); their Slurm side is a local cluster of real
daemons (tests/slurm's `local_cluster` fixture, host Slurm), which the modules reach with slurm_transport=local.

- `Namespaced`: a test's own namespace soperator-it-<hex> and examples/small-cpu.yml in it; the cluster applied
  there is deleted at the end (state=absent, volumes purged; its cluster-scoped RBAC too) and then the namespace.
- `Api`: the admin's clients of the real server, with small readers; `until`, a bounded wait.
"""
import uuid


from slurm_specs import SMALL, module, spec_docs
from waiting import wait_for

CR_GROUP, CR_VERSION = "slurm.soperator.dev", "v1alpha1"
BOUND = 180     # seconds: the longest any wait of these tests may take before the test fails


def small_docs(namespace):
    return spec_docs(SMALL, namespace)


def until(what, probe, timeout=BOUND, poll=0.5):
    """probe()'s first true value, polled; fails the test after `timeout` seconds (tests/waiting.py)."""
    return wait_for(probe, what, timeout, poll=poll)


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
