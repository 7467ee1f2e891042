"""A real node for the control plane of cluster.py: containerd 2.x (CRI, runc, cgroupfs), the kubelet, kube-proxy
(iptables), the bridge CNI, CoreDNS on the host and a hostPath volume provisioner; the images of `make images`
imported into containerd, so pods pull nothing.

cluster.py calls up() after the control plane when asked for `--node real` and down() before stopping it. Every
process is recorded in the same processes.json (pid + start time); state lives under <state>/node/.

What this needs from the machine, and why (each the narrowest we found):
- NODE_IP/32 on the loopback link (this kernel has no dummy links): a host-only address that pods reach through
  the bridge's gateway, for the API server, the kubelet and CoreDNS, which stay off the VM's real interface;
- the kubelet's root directory bind-mounted onto itself with shared propagation (what kind does with `mount
  --make-rshared /`, limited to the kubelet's own tree);
- kube-proxy's and the bridge plugin's iptables rules: kube-proxy --cleanup and our bridge's rules are removed on
  down. The real node is one per machine (the kubelet's cgroups, the iptables chains): a second `up` is refused.
"""
import json
import os
import shlex
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NODE_NAME = "soperator-node-0"
NODE_IP = "10.255.255.1"     # on the dummy link: host-only, not the VM's eth0
LINK = "lo"
BRIDGE = "soperator-cni0"
CNI_NETWORK = "soperator-pods"
POD_SUBNET = "10.244.0.0/24"  # this node's share of cluster.py's POD_RANGE
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/soperator/pause:1"
STORAGE_CLASS = "soperator-hostpath"
PROVISIONER = "soperator.dev/hostpath"
OWNER_FILE = "/run/soperator-k8s-node.json"  # which state directory holds the machine's one real node
CNI_BIN = "/usr/lib/cni"      # Debian's containernetworking-plugins
RUNC = "/usr/sbin/runc"       # Debian's runc


class NodeError(Exception):
    pass


def node_bin(cached=False):
    """tools/node/build.sh's bin directory (containerd, shim, ctr, coredns, pause), built if missing; with
    cached=True never built: None when it is not complete."""
    out = subprocess.run([os.path.join(REPO, "tools", "node", "build.sh")] + (["--cached"] if cached else []),
                         stdout=subprocess.PIPE, check=not cached, text=True)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else None


def _run(argv, check=True, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, check=check,
                          **kw)


