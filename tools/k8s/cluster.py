"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok with a few fake Nodes, from the binaries tools/k8s/build.sh builds.

    python3 tools/k8s/cluster.py up   [--state DIR] [--bin DIR] [--nodes N]   start (nothing when it is up)
    python3 tools/k8s/cluster.py down [--state DIR]             stop what `up` started (by pid + start time)
    python3 tools/k8s/cluster.py status [--state DIR]

State (certificates, etcd data, logs, audit.log, kubeconfig) lives in --state (default $SOPERATOR_K8S_STATE or
build/k8s of the checkout). The audit log records every request once (stage ResponseComplete) at Metadata level.
tests/integration/conftest.py imports up() and down() to run the suite against a cluster of its own.
"""
import argparse
import base64
import datetime
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HERE = os.path.dirname(os.path.abspath(__file__))
# node.py beside us, by file: the tests load this file by path, and a module named `node` could shadow others.
_NODE_SPEC = importlib.util.spec_from_file_location("soperator_k8s_node", os.path.join(HERE, "node.py"))
real_node = importlib.util.module_from_spec(_NODE_SPEC)
_NODE_SPEC.loader.exec_module(real_node)
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_STATE = os.environ.get("SOPERATOR_K8S_STATE") or os.path.join(REPO, "build", "k8s")
SERVICE_RANGE = "10.96.0.0/12"
SERVICE_IP = "10.96.0.1"  # the first address of SERVICE_RANGE: the `kubernetes` Service
POD_RANGE = "10.244.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# What we create and may therefore remove on a fresh start: never the whole state directory.
OURS = ("pki", "etcd", "logs", "kcm-certs", "sched-certs", "audit.log", "audit-policy.yaml", "kwok.yaml",
        "kubeconfig", "kubeconfigs", "processes.json", "node", "volumes")
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
# One event per request (its ResponseComplete, or ResponseStarted for a watch): counts per user and verb are exact.
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


class StartError(Exception):
    pass


# ---------------------------------------------------------------- processes we started (pid + start time)

def _start_time(pid):
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): a pid reused by another process has another one.
    None for a process that is gone or a zombie (exited; PID 1 here does not always reap what it inherits)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _ours_alive(record):
    return _start_time(record["pid"]) == record["start_time"]


def _records(state):
    try:
        with open(os.path.join(state, "processes.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _save_records(state, records):
    tmp = os.path.join(state, "processes.json.tmp")
    with open(tmp, "w") as f:
        json.dump(records, f, indent=1)
    os.replace(tmp, os.path.join(state, "processes.json"))


def _stop(record, timeout=15):
    """SIGTERM, then SIGKILL after a bounded wait; only if the pid is still the process we started."""
    if not _ours_alive(record):
        return
    os.kill(record["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _ours_alive(record):
            return
        time.sleep(0.1)
    if _ours_alive(record):
        os.kill(record["pid"], signal.SIGKILL)


def _spawn(state, records, name, argv, env=None):
    log = open(os.path.join(state, "logs", name + ".log"), "ab")
    # A session of its own: the daemon outlives `make k8s-up` and a ^C in the caller's terminal.
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=state, env=env)
    log.close()
    start = None
    for dummy in range(50):
        start = _start_time(proc.pid)
        if start is not None:
            break
        time.sleep(0.01)
    records[name] = {"pid": proc.pid, "start_time": start, "argv": argv}
    _save_records(state, records)
    return proc


def _free_port():
    # The port is free now; a daemon that loses it to another process fails to bind and _start_with_retry tries
    # another one.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- certificates

def _key(kind="ec"):
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def _cert(subject_cn, key, issuer=None, orgs=(), ca=False, server_names=(), client=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
                     + [x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    issuer_cert, issuer_key = issuer if issuer else (None, key)
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer_cert.subject if issuer_cert else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               # Key identifiers: Python >= 3.13 verifies strictly (VERIFY_X509_STRICT) and refuses a chain
               # without them, as the runner image's Python does against the API server.
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_names:
        sans = []
        for n in server_names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path, data, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _make_pki(pki, host="127.0.0.1", real=False, provisioner=False):
    os.makedirs(pki, mode=0o700)
    ca_key = _key()
    ca = _cert("soperator-test-ca", ca_key, ca=True)
    _write(os.path.join(pki, "ca.crt"), _pem_cert(ca), 0o644)
    _write(os.path.join(pki, "ca.key"), _pem_key(ca_key))
    leaves = {
        "apiserver": dict(cn="kube-apiserver", server_names=(
            "127.0.0.1", host, SERVICE_IP, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local")),
        "admin": dict(cn="soperator-admin", orgs=("system:masters",), client=True),
        "controller-manager": dict(cn="system:kube-controller-manager", client=True),
        "scheduler": dict(cn="system:kube-scheduler", client=True),
        # kwok plays every fake node's kubelet (node and pod status in all namespaces): an admin, as kwokctl makes it.
        "kwok": dict(cn="kwok", orgs=("system:masters",), client=True),
    }
    if real:
        leaves.update(real_node.node_leaves(host))
    elif provisioner:
        leaves["provisioner"] = real_node.node_leaves(host)["provisioner"]
    for name, spec in leaves.items():
        key = _key()
        cert = _cert(spec["cn"], key, issuer=(ca, ca_key), orgs=spec.get("orgs", ()),
                     server_names=spec.get("server_names", ()), client=spec.get("client", False))
        _write(os.path.join(pki, name + ".crt"), _pem_cert(cert), 0o644)
        _write(os.path.join(pki, name + ".key"), _pem_key(key))
    sa_key = _key("rsa")
    _write(os.path.join(pki, "sa.key"), _pem_key(sa_key))
    _write(os.path.join(pki, "sa.pub"), sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)


def _kubeconfig(path, server, pki, user):
    def b64(name):
        with open(os.path.join(pki, name), "rb") as f:
            return base64.b64encode(f.read()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "soperator-test",
        "clusters": [{"name": "soperator-test", "cluster": {
            "server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(user + ".crt"), "client-key-data": b64(user + ".key")}}],
        "contexts": [{"name": "soperator-test", "context": {"cluster": "soperator-test", "user": user}}],
    }
    _write(path, json.dumps(config, indent=1).encode())  # JSON is YAML: every client reads it


# ---------------------------------------------------------------- the API, through the admin certificate

def _tls(pki, verify=True):
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
    if not verify:  # the components' own /healthz serve self-signed certificates
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _request(url, ctx=None, method="GET", body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def _wait(what, probe, timeout, records=None, name=None, state=None):
    """Polls probe() until it returns a true value; fails early when the process `name` has exited."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if name and not _ours_alive(records[name]):
            raise StartError("%s exited while waiting for %s; see %s" % (
                name, what, os.path.join(state, "logs", name + ".log")))
        try:
            result = probe()
            if result:
                return result
        except (OSError, urllib.error.URLError, ssl.SSLError, ValueError) as e:
            last = e
        time.sleep(0.2)
    raise StartError("timed out after %ss waiting for %s (last error: %s)" % (timeout, what, last))


