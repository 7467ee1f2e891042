"""Ephemeral workers on a real node (tools/k8s/node.py: kubelet, containerd, kube-proxy, CoreDNS; needs root,
`make k8s-build` and `make images`): the control plane and the node are started in a temporary directory and
stopped at the end.

A NodeSet `burst` with no worker running (ephemeral, maxReplicas 2, 500m CPU each, suspendTime 10 s,
suspendTimeout 10 s). Per sample, `sbatch -N2 --wrap 'srun hostname'` from the login pod, then:
- submit -> running: until `scontrol show job` in the controller pod says RUNNING (or later);
- submit -> done: until the job has ended;
- job end -> gone: until both worker pods are deleted and sinfo shows both nodes powered down (`~`);
- resume latency: what the exporter reports (observe/metrics.py resume_families over `scontrol show nodes --json`):
  from our ResumeProgram's run to the start of each node's slurmd.
States are polled (each poll is a kubectl exec, about half a second): the numbers are that coarse. Each sample waits
SuspendTimeout after the nodes are down (Slurm resumes a node only after it). Prints numbers only.

    python3 bench/bench_ephemeral_realnode.py [--samples 3]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "collections"))
import ansible_run  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.observe import metrics  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.node_records import parse_sinfo_json  # noqa: E402

_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster", os.path.join(ROOT, "tools", "k8s",
                                                                                     "cluster.py"))
k8s = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s)

NS, CLUSTER = "slurm-eph", "eph"
CONTROLLER, LOGIN = CLUSTER + "-controller-0", CLUSTER + "-login-0"
SUSPEND_TIME, SUSPEND_TIMEOUT, RESUME_TIMEOUT = 10, 10, 150
NODES = ["burst-0", "burst-1"]
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: eph, namespace: slurm-eph}
spec:
  jail: {volume: {size: 1Gi}}
  login: {replicas: 1}
  slurmConfig: {SlurmdTimeout: 120}
  remediation: {enabled: false}
  healthChecks: {passive: {interval: 0}}
  partitions:
    - {name: burst, default: true, nodeSets: [burst]}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: burst, namespace: slurm-eph}
spec:
  clusterName: eph
  maxReplicas: 2
  ephemeral: {enabled: true, suspendTime: %d, resumeTimeout: %d, suspendTimeout: %d}
  resources: {cpu: 500m, memory: 512Mi}
  slurmNode: {cpus: 1}
""" % (SUSPEND_TIME, RESUME_TIMEOUT, SUSPEND_TIMEOUT)
LIMIT = 600


def kubectl(info, *args, check=True):
    proc = subprocess.run([os.path.join(info["bin"], "kubectl"), "--kubeconfig", info["kubeconfig"]] + list(args),
                          capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), proc.stderr))
    return proc


def in_controller(info, *argv):
    return kubectl(info, "-n", NS, "exec", CONTROLLER, "-c", "slurmctld", "--", *argv, check=False).stdout


def until(what, probe, timeout=LIMIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for " + what)


def job_state(info, job):
    out = in_controller(info, "scontrol", "show", "job", "-o", job)
    return dict(w.split("=", 1) for w in out.split() if "=" in w).get("JobState", "")


def burst_pods(info):
    out = kubectl(info, "-n", NS, "get", "pods", "-o", "json").stdout
    return sorted(p["metadata"]["name"] for p in json.loads(out)["items"] if p["metadata"]["name"].startswith("burst-"))


def powered_down(info):
    out = in_controller(info, "sinfo", "-h", "-N", "-o", "%N|%t")
    states = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
    return all(states.get(n, "").endswith("~") for n in NODES)


def resume_seconds(info):
    """{node: seconds} as the exporter computes it, from the controller's node records."""
    records = parse_sinfo_json(in_controller(info, "scontrol", "show", "nodes", "--json"))
    (family,) = metrics.resume_families(records, "soperator:")
    return dict((s.labels["node"], s.value) for s in family.samples)


def sbatch(info):
    done = kubectl(info, "-n", NS, "exec", LOGIN, "--", "sbatch", "--parsable", "-p", "burst", "-N2", "-o",
                   "/dev/null", "--wrap", "srun hostname", check=False)
    job = done.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise RuntimeError("sbatch: %s %s" % (done.stdout, done.stderr))
    return job


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args(argv)
    state = tempfile.mkdtemp(prefix="bench-eph-rn-")
    started = time.monotonic()
    info = k8s.up(state, timeout=300, node="real")
    print("up (control plane + real node, %d images imported): %.1f s" % (
        len(info["real_node"]["images"]), time.monotonic() - started), flush=True)
    try:
        spec = os.path.join(state, "eph.yml")
        with open(spec, "w") as f:
            f.write(SPEC)
        ansible_run.playbook("site.yml", "-e", "spec_file=" + spec, "-e", "kubeconfig=" + info["kubeconfig"],
                             timeout=900, expect_rc=0)
        until("the controller", lambda: powered_down(info))

        def login_ready():
            out = kubectl(info, "-n", NS, "get", "pod", LOGIN, "-o", "json", check=False).stdout
            return bool(out) and any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in json.loads(out).get("status", {}).get("conditions", []))
        until("the login pod", login_ready)
        rows = []
        for sample in range(args.samples):
            submitted = time.monotonic()
            job = sbatch(info)
            until("job %s running" % job, lambda: job_state(info, job) not in ("", "PENDING", "CONFIGURING"))
            running = time.monotonic() - submitted
            final = until("job %s done" % job, lambda: job_state(info, job) in (
                "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT") and job_state(info, job))
            ended = time.monotonic()
            latency = resume_seconds(info)
            until("the burst pods gone and powered down", lambda: burst_pods(info) == [] and powered_down(info))
            gone = time.monotonic() - ended
            rows.append((running, ended - submitted, gone, max(latency.values()) if latency else None))
            print("sample %d: job %s %s; submit -> running %.1f s, submit -> done %.1f s, job end -> 2 pods gone and "
                  "powered down %.1f s; resume latency (exporter) %s" % (
                      sample + 1, job, final, running, ended - submitted, gone,
                      ", ".join("%s %d s" % kv for kv in sorted(latency.items())) or "none"), flush=True)
            time.sleep(SUSPEND_TIMEOUT + 1)
        for i, what in enumerate(("submit -> running", "submit -> done", "job end -> pods gone")):
            print("%s: %.1f-%.1f s" % (what, min(r[i] for r in rows), max(r[i] for r in rows)))
    finally:
        kubectl(info, "delete", "namespace", NS, "--wait=true", check=False)
        k8s.down(state)


if __name__ == "__main__":
    main()
