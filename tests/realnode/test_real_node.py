"""examples/small-cpu.yml on a real node: site.yml makes pods that run slurmctld, slurmd and sshd from the images of
`make images`; users run jobs in the jail through kubectl exec and through ssh to the login Service.

The one change to the example: 1 CPU per worker instead of 2. The kubelet offers what the machine has (2 CPUs on
CI's VMs), and requests equal limits; with 2 CPUs each the second worker could never be scheduled.
"""
import json
import os
import subprocess
import time

import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = "slurm"


def _spec(tmp_path, public_key):
    docs = list(yaml.safe_load_all(open(os.path.join(ROOT, "examples", "small-cpu.yml"))))
    cluster, nodeset = docs
    assert nodeset["spec"]["resources"]["cpu"] == "2"
    nodeset["spec"]["resources"]["cpu"] = "1"
    cluster["spec"]["login"]["sshRootPublicKeys"] = [public_key]
    path = tmp_path / "small-cpu-real.yml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def _wait(what, probe, timeout=180):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last and last[0]:
            return last
        time.sleep(2)
    raise AssertionError("timed out after %ss waiting for %s (last: %s)" % (timeout, what, last))


def _pods(node):
    return json.loads(node.kubectl("-n", NS, "get", "pods", "-o", "json").stdout)["items"]


def _ready(pod):
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _exec(node, pod, *argv, container=None, timeout=90):
    extra = ["-c", container] if container else []
    return node.kubectl("-n", NS, "exec", pod, *extra, "--", "timeout", str(timeout - 10), *argv,
                        check=False, timeout=timeout)


def _idle(node, names):
    out = _exec(node, "small-controller-0", "sinfo", "-h", "-N", "-o", "%N %t").stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return all(states.get(n) == "idle" for n in names), states


def test_small_cpu_runs_jobs_in_real_pods(real_node, tmp_path):
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    spec = _spec(tmp_path, (tmp_path / "key.pub").read_text().strip())
    ansible_run.playbook("site.yml", "-e", "spec_file=" + spec, "-e", "kubeconfig=" + real_node.kubeconfig,
                         timeout=900)

    # Every pod of the cluster Running and Ready (the populate Job's pod has completed).
    pods = _pods(real_node)
    running = {p["metadata"]["name"] for p in pods if not p["metadata"].get("ownerReferences", [{}])[0].get(
        "kind") == "Job"}
    assert running == {"small-controller-0", "small-login-0", "cpu-0", "cpu-1"}, running
    assert all(_ready(p) for p in pods if p["metadata"]["name"] in running), [
        (p["metadata"]["name"], p["status"].get("phase")) for p in pods]
    assert {p["spec"]["nodeName"] for p in pods} == {real_node.info["real_node"]["name"]}

    _wait("cpu-0 and cpu-1 idle in sinfo", lambda: _idle(real_node, ("cpu-0", "cpu-1")))

    # srun from the login pod runs on both workers, inside the jail: the worker image's /opt/soperator is not there.
    out = _exec(real_node, "small-login-0", "srun", "-N2", "sh", "-c",
                "echo $(hostname) $(test -e /opt/soperator && echo image || echo jail)", container="sshd")
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.split("\n")[:2]) == ["cpu-0 jail", "cpu-1 jail"], out.stdout

    # ssh with the key to the login Service (its ClusterIP, through kube-proxy) lands in the jail; sbatch completes.
    ip = real_node.kubectl("-n", NS, "get", "svc", "small-login", "-o", "jsonpath={.spec.clusterIP}").stdout
    ssh = ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
           "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "root@" + ip]
    script = ("test -e /opt/soperator && echo not-in-jail; hostname; "
              "sbatch -N2 --wait --parsable -o /root/real-node.%j.out --wrap 'srun hostname' && "
              "cat /root/real-node.*.out")
    done = subprocess.run(ssh + [script], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split()
    assert "not-in-jail" not in lines and lines[0] == "small-login-0", done.stdout
    assert sorted(lines[-2:]) == ["cpu-0", "cpu-1"], done.stdout

    # A recreated worker pod has a new IP: slurmctld takes it from the registration (cloud_reg_addrs).
    old_ip = next(p["status"]["podIP"] for p in _pods(real_node) if p["metadata"]["name"] == "cpu-0")
    real_node.kubectl("-n", NS, "delete", "pod", "cpu-0", "--wait=true", timeout=180)
    _wait("a new cpu-0 pod Ready", lambda: ([p for p in _pods(real_node) if p["metadata"]["name"] == "cpu-0"
                                             and _ready(p)], None))
    new_ip = next(p["status"]["podIP"] for p in _pods(real_node) if p["metadata"]["name"] == "cpu-0")
    _wait("cpu-0 idle again", lambda: _idle(real_node, ("cpu-0", "cpu-1")))
    out = _exec(real_node, "small-login-0", "srun", "-N2", "hostname", container="sshd")
    assert out.returncode == 0 and sorted(out.stdout.split()) == ["cpu-0", "cpu-1"], (old_ip, new_ip, out.stdout,
                                                                                    out.stderr)

    # Teardown: no pod is left; the jail and spool volumes stay (not purged).
    ansible_run.playbook("teardown.yml", "-e", "spec_file=" + spec, "-e", "kubeconfig=" + real_node.kubeconfig,
                         timeout=600)
    _wait("no pod left", lambda: (not _pods(real_node), None), timeout=180)
    claims = json.loads(real_node.kubectl("-n", NS, "get", "pvc", "-o", "json").stdout)["items"]
    assert {c["metadata"]["name"] for c in claims} >= {"small-jail", "spool-small-controller-0"}