def _healthy(url, ctx, expect="ok"):
    def probe():
        status, body = _request(url, ctx)
        return status == 200 and body.strip() == expect
    return probe


def _port_clash(state, name):
    try:
        with open(os.path.join(state, "logs", name + ".log"), errors="replace") as f:
            return "address already in use" in f.read()
    except OSError:
        return False


def _start_with_retry(state, records, name, make_argv, wait, attempts=4):
    """Starts `name` on fresh ports; if another process took a port between our pick and the bind, tries again."""
    for attempt in range(attempts):
        ports = make_argv.ports()
        _spawn(state, records, name, make_argv(ports))
        try:
            wait(ports)
            return ports
        except StartError:
            clash = _port_clash(state, name)
            _stop(records[name])
            if not clash or attempt == attempts - 1:
                raise
            os.rename(os.path.join(state, "logs", name + ".log"),
                      os.path.join(state, "logs", "%s.port-clash-%d.log" % (name, attempt)))


class _Argv:
    def __init__(self, n_ports, build):
        self.n_ports, self.build = n_ports, build

    def ports(self):
        return [_free_port() for dummy in range(self.n_ports)]

    def __call__(self, ports):
        return self.build(*ports)


class _Plane:
    """What node.py needs of the running control plane: our process helpers and the admin API."""
    COLLECTIONS = {"ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                   "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                   "StorageClass": "/apis/storage.k8s.io/v1/storageclasses"}
    pod_range = POD_RANGE

    def __init__(self, state, pki, records, bin_dir, server, ctx):
        self.state, self.pki, self.records, self.bin, self.server, self.ctx = (
            state, pki, records, bin_dir, server, ctx)

    def spawn(self, name, argv, env=None):
        return _spawn(self.state, self.records, name, argv, env)

    def wait(self, what, probe, timeout, name):
        return _wait(what, probe, timeout, self.records, name, self.state)

    def get(self, path):
        return _request(self.server + path, self.ctx)

    def apply(self, obj):
        try:
            _request(self.server + self.COLLECTIONS[obj["kind"]], self.ctx, "POST", obj)
        except urllib.error.HTTPError as e:
            if e.code != 409:  # already there (an earlier up of this state)
                raise

    def kubeconfig(self, path, user):
        _kubeconfig(path, self.server, self.pki, user)

    @staticmethod
    def free_port():
        return _free_port()

    @staticmethod
    def http_ok(url):
        return _request(url)[0] == 200