def _owner():
    try:
        with open(OWNER_FILE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def claim_machine(state, alive):
    """The real node is one per machine: refuse when another live state directory holds it."""
    owner = _owner()
    if owner and owner.get("state") != state and alive(owner.get("state")):
        raise NodeError("a real node of %s is running on this machine; stop it first (cluster.py down --state %s)"
                        % (owner["state"], owner["state"]))
    with open(OWNER_FILE + ".tmp", "w") as f:
        json.dump({"state": state}, f)
    os.replace(OWNER_FILE + ".tmp", OWNER_FILE)


def release_machine(state):
    owner = _owner()
    if owner and owner.get("state") == state:
        os.remove(OWNER_FILE)


def preflight():
    missing = [p for p in (RUNC, os.path.join(CNI_BIN, "bridge"), os.path.join(CNI_BIN, "host-local"),
                           os.path.join(CNI_BIN, "loopback"), os.path.join(CNI_BIN, "portmap"), "/dev/kmsg")
               if not os.path.exists(p)]
    if os.geteuid() != 0:
        missing.append("root")
    if missing:
        raise NodeError("a real node needs %s (apt: runc containernetworking-plugins)" % ", ".join(missing))


# ---------------------------------------------------------------- host network

def setup_network():
    _run(["ip", "addr", "replace", NODE_IP + "/32", "dev", LINK])
    for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1")):
        with open("/proc/sys/" + key, "w") as f:
            f.write(value)


def teardown_network():
    _run(["ip", "link", "del", BRIDGE], check=False)
    _run(["ip", "addr", "del", NODE_IP + "/32", "dev", LINK], check=False)
    _remove_bridge_rules()
    _remove_kubelet_rules()


# The kubelet's own iptables chains (fixed names; one kubelet per machine, ours) and where they are hooked in.
KUBELET_CHAINS = {"filter": ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY"], "nat": ["KUBE-KUBELET-CANARY"],
                  "mangle": ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"]}


def _remove_kubelet_rules():
    for table, chains in KUBELET_CHAINS.items():
        dump = _run(["iptables-save", "-t", table], check=False).stdout
        for line in dump.splitlines():
            if line.startswith("-A ") and line.split()[-1] in chains and not line.split()[1].startswith("KUBE-"):
                _run(["iptables", "-t", table, "-D"] + shlex.split(line[3:]), check=False)
        for chain in chains:
            _drop_chain(table, chain)


def _remove_bridge_rules():
    """The bridge plugin's masquerade chains (CNI-<hash>) of our network only: their rules carry its name."""
    dump = _run(["iptables-save", "-t", "nat"], check=False).stdout
    chains = set()
    for line in dump.splitlines():
        if line.startswith("-A POSTROUTING") and 'name: \\"%s\\"' % CNI_NETWORK in line:
            parts = line.split()
            if "-j" in parts:
                chains.add(parts[parts.index("-j") + 1])
            _run(["iptables", "-t", "nat", "-D"] + shlex.split(line[3:]), check=False)
    for chain in chains:
        if chain.startswith("CNI-"):
            _drop_chain("nat", chain)


def _drop_chain(table, chain):
    _run(["iptables", "-t", table, "-F", chain], check=False)
    _run(["iptables", "-t", table, "-X", chain], check=False)


# ---------------------------------------------------------------- configuration files

def cni_config(node):
    return {
        "cniVersion": "1.0.0", "name": CNI_NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True,
             "hairpinMode": True,  # a pod reaches itself through a Service
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": os.path.join(node, "cni", "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(node):
    return """version = 3
root = "{node}/containerd/root"
state = "{node}/containerd/state"

[grpc]
  address = "{node}/containerd/containerd.sock"

[ttrpc]
  address = "{node}/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  # The images are imported (cluster.py node.import_images); nothing is pulled, the sandbox image included.
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"

[plugins.'io.containerd.cri.v1.runtime']
  # CNI network namespaces under our state, not /var/run/netns of the machine.
  netns_mounts_under_state_dir = true
  # This VM grants root every capability but CAP_SYS_RESOURCE: no process may lower its oom_score_adj, and runc
  # fails on the kubelet's negative values (-998 for sandboxes, -997 for Guaranteed pods). Clamp them to ours (0).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{runc}"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{node}/cni/net.d"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
""".format(node=node, pause=PAUSE_IMAGE, runc=RUNC, cni_bin=CNI_BIN)


def kubelet_config(node, pki, port, healthz_port):
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # This VM has cgroup v1 (hybrid) and no systemd: the kubelet allows v1 through 1.37 when told.
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
        "address": NODE_IP, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "tlsCertFile": os.path.join(pki, "kubelet-serving.crt"),
        "tlsPrivateKeyFile": os.path.join(pki, "kubelet-serving.key"),
        "authentication": {"x509": {"clientCAFile": os.path.join(pki, "ca.crt")},
                           "webhook": {"enabled": True}, "anonymous": {"enabled": False}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": "unix://%s/containerd/containerd.sock" % node,
        "clusterDNS": [NODE_IP], "clusterDomain": CLUSTER_DOMAIN,
        "podLogsDir": os.path.join(node, "pod-logs"),
        "resolvConf": os.path.join(node, "resolv.conf"),
        # A test node on a shared disk: never evict or garbage-collect images for disk pressure (as kind does).
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
        "registerNode": True, "serializeImagePulls": False,
        "syncFrequency": "10s", "fileCheckFrequency": "10s",
    }


def kube_proxy_config(kubeconfig, healthz_port, metrics_port, cluster_cidr):
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "clusterCIDR": cluster_cidr, "hostnameOverride": NODE_NAME,
        "clientConnection": {"kubeconfig": kubeconfig},
        "healthzBindAddress": "127.0.0.1:%d" % healthz_port, "metricsBindAddress": "127.0.0.1:%d" % metrics_port,
        # Leave the machine's conntrack table size alone (as kind does).
        "conntrack": {"maxPerCore": 0},
    }


def corefile(kubeconfig, ready_port):
    return """.:53 {
    bind %s
    errors
    ready 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
""" % (NODE_IP, ready_port, CLUSTER_DOMAIN, kubeconfig)


# What CoreDNS's kubernetes plugin and our provisioner read and write; bound to their certificates' users.
RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "soperator:coredns"},
     "rules": [{"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
               {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "soperator:coredns"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "soperator:coredns"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "soperator:coredns"}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "soperator:provisioner"},
     "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"],
                "verbs": ["get", "list", "watch", "create", "delete"]},
               {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
               {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "soperator:provisioner"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "soperator:provisioner"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "soperator:provisioner"}]},
    {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
     "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
     "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"},
]


