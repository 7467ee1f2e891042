"""`make k8s-demo`: the product on Kubernetes in one command, on this machine. It builds what is missing (the
control plane and the node's binaries, the images: both cached), starts the control plane with the real node
(cluster.py --node real: kubelet, containerd, the images imported), deploys examples/small-cpu.yml sized to the
node (each of its two workers gets half the node's CPUs, at least one) with site.yml, waits until both workers are
idle, runs `srun -N2 hostname` from the login pod as a check, and prints how to get a shell on the login node
(ssh through the login Service, or kubectl exec) and how to tear it all down (`make k8s-demo-down`).

    python3 tools/k8s/demo.py up   [--state DIR]    a progress line per step, with its time
    python3 tools/k8s/demo.py down [--state DIR]    teardown.yml (volumes kept), then the control plane stopped

Needs root (the real node). The state directory holds the control plane, the spec and the demo's SSH key.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "collections"))     # the collection's one bounded wait (module_utils/wait.py)
from ansible_collections.soperator.slurm.plugins.module_utils.wait import wait_until  # noqa: E402
# By file: tools/k8s is no package (as tests/integration/conftest.py loads it).
_spec = importlib.util.spec_from_file_location("soperator_k8s_cluster_demo", os.path.join(HERE, "cluster.py"))
cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cluster)

NAMESPACE, NAME, LOGIN_POD = "slurm", "small", "small-login-0"
WORKERS = ("cpu-0", "cpu-1")
BOUND = 600         # seconds, for each wait of the demo


class DemoError(Exception):
    pass


@contextlib.contextmanager
def step(what):
    """A progress line when a step starts and one with its time when it ends."""
    started = time.monotonic()
    print("k8s-demo: %s ..." % what, flush=True)
    outcome = "FAILED"
    try:
        yield
        outcome = "done"
    finally:
        print("k8s-demo: %s: %s in %.0f s" % (what, outcome, time.monotonic() - started), flush=True)


def run(argv, timeout=3600, capture=False, check=True):
    proc = subprocess.run(argv, cwd=ROOT, timeout=timeout, check=False, text=True,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    if check and proc.returncode != 0:
        raise DemoError("%s failed (rc %d)%s" % (" ".join(argv), proc.returncode,
                                                 ":\n" + proc.stdout[-3000:] if capture else ""))
    return proc


class Kubectl:
    def __init__(self, bin_dir, kubeconfig):
        self.argv = [os.path.join(bin_dir, "kubectl"), "--kubeconfig", kubeconfig]

    def __call__(self, *args, check=True, timeout=120):
        return run(self.argv + list(args), timeout=timeout, capture=True, check=check)

    def exec_in(self, pod, *argv, container=None, timeout=120):
        extra = ["-c", container] if container else []
        return self("-n", NAMESPACE, "exec", pod, *extra, "--", *argv, check=False, timeout=timeout)


def _cpus(quantity):
    """A Kubernetes CPU quantity ("2", "1500m") in CPUs."""
    return int(quantity[:-1]) / 1000.0 if quantity.endswith("m") else float(quantity)


def sized_spec(allocatable_cpus, public_key):
    """examples/small-cpu.yml with each of the two workers given half the node's CPUs (at least 1): requests equal
    limits, so the example's 2 CPUs each would leave the second worker unscheduled on a 2-CPU node."""
    import yaml
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = list(yaml.safe_load_all(f))
    cluster_doc, nodeset = docs
    nodeset["spec"]["resources"]["cpu"] = str(max(1, int(math.floor(allocatable_cpus / len(WORKERS)))))
    cluster_doc["spec"]["login"]["sshRootPublicKeys"] = [public_key]
    return yaml.safe_dump_all(docs)