# ---------------------------------------------------------------- up / down

def status(state=DEFAULT_STATE):
    """The running cluster's description, or None when not all of what `up` started is alive."""
    records = _records(state)
    info = records.get("_cluster")
    names = [n for n in records if not n.startswith("_")]
    if not info or not names or not all(_ours_alive(records[n]) for n in names):
        return None
    try:
        ok = _healthy(info["server"] + "/readyz", _tls(os.path.join(state, "pki")))()
    except (OSError, urllib.error.URLError, ssl.SSLError):
        ok = False
    return info if ok else None


def down(state=DEFAULT_STATE):
    """Stops, newest first, the processes `up` recorded in this state directory; nothing else. A real node goes
    first: its containers, mounts, links and iptables rules (node.down)."""
    state = os.path.abspath(state)
    records = _records(state)
    names = [n for n in records if not n.startswith("_")]
    if "kubelet" in records or "containerd" in records or os.path.isdir(os.path.join(state, "node")):
        real_node.down(state, records, _stop)
    for name in reversed(names):
        _stop(records[name])
    if records:
        os.remove(os.path.join(state, "processes.json"))
    return names


def up(state=DEFAULT_STATE, bin_dir=None, nodes=3, timeout=180, node="kwok", provisioner=False):
    """Starts the control plane unless it is already up; returns its description (server, kubeconfig, audit log).
    node="real" adds a real node (tools/k8s/node.py: kubelet, containerd, kube-proxy, CoreDNS) and no kwok nodes.
    provisioner=True (kwok nodes; the real node always has it): the real node's hostPath provisioner and its default
    StorageClass, so claims bind as on a real cluster (`make k8s-up`; the test suites pre-bind their volumes)."""
    state = os.path.abspath(state)
    running = status(state)
    if running and running.get("node_kind", "kwok") == node:
        return dict(running, already_up=True)
    if running:
        raise StartError("the cluster of %s is up with %s nodes; `down` it first" % (
            state, running.get("node_kind", "kwok")))
    real = node == "real"
    if real:
        real_node.preflight()
        real_node.claim_machine(state, lambda other: bool(other and status(other)))
        nodes = 0
    bin_dir = bin_dir or os.environ.get("SOPERATOR_K8S_BIN") or _build()
    started = time.monotonic()
    os.makedirs(state, exist_ok=True)
    down(state)  # a half-started or crashed earlier run: stop whatever of it is left
    for name in OURS:
        path = os.path.join(state, name)
        if name == "node":
            real_node.remove_tree(path)  # unmounts what an earlier real node left, never follows a link
        elif os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    os.makedirs(os.path.join(state, "logs"))
    os.makedirs(os.path.join(state, "kubeconfigs"))
    pki = os.path.join(state, "pki")
    host = real_node.NODE_IP if real else "127.0.0.1"
    if real:
        real_node.setup_network()  # the API server binds the node's host-only address
    _make_pki(pki, host, real, provisioner)
    with open(os.path.join(state, "audit-policy.yaml"), "w") as f:
        f.write(AUDIT_POLICY)
    # kwok's own node and pod lifecycles (build.sh copies them beside the binaries); given with --config, they are
    # all kwok reads (not a ~/.kwok/kwok.yaml of the machine).
    stages = os.path.join(bin_dir, "kwok-stages")
    with open(os.path.join(state, "kwok.yaml"), "w") as f:
        for name in sorted(os.listdir(stages)):
            with open(os.path.join(stages, name)) as stage:
                f.write("---\n" + stage.read().strip() + "\n")
    records = {}
    try:
        return _up(state, pki, records, bin_dir, nodes, timeout, started, host, real, provisioner)
    except BaseException:
        down(state)
        raise


