"""The remediation's pod replacement (kube/pod_replace.py) of many nodes at once: the pods are read with one list,
deleted, and waited for together - one list per poll, whatever the number of nodes (issue 32: a pass with 50 drained
nodes of 5,000). Before, each node was read, deleted and waited for in turn: 50 nodes, 50 waits one after the other,
each polling its own pod with a GET."""
from ansible_collections.soperator.slurm.plugins.module_utils.kube.pod_replace import KubeReplacer
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.remediation import RemediationError

POD_NAME = "statefulset.kubernetes.io/pod-name"


def pod(name, uid, ready=True):
    return {"metadata": {"name": name, "uid": uid, "labels": {POD_NAME: name}}, "spec": {"nodeName": "k1"},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class StatefulSets:
    """The API server with the StatefulSet controller: a deleted pod comes back (new uid) `delay` polls later, Ready.
    Label selectors: only `statefulset.kubernetes.io/pod-name in (a,b,...)`, as the server reads it."""

    def __init__(self, names, delay=3, never=()):
        self.pods = dict((n, pod(n, n + "-1")) for n in names)
        self.calls, self.delay, self.never, self.gone = [], delay, set(never), {}

    def _selected(self, selector):
        key, _op, values = selector.partition(" in ")
        assert key == POD_NAME, selector
        return set(values.strip("()").split(","))

    def list(self, kind, namespace=None, label_selector=None):
        self.calls.append(("list", kind, label_selector))
        for name in list(self.gone):        # the controller's progress, one step per poll
            self.gone[name] -= 1
            if self.gone[name] <= 0 and name not in self.never:
                self.pods[name] = pod(name, name + "-2")
                del self.gone[name]
        wanted = self._selected(label_selector)
        return [p for n, p in sorted(self.pods.items()) if n in wanted]

    def get(self, kind, name, namespace=None):
        self.calls.append(("get", kind, name))
        return self.pods.get(name)

    def delete(self, kind, name, namespace=None):
        self.calls.append(("delete", kind, name))
        del self.pods[name]
        self.gone[name] = self.delay


class Clock:
    def __init__(self):
        self.now, self.sleeps = 0.0, 0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps += 1
        self.now += seconds


def test_fifty_of_five_thousand_pods_are_replaced_together():
    names = ["gpu-%d" % i for i in range(5000)]
    drained = names[100:150]
    api, clock = StatefulSets(names), Clock()
    replacer = KubeReplacer(api, "slurm", timeout=300, poll=2.0, sleep=clock.sleep, clock=clock)
    out = replacer.replace_all(drained)
    assert sorted(out) == sorted(drained)
    assert all(out[n]["new_uid"] == n + "-2" and out[n]["deleted_uid"] == n + "-1" for n in drained), out
    # one list, the 50 deletes, then one list per poll: no GET of any pod, no request for the other 4,950
    kinds = [call[0] for call in api.calls]
    assert kinds.count("delete") == 50 and kinds.count("get") == 0
    assert kinds[0] == "list" and kinds[1:51] == ["delete"] * 50 and set(kinds[51:]) == {"list"}
    assert len(kinds[51:]) == clock.sleeps + 1 == 3, kinds[51:]
    for _verb, _kind, selector in (c for c in api.calls if c[0] == "list"):
        assert set(selector.split(" in ")[1].strip("()").split(",")) <= set(drained)
    assert clock.now < 10       # waited for together: one delay, not 50


def test_a_pod_that_does_not_come_back_fails_alone():
    names = ["cpu-%d" % i for i in range(10)]
    api, clock = StatefulSets(names, never=["cpu-3"]), Clock()
    replacer = KubeReplacer(api, "slurm", timeout=30, poll=2.0, sleep=clock.sleep, clock=clock)
    out = replacer.replace_all(["cpu-2", "cpu-3", "cpu-4"])
    assert isinstance(out["cpu-3"], RemediationError) and "no new pod became Ready within 30s" in str(out["cpu-3"])
    assert out["cpu-2"]["new_uid"] == "cpu-2-2" and out["cpu-4"]["new_uid"] == "cpu-4-2"


def test_one_node_as_before():
    api, clock = StatefulSets(["cpu-0", "cpu-1"]), Clock()
    replacer = KubeReplacer(api, "slurm", timeout=30, poll=2.0, sleep=clock.sleep, clock=clock)
    info = replacer.replace("cpu-1")
    assert info["pod"] == "slurm/cpu-1" and info["new_uid"] == "cpu-1-2" and info["kubernetes_node"] == "k1"
    assert [c[0] for c in api.calls if c[0] != "list"] == ["delete"]


class Cordoning(StatefulSets):
    def apply(self, obj, force=False):
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))


def test_a_kubernetes_node_is_cordoned_once_for_all_its_pods():
    # 50 drained pods on 7 Kubernetes nodes (a 5,000-worker bench): one patch per Kubernetes node, not per pod
    names = ["gpu-%d" % i for i in range(50)]
    api, clock = Cordoning(names), Clock()
    for i, name in enumerate(names):
        api.pods[name]["spec"]["nodeName"] = "k%d" % (i % 7)
    out = KubeReplacer(api, "slurm", cordon=True, timeout=30, poll=2.0, sleep=clock.sleep, clock=clock).replace_all(names)
    assert sorted(c[2] for c in api.calls if c[0] == "apply") == ["k%d" % i for i in range(7)]
    assert all(out[n]["cordoned"] == "k%d" % (i % 7) for i, n in enumerate(names))