# ---------------------------------------------------------------- images

def _containers_env():
    """podman and buildah with the images' containers.conf (as `make images` runs them)."""
    return dict(os.environ, CONTAINERS_CONF=os.path.join(REPO, "images", "containers.conf"))


def build_pause_image(bin_dir, archive):
    """The sandbox image: the static pause program alone, from scratch (buildah), saved as an archive."""
    env = _containers_env()
    ctr = _run(["buildah", "from", "scratch"], env=env).stdout.strip()
    try:
        _run(["buildah", "copy", ctr, os.path.join(bin_dir, "pause"), "/pause"], env=env)
        _run(["buildah", "config", "--entrypoint", '["/pause"]', "--cmd", "", ctr], env=env)
        _run(["buildah", "commit", "--rm", ctr, PAUSE_IMAGE], env=env)
    except subprocess.CalledProcessError:
        _run(["buildah", "rm", ctr], env=env, check=False)
        raise
    save_image(PAUSE_IMAGE, archive)


def save_image(ref, path):
    """An image of podman's storage (`make images` builds them there) as an archive. docker-archive: its manifest
    carries the image's name, which ctr keeps (podman's oci-archive index does not name it)."""
    if os.path.exists(path):
        os.remove(path)  # podman does not add to an existing docker-archive
    _run(["podman", "save", "--format", "docker-archive", "-o", path, ref], env=_containers_env())


def default_images():
    """The images the rendered examples name: every `<registry>/<component>:<default tag>` podman holds, but the GPU
    variants (worker-gpu, jail-gpu: several hundred MB each, and this node has no GPU to run them on)."""
    import sys
    sys.path.insert(0, os.path.join(REPO, "collections"))
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import DEFAULT_REGISTRY, DEFAULT_TAG
    out = _run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], env=_containers_env()).stdout.split()
    return sorted(r for r in out if r.startswith(DEFAULT_REGISTRY + "/") and r.endswith(":" + DEFAULT_TAG)
                  and not r.rsplit(":", 1)[0].endswith("-gpu"))


def import_image(bin_dir, sock, archive, ref):
    out = _run([os.path.join(bin_dir, "ctr"), "--address", sock, "-n", "k8s.io", "images", "import",
                "--local", archive]).stdout
    names = _run([os.path.join(bin_dir, "ctr"), "--address", sock, "-n", "k8s.io", "images", "ls", "-q"]).stdout
    if ref not in names.split():
        raise NodeError("importing %s named no image %s (ctr said: %s)" % (archive, ref, out.strip()))


def node_ready(node):
    """A Node object's Ready condition is True."""
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))