def _up(state, pki, records, bin_dir, nodes, timeout, started, host, real,  # pylint: disable=too-many-locals
        provisioner):
    def binary(name):
        return os.path.join(bin_dir, name)

    def p(name):
        return os.path.join(pki, name)

    etcd = _start_with_retry(state, records, "etcd", _Argv(2, lambda client, peer: [
        binary("etcd"), "--name=soperator-test", "--data-dir=" + os.path.join(state, "etcd"),
        "--listen-client-urls=http://127.0.0.1:%d" % client,
        "--advertise-client-urls=http://127.0.0.1:%d" % client,
        "--listen-peer-urls=http://127.0.0.1:%d" % peer,
        "--initial-advertise-peer-urls=http://127.0.0.1:%d" % peer,
        "--initial-cluster=soperator-test=http://127.0.0.1:%d" % peer,
        "--unsafe-no-fsync=true",  # a throw-away test store: durability costs time and buys nothing
    ]), lambda ports: _wait("etcd /health", lambda: '"health":"true"' in _request(
        "http://127.0.0.1:%d/health" % ports[0])[1], timeout, records, "etcd", state))

    ctx = _tls(pki)
    apiserver = _start_with_retry(state, records, "kube-apiserver", _Argv(1, lambda port: [
        binary("kube-apiserver"), "--etcd-servers=http://127.0.0.1:%d" % etcd[0],
        "--bind-address=" + host, "--secure-port=%d" % port,
        "--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"),
        "--cert-dir=" + os.path.join(state, "pki"),
        "--client-ca-file=" + p("ca.crt"), "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        "--service-cluster-ip-range=" + SERVICE_RANGE,
        "--service-account-issuer=" + ISSUER, "--service-account-key-file=" + p("sa.pub"),
        "--service-account-signing-key-file=" + p("sa.key"),
        "--audit-policy-file=" + os.path.join(state, "audit-policy.yaml"),
        "--audit-log-path=" + os.path.join(state, "audit.log"), "--audit-log-mode=blocking",
        "--audit-log-maxbackup=0", "--audit-log-maxsize=0",
    ] + ([  # pods reach the API server (the `kubernetes` Service) at the node's address, not loopback
        "--advertise-address=" + host,
        # exec, logs and port-forward reach the kubelet with this certificate
        "--kubelet-client-certificate=" + p("apiserver-kubelet-client.crt"),
        "--kubelet-client-key=" + p("apiserver-kubelet-client.key"),
        "--kubelet-certificate-authority=" + p("ca.crt"), "--kubelet-preferred-address-types=InternalIP",
    ] if real else [])), lambda ports: _wait("kube-apiserver /readyz", _healthy(
        "https://%s:%d/readyz" % (host, ports[0]), ctx), timeout, records, "kube-apiserver", state))
    server = "https://%s:%d" % (host, apiserver[0])

    kubeconfigs = os.path.join(state, "kubeconfigs")
    for user in ("controller-manager", "scheduler", "kwok"):
        _kubeconfig(os.path.join(kubeconfigs, user), server, pki, user)
    admin_kubeconfig = os.path.join(state, "kubeconfig")
    _kubeconfig(admin_kubeconfig, server, pki, "admin")

    insecure = _tls(pki, verify=False)
    _start_with_retry(state, records, "kube-controller-manager", _Argv(1, lambda port: [
        binary("kube-controller-manager"), "--kubeconfig=" + os.path.join(kubeconfigs, "controller-manager"),
        "--bind-address=127.0.0.1", "--secure-port=%d" % port, "--leader-elect=false",
        "--cert-dir=" + os.path.join(state, "kcm-certs"),
        "--use-service-account-credentials=true", "--service-account-private-key-file=" + p("sa.key"),
        "--root-ca-file=" + p("ca.crt"),
        "--cluster-signing-cert-file=" + p("ca.crt"), "--cluster-signing-key-file=" + p("ca.key"),
        "--cluster-cidr=" + POD_RANGE, "--service-cluster-ip-range=" + SERVICE_RANGE,
    ]), lambda ports: _wait("kube-controller-manager /healthz", _healthy(
        "https://127.0.0.1:%d/healthz" % ports[0], insecure), timeout, records, "kube-controller-manager", state))

    _start_with_retry(state, records, "kube-scheduler", _Argv(1, lambda port: [
        binary("kube-scheduler"), "--kubeconfig=" + os.path.join(kubeconfigs, "scheduler"),
        "--bind-address=127.0.0.1", "--secure-port=%d" % port, "--leader-elect=false",
        "--cert-dir=" + os.path.join(state, "sched-certs"),
    ]), lambda ports: _wait("kube-scheduler /healthz", _healthy(
        "https://127.0.0.1:%d/healthz" % ports[0], insecure), timeout, records, "kube-scheduler", state))

    if nodes:
        _start_kwok(state, records, binary, kubeconfigs, server, ctx, nodes, timeout)
    names = ["kwok-node-%d" % i for i in range(nodes)]
    if provisioner and not real:
        _start_provisioner(_Plane(state, pki, records, bin_dir, server, ctx))
    # The service account controller (kube-controller-manager) has run: pods can be created in `default`.
    _wait("the default ServiceAccount", lambda: _request(
        server + "/api/v1/namespaces/default/serviceaccounts/default", ctx)[0] == 200, timeout)

    info = {"server": server, "kubeconfig": admin_kubeconfig, "audit_log": os.path.join(state, "audit.log"),
            "state": state, "bin": os.path.dirname(records["etcd"]["argv"][0]), "nodes": names,
            "node_kind": "real" if real else "kwok"}
    if real:
        info["real_node"] = real_node.up(_Plane(state, pki, records, info["bin"], server, ctx), timeout)
        info["nodes"] = [info["real_node"]["name"]]
    info["startup_seconds"] = round(time.monotonic() - started, 1)
    records["_cluster"] = info
    _save_records(state, records)
    return dict(info, already_up=False)


