"""End to end on a real node (tools/k8s/node.py; needs root, `make k8s-build` and `make images`): the control plane
and the node are started in a temporary directory and stopped at the end.

Rows:
- up: control plane + real node, the images imported into containerd;
- first srun: from `ansible-playbook site.yml` (examples/small-cpu.yml with 1 CPU per worker, `--workers` of them)
  to the first `srun -N<workers> hostname` from the login pod that prints every worker;
- scale-up: `kubectl scale nodeset cpu --replicas=<to>` + `remediate.yml` until every worker is idle in sinfo.
The kubelet offers the machine's CPUs and workers request theirs: on a 2-CPU machine, 1 -> 2 workers is all that
fits (the issue's 2 -> 8 needs 8 CPUs: pass --to 8 there). Prints numbers only.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import ansible_run  # noqa: E402

_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster", os.path.join(ROOT, "tools", "k8s",
                                                                                     "cluster.py"))
k8s = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s)


def kubectl(info, *args, check=True):
    proc = subprocess.run([os.path.join(info["bin"], "kubectl"), "--kubeconfig", info["kubeconfig"]] + list(args),
                          capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), proc.stderr))
    return proc


def until(what, probe, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.5)
    raise RuntimeError("timed out waiting for " + what)


def idle(info, names):
    out = kubectl(info, "-n", "slurm", "exec", "small-controller-0", "--", "sinfo", "-h", "-N", "-o", "%N %t",
                  check=False).stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return all(states.get(n) == "idle" for n in names)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--to", type=int, default=2)
    args = parser.parse_args(argv)
    state = tempfile.mkdtemp(prefix="bench-rn-")
    started = time.monotonic()
    info = k8s.up(state, timeout=300, node="real")
    print("up (control plane + real node, %d images imported): %.1f s (import %.1f s)" % (
        len(info["real_node"]["images"]), time.monotonic() - started, info["real_node"]["images_seconds"]))
    try:
        docs = list(yaml.safe_load_all(open(os.path.join(ROOT, "examples", "small-cpu.yml"))))
        docs[1]["spec"].update(replicas=args.workers, maxReplicas=max(args.to, docs[1]["spec"]["maxReplicas"]))
        docs[1]["spec"]["resources"]["cpu"] = "1"
        spec = os.path.join(state, "spec.yml")
        with open(spec, "w") as f:
            yaml.safe_dump_all(docs, f)
        workers = ["cpu-%d" % i for i in range(args.workers)]
        started = time.monotonic()
        ansible_run.playbook("site.yml", "-e", "spec_file=" + spec, "-e", "kubeconfig=" + info["kubeconfig"],
                             timeout=900)
        applied = time.monotonic() - started

        def srun_ok():
            out = kubectl(info, "-n", "slurm", "exec", "small-login-0", "-c", "sshd", "--", "timeout", "30", "srun",
                          "-N%d" % args.workers, "hostname", check=False).stdout.split()
            return sorted(out) == workers
        until("the first srun", srun_ok)
        print("site.yml -> first srun -N%d: %.1f s (site.yml itself %.1f s)" % (
            args.workers, time.monotonic() - started, applied))

        kubectl(info, "-n", "slurm", "patch", "cronjob", "small-remediation", "-p", '{"spec":{"suspend":true}}')
        started = time.monotonic()
        kubectl(info, "-n", "slurm", "scale", "nodeset", "cpu", "--replicas=%d" % args.to)
        ansible_run.playbook("remediate.yml", "-e", "cluster=small", "-e", "slurm_namespace=slurm",
                             "-e", "kubeconfig=" + info["kubeconfig"], timeout=900)
        until("every worker idle", lambda: idle(info, ["cpu-%d" % i for i in range(args.to)]))
        print("scale-up %d -> %d workers until all idle: %.1f s" % (args.workers, args.to,
                                                                    time.monotonic() - started))
    finally:
        k8s.down(state)
    print(json.dumps({"state": state}))


if __name__ == "__main__":
    main()
