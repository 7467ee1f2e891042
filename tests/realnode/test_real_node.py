"""examples/small-cpu.yml on a real node: site.yml makes pods that run slurmctld, slurmd and sshd from the images of
`make images`; users run jobs in the jail through kubectl exec and through ssh to the login Service.

The one change to the example: 400m CPU per worker (Slurm sees 1 CPU) instead of 2. The kubelet offers what the
machine has (2 CPUs on CI's VMs), requests equal limits, and the suite's other lane has its pods on the same node
(conftest.py): two workers of 400m leave it room.
"""
import base64
import functools
import io
import json
import os
import subprocess
import tarfile
import time

import pytest
import yaml

import ansible_run
import oci_helpers
from realnode_wait import wait as _wait

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = "slurm"
HPC = "hpc"   # the second test's namespace


def _spec(tmp_path, public_key):
    docs = list(yaml.safe_load_all(open(os.path.join(ROOT, "examples", "small-cpu.yml"))))
    cluster, nodeset = docs
    assert nodeset["spec"]["resources"]["cpu"] == "2"
    nodeset["spec"]["resources"]["cpu"] = "400m"
    nodeset["spec"]["slurmNode"] = {"cpus": 1}
    cluster["spec"]["login"]["sshRootPublicKeys"] = [public_key]
    # srun --container (issue 29): oci.conf and the jail's /home on the workers; the rest of the test is unchanged
    cluster["spec"]["containers"] = {"enabled": True}
    path = tmp_path / "small-cpu-real.yml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def _pods(node):
    return json.loads(node.kubectl("-n", NS, "get", "pods", "-o", "json").stdout)["items"]


def _ready(pod):
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _exec(node, pod, *argv, container=None, namespace=NS, timeout=90):
    extra = ["-c", container] if container else []
    return node.kubectl("-n", namespace, "exec", pod, *extra, "--", "timeout", str(timeout - 10), *argv,
                        check=False, timeout=timeout)


def _sinfo(node, cluster="small", namespace=NS):
    """{node: [state, reason]}, from sinfo in the cluster's controller pod."""
    out = _exec(node, cluster + "-controller-0", "sinfo", "-h", "-N", "-o", "%N|%t|%E", namespace=namespace).stdout
    return dict((line.split("|")[0], line.split("|")[1:]) for line in out.splitlines() if "|" in line)


def _idle(node, names, cluster="small", namespace=NS):
    states = _sinfo(node, cluster, namespace)
    return all(states.get(n, [""])[0] == "idle" for n in names), states


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

    _container_step_as_a_user(real_node, tmp_path)

    # `kubectl logs` (what log collectors read) has each daemon's own lines: slurmctld's and slurmd's (their -D logs
    # to the container's standard error besides the log file) and munged's (in the foreground, "munged: ...").
    for pod, daemon in (("small-controller-0", "slurmctld"), ("cpu-0", "slurmd")):
        logs = real_node.kubectl("-n", NS, "logs", pod, "--all-containers=true").stdout
        assert "%s version 26.05" % daemon in logs and "munged: Notice: Starting munge" in logs, (pod, logs[-3000:])

    # A recreated worker pod has a new IP: slurmctld takes it from the registration (cloud_reg_addrs).
    old_ip = next(p["status"]["podIP"] for p in _pods(real_node) if p["metadata"]["name"] == "cpu-0")
    real_node.kubectl("-n", NS, "delete", "pod", "cpu-0", "--wait=true", timeout=180)
    _wait("a new cpu-0 pod Ready", lambda: ([p for p in _pods(real_node) if p["metadata"]["name"] == "cpu-0"
                                             and _ready(p)], None))
    new_ip = next(p["status"]["podIP"] for p in _pods(real_node) if p["metadata"]["name"] == "cpu-0")
    _wait("cpu-0 idle again", lambda: _idle(real_node, ("cpu-0", "cpu-1")))
    out = _exec(real_node, "small-login-0", "srun", "-N2", "hostname", container="sshd")
    assert out.returncode == 0 and sorted(out.stdout.split()) == ["cpu-0", "cpu-1"], (
        old_ip, new_ip, out.stdout, out.stderr)

    # Teardown: no pod is left; the jail and spool volumes stay (not purged).
    ansible_run.playbook("teardown.yml", "-e", "spec_file=" + spec, "-e", "kubeconfig=" + real_node.kubeconfig,
                         timeout=600)
    _wait("no pod left", lambda: (not _pods(real_node), None), timeout=180)
    claims = json.loads(real_node.kubectl("-n", NS, "get", "pvc", "-o", "json").stdout)["items"]
    assert {c["metadata"]["name"] for c in claims} >= {"small-jail", "spool-small-controller-0"}