def _start_provisioner(plane):
    """The real node's hostPath provisioner (tools/k8s/provisioner.py) with its RBAC and default StorageClass, its
    volumes under <state>/volumes: kwok runs no pod, so nothing mounts them, but every claim binds."""
    for obj in real_node.RBAC:
        if obj["kind"] == "StorageClass" or obj["metadata"]["name"] == "soperator:provisioner":
            plane.apply(obj)
    kubeconfig = os.path.join(plane.state, "kubeconfigs", "provisioner")
    plane.kubeconfig(kubeconfig, "provisioner")
    volumes = os.path.join(plane.state, "volumes")
    os.makedirs(volumes, exist_ok=True)
    plane.spawn("provisioner", [sys.executable, os.path.join(HERE, "provisioner.py"), "--kubeconfig", kubeconfig,
                                "--root", volumes, "--provisioner", real_node.PROVISIONER])


def _start_kwok(state, records, binary, kubeconfigs, server, ctx, nodes, timeout):
    # kwok serves nothing unless asked (no --server-address, no --node-port): it needs no port.
    _spawn(state, records, "kwok", [
        binary("kwok"), "--config=" + os.path.join(state, "kwok.yaml"),
        "--kubeconfig=" + os.path.join(kubeconfigs, "kwok"), "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=%s=fake" % KWOK_ANNOTATION, "--cidr=" + POD_RANGE,
        "--node-ip=127.0.0.1",
        # The heartbeat stage refreshes node status every 10 minutes and leaves liveness to node Leases, which kwok
        # renews only with a lease duration (0 when --config holds no KwokConfiguration): without it the node
        # lifecycle controller marks the nodes NotReady and their pods unready.
        "--node-lease-duration-seconds=40"])
    names = ["kwok-node-%d" % i for i in range(nodes)]
    for name in names:
        _request(server + "/api/v1/nodes", ctx, "POST", _fake_node(name))

    def nodes_ready():
        body = _request(server + "/api/v1/nodes", ctx)[1]
        ready = {n["metadata"]["name"] for n in json.loads(body)["items"] if real_node.node_ready(n)}
        return ready >= set(names)
    _wait("%d kwok nodes Ready" % nodes, nodes_ready, timeout, records, "kwok", state)

    def leases_held():
        body = _request(server + "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", ctx)[1]
        return {lease["metadata"]["name"] for lease in json.loads(body)["items"]} >= set(names)
    _wait("the kwok nodes' Leases", leases_held, timeout, records, "kwok", state)