def unmount_below(path):
    """Unmounts every mount point at or below path, deepest first (the kubelet's volumes, containerd's rootfs and
    shm, the network namespaces); our own tree only."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    ours = sorted({p for p in points if p == path or p.startswith(path + "/")}, key=len, reverse=True)
    for point in ours:
        _run(["umount", "-l", point], check=False)
    return ours


def remove_tree(path):
    if os.path.isdir(path) and not os.path.islink(path):
        unmount_below(path)
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- up / down

def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def up(cp, timeout):
    """Starts the real node on the running control plane `cp` (cluster.py's _Plane: state, pki, records, binaries,
    spawn/wait helpers and the admin API). Returns the node's description."""
    started = time.monotonic()
    node = os.path.join(cp.state, "node")
    bins = node_bin()
    for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volumes", "images", "config"):
        os.makedirs(os.path.join(node, sub), exist_ok=True)
    setup_network()
    # The kubelet's tree is its own shared mount point: mount propagation for volumes, without touching /.
    kubelet_root = os.path.join(node, "kubelet")
    _run(["mount", "--bind", kubelet_root, kubelet_root])
    _run(["mount", "--make-rshared", kubelet_root])
    _write_json(os.path.join(node, "cni", "net.d", "10-soperator.conflist"), cni_config(node))
    with open(os.path.join(node, "resolv.conf"), "w") as f:
        # What pods with dnsPolicy Default get: no resolver of the machine's is reachable from them.
        f.write("nameserver %s\n" % NODE_IP)
    with open(os.path.join(node, "config", "containerd.toml"), "w") as f:
        f.write(containerd_config(node))

    env = dict(os.environ, PATH=bins + ":" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    sock = os.path.join(node, "containerd", "containerd.sock")
    cp.spawn("containerd", [os.path.join(bins, "containerd"), "--config",
                            os.path.join(node, "config", "containerd.toml")], env=env)
    cp.wait("containerd's socket", lambda: _run([os.path.join(bins, "ctr"), "--address", sock, "version"],
                                                check=False).returncode == 0, timeout, "containerd")

    t0 = time.monotonic()
    archives = os.path.join(node, "images")
    pause = os.path.join(archives, "pause.tar")
    build_pause_image(bins, pause)
    import_image(bins, sock, pause, PAUSE_IMAGE)
    images = default_images()
    for ref in images:  # one archive on disk at a time
        path = os.path.join(archives, ref.replace("/", "_").replace(":", "_") + ".tar")
        save_image(ref, path)
        import_image(bins, sock, path, ref)
        os.remove(path)
    images_seconds = round(time.monotonic() - t0, 1)

    for obj in RBAC:
        cp.apply(obj)
    kubeconfigs = os.path.join(cp.state, "kubeconfigs")
    for user in ("kubelet", "kube-proxy", "coredns", "provisioner"):
        cp.kubeconfig(os.path.join(kubeconfigs, user), user)

    kubelet_port, kubelet_healthz = cp.free_port(), cp.free_port()
    _write_json(os.path.join(node, "config", "kubelet.json"),
                kubelet_config(node, cp.pki, kubelet_port, kubelet_healthz))
    cp.spawn("kubelet", [
        os.path.join(cp.bin, "kubelet"), "--config=" + os.path.join(node, "config", "kubelet.json"),
        "--kubeconfig=" + os.path.join(kubeconfigs, "kubelet"), "--root-dir=" + kubelet_root,
        "--hostname-override=" + NODE_NAME, "--node-ip=" + NODE_IP,
        "--node-labels=soperator.dev/real-node=true"], env=env)
    cp.wait("node %s Ready" % NODE_NAME, lambda: node_ready(json.loads(cp.get("/api/v1/nodes/" + NODE_NAME)[1])),
            timeout, "kubelet")

    proxy_healthz, proxy_metrics = cp.free_port(), cp.free_port()
    _write_json(os.path.join(node, "config", "kube-proxy.json"), kube_proxy_config(
        os.path.join(kubeconfigs, "kube-proxy"), proxy_healthz, proxy_metrics, cp.pod_range))
    cp.spawn("kube-proxy", [os.path.join(cp.bin, "kube-proxy"),
                            "--config=" + os.path.join(node, "config", "kube-proxy.json")], env=env)
    cp.wait("kube-proxy /healthz", lambda: cp.http_ok("http://127.0.0.1:%d/healthz" % proxy_healthz), timeout,
            "kube-proxy")

    dns_ready = cp.free_port()
    with open(os.path.join(node, "config", "Corefile"), "w") as f:
        f.write(corefile(os.path.join(kubeconfigs, "coredns"), dns_ready))
    cp.spawn("coredns", [os.path.join(bins, "coredns"), "-conf", os.path.join(node, "config", "Corefile")])
    cp.wait("CoreDNS /ready", lambda: cp.http_ok("http://127.0.0.1:%d/ready" % dns_ready), timeout, "coredns")

    cp.spawn("provisioner", ["python3", os.path.join(HERE, "provisioner.py"),
                             "--kubeconfig", os.path.join(kubeconfigs, "provisioner"),
                             "--root", os.path.join(node, "volumes"), "--provisioner", PROVISIONER])
    return {"name": NODE_NAME, "ip": NODE_IP, "images": images, "images_seconds": images_seconds,
            "storage_class": STORAGE_CLASS, "startup_seconds": round(time.monotonic() - started, 1),
            # for tests that name an image the node already has anew (ctr images tag): pods pull nothing
            "ctr": [os.path.join(bins, "ctr"), "--address", sock, "-n", "k8s.io"]}


def _our_shims(sock):
    """The runc shims of our containerd: started with `-address <our socket>`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in argv:
            pids.append(int(entry))
    return pids


def down(state, records, stop):
    """Stops the node's processes (kubelet first, so it restarts nothing), kills every container of our containerd,
    removes our mounts, links and iptables rules. `stop(record)` is cluster.py's pid + start time stop."""
    node = os.path.join(state, "node")
    sock = os.path.join(node, "containerd", "containerd.sock")
    for name in ("provisioner", "coredns", "kube-proxy", "kubelet"):
        if name in records:
            stop(records[name])
    ctr = None
    if "containerd" in records:
        ctr = os.path.join(os.path.dirname(records["containerd"]["argv"][0]), "ctr")
    if ctr and os.path.exists(sock):
        base = [ctr, "--address", sock, "-n", "k8s.io"]
        tasks = _run(base + ["tasks", "ls", "-q"], check=False).stdout.split()
        for task in tasks:
            _run(base + ["tasks", "kill", "-s", "SIGKILL", task], check=False)
        deadline = time.monotonic() + 30
        for task in tasks:
            while time.monotonic() < deadline and _run(base + ["tasks", "delete", task], check=False).returncode:
                time.sleep(0.5)
    shims = _our_shims(sock)
    if "containerd" in records:
        stop(records["containerd"])
    for pid in shims:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    if "kube-proxy" in records:
        _run([records["kube-proxy"]["argv"][0], "--cleanup"], check=False)
    unmount_below(node)
    teardown_network()
    release_machine(state)
    return [n for n in ("provisioner", "coredns", "kube-proxy", "kubelet", "containerd") if n in records]


def node_leaves(host):
    """The certificates of the real node's components (cluster.py's _make_pki signs them with the cluster CA)."""
    return {
        "kubelet": dict(cn="system:node:" + NODE_NAME, orgs=("system:nodes",), client=True),
        "kubelet-serving": dict(cn=NODE_NAME, server_names=(host, NODE_NAME)),
        "apiserver-kubelet-client": dict(cn="kube-apiserver-kubelet-client", orgs=("system:masters",), client=True),
        "kube-proxy": dict(cn="system:kube-proxy", client=True),
        "coredns": dict(cn="soperator:coredns", client=True),
        "provisioner": dict(cn="soperator:provisioner", client=True),
    }
