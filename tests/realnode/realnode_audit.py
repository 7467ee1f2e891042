"""What the real node's API server recorded of a run (its audit log, Metadata level): the exec requests - pod,
container, argv, answer - and the writes, read from the server's own account rather than from the client's.

The exec's argv is in the request's query (`command=` once per argument). The transport puts coreutils' `timeout`
in front of every command (runner.pod_time_limit); `argv` is the command without it, `limited` says it was there.
"""
import importlib.util
import os
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("soperator_k8s_audit_realnode",
                                               os.path.join(ROOT, "tests", "integration", "k8s_audit.py"))
k8s_audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s_audit)


class Exec:
    def __init__(self, request):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.event["requestURI"]).query,
                                      keep_blank_values=True)
        self.namespace, self.pod, self.code = request.namespace, request.name, request.code
        self.user = request.user
        self.container = (query.get("container") or [None])[0]
        argv = query.get("command") or []
        self.limited = argv[:1] == ["timeout"]
        argv = argv[3:] if self.limited else argv
        # the transport's `env NAME=value ...` prefix (slurm_conf, the C locale, UTC): env here, the command in argv
        self.env = {}
        if argv[:1] == ["env"]:
            argv = argv[1:]
            while argv and "=" in argv[0] and not argv[0].startswith("="):
                name, value = argv.pop(0).split("=", 1)
                self.env[name] = value
        self.argv = argv

    def __repr__(self):
        return "exec %s/%s -c %s %s -> %s" % (self.namespace, self.pod, self.container, self.argv, self.code)


class Audit:
    """mark() before a run, execs(mark) / writes(mark) after it, in one test file's namespace. Requests of the node's
    and the control plane's own users (the kubelet, the controllers, ServiceAccounts, CoreDNS, the volume provisioner)
    are left out: a run of ours is the admin's. So are other namespaces' and cluster-scoped requests (but the
    namespace itself): the suite's two workers share the node and its API server (conftest.py), and the other
    worker's runs are the same admin's."""

    def __init__(self, path, namespace):
        self.log = k8s_audit.AuditLog(path)
        self.namespace = namespace

    def mark(self):
        return self.log.mark()

    def _ours(self, since, stage):
        return [r for r in self.log.requests(since, stages=(stage,))
                if not r.user.startswith(("system:", "soperator:")) and (
                    r.namespace == self.namespace or (r.resource == "namespaces" and r.name == self.namespace))]

    def execs(self, since, pod=None):
        # An exec is a long-running request: its ResponseStarted event is written before the client hears anything,
        # its ResponseComplete one only once the stream is over, maybe after the client has read it all.
        return [Exec(r) for r in self._ours(since, "ResponseStarted") if r.resource == "pods"
                and r.subresource == "exec" and pod in (None, r.name)]

    def writes(self, since):
        """Writes that changed something (dry runs left out)."""
        return [r for r in self._ours(since, "ResponseComplete") if r.write and not r.dry_run]
