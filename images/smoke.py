# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the built images as a real Slurm cluster with podman, driven by the rendered manifests of an example.

    python3 images/smoke.py [--spec examples/small-cpu.yml] [--tag T] [--keep] [--accounting] [--pods-first]

The spec is rendered with playbooks/render.yml (its images.tag set to the built tag, a fresh root SSH key added).
Every pod the manifests define is started as a podman container the way a kubelet would: the pod template's
command/args (with $(VAR) expanded), env (values, the pod name, Secret keys), securityContext (privileged, added
capabilities over the container runtime's default set, no-new-privileges, runAsUser/runAsGroup, a read-only root
filesystem) and volumes (ConfigMaps and Secrets
written out as files with their modes, the jail claim as one directory every pod shares, emptyDirs, subPath), init
containers first, each to its end. The populate Job fills the jail first, as the kube backend orders it with
wait=true; --pods-first starts the pods before it (wait=false), their init containers waiting for the jail.
Containers are named like the pods (cpu-0, cpu-1: Slurm node names) on a podman network of their own, with the
StatefulSet's per-pod DNS names as aliases.

Checks: slurmctld -V is the images' Slurm; every worker registers; `srun -N2 hostname` prints both workers' names;
the steps ran inside the jail (the SPANK plugin); ssh with the key into the login container lands in the jail, and
`sbatch` from there runs a job whose srun step spans the workers; with accounting (--accounting, or a spec that has
it: slurmdbd and the MariaDB image built here), sacct lists the jobs; the health check program passes on each
worker.
Exits non-zero on any failure; the last line is one line of results. Everything started is removed at the end
(by the IDs this run created), also on failure; --keep leaves it running for a look.
"""

from __future__ import print_function

import argparse
import base64
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(ROOT, "images")
# containerd's default capabilities: what a Kubernetes container has unless its securityContext adds or drops.
K8S_DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP",
                    "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"]
CMD_TIMEOUT = 120
GPU_RESOURCE = "nvidia.com/gpu"
# An init container waits for the populate Job (the jail's root filesystem: a few hundred MB to unpack).
INIT_TIMEOUT = 600


class SmokeError(Exception):
    pass


def log(msg):
    print("smoke: %s" % msg, file=sys.stderr)
    sys.stderr.flush()


def sh(cmd, timeout=CMD_TIMEOUT, check=True, input=None):
    """Run a command (bounded) -> stdout; raises SmokeError with its output when it fails."""
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout, input=input, check=False)
    except subprocess.TimeoutExpired:
        raise SmokeError("timed out after %ds: %s" % (timeout, " ".join(cmd)))
    if check and proc.returncode != 0:
        raise SmokeError("%s -> exit %d\n%s%s" % (" ".join(cmd), proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


def wait_for(what, probe, timeout, sleep=2):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except SmokeError as e:
            last = e
        if time.monotonic() >= deadline:
            raise SmokeError("%s: not after %ds%s" % (what, timeout, (" (last error: %s)" % last) if last else ""))
        time.sleep(sleep)


class Cluster(object):
    def __init__(self, args, tag):
        self.args = args
        self.tag = tag
        self.run_id = "%d-%d" % (os.getpid(), int(time.time()))
        self.work = tempfile.mkdtemp(prefix="smoke-", dir=os.path.join(ROOT, "build", "images"))
        self.network = "soperator-smoke-%s" % self.run_id
        self.containers = []      # (pod, container name) of every container this run created
        self.names = {}           # pod -> its container's name
        self.started = set()      # pods whose first container (an init container, or the pod's) runs
        self.objects = []
        self.secrets = {}

    # --- render -----------------------------------------------------------------------------------------------

    def render(self):
        key = os.path.join(self.work, "id_ed25519")
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "soperator-smoke", "-f", key])
        with open(key + ".pub") as f:
            public = f.read().strip()
        with open(os.path.join(ROOT, self.args.spec)) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            if doc.get("kind") == "SlurmCluster":
                spec = doc.setdefault("spec", {})
                images = spec.setdefault("images", {})
                images["tag"] = self.tag
                images["registry"] = self.args.registry
                spec.setdefault("login", {})["sshRootPublicKeys"] = [public]
                if self.args.accounting:
                    spec["accounting"] = {"enabled": True, "database": {"inCluster": {"storage": "1Gi"}}}
                # The public MariaDB image cannot be pulled here: the one built by images/build.py.
                images["mariadb"] = "%s/mariadb:%s" % (self.args.registry, self.tag)
        spec_file = os.path.join(self.work, "spec.yml")
        with open(spec_file, "w") as f:
            yaml.safe_dump_all(docs, f)
        dest = os.path.join(self.work, "render")
        os.makedirs(dest)
        sh(["ansible-playbook", "playbooks/render.yml", "-e", "spec_file=%s" % spec_file, "-e",
            "render_dest=%s" % dest], timeout=300)
        for path in sorted(glob.glob(os.path.join(dest, "manifests", "*.yaml"))):
            with open(path) as f:
                self.objects += [o for o in yaml.safe_load_all(f) if o]
        for obj in self.objects:
            if obj["kind"] == "Secret":
                self.secrets[obj["metadata"]["name"]] = {k: base64.b64decode(v) for k, v in obj["data"].items()}
        self.key = key

    def get(self, kind, name=None):
        return [o for o in self.objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]

    # --- volumes, as a kubelet would make them ----------------------------------------------------------------

    def volume_dir(self, pod, volume):
        """The host directory of one pod volume."""
        if "configMap" in volume:
            ref = volume["configMap"]
            data = self.get("ConfigMap", ref["name"])[0].get("data") or {}
            files = {k: v.encode("utf-8") for k, v in data.items()}
            items, mode = ref.get("items"), ref.get("defaultMode", 0o644)
            path = os.path.join(self.work, "vol", pod, volume["name"])
        elif "secret" in volume:
            ref = volume["secret"]
            files = self.secrets[ref["secretName"]]
            items, mode = ref.get("items"), ref.get("defaultMode", 0o644)
            path = os.path.join(self.work, "vol", pod, volume["name"])
        elif "persistentVolumeClaim" in volume:
            path = os.path.join(self.work, "claims", volume["persistentVolumeClaim"]["claimName"])
            os.makedirs(path, exist_ok=True)
            return path
        elif "emptyDir" in volume:
            path = os.path.join(self.work, "vol", pod, volume["name"])
            os.makedirs(path, exist_ok=True)
            return path
        else:
            raise SmokeError("pod %s: volume %s of a kind this smoke cannot make" % (pod, volume))
        os.makedirs(path, exist_ok=True)
        for item in items or [{"key": k, "path": k} for k in files]:
            target = os.path.join(path, item["path"])
            with open(target, "wb") as f:
                f.write(files[item["key"]])
            os.chmod(target, item.get("mode", mode))
        return path

    # --- pods -------------------------------------------------------------------------------------------------

    def podman_run(self, pod, template, service=None, detach=True, claims=None):
        """Run a pod: its init containers one after the other, each to its end (a kubelet's order: the pod's
        container, and the mounts it makes, come only after), then its container."""
        spec = template["spec"]
        if len(spec["containers"]) != 1:
            raise SmokeError("pod %s: one container expected" % pod)
        namespace = self.get("StatefulSet")[0]["metadata"]["namespace"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        # A StatefulSet's volumeClaimTemplates: one claim per pod, <template>-<pod>.
        for claim in claims or []:
            name = claim["metadata"]["name"]
            volumes[name] = {"name": name, "persistentVolumeClaim": {"claimName": "%s-%s" % (name, pod)}}
        # The container's name is this run's (another smoke may run on the machine); the pod's name is its
        # hostname and a name on this run's network, as in a cluster.
        container = pod if pod.endswith(self.run_id) else "%s-%s" % (pod, self.run_id)
        self.names[pod] = container
        for init in spec.get("initContainers", []):
            name = "%s-init-%s" % (container, init["name"])
            self.containers.append((pod, name))
            sh(self._run_cmd(pod, init, name, volumes, namespace, ["--network", "none", "-d"]))
            self.started.add(pod)
            rc = sh(["podman", "wait", name], timeout=INIT_TIMEOUT).strip()
            if rc != "0":
                raise SmokeError("pod %s: init container %s exited %s:\n%s" % (
                    pod, init["name"], rc, sh(["podman", "logs", name], check=False)))
        net = ["--network", self.network, "--network-alias", pod]
        if detach:
            net.append("-d")
        if service:
            net += ["--network-alias", "%s.%s" % (pod, service),
                    "--network-alias", "%s.%s.%s.svc.cluster.local" % (pod, service, namespace)]
        # Every Service that selects this pod resolves to it, as cluster DNS would (one pod per Service here, or
        # several for a headless one).
        labels = template["metadata"].get("labels", {})
        for svc in self.get("Service"):
            selector = svc["spec"].get("selector") or {}
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                name = svc["metadata"]["name"]
                net += ["--network-alias", name, "--network-alias", "%s.%s.svc.cluster.local" % (name, namespace)]
        for search in spec.get("dnsConfig", {}).get("searches", []):
            net += ["--dns-search", search]
        cmd = self._run_cmd(pod, spec["containers"][0], container, volumes, namespace, net)
        if not detach:
            return sh(cmd, timeout=300, check=False)
        # recorded before it runs: a container that was created but failed to start is removed too
        self.containers.append((pod, container))
        out = sh(cmd)
        self.started.add(pod)
        return out

    def _run_cmd(self, pod, ctr, container, volumes, namespace, options):
        """`podman run` of one container of a pod: its securityContext, env, mounts, command and args."""
        cmd = ["podman", "run", "--name", container, "--hostname", pod, "--label",
               "dev.soperator.smoke=%s" % self.run_id, "--cap-drop=all"] + options
        sec = ctr.get("securityContext", {})
        caps = list(K8S_DEFAULT_CAPS) + list(sec.get("capabilities", {}).get("add", []))
        caps = [c for c in caps if c not in sec.get("capabilities", {}).get("drop", [])]
        cmd += ["--cap-add=" + c for c in caps]
        if sec.get("privileged"):
            cmd.append("--privileged")
        if sec.get("allowPrivilegeEscalation") is False:
            cmd += ["--security-opt", "no-new-privileges"]
        if sec.get("runAsUser") is not None:
            cmd += ["--user", "%d:%d" % (sec["runAsUser"], sec.get("runAsGroup", sec["runAsUser"]))]
        if sec.get("readOnlyRootFilesystem"):
            cmd.append("--read-only")
        env = {}
        for e in ctr.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "fieldRef" in e.get("valueFrom", {}):
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                if field == "status.podIP":
                    continue    # unknown before podman starts it; without it the worker announces no address
                env[e["name"]] = {"metadata.name": pod, "metadata.namespace": namespace}[field]
            elif "secretKeyRef" in e.get("valueFrom", {}):
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = self.secrets[ref["name"]][ref["key"]].decode("utf-8")
            else:
                raise SmokeError("pod %s: env %s of a kind this smoke cannot set" % (pod, e))
        for name, value in sorted(env.items()):
            cmd += ["--env", "%s=%s" % (name, value)]
        # What the NVIDIA device plugin gives a container that asks for nvidia.com/gpu, stood in for by /dev/null
        # (no GPU here): device files at the paths gres.conf names, which slurmd stats when it starts. Bound, not
        # --device: a privileged container (the workers) gets the host's /dev and podman drops --device then.
        gpus = int((ctr.get("resources", {}).get("limits") or {}).get(GPU_RESOURCE, 0))
        if gpus and getattr(self.args, "fake_gpu_devices", False):
            for i in range(gpus):
                cmd += ["--volume", "/dev/null:/dev/nvidia%d" % i]
        for m in ctr.get("volumeMounts", []):
            host = self.volume_dir(pod, volumes[m["name"]])
            if m.get("subPath"):
                host = os.path.join(host, m["subPath"])
                os.makedirs(host, exist_ok=True)
            cmd += ["--volume", "%s:%s%s" % (host, m["mountPath"], ":ro" if m.get("readOnly") else "")]
        if ctr.get("command"):
            cmd += ["--entrypoint", json.dumps(ctr["command"])]
        cmd.append(ctr["image"])
        # The kubelet expands $(VAR) in args from the container's env.
        return cmd + [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda mo: env.get(mo.group(1), mo.group(0)), a)
                      for a in ctr.get("args", [])]

    def populate_jail(self):
        for job in self.get("Job"):
            name = "%s-%s" % (job["metadata"]["name"], self.run_id)
            self.containers.append((name, name))
            out = self.podman_run(name, job["spec"]["template"], detach=False)
            rc = sh(["podman", "inspect", "--format", "{{.State.ExitCode}}", name]).strip()
            if rc != "0":
                logs = sh(["podman", "logs", name], check=False)
                raise SmokeError("populate Job exited %s:\n%s%s" % (rc, out, logs))
            lines = [l for l in out.splitlines() if l.startswith("{")]
            if not lines or json.loads(lines[-1]).get("action") not in ("populated", "kept"):
                raise SmokeError("populate Job printed no result line:\n%s" % out)
            log("jail populated: %s" % lines[-1][:160])

    def start(self, components=None, pods_first=False):
        """Run the populate Job to its end, then start every StatefulSet's pods (only those of `components` when
        given): the kube backend's order with wait=true (kube/backend.py applies the workloads once the Job
        completed). `pods_first`: the pods start before the Job (wait=false applies the workloads right after it,
        and a kubelet may start them first): the login and worker pods' init containers wait until the jail is
        populated. Without them, the login container's mounts below the jail (etc/slurm, run/munge) created those
        directories in the empty volume, and the populate Job then refused a jail that is not empty."""
        sh(["podman", "network", "create", "--label", "dev.soperator.smoke=%s" % self.run_id, self.network])
        pods = []
        for sts in self.get("StatefulSet"):
            component = sts["metadata"]["labels"]["app.kubernetes.io/component"]
            if components is not None and component not in components:
                continue
            for i in range(sts["spec"]["replicas"]):
                pods.append(("%s-%d" % (sts["metadata"]["name"], i), sts))
        populate = components is None or "jail" in components
        if populate and not pods_first:
            self.populate_jail()
        errors, threads = [], []
        for pod, sts in pods:
            log("starting %s (%s)" % (pod, sts["spec"]["template"]["spec"]["containers"][0]["image"]))
            args = (pod, sts["spec"]["template"], sts["spec"]["serviceName"], True,
                    sts["spec"].get("volumeClaimTemplates"))
            if not pods_first:
                self.podman_run(*args)
                continue
            threads.append(threading.Thread(target=self._run_pod, args=(args, errors)))
            threads[-1].start()
        if pods_first:
            names = [pod for pod, _sts in pods]
            wait_for("every pod started (an init container or its container runs)",
                     lambda: errors or all(n in self.started for n in names), 120, sleep=0.5)
            if populate and not errors:
                log("pods started before the populate Job: %s" % ", ".join(names))
                self.populate_jail()
            for thread in threads:
                thread.join(INIT_TIMEOUT + CMD_TIMEOUT)
            if errors:
                raise errors[0]

    def _run_pod(self, args, errors):
        try:
            self.podman_run(*args)
        except SmokeError as e:
            errors.append(e)

    def exec(self, pod, cmd, timeout=CMD_TIMEOUT, check=True):
        return sh(["podman", "exec", self.names.get(pod, pod)] + cmd, timeout=timeout, check=check)

    def diagnostics(self):
        for name, cid in self.containers:
            print("----- %s: podman logs (last 40 lines)" % name, file=sys.stderr)
            print(sh(["podman", "logs", "--tail", "40", cid], check=False), file=sys.stderr)
            print(sh(["podman", "exec", cid, "sh", "-c", "tail -n 40 /var/log/slurm/*.log 2>/dev/null"],
                     check=False), file=sys.stderr)

    def cleanup(self):
        for name, cid in reversed(self.containers):
            sh(["podman", "rm", "-f", "-t", "5", cid], check=False, timeout=60)
        sh(["podman", "network", "rm", self.network], check=False, timeout=60)
        shutil.rmtree(self.work, ignore_errors=True)


def check(cluster, results):
    controller = [o["metadata"]["name"] + "-0" for o in cluster.get("StatefulSet")
                  if o["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"][0]
    login = [o["metadata"]["name"] + "-0" for o in cluster.get("StatefulSet")
             if o["metadata"]["labels"]["app.kubernetes.io/component"] == "login"][0]
    workers = sorted("%s-%d" % (o["metadata"]["name"], i) for o in cluster.get("StatefulSet")
                     if o["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
                     for i in range(o["spec"]["replicas"]))

    version = cluster.exec(controller, ["slurmctld", "-V"]).strip()
    # "slurm 26.05.5" upstream, "slurm-wlm 26.05.5" from Debian's packages.
    if not re.match(r"slurm(-wlm)? %s(\.|$)" % re.escape(cluster.args.expect_slurm), version):
        raise SmokeError("slurmctld -V says %r, expected Slurm %s" % (version, cluster.args.expect_slurm))
    results.append("slurmctld=%s" % version.split()[-1])

    wait_for("slurmctld answers", lambda: "UP" in cluster.exec(controller, ["scontrol", "ping"], check=False),
             60)

    def idle():
        out = cluster.exec(controller, ["sinfo", "-h", "-N", "-o", "%N %T"])
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return all(states.get(w, "").rstrip("*~#") == "idle" for w in workers)
    wait_for("workers %s idle" % ",".join(workers), idle, 120)
    results.append("nodes=%s" % ",".join(workers))

    # The login and worker pods copy their resolv.conf into the jail (entrypoint.sh), or job steps in the jail could
    # not resolve slurmctld.
    jail = [o["spec"]["template"]["spec"]["volumes"] for o in cluster.get("Job")][0]
    claim = [v["persistentVolumeClaim"]["claimName"] for v in jail if "persistentVolumeClaim" in v][0]
    resolv = os.path.join(cluster.work, "claims", claim, "etc", "resolv.conf")
    wait_for("the pods' resolv.conf in the jail", lambda: os.path.isfile(resolv), 60)
    results.append("jail-resolv.conf=ok")

    n = str(len(workers))
    out = cluster.exec(login, ["timeout", "90", "srun", "-N", n, "hostname"], timeout=100)
    names = sorted(out.split())
    if names != workers:
        raise SmokeError("srun -N%s hostname printed %r, expected %r" % (n, names, workers))
    results.append("srun -N%s hostname=%s" % (n, ",".join(names)))

    # The marker is only in the jail's root filesystem, not in the worker image: the steps ran in the jail.
    out = cluster.exec(login, ["timeout", "90", "srun", "-N", n, "cat", "/etc/soperator-jail-release"], timeout=100)
    if out.count("soperator.slurm jail root filesystem") != len(workers):
        raise SmokeError("steps did not run in the jail: %r" % out)
    worker_root = cluster.exec(workers[0], ["sh", "-c", "test -e /etc/soperator-jail-release && echo present || "
                                                        "echo absent"]).strip()
    if worker_root != "absent":
        raise SmokeError("the worker image itself has the jail marker: the jail check proves nothing")
    results.append("jail=yes")

    # GPU NodeSets (--fake-gpu-devices): slurmd took gres.conf's device files, a step gets its GPUs, and the jail of
    # the GPU images holds the CUDA runtime and NCCL, which load in a step (no GPU: the probe's documented exit 3).
    gpu_workers = {"%s-%d" % (o["metadata"]["name"], i): int(o["spec"]["template"]["spec"]["containers"][0].get(
        "resources", {}).get("limits", {}).get(GPU_RESOURCE, 0)) for o in cluster.get("StatefulSet")
        if o["metadata"]["labels"]["app.kubernetes.io/component"] == "worker" for i in range(o["spec"]["replicas"])}
    for worker, gpus in sorted((w, g) for w, g in gpu_workers.items() if g):
        out = cluster.exec(login, ["timeout", "90", "srun", "-w", worker, "--gres=gpu:%d" % gpus, "printenv",
                                   "CUDA_VISIBLE_DEVICES"], timeout=100).strip()
        if out != ",".join(str(i) for i in range(gpus)):
            raise SmokeError("srun --gres=gpu:%d on %s: CUDA_VISIBLE_DEVICES=%r" % (gpus, worker, out))
        out = cluster.exec(login, ["timeout", "90", "srun", "-w", worker, "sh", "-c", "nccl-probe; echo exit=$?"],
                           timeout=100)
        if not re.search(r"^nccl: 2\.", out, re.M) or "\nno-gpu: " not in out or "exit=3" not in out:
            raise SmokeError("nccl-probe in a step on %s: %r" % (worker, out))
        versions = cluster.exec(worker, ["cat", "/opt/soperator/versions"])
        if "libnccl2\t" not in versions or "libcudart12\t" not in versions:
            raise SmokeError("/opt/soperator/versions of %s: %r" % (worker, versions))
        results.append("gpu=%s:gres-gpu:%d,nccl-probe:no-gpu" % (worker, gpus))

    ip = cluster.exec(login, ["sh", "-c", "hostname -I"]).split()[0]
    ssh = ["ssh", "-i", cluster.key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
           "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "root@" + ip]
    out = wait_for("ssh into %s" % login, lambda: sh(ssh + ["cat", "/etc/soperator-jail-release"], timeout=30), 30)
    if "soperator.slurm jail root filesystem" not in out:
        raise SmokeError("ssh did not land in the jail: %r" % out)
    results.append("ssh=jail")

    # A batch job from the ssh session (in the jail), whose srun step spans both workers; its output file is
    # written in the jail, where the session reads it.
    out = sh(ssh + ["cd /root && timeout 120 sbatch --wait --parsable -N %s -o /root/smoke-%%j.out "
                    "--wrap 'srun hostname' && cat /root/smoke-*.out" % n], timeout=150)
    names = sorted(w for w in out.split() if w in workers)
    if names != workers:
        raise SmokeError("sbatch from the login session: output %r, expected %r" % (out, workers))
    results.append("sbatch=ok")

    if cluster.get("StatefulSet", "%s-accounting" % controller.rsplit("-controller-", 1)[0]):
        def recorded():
            out = cluster.exec(login, ["sacct", "-n", "-X", "-a", "-P", "-o", "JobID,State"])
            jobs = [l.split("|") for l in out.split()]
            return len([j for j in jobs if j[1] == "COMPLETED"]) >= 3 and jobs
        jobs = wait_for("sacct lists the smoke's jobs as COMPLETED", recorded, 90)
        results.append("sacct=%d jobs" % len(jobs))

    # Finished steps leave no zombies: PID 1 (tini) reaps what slurmstepd's double fork hands to it.
    for worker in workers:
        wait_for("no zombie processes on %s" % worker, lambda: not [
            l for l in cluster.exec(worker, ["ps", "-eo", "stat=,comm="]).splitlines() if l.strip().startswith("Z")],
            15, sleep=1)
    results.append("zombies=0")

    # The passive health check program, as slurmd runs it (HealthCheckProgram, root, SLURMD_NODENAME only).
    for worker in workers:
        out = cluster.exec(worker, ["env", "-i", "SLURMD_NODENAME=%s" % worker, "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                    "/opt/soperator/bin/health-check"])
        if '"healthy": true' not in out:
            raise SmokeError("health check on %s: %s" % (worker, out))
    results.append("health-check=ok")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--spec", default="examples/small-cpu.yml")
    parser.add_argument("--registry", default=os.environ.get("REGISTRY") or "ghcr.io/soperator-slurm")
    parser.add_argument("--tag", default=os.environ.get("TAG") or "")
    parser.add_argument("--expect-slurm", default=os.environ.get("EXPECT_SLURM") or "26.05")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (remove it by hand)")
    parser.add_argument("--accounting", action="store_true",
                        help="enable accounting with the in-cluster database (MariaDB image built here)")
    parser.add_argument("--fake-gpu-devices", action="store_true",
                        help="give pods that ask for nvidia.com/gpu /dev/null as /dev/nvidia<N> (no GPU here), as "
                             "the device plugin gives its device files, and check the GPU NodeSets")
    parser.add_argument("--pods-first", action="store_true",
                        help="start the pods before the populate Job, as site.yml -e wait=false may")
    args = parser.parse_args(argv)
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(IMAGES, "containers.conf"))
    os.chdir(ROOT)
    started = time.time()
    tag = args.tag or sh([sys.executable, os.path.join(IMAGES, "build.py"), "--print-tag"], timeout=600).strip()
    results = []
    for component in ("controller", "worker", "login", "jail") + (("accounting", "mariadb") if args.accounting else ()) \
            + (("worker-gpu", "jail-gpu") if args.fake_gpu_devices else ()):
        ref = "%s/%s:%s" % (args.registry, component, tag)
        if subprocess.run(["podman", "image", "exists", ref], check=False).returncode != 0:
            print("images-smoke: FAILED: %s is not built (make images)" % ref)
            return 1
    cluster = Cluster(args, tag)
    ok = False
    try:
        cluster.render()
        cluster.start(pods_first=args.pods_first)
        if args.pods_first:
            results.append("pods-first=ok")
        check(cluster, results)
        ok = True
    except (SmokeError, OSError, KeyError, IndexError, ValueError) as e:
        log("FAILED: %s" % e)
        cluster.diagnostics()
        results.append("error=%s" % str(e).splitlines()[0][:200])
    finally:
        if args.keep:
            log("kept: containers %s, network %s, files %s" % (
                " ".join(c[0] for c in cluster.containers), cluster.network, cluster.work))
        else:
            cluster.cleanup()
    print("images-smoke: %s %s (%s, %.0f s)" % ("OK" if ok else "FAILED", " ".join(results), args.spec,
                                                time.time() - started))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
