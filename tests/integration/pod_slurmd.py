"""The kubelet's half of a worker replacement, for tests that pair the real API server (kwok pods, which run nothing)
with a local Slurm cluster whose slurmd are named like the worker pods.

On a real node a new worker pod starts a new slurmd, which registers with slurmctld. Here kwok only marks the pod
Ready, so `PodSlurmd` watches the namespace's worker pods and, when a pod of a node comes back Ready with a new uid,
restarts that node's local slurmd (LocalCluster.restart_node: what the local backend's remediation does): the module
under test sees the pod replaced through the API server and the new slurmd register through Slurm, each on its own.
A failed poll (the API server or sinfo slow to answer on a busy machine, a slurmd restart that did not start) is
tried again at the next poll; only GIVE_UP failures in a row end the watch, and __exit__ raises the last of them. It
also samples how many of the nodes are out of service at once (pod missing or not Ready, or the Slurm node
drained, down or not responding), the number a rolling upgrade must keep within maxUnavailable.
"""
import threading

GIVE_UP = 25      # failed polls in a row (about 5 s at the default poll) before the watch stops and reports


def _ready(pod):
    return pod.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


class PodSlurmd:
    def __init__(self, api, namespace, cluster, nodes, poll=0.2):
        self.api, self.namespace, self.cluster, self.nodes, self.poll = api, namespace, cluster, list(nodes), poll
        self.uids = dict((name, pod.metadata.uid) for name, pod in self._pods().items())
        self.restarted = []         # node names, in the order their slurmd was restarted
        self.max_out = 0            # the most nodes seen out of service at once
        self.out_seen = set()       # every node seen out of service
        self.samples = 0
        self.error = None
        self.failures = []          # every failed poll's exception, for the report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _pods(self):
        pods = self.api.core.list_namespaced_pod(self.namespace).items
        return dict((p.metadata.name, p) for p in pods if p.metadata.name in self.nodes)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None and exc[0] is None:
            raise self.error

    def _loop(self):
        in_a_row = 0
        while not self._stop.is_set():
            try:
                self._once()
                in_a_row = 0
            except Exception as e:  # pylint: disable=broad-except  # tried again; reported by __exit__ at GIVE_UP
                self.failures.append(e)
                in_a_row += 1
                if in_a_row >= GIVE_UP:
                    self.error = e
                    return
            self._stop.wait(self.poll)

    def _once(self):
        pods = self._pods()
        out = set()
        for name in self.nodes:
            pod = pods.get(name)
            if pod is None or not _ready(pod):
                out.add(name)
                continue
            if pod.metadata.uid != self.uids.get(name):
                self.cluster.restart_node(name)
                self.uids[name] = pod.metadata.uid
                self.restarted.append(name)
        for node in self.cluster.sinfo_nodes():
            flags = node["state_flags"]
            if node["name"] in self.nodes and ("DRAIN" in flags or "NOT_RESPONDING" in flags or
                                               node["state"] in ("down", "fail")):
                out.add(node["name"])
        self.out_seen |= out
        self.max_out = max(self.max_out, len(out))
        self.samples += 1
