"""The most pods of a NodeSet that existed and were not Ready at once, as the API server told them: what a bound on
starting pods (spec.workers.maxStartingPods) must keep. Shared by tests/integration/test_nodeset_scale_real.py and
bench/bench_stagger.py."""
import threading

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c


class NotReadyWatch:
    """A watch of a NodeSet's pods (kubernetes' watch, in a thread, renewed every 2 s so that it ends soon after the
    `with` block): `most` is the most pods that existed and were not Ready at once; `events` how many it saw."""

    def __init__(self, core, namespace, nodeset):
        self.core, self.namespace, self.selector = core, namespace, "%s=%s" % (c.LABEL_NODESET, nodeset)
        self.ready = {}
        self.most = 0
        self.events = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        from kubernetes import watch
        version = None
        while not self.stopped:
            since = {"resource_version": version} if version else {}
            for event in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                              label_selector=self.selector, timeout_seconds=2, **since):
                pod = event["object"]
                version = pod.metadata.resource_version
                self.events += 1
                if event["type"] == "DELETED" or pod.metadata.deletion_timestamp is not None:
                    self.ready.pop(pod.metadata.name, None)
                else:
                    self.ready[pod.metadata.name] = any(cond.type == "Ready" and cond.status == "True"
                                                        for cond in (pod.status.conditions or []))
                self.most = max(self.most, sum(1 for ready in self.ready.values() if not ready))

    def __enter__(self):
        self.thread.start()     # the pods it lists first come as events too: a late start misses nothing made
        return self

    def __exit__(self, *exc):
        self.stopped = True
        self.thread.join(timeout=30)
