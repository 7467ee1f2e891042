"""A real Prometheus (Debian's) on loopback for the tests that need one: started with the configuration a test
gives, asked through its HTTP API, stopped by the process it started."""
import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request

import yaml

from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import find_free_base_port

PROMETHEUS = shutil.which("prometheus")


def free_ports(count):
    """`count` loopback ports nobody listens on, from this process' own range (parallel runs search elsewhere)."""
    base = find_free_base_port(count, start=31000 + (os.getpid() % 100) * 50)
    return list(range(base, base + count))


def stop_daemon(proc, log):
    """Ends a daemon a test started (its Popen: by pid, never by name): SIGTERM, SIGKILL after 30 s; closes its log."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    log.close()


class Prometheus(object):
    """Prometheus with `config` (a dict: prometheus.yml) on 127.0.0.1:`port`, its files under `workdir`."""

    def __init__(self, port, workdir, config):
        self.url = "http://127.0.0.1:%d" % port
        path = os.path.join(workdir, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        self.log = open(os.path.join(workdir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen([PROMETHEUS, "--config.file=" + path,
                                      "--storage.tsdb.path=" + os.path.join(workdir, "data"),
                                      "--web.listen-address=127.0.0.1:%d" % port],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self):
        stop_daemon(self.proc, self.log)

    def api(self, path, **params):
        url = "%s/api/v1/%s?%s" % (self.url, path, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read().decode())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def ready(self):
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
