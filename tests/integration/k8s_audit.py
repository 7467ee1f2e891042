"""Reads a kube-apiserver audit log (JSON lines, Metadata level, one event per request as tools/k8s/cluster.py's
policy writes it) and counts requests: the API server's own account of what a run did, not the client's."""
import collections
import json
import os
import urllib.parse

WRITE_VERBS = frozenset(("create", "update", "patch", "delete", "deletecollection"))
READ_VERBS = frozenset(("get", "list", "watch"))


class Request:
    def __init__(self, event):
        self.event = event
        ref = event.get("objectRef") or {}
        self.verb = event["verb"]
        self.user = event["user"]["username"]
        self.resource = ref.get("resource")
        self.group = ref.get("apiGroup", "")
        self.namespace = ref.get("namespace")
        self.name = ref.get("name")
        self.subresource = ref.get("subresource")
        self.code = (event.get("responseStatus") or {}).get("code")
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(event["requestURI"]).query)
        self.dry_run = query.get("dryRun") == ["All"]

    @property
    def write(self):
        return self.verb in WRITE_VERBS

    @property
    def read(self):
        return self.verb in READ_VERBS

    def __repr__(self):
        group = self.group + "/" if self.group else ""
        sub = "/" + self.subresource if self.subresource else ""
        return "%s %s%s/%s%s%s (%s)" % (self.verb, group, self.resource, self.name or "", sub,
                                        " dryRun" if self.dry_run else "", self.code)


class AuditLog:
    def __init__(self, path):
        self.path = path

    def mark(self):
        """A position; requests() returns what was logged after it. The apiserver writes in blocking mode: an event
        is in the file before its response reaches the client. The position is the end of the last whole line: an
        event the API server is still writing (a controller's) starts before it, and is read whole after it."""
        with open(self.path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            while end > 0:
                start = max(0, end - 65536)
                f.seek(start)
                newline = f.read(end - start).rfind(b"\n")
                if newline >= 0:
                    return start + newline + 1
                end = start
        return 0

    def requests(self, since=0, user=None, stages=("ResponseComplete", "ResponseStarted", "Panic")):
        out = []
        with open(self.path, "rb") as f:
            f.seek(since)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # an event the API server is still writing (another client's request)
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("stage") not in stages:
                    continue
                req = Request(event)
                if user is None or req.user == user:
                    out.append(req)
        return out


def reads_per_resource(requests):
    """{(group, resource): number of reads}."""
    return collections.Counter((r.group, r.resource) for r in requests if r.read)
