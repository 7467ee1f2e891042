# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm's power saving programs on Kubernetes (ephemeral NodeSets, docs/ephemeral-workers.md): slurmctld runs them in
the controller pod, as SlurmUser, with the hostlist of the nodes it wants up or down.

    power-resume|power-suspend|power-resume-fail <hostlist>

(three names of this one file in /opt/soperator/bin of the controller image; the name is the action.)

- resume: create each node's worker Pod, named as the node, from its NodeSet's template (render/power_kube.py, in the
  ConfigMap mounted at /etc/soperator/power). A Pod of that name that is ours and alive is left as it is; one being
  deleted is waited for (bounded), then made again; one that is not ours is refused.
- suspend: delete each node's Pod, only when it carries our labels (read first; the delete is conditional on that
  Pod's uid, so nothing made in between is removed).
- resume-fail: the same delete, then `scontrol update State=DOWN Reason="<prefix> resume-failed: ..."`: the node is
  DOWN with our reason (Slurm requeues its jobs), and the exporter and alert say so.

Credentials: the controller pod's ServiceAccount token (the power ServiceAccount: pods create, get/delete of the
CLOUD node names only). For tests, SOPERATOR_KUBE_API, SOPERATOR_KUBE_TOKEN_FILE, SOPERATOR_KUBE_CA_FILE,
SOPERATOR_KUBE_NAMESPACE, SOPERATOR_POWER_CONFIG and SOPERATOR_POWER_LOG replace the in-cluster defaults.

Standard library only: the controller image has python3 but no kubernetes client, so the few API calls (create, get,
delete of one pod) are made here with http.client.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from http.client import HTTPException, HTTPSConnection
from urllib.parse import urlsplit

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node.power_program import PowerError, PowerProgram
except ImportError:  # run as a program from the controller image: power_program.py lies beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    from power_program import PowerError, PowerProgram

ACTIONS = {"power-resume": "resume", "power-suspend": "suspend", "power-resume-fail": "resume-fail"}
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CONFIG_FILE = "/etc/soperator/power/power.json"
LOG_FILE = "/var/log/slurm/power.log"
REQUEST_TIMEOUT = 30        # seconds per API request
IN_CLUSTER_API = "https://kubernetes.default.svc"
GONE_WAIT = 120             # seconds a resume waits for a terminating Pod of the node to go away