OCI_USER = ("ocitest", 1500, 1500)
NODE_PROGRAMS = os.path.join(ROOT, "plugins", "module_utils", "node")


def _container_step_as_a_user(node, tmp_path):
    """issue 29's must-show: an image built here (this machine's sh, cat and ls with their libraries, and its
    os-release: not the jail's Debian) becomes a bundle in the jail, made by oci_bundle.py in the login pod as a
    regular user; that user's `srun -N2 --container` runs in it on both workers, rootless: the process is root of a
    user namespace that maps only the user's uid, and a file it writes to the bind-mounted jail /home is the
    user's; run from a folder under /home, the container starts in it."""
    name, uid, gid = OCI_USER
    with open("/etc/os-release", "rb") as f:
        os_release = f.read()
    layout = str(tmp_path / "oci-layout")
    oci_helpers.make_layout(layout, [oci_helpers.host_layer(),
                                     [(oci_helpers.member("etc/os-release", mode=0o644), os_release)]])
    image = oci_helpers.make_archive(tmp_path / "image.tar", layout)
    # A jail user (the jail's passwd, what the login pod's NSS reads); slurmctld looks the user up for the job's
    # credential: its pod learns it the way spec.identity's SSSD would tell it.
    entry = "%s:x:%d:%d::/home/%s:/bin/sh" % (name, uid, gid, name)
    group = "%s:x:%d:" % (name, gid)
    added = _exec(node, "small-login-0", "sh", "-c",
                  "echo '%s' >> /mnt/jail/etc/passwd && echo '%s' >> /mnt/jail/etc/group && "
                  "mkdir /mnt/jail/home/%s && chown %d:%d /mnt/jail/home/%s" % (entry, group, name, uid, gid, name),
                  container="sshd")
    assert added.returncode == 0, added.stderr
    added = _exec(node, "small-controller-0", "sh", "-c",
                  "echo '%s' >> /etc/passwd && echo '%s' >> /etc/group" % (entry, group), container="slurmctld")
    assert added.returncode == 0, added.stderr
    # oci_bundle.py (standard library, with the jail writer it imports) and the image into the login pod
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for program in ("oci_bundle.py", "safe_tree.py", "tree_reader.py"):
            tar.add(os.path.join(NODE_PROGRAMS, program), arcname="ocitest/" + program)
        tar.add(image, arcname="ocitest/image.tar")
    copied = subprocess.run([node.kubectl_path, "--kubeconfig", node.kubeconfig, "-n", NS, "exec", "-i",
                             "small-login-0", "-c", "sshd", "--", "python3", "-c",
                             "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|')"
                             ".extractall('/tmp')"], input=buf.getvalue(), capture_output=True, timeout=120,
                            check=False)
    assert copied.returncode == 0, copied.stderr
    as_user = ["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups"]
    made = _exec(node, "small-login-0", *as_user, "python3", "/tmp/ocitest/oci_bundle.py", "--source",
                 "/tmp/ocitest/image.tar", "--cache", "/mnt/jail/home/%s/bundles" % name, "--json", container="sshd")
    assert made.returncode == 0, made.stderr
    bundle = json.loads(made.stdout)["bundle"][len("/mnt/jail"):]      # its path in the jail
    assert bundle.startswith("/home/%s/bundles/sha256-" % name), bundle
    out = _exec(node, "small-login-0", *as_user, "srun", "-N2", "-l", "--container=" + bundle, "sh", "-c",
                "cat /etc/os-release; echo uid_map $(cat /proc/self/uid_map); "
                "test -e /etc/soperator-jail-release && echo jail || echo image; "
                "echo written >> /home/%s/from-container" % name, container="sshd", timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    by_task = {}
    for line in out.stdout.splitlines():
        task, text = line.split(": ", 1)
        by_task.setdefault(task.strip(), []).append(text)
    assert sorted(by_task) == ["0", "1"], out.stdout      # -N2: one task on each worker
    for lines in by_task.values():
        # the image's os-release (this machine's), the user's uid behind the namespace's 0, not the jail's files
        assert lines == os_release.decode().splitlines() + ["uid_map 0 %d 1" % uid, "image"], out.stdout
    # both tasks wrote to the jail's /home, bind-mounted: the file is there after the job, the user's
    written = _exec(node, "small-login-0", "sh", "-c", "stat -c '%%u %%g' /mnt/jail/home/%s/from-container && "
                    "cat /mnt/jail/home/%s/from-container" % (name, name), container="sshd")
    assert written.stdout.split("\n")[:3] == ["%d %d" % (uid, gid), "written", "written"], written.stdout
    # the job's working directory: from a folder under the user's /home in the jail (where a login session is; a
    # space in its name), the container starts there on both workers (oci.conf's RunTimeRun: oci_run.py with 26.05's
    # %Z, the jail's copy, then runc); sh's own pwd: the image has no /bin/pwd
    work = "/home/%s/run 1" % name
    made = _exec(node, "small-login-0", "install", "-d", "-o", str(uid), "-g", str(gid), "/mnt/jail" + work,
                 container="sshd")
    assert made.returncode == 0, made.stderr
    out = _exec(node, "small-login-0", "chroot", "--userspec=%d:%d" % (uid, gid), "/mnt/jail", "sh", "-c",
                'cd "%s" && srun -N2 -l --container=%s sh -c pwd' % (work, bundle), container="sshd", timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["0: " + work, "1: " + work], out.stdout + out.stderr
    # a bundle that is not there: the step fails, and srun says so (printed: what a user reads)
    missing = _exec(node, "small-login-0", *as_user, "srun", "-N1", "--container=/home/%s/no-such-bundle" % name,
                    "true", container="sshd")
    print("srun --container=<missing bundle>: rc %d\n%s" % (missing.returncode, missing.stderr))
    assert missing.returncode != 0 and "srun: error" in missing.stderr, missing.stderr


ROLL = "roll"   # the rolling upgrade's namespace


def _converge(spec, node, **extra):
    """site.yml on `spec`; its slurm_cluster task's result."""
    done = ansible_run.playbook("site.yml", "-e", json.dumps(dict(spec_file=spec, kubeconfig=node.kubeconfig,
                                                                  **extra)), timeout=900, expect_rc=None)
    found = [r for name, r in done.tasks().items() if name.endswith("Converge the Slurm cluster on Kubernetes")]
    assert len(found) == 1, done.output()
    assert done.rc == 0 and not found[0].get("failed"), "%s\n%s" % (
        found[0].get("msg"), node.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout)
    return found[0]


def test_new_worker_image_rolls_slurm_aware_in_real_pods(real_node, tmp_path):
    """issue 16's must-show on the real node: a running cluster gets a new worker image tag while a job runs on
    cpu-0. site.yml replaces idle cpu-1 (a new pod from the new template, its real slurmd registers, its health checks
    run in the pod, it is resumed), drains cpu-0 and leaves it waiting at rollout_timeout; the job runs on. Once the
    job has ended, the next site.yml replaces and resumes cpu-0. The job ran to its end; every node idle, every worker
    pod on the new image; a re-run changes nothing. The new tag names the same image (ctr images tag): pods pull
    nothing."""
    docs = list(yaml.safe_load_all(open(os.path.join(ROOT, "examples", "small-cpu.yml"))))
    for doc in docs:
        doc["metadata"]["namespace"] = ROLL
    docs[1]["spec"]["resources"]["cpu"] = "400m"    # two workers beside the other lane (the module's docstring)
    docs[1]["spec"]["slurmNode"] = {"cpus": 1}
    spec = tmp_path / "roll.yml"
    spec.write_text(yaml.safe_dump_all(docs))
    try:
        first = _converge(str(spec), real_node)
        assert first["rollout"] == [], first["rollout"]
        # The roll is site.yml's here: the remediation CronJob (which carries a roll on too) stays out of the way.
        real_node.kubectl("-n", ROLL, "patch", "cronjob", "small-remediation", "-p", '{"spec": {"suspend": true}}')
        ready = functools.partial(_idle, real_node, ("cpu-0", "cpu-1"), "small", ROLL)
        _wait("cpu-0 and cpu-1 idle", ready)
        old = dict((n, _pod(real_node, n, ROLL)) for n in ("cpu-0", "cpu-1"))
        old_image = old["cpu-0"]["spec"]["containers"][0]["image"]

        # A job on cpu-0 that ends when the test says so, in the jail (shared by the login pod and the workers).
        job = _exec(real_node, "small-login-0", "sbatch", "--parsable", "-w", "cpu-0", "-o", "/root/roll.out",
                    "--wrap", "echo started; while [ ! -e /root/roll-release ]; do sleep 1; done; echo finished",
                    container="sshd", namespace=ROLL)
        assert job.returncode == 0, job.stdout + job.stderr
        job_id = job.stdout.strip()

        def job_state():
            out = _exec(real_node, "small-controller-0", "scontrol", "-o", "show", "job", job_id,
                        namespace=ROLL).stdout
            return dict(w.split("=", 1) for w in out.split() if "=" in w).get("JobState")
        _wait("the job to run on cpu-0", lambda: (job_state() == "RUNNING", job_state()))

        # The new tag: the same Slurm version (its tag says so), the same image content.
        registry, tag = old_image.rsplit(":", 1)
        new_image = "%s:%s-rollout" % (registry, tag.split("-", 1)[0])
        ctr = real_node.info["real_node"]["ctr"]
        tagged = subprocess.run(ctr + ["images", "tag", "--force", old_image, new_image], capture_output=True,
                                text=True, timeout=60, check=False)
        assert tagged.returncode == 0, tagged.stdout + tagged.stderr
        docs[0]["spec"].setdefault("images", {})["worker"] = new_image
        spec.write_text(yaml.safe_dump_all(docs))

        done = _converge(str(spec), real_node, rollout_timeout=5)
        steps = [(r["node"], r["batch"], r["step"]) for r in done["rollout"]]
        assert steps == [("cpu-1", 1, "resumed"), ("cpu-0", 2, "waiting")], done["rollout"]
        assert done["rollout"][0]["steps"] == ["drained", "replaced", "rechecked", "resumed"], done["rollout"]
        cpu1 = _pod(real_node, "cpu-1", ROLL)
        assert cpu1["metadata"]["uid"] != old["cpu-1"]["metadata"]["uid"]
        assert cpu1["spec"]["containers"][0]["image"] == new_image
        assert _pod(real_node, "cpu-0", ROLL)["metadata"]["uid"] == old["cpu-0"]["metadata"]["uid"]
        states = _sinfo(real_node, "small", ROLL)
        assert states["cpu-0"][1] == "soperator: upgrade" and states["cpu-1"][0] == "idle", states
        assert job_state() == "RUNNING"

        # The job ends by itself; the next run replaces, re-checks and resumes cpu-0.
        # (the login pod's sshd container has the jail at /mnt/jail; the job sees it as /)
        released = _exec(real_node, "small-login-0", "touch", "/mnt/jail/root/roll-release", container="sshd",
                         namespace=ROLL)
        assert released.returncode == 0, released.stderr
        _wait("the job to complete", lambda: (job_state() == "COMPLETED", job_state()))
        done = _converge(str(spec), real_node, rollout_timeout=5)
        assert [(r["node"], r["batch"], r["step"]) for r in done["rollout"]] == [("cpu-0", 1, "resumed")], \
            done["rollout"]
        cpu0 = _pod(real_node, "cpu-0", ROLL)
        assert cpu0["metadata"]["uid"] != old["cpu-0"]["metadata"]["uid"]
        assert cpu0["spec"]["containers"][0]["image"] == new_image
        out = _exec(real_node, "small-login-0", "cat", "/mnt/jail/root/roll.out", container="sshd", namespace=ROLL)
        assert out.stdout.split() == ["started", "finished"], out.stdout + out.stderr    # never killed

        # Every node idle; a re-run changes nothing.
        _wait("cpu-0 and cpu-1 idle", ready)
        again = _converge(str(spec), real_node, rollout_timeout=5)
        assert not again["changed"] and again["rollout"] == [], again
    finally:
        real_node.kubectl("delete", "namespace", ROLL, "--wait=true", timeout=300, check=False)


FULL = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: acct, namespace: hpc}
spec:
  jail: {volume: {size: 20Gi}}
  login: {replicas: 1, service: {type: ClusterIP}}
  accounting:
    enabled: true
    # issue 31's policy, applied by site.yml through the exec transport (sacctmgr in the controller pod)
    policy:
      preemption: {type: qos, mode: requeue}
      enforce: [associations, limits, qos]
    qos:
      - {name: urgent, priority: 100, preempt: [normal]}
    accounts:
      - {name: science, fairshare: 4, qos: [normal, urgent], defaultQos: normal}
      - {name: small, parent: science, fairshare: 1, limits: {MaxJobs: 2}}
    users:
      - {name: root, defaultAccount: science, accounts: [science, small]}
  images: {mariadb: "%(mariadb)s"}
  # issue 30: slurmrestd with JWT (the <cluster>-rest Service; tokens from slurm_token); off again at the end
  rest: {enabled: true, maxTokenLifespan: 600}
  healthChecks:
    passive:
      interval: 15
      custom:
        - name: fault-file
          command: test ! -e /tmp/soperator-fault
          timeoutSeconds: 3
  remediation:
    schedule: "* * * * *"
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: hpc}
spec:
  clusterName: acct
  replicas: 1
  maxReplicas: 4
  resources: {cpu: 400m, memory: 1Gi}
  slurmNode: {cpus: 1}