def up(state):
    if os.geteuid() != 0:
        raise DemoError("the real node needs root")
    state = os.path.abspath(state)
    longest = os.path.join(state, "node", "containerd", "containerd.sock.ttrpc")
    if len(longest) >= 108:     # a unix socket's path holds at most 107 bytes
        raise DemoError("the state directory's path is too long for containerd's sockets (%s): pass a shorter "
                        "--state (make k8s-demo K8S_DEMO_STATE=...)" % longest)
    os.makedirs(state, exist_ok=True)
    total = time.monotonic()
    with step("the control plane's and the node's binaries (make k8s-build; cached)"):
        run(["make", "--no-print-directory", "k8s-build"])
    with step("the images (make images; cached)"):
        run(["make", "--no-print-directory", "images"])
    with step("the control plane and the real node (kubelet, containerd, the images imported)"):
        info = cluster.up(state, None, timeout=180, node="real")
    kubectl = Kubectl(info["bin"], info["kubeconfig"])
    key = os.path.join(state, "demo-key")
    if not os.path.exists(key):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "soperator-k8s-demo", "-f", key])
    with open(key + ".pub") as f:
        public_key = f.read().strip()
    node = json.loads(kubectl("get", "node", info["nodes"][0], "-o", "json").stdout)
    spec_path = os.path.join(state, "demo-spec.yml")
    with open(spec_path, "w") as f:
        f.write(sized_spec(_cpus(node["status"]["allocatable"]["cpu"]), public_key))
    with step("deploy examples/small-cpu.yml, sized to the node (site.yml)"):
        run(["ansible-playbook", "playbooks/site.yml", "-e", "spec_file=" + spec_path,
             "-e", "kubeconfig=" + info["kubeconfig"]], timeout=1800)

    def idle():
        out = kubectl.exec_in(NAME + "-controller-0", "sinfo", "-h", "-N", "-o", "%N %t").stdout
        states = dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)
        return all(states.get(w) == "idle" for w in WORKERS), states
    with step("both workers idle in sinfo"):
        wait_until(idle, "cpu-0 and cpu-1 idle", BOUND, poll=2.0, timeout_error=lambda last: DemoError(
            "cpu-0 and cpu-1 not idle within %d s (last: %s)" % (BOUND, last)))
    with step("check: srun -N2 hostname from the login pod"):
        out = kubectl.exec_in(LOGIN_POD, "srun", "-N2", "hostname", container="sshd", timeout=180)
        if out.returncode != 0 or sorted(out.stdout.split()) != sorted(WORKERS):
            raise DemoError("srun -N2 hostname: rc %d: %s" % (out.returncode, out.stdout[-2000:]))
    login_ip = kubectl("-n", NAMESPACE, "get", "svc", NAME + "-login", "-o", "jsonpath={.spec.clusterIP}").stdout
    ssh = "ssh -i %s -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null root@%s" % (key, login_ip)
    print("""
k8s-demo: the Slurm cluster '%(name)s' runs in real pods (namespace %(ns)s), ready in %(took).0f s.
  A shell on the login node (sessions run in the jail):
    %(ssh)s
    %(kubectl)s -n %(ns)s exec -it %(login)s -c sshd -- bash
  then: sinfo; srun -N2 hostname; sbatch --wrap hostname; squeue
  kubectl: export KUBECONFIG=%(kubeconfig)s  (kubectl is %(kubectl)s)
  Tear it down: make k8s-demo-down
""" % {"name": NAME, "ns": NAMESPACE, "took": time.monotonic() - total, "ssh": ssh, "login": LOGIN_POD,
       "kubectl": kubectl.argv[0], "kubeconfig": info["kubeconfig"]}, flush=True)


def down(state):
    state = os.path.abspath(state)
    info = cluster.status(state)
    spec_path = os.path.join(state, "demo-spec.yml")
    if info and os.path.exists(spec_path):
        with step("teardown.yml (the cluster's pods and objects; its volumes are kept)"):
            run(["ansible-playbook", "playbooks/teardown.yml", "-e", "spec_file=" + spec_path,
                 "-e", "kubeconfig=" + info["kubeconfig"]], timeout=1800)
    with step("stop the control plane and the real node"):
        stopped = cluster.down(state)
    print("k8s-demo: stopped %s" % (", ".join(stopped) if stopped else "nothing (not up)"), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument("--state", default=os.path.join(ROOT, "build", "k8s-demo"),
                        help="state directory (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        (up if args.command == "up" else down)(args.state)
    except (DemoError, cluster.StartError, cluster.real_node.NodeError, subprocess.TimeoutExpired) as e:
        print("k8s-demo failed: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