class KubeApi(object):
    """Just enough of the Kubernetes API: a JSON request with a bearer token, verified against the cluster's CA."""

    def __init__(self, base, token, ca_file):
        url = urlsplit(base)
        if url.scheme != "https" or not url.hostname:
            raise PowerError("the API server must be an https:// URL, got %r" % base)
        self.host, self.port, self.prefix = url.hostname, url.port or 443, url.path.rstrip("/")
        self.token = token
        try:
            self.context = ssl.create_default_context(cafile=ca_file)
        except (IOError, OSError, ssl.SSLError) as e:
            raise PowerError("the cluster's CA %s: %s" % (ca_file, e))

    def request(self, method, path, body=None):
        """(HTTP status, decoded JSON body or None)."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn = HTTPSConnection(self.host, self.port, timeout=REQUEST_TIMEOUT, context=self.context)
        try:
            conn.request(method, self.prefix + path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, _json(resp.read())
        except HTTPException as e:
            raise PowerError("%s %s: %s" % (method, path, e))
        finally:
            conn.close()


def _json(raw):
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except ValueError:
        return None


def _message(status, body):
    return "HTTP %d: %s" % (status, (body or {}).get("message") if isinstance(body, dict) else body)


class KubePower(PowerProgram):
    """The power programs' work on one namespace, with the config render/power_kube.py writes."""

    def __init__(self, api, namespace, config, scontrol="scontrol", out=None, gone_wait=GONE_WAIT):
        super(KubePower, self).__init__(scontrol, out)
        self.api = api
        self.namespace = namespace
        self.config = config
        self.gone_wait = gone_wait

    def prefix(self, node):
        return self.config["reasonPrefix"]

    def template(self, node):
        """The Pod of a CLOUD node of an ephemeral NodeSet; refuses any other name."""
        for name, node_set in sorted(self.config["nodeSets"].items()):
            ordinal = node[len(name) + 1:]
            if node.startswith(name + "-") and ordinal.isdigit() and "%s-%d" % (name, int(ordinal)) == node \
                    and node_set["firstOrdinal"] <= int(ordinal) < node_set["endOrdinal"]:
                pod = copy.deepcopy(node_set["pod"])
                pod["metadata"]["name"] = node
                pod["metadata"]["namespace"] = self.namespace
                pod["spec"]["hostname"] = node
                return pod
        raise PowerError("%s is not a node Slurm powers up in this cluster" % node)

    def _path(self, name=None):
        path = "/api/v1/namespaces/%s/pods" % self.namespace
        return path if name is None else "%s/%s" % (path, name)

    def _live(self, node, wanted):
        """The node's Pod when it exists (None when not); refuses one without our labels."""
        status, pod = self.api.request("GET", self._path(node))
        if status == 404:
            return None
        if status != 200:
            raise PowerError("get pod %s: %s" % (node, _message(status, pod)))
        labels = pod["metadata"].get("labels") or {}
        mine = wanted["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in mine.items()):
            raise PowerError("pod %s is not one of ours (labels %s): left alone" % (node, labels))
        return pod

    def _delete(self, pod):
        """Delete exactly this Pod (its uid): a Pod made again meanwhile under the same name stays."""
        name = pod["metadata"]["name"]
        status, body = self.api.request("DELETE", self._path(name), {
            "apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod["metadata"]["uid"]}})
        if status not in (200, 202, 404):
            raise PowerError("delete pod %s: %s" % (name, _message(status, body)))
        return status != 404

    def _wait_gone(self, node, wanted):
        deadline = time.monotonic() + self.gone_wait
        while self._live(node, wanted) is not None:
            if time.monotonic() > deadline:
                raise PowerError("pod %s is still being deleted after %d s" % (node, self.gone_wait))
            time.sleep(1)

    def resume(self, node):
        wanted = self.template(node)
        for _attempt in range(3):
            status, body = self.api.request("POST", self._path(), wanted)
            if status in (200, 201):
                self.say("resume %s: created pod (uid %s)" % (node, body["metadata"]["uid"]))
                return True
            if status != 409:
                raise PowerError("create pod %s: %s" % (node, _message(status, body)))
            live = self._live(node, wanted)
            if live is None:
                continue            # gone since the create: try again
            phase = (live.get("status") or {}).get("phase")
            if not live["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
                self.say("resume %s: its pod exists already (uid %s)" % (node, live["metadata"]["uid"]))
                return False
            if not live["metadata"].get("deletionTimestamp"):
                self._delete(live)          # ended (evicted, failed): a new one replaces it
            self.say("resume %s: waiting for the old pod to go" % node)
            self._wait_gone(node, wanted)
        raise PowerError("create pod %s: a pod of that name keeps coming back" % node)

    def suspend(self, node):
        wanted = self.template(node)
        live = self._live(node, wanted)
        if live is None:
            self.say("suspend %s: no pod" % node)
            return False
        deleted = self._delete(live)
        self.say("suspend %s: deleted pod (uid %s)" % (node, live["metadata"]["uid"]))
        return deleted


def _read(path):
    with open(path) as f:
        return f.read().strip()


def from_environment(env, out=None):
    """A KubePower from the pod's ServiceAccount and the power ConfigMap, or what the environment names instead."""
    api = env.get("SOPERATOR_KUBE_API")
    if not api and env.get("KUBERNETES_SERVICE_HOST"):
        api = "https://%s:%s" % (env["KUBERNETES_SERVICE_HOST"], env.get("KUBERNETES_SERVICE_PORT", "443"))
    # slurmctld runs the programs through slurmscriptd with a few variables of its own, not the pod's: the API
    # server's Service by its DNS name then (the API server's certificate names it)
    api = api or IN_CLUSTER_API
    token = _read(env.get("SOPERATOR_KUBE_TOKEN_FILE") or os.path.join(SA_DIR, "token"))
    ca_file = env.get("SOPERATOR_KUBE_CA_FILE") or os.path.join(SA_DIR, "ca.crt")
    namespace = env.get("SOPERATOR_KUBE_NAMESPACE") or _read(os.path.join(SA_DIR, "namespace"))
    with open(env.get("SOPERATOR_POWER_CONFIG") or CONFIG_FILE) as f:
        config = json.load(f)
    return KubePower(KubeApi(api, token, ca_file), namespace, config, out=out)


def _log(env):
    try:
        return open(env.get("SOPERATOR_POWER_LOG") or LOG_FILE, "a")
    except (IOError, OSError):
        return sys.stderr       # None when slurmctld closed it: then nothing is written


def main(argv=None, env=None):
    argv = sys.argv if argv is None else argv
    env = os.environ if env is None else env
    action = ACTIONS.get(os.path.basename(argv[0]))
    if action is None or len(argv) != 2:
        sys.stderr.write("usage: power-resume|power-suspend|power-resume-fail HOSTLIST\n")
        return 2
    # slurmctld runs us with signals blocked; scontrol must not inherit that
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    out = _log(env)
    try:
        errors = from_environment(env, out).act(action, argv[1])
    except (PowerError, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        if out is not None:
            out.write("%s %s %s: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), action, argv[1], e))
        return 1
    finally:
        if out is not None and out is not sys.stderr:
            out.close()
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