"""


def _sa_kubeconfig(node, tmp_path):
    """A kubeconfig of the remediation ServiceAccount's own token (TokenRequest)."""
    token = node.kubectl("-n", HPC, "create", "token", "acct-remediation", "--duration=1h").stdout.strip()
    with open(node.kubeconfig) as f:
        config = json.load(f)
    config["users"] = [{"name": "remediation", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "remediation"
    path = tmp_path / "remediation.kubeconfig"
    path.write_text(json.dumps(config))
    return str(path)


def _pod(node, name, namespace=HPC):
    proc = node.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def _suspend_remediation(node, suspend):
    node.kubectl("-n", HPC, "patch", "cronjob", "acct-remediation", "-p", json.dumps({"spec": {"suspend": suspend}}))


def _quiet_remediation(node):
    """Suspend the CronJob and wait until no pass of it runs: a pass reconciles from the SlurmCluster it read when it
    started, so one that overlaps a site.yml run with a changed spec applies the older spec while site.yml waits."""
    _suspend_remediation(node, True)
    _wait("no remediation pass running", lambda: (not node.kubectl(
        "-n", HPC, "get", "cronjob", "acct-remediation", "-o", "jsonpath={.status.active}").stdout.strip(), None),
        timeout=300)


_hpc_exec = functools.partial(_exec, namespace=HPC)
_acct_sinfo = functools.partial(_sinfo, cluster="acct", namespace=HPC)


def _job_field(node, job, field):
    out = _hpc_exec(node, "acct-controller-0", "scontrol", "-o", "show", "job", job).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w).get(field)


def _policy_in_real_pods(node):
    """spec.accounting's QOS, accounts and users as sacctmgr in the controller pod reads them (site.yml applied them
    through the exec transport); slurm.conf's preemption; then a job of the urgent QOS preempts (requeues) a running
    job of normal on the full cluster (one 1-CPU worker), as sacct records it."""
    def sacctmgr(*what):
        out = _hpc_exec(node, "acct-controller-0", "sacctmgr", "-n", "-P", "show", *what)
        assert out.returncode == 0, out.stdout + out.stderr
        return sorted(out.stdout.split())
    assert "urgent|100|normal" in sacctmgr("qos", "format=Name,Priority,Preempt")
    accounts = sacctmgr("assoc", "where", "cluster=acct", "format=Account,User,ParentName,Fairshare,MaxJobs")
    assert {"science||root|4|", "small||science|1|2"} <= set(accounts), accounts
    users = sacctmgr("assoc", "where", "cluster=acct", "user=root", "format=Account,User,QOS")
    assert {"science|root|normal,urgent", "small|root|normal,urgent"} <= set(users), users
    assert sacctmgr("user", "root", "format=User,DefaultAccount") == ["root|science"]
    conf = dict(line.split(" = ", 1) for line in _hpc_exec(
        node, "acct-controller-0", "scontrol", "show", "config").stdout.splitlines() if " = " in line)
    conf = dict((k.strip(), v.strip()) for k, v in conf.items())
    assert (conf["PreemptType"], conf["PreemptMode"]) == ("preempt/qos", "REQUEUE"), conf

    def sbatch(*args):
        out = _hpc_exec(node, "acct-login-0", "sbatch", "--parsable", "-o", "/dev/null", *args, container="sshd")
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.strip().split(";")[0]
    victim = sbatch("--wrap", "sleep 300")                 # root's default account (science) and QOS (normal)
    _wait("the normal job running", lambda: (_job_field(node, victim, "JobState") == "RUNNING",
                                             _job_field(node, victim, "JobState")))
    urgent = sbatch("--qos=urgent", "--wrap", "sleep 2")

    def records():
        out = _hpc_exec(node, "acct-login-0", "sacct", "-X", "-n", "-P", "-D", "-j", "%s,%s" % (victim, urgent),
                        "-o", "JobID,Account,QOS,State", container="sshd").stdout.split()
        rows = [line.split("|") for line in out]
        return ["%s|science|normal|PREEMPTED" % victim in out and "%s|science|urgent|COMPLETED" % urgent in out,
                rows]
    _wait("sacct to record the preemption and the urgent job's end", records)
    _hpc_exec(node, "acct-login-0", "scancel", victim, container="sshd")     # requeued: it would hold the CPU
    _wait("the requeued job gone", lambda: (_job_field(node, victim, "JobState") in ("CANCELLED", None),
                                            _job_field(node, victim, "JobState")))


# issue 30's REST API: an HTTP client in the login pod's sshd container (no image here has curl: python3's urllib
# is the client; no image can be pulled onto this node). argv: method, URL, user, token ('' for none), JSON body
# ('' for none); prints the status, then the answer.
_HTTP = """
import sys, urllib.request, urllib.error
method, url, user, token, body = sys.argv[1:6]
headers = {"Content-Type": "application/json"}
if token:
    headers.update({"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})
req = urllib.request.Request(url, data=body.encode() if body else None, headers=headers, method=method)
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        status, text = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
print(status)
print(text)
"""
REST_API = "v0.0.45"        # the newest data parser of 26.05 (the images' data_parser_v0_0_4[2-5].so)
REST_URL = "http://acct-rest:6820"      # the <cluster>-rest Service, by its name in the namespace


def _rest(node, method, path, token, body=None, user="root"):
    """(HTTP status, parsed answer or text) of a request from the login pod through the rest Service."""
    out = _hpc_exec(node, "acct-login-0", "python3", "-c", _HTTP, method, REST_URL + path, user, token or "",
                    json.dumps(body) if body is not None else "", container="sshd")
    assert out.returncode == 0, out.stdout + out.stderr
    status, _sep, text = out.stdout.partition("\n")
    try:
        return int(status), json.loads(text)
    except ValueError:
        return int(status), text


def _token(node, lifespan, **kw):
    """slurm_token through the controller pod (transport kubernetes); its whole result."""
    return ansible_run.module("slurm_token", dict(
        transport="kubernetes", namespace=HPC, cluster_name="acct", kubeconfig=node.kubeconfig, user="root",
        lifespan=lifespan), timeout=300, **kw)


def _submit(node, token, name):
    return _rest(node, "POST", "/slurm/%s/job/submit" % REST_API, token, body={"job": {
        "script": "#!/bin/sh\nhostname\n", "name": name, "current_working_directory": "/root",
        "environment": ["PATH=/usr/bin:/bin"], "standard_output": "/root/rest.%j.out"}})


def _job_names(node):
    """Names of every job slurmctld knows and slurmdbd recorded."""
    queue = _hpc_exec(node, "acct-controller-0", "squeue", "-h", "-t", "all", "-o", "%j").stdout.split()
    recorded = _hpc_exec(node, "acct-login-0", "sacct", "-X", "-n", "-P", "-o", "JobName", container="sshd")
    return set(queue) | set(recorded.stdout.split())


def _jwt_key(node):
    data = json.loads(node.kubectl("-n", HPC, "get", "secret", "acct-jwt-key", "-o", "json").stdout)["data"]
    return base64.b64decode(data["jwt_hs256.key"]), data["jwt_hs256.key"]


def _key_forms(key, encoded):
    return [encoded, key.hex(), base64.urlsafe_b64encode(key).decode().rstrip("=")] + (
        [key.decode("latin-1")] if len(key) else [])


def _pod_logs(node):
    logs = []
    for pod in _pods_in(node, HPC):
        logs.append(node.kubectl("-n", HPC, "logs", pod, "--all-containers=true", check=False).stdout)
    return logs


def _pods_in(node, namespace):
    return [p["metadata"]["name"] for p in json.loads(
        node.kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)["items"]]


def _rest_in_real_pods(node, outputs):
    """issue 30's must-show: a token from slurm_token (through the controller pod); with it the login pod submits a
    job through the rest Service, it runs, slurmctld's and slurmdbd's REST APIs read it back; no token, a forged one
    and an expired one are refused and run nothing; the key is in no module output, playbook output or pod log.
    Returns the key (bytes, and its base64 in the Secret)."""
    checked = _token(node, 60, check=True)
    assert checked["token"] is None and checked["max_lifespan"] == 600, checked
    too_long = _token(node, 601, expect_failed=True)
    assert "max_token_lifespan 600" in too_long["msg"], too_long
    got = _token(node, 300)
    token = got["token"]
    assert got["queries"] == ["scontrol show config", "scontrol token username=root lifespan=300"], got

    status, diag = _rest(node, "GET", "/slurm/%s/diag" % REST_API, token)
    assert status == 200 and "statistics" in diag, (status, diag)

    head, payload, signature = token.split(".")
    forged = ".".join([head, payload, signature[:-4] + ("AAAA" if signature[-4:] != "AAAA" else "BBBB")])
    expired = _token(node, 1)["token"]
    time.sleep(3)
    refused = dict((what, _submit(node, tok, "rest-" + what))
                   for what, tok in (("none", None), ("forged", forged), ("expired", expired)))
    # recorded: what 26.05.5's slurmrestd answers each (the assertion message names them when one differs)
    answers = dict((what, status) for what, (status, _body) in refused.items())
    assert answers["none"] == 401, refused
    assert all(answers[what] in (401, 511) for what in ("forged", "expired")), refused

    status, answer = _submit(node, token, "rest-job")
    assert status == 200 and not answer.get("errors"), (status, answer)
    job = str(answer["job_id"])

    def state():
        code, jobs = _rest(node, "GET", "/slurm/%s/job/%s" % (REST_API, job), token)
        assert code == 200, (code, jobs)
        return jobs["jobs"][0]["job_state"] == ["COMPLETED"], jobs["jobs"][0]["job_state"]
    _wait("the REST job COMPLETED, read over REST", state)
    out = _hpc_exec(node, "acct-login-0", "cat", "/mnt/jail/root/rest.%s.out" % job, container="sshd")
    assert out.stdout.split() == ["cpu-0"], out.stdout + out.stderr

    def recorded():
        code, jobs = _rest(node, "GET", "/slurmdb/%s/job/%s" % (REST_API, job), token)
        rows = jobs.get("jobs") if code == 200 and isinstance(jobs, dict) else None
        return bool(rows) and rows[0]["state"]["current"] == ["COMPLETED"] and rows[0]["name"] == "rest-job", (
            code, rows or jobs)
    _wait("slurmdbd's REST API to read the job COMPLETED", recorded)

    names = _job_names(node)
    assert "rest-job" in names and not {"rest-none", "rest-forged", "rest-expired"} & names, names

    key, encoded = _jwt_key(node)
    assert len(key) == 32
    texts = outputs + [json.dumps(r) for r in (checked, too_long, got)] + _pod_logs(node)
    for form in _key_forms(key, encoded):
        assert not any(form in text for text in texts), "the JWT key is in an output or a log"
    print("REST on the real node: refused with", answers)
    return key, encoded


def _rest_off_in_real_pods(node, spec, key):
    """spec.rest turned off: a re-run (with --diff) prunes slurmrestd's Deployment and Service, keeps the key Secret
    as it was, and slurmctld runs without AuthAlt; the key is not in the diff."""
    docs = list(yaml.safe_load_all(spec.read_text()))
    docs[0]["spec"]["rest"] = {"enabled": False}
    spec.write_text(yaml.safe_dump_all(docs))
    done = ansible_run.playbook("site.yml", "--diff", "-e", "spec_file=%s" % spec,
                                "-e", "kubeconfig=" + node.kubeconfig, timeout=900)
    for kind in ("deployment", "service"):
        assert node.kubectl("-n", HPC, "get", kind, "acct-rest", check=False).returncode != 0, kind
    assert _jwt_key(node) == key
    for form in _key_forms(*key):
        assert form not in done.stdout + done.stderr, "the JWT key is in the --diff output"

    def no_auth_alt():
        conf = _hpc_exec(node, "acct-controller-0", "scontrol", "show", "config").stdout
        lines = [line for line in conf.splitlines() if line.startswith("AuthAlt")]
        return "ClusterName" in conf and all(line.split("=", 1)[1].strip() == "(null)" for line in lines), lines
    _wait("slurmctld without AuthAlt", no_auth_alt, timeout=300)
    out = _hpc_exec(node, "acct-login-0", "srun", "-N1", "hostname", container="sshd")
    assert out.returncode == 0 and out.stdout.split() == ["cpu-0"], out.stdout + out.stderr


@pytest.fixture
def hpc_namespace(real_node):
    """The accounting test's namespace, deleted afterwards: its pods hold the node's CPUs, which a later test needs."""
    yield HPC
    real_node.kubectl("delete", "namespace", HPC, "--wait=true", timeout=300, check=False)


def test_accounting_scaling_and_remediation_in_real_pods(real_node, hpc_namespace, tmp_path):
    """Accounting with the in-cluster database; kubectl scale up, converged by the remediation CronJob (the real
    CronJob controller, the runner image, its ServiceAccount) without restarting slurmctld; scale down with a job
    on the removed node (remediate.yml with the ServiceAccount's token) waits for the job; a passive health check
    drains a worker and the CronJob replaces, re-checks and resumes it."""
    registry_tag = next(r for r in real_node.info["real_node"]["images"] if "/controller:" in r)
    mariadb = registry_tag.replace("/controller:", "/mariadb:")
    spec = tmp_path / "acct.yml"
    spec.write_text(FULL % {"mariadb": mariadb})
    first = ansible_run.playbook("site.yml", "-e", "spec_file=%s" % spec, "-e", "kubeconfig=" + real_node.kubeconfig,
                                 timeout=900)
    kc = real_node.kubectl
    _quiet_remediation(real_node)

    # Accounting: sacct in the login pod lists a job.
    out = _hpc_exec(real_node, "acct-login-0", "srun", "-N1", "hostname", container="sshd")
    assert out.returncode == 0 and out.stdout.split() == ["cpu-0"], out.stdout + out.stderr

    def listed():
        out = _hpc_exec(real_node, "acct-login-0", "sacct", "-X", "-n", "-o", "JobName,State",
                        container="sshd").stdout
        return "COMPLETED" in out, out
    acct = _wait("sacct to list the job", listed)
    assert "hostname" in acct[1]
    _policy_in_real_pods(real_node)
    began = time.monotonic()
    key = _rest_in_real_pods(real_node, [first.stdout + first.stderr])
    print("REST checks: %.0f s" % (time.monotonic() - began))

    # Scale up through the scale subresource; the CronJob converges to it.
    started = _pod(real_node, "acct-controller-0")["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    kc("-n", HPC, "scale", "nodeset", "cpu", "--replicas=2")
    _suspend_remediation(real_node, False)
    _wait("cpu-1 idle after the CronJob's pass", lambda: _idle(real_node, ("cpu-1",), "acct", HPC), timeout=300)
    _quiet_remediation(real_node)
    controller = _pod(real_node, "acct-controller-0")["status"]["containerStatuses"][0]
    assert controller["state"]["running"]["startedAt"] == started and controller["restartCount"] == 0

    # Scale down while a job runs on cpu-1: remediate.yml (as the ServiceAccount) drains it, waits for the job, then
    # removes the node from Slurm and its pod.
    job = _hpc_exec(real_node, "acct-login-0", "sbatch", "--parsable", "-w", "cpu-1", "--wrap", "sleep 30",
                    container="sshd").stdout.strip()

    def running_on_cpu1():
        states = _acct_sinfo(real_node)
        return states.get("cpu-1", [""])[0] in ("alloc", "mix"), states
    _wait("the job running on cpu-1", running_on_cpu1)
    kc("-n", HPC, "scale", "nodeset", "cpu", "--replicas=1")
    ansible_run.playbook("remediate.yml", "-e", "cluster=acct", "-e", "slurm_namespace=hpc",
                         "-e", "kubeconfig=" + _sa_kubeconfig(real_node, tmp_path), timeout=600)
    state = _hpc_exec(real_node, "acct-login-0", "sacct", "-X", "-n", "-j", job, "-o", "State",
                      container="sshd").stdout.split()
    assert state == ["COMPLETED"], state
    assert _pod(real_node, "cpu-1") is None or _pod(real_node, "cpu-1")["metadata"].get("deletionTimestamp")
    assert "cpu-1" not in _acct_sinfo(real_node)

    # A passive health check fails in cpu-0: it is drained with our prefix; the CronJob replaces the pod (the fault
    # file lives in the old container), re-checks and resumes it.
    old = _pod(real_node, "cpu-0")["metadata"]["uid"]
    _hpc_exec(real_node, "cpu-0", "touch", "/tmp/soperator-fault", container="slurmd")

    def drained():
        states = _acct_sinfo(real_node)
        return states.get("cpu-0", ["", ""])[1].startswith("soperator: health"), states
    _wait("cpu-0 drained by the health check", drained, timeout=120)
    _suspend_remediation(real_node, False)

    def replaced_and_resumed():
        pod, states = _pod(real_node, "cpu-0"), _acct_sinfo(real_node)
        return pod is not None and pod["metadata"]["uid"] != old and states.get("cpu-0") == ["idle", "none"], states
    _wait("cpu-0 replaced and resumed", replaced_and_resumed, timeout=420)

    # ... and its record (written when the pass ends) counts each step.

    def record():
        data = kc("-n", HPC, "get", "configmap", "acct-remediation-status", "-o",
                  "jsonpath={.data.remediation\\.json}").stdout
        steps = json.loads(data)["actions"] if data else {}
        return all(steps.get(step, {}).get("success", 0) >= 1 for step in ("replace", "recheck", "resume")), steps
    _wait("the remediation record of the pass", record, timeout=120)
    _quiet_remediation(real_node)
    began = time.monotonic()
    _rest_off_in_real_pods(real_node, spec, key)
    print("spec.rest off: %.0f s" % (time.monotonic() - began))