def _fake_node(name):
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64"}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _build():
    out = subprocess.run([os.path.join(HERE, "build.sh")], stdout=subprocess.PIPE, check=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def cached_bin():
    """The bin directory build.sh would use, if its binaries are already there (no build)."""
    try:
        out = subprocess.run([os.path.join(HERE, "build.sh"), "--cached"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--state", default=DEFAULT_STATE, help="state directory (default %(default)s)")
    parser.add_argument("--bin", help="binaries (default: tools/k8s/build.sh's cache, built if missing)")
    parser.add_argument("--nodes", type=int, default=3, help="kwok fake nodes (default %(default)s)")
    parser.add_argument("--node", choices=("kwok", "real"), default=os.environ.get("NODE") or "kwok",
                        help="kwok: fake nodes only; real: one real node (kubelet, containerd) and no kwok nodes")
    parser.add_argument("--timeout", type=float, default=180, help="bound on each readiness wait, seconds")
    parser.add_argument("--no-provisioner", dest="provisioner", action="store_false",
                        help="kwok nodes without the hostPath provisioner and default StorageClass (claims then bind "
                             "only to volumes made for them)")
    args = parser.parse_args(argv)
    if args.command == "down":
        stopped = down(args.state)
        print("stopped: %s" % (", ".join(stopped) if stopped else "nothing (not up)"))
        return 0
    if args.command == "status":
        info = status(args.state)
        print(json.dumps(info, indent=1) if info else "not up")
        return 0 if info else 1
    try:
        info = up(args.state, args.bin, args.nodes, args.timeout, args.node, provisioner=args.provisioner)
    except (StartError, real_node.NodeError) as e:
        print("k8s-up failed: %s" % e, file=sys.stderr)
        return 1
    if info["already_up"]:
        print("already up (%s); nothing started" % info["server"])
    else:
        if info.get("real_node"):
            rn = info["real_node"]
            print("started in %.1fs: %s with the real node %s (%s), %d images imported in %.1fs" % (
                info["startup_seconds"], info["server"], rn["name"], rn["ip"], len(rn["images"]),
                rn["images_seconds"]))
        else:
            print("started in %.1fs: %s with %d kwok nodes%s" % (
                info["startup_seconds"], info["server"], len(info["nodes"]),
                " and the hostPath provisioner (default StorageClass %s)" % real_node.STORAGE_CLASS
                if args.provisioner else ""))
    print("kubeconfig: %s" % info["kubeconfig"])
    print("audit log:  %s" % info["audit_log"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
