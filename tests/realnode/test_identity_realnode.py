"""spec.identity on a real node: a real slapd (Debian's, tests/slurm/ldap_server.py) with ldaps:// on the node's
host-only address (tools/k8s/node.py NODE_IP, which pods reach through the bridge's gateway), a CA this test makes
(the caConfigMap) and the bind password in a Secret; site.yml with the images of `make images` (SSSD in the
controller, login and worker images, libnss-sss in the jail). alice, defined once in LDAP, ssh-es with the key of
her entry to the login Service and lands in the jail as herself; `srun -N2 id` shows her directory ids on both
workers; a file her job writes in the jail is hers; bob, removed from LDAP, cannot log in after entryCacheTimeout;
alice, excluded by the accessFilter (PAM's account step), is refused, then let in again;
with slapd stopped alice is refused (the key command's line in the login pod's log) while root's key works, and
with slapd back she logs in again. Then the bind password: rotated in the directory after alice was cached (SSSD
goes offline and would serve its cache) she is refused, the login's bind watcher says why; a wrong password in the
Secret, picked up by a restarted login pod, refuses her too with a clear line; the right one lets her in again.
Root's key works throughout.
"""
import json
import os
import subprocess
import sys

import pytest
import yaml

import ansible_run
from realnode_wait import wait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "slurm"))
from ldap_server import GROUPS, SSSD_DN, SUFFIX, USERS, Slapd  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = "ident"
NODE_IP = "10.255.255.1"    # tools/k8s/node.py: host-only, reached by pods through the bridge's gateway


def _openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, timeout=120, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _ca_and_server_cert(where):
    """A CA and a server certificate for NODE_IP signed by it: (ca.crt, server.crt, server.key)."""
    ca_key, ca, key, csr, crt = (str(where / n) for n in ("ca.key", "ca.crt", "server.key", "server.csr",
                                                          "server.crt"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=soperator test CA",
             "-keyout", ca_key, "-out", ca)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=%s" % NODE_IP, "-keyout", key, "-out", csr)
    ext = where / "san.ext"
    ext.write_text("subjectAltName=IP:%s\n" % NODE_IP)
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
             "-extfile", str(ext), "-out", crt)
    return ca, crt, key


def _spec(tmp_path, root_key, uri):
    docs = list(yaml.safe_load_all(open(os.path.join(ROOT, "examples", "small-cpu.yml"))))
    cluster, nodeset = docs
    for doc in docs:
        doc["metadata"]["namespace"] = NS
    # two workers with their sssd sidecars (100m each, Guaranteed) on a 2-CPU node shared with the suite's other
    # lane (conftest.py): 300m and the sidecar's 100m each, Slurm sees 1
    nodeset["spec"]["resources"] = {"cpu": "300m", "memory": "512Mi"}
    nodeset["spec"]["slurmNode"] = {"cpus": 1}
    cluster["spec"]["login"]["sshRootPublicKeys"] = [root_key]
    cluster["spec"]["identity"] = {"ldap": {"uri": uri, "searchBase": SUFFIX, "bindDN": SSSD_DN,
                                            "bindPasswordSecret": {"name": "ldap-bind"},
                                            "caConfigMap": {"name": "ldap-ca"}, "entryCacheTimeout": 10,
                                            "accessFilter": "(!(description=blocked))"}}
    path = tmp_path / "ident.yml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path), cluster["metadata"]["name"]


def _keygen(path, comment):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True,
                   timeout=60)
    return str(path), open(str(path) + ".pub").read().strip()


def _ready(pod):
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


@pytest.mark.skipif(not os.path.exists("/usr/sbin/slapd"), reason="needs slapd (make deps)")
def test_a_directory_user_sshes_to_the_login_service_and_runs_on_both_workers(real_node, tmp_path):
    keys = dict((n, _keygen(tmp_path / n, n)) for n in ("alice", "bob", "root"))
    ca, crt, key = _ca_and_server_cert(tmp_path)
    slapd = Slapd(str(tmp_path / "slapd"), {"alice": keys["alice"][1], "bob": keys["bob"][1]}, host=NODE_IP,
                  tls=(crt, key)).start()
    try:
        node = real_node
        node.kubectl("create", "namespace", NS)
        node.kubectl("-n", NS, "create", "secret", "generic", "ldap-bind", "--from-literal=password=" +
                     slapd.sssd_password)
        node.kubectl("-n", NS, "create", "configmap", "ldap-ca", "--from-file=ca.crt=" + ca)
        spec, name = _spec(tmp_path, keys["root"][1], slapd.uri)
        ansible_run.playbook("site.yml", "-e", "spec_file=" + spec, "-e", "kubeconfig=" + node.kubeconfig,
                             timeout=900)

        def pods():
            return json.loads(node.kubectl("-n", NS, "get", "pods", "-o", "json").stdout)["items"]
        wanted = {name + "-controller-0", name + "-login-0", "cpu-0", "cpu-1"}

        def all_ready():
            current = pods()
            return (wanted <= {p["metadata"]["name"] for p in current if _ready(p)},
                    [(p["metadata"]["name"], p["status"].get("phase")) for p in current])
        wait("the cluster's pods Ready", all_ready, 300, poll=3)
        ip = node.kubectl("-n", NS, "get", "svc", name + "-login", "-o", "jsonpath={.spec.clusterIP}").stdout

        def ssh(user, command):
            return subprocess.run(["ssh", "-i", keys[user][0], "-o", "StrictHostKeyChecking=no", "-o",
                                   "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                                   "-o", "ConnectTimeout=10", "%s@%s" % (user, ip), command],
                                  capture_output=True, text=True, timeout=180, check=False)

        def refused(user):
            """`user` refused by sshd's authentication (not a connection it turned away: the login image's OpenSSH
            10 penalizes a source address after failed logins, PerSourcePenalties, and these tests fail some)."""
            proc = ssh(user, "true")
            return proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stderr

        def root_in():
            wait("root logs in with the cluster's key (once this host's penalty from failed logins is over)",
                 lambda: (ssh("root", "id -u").stdout.strip() == "0", None), 180, poll=5)

        def sshd_log():
            return node.kubectl("-n", NS, "logs", name + "-login-0", "--all-containers=true", "--tail=400",
                                check=False).stdout

        uid, gid = USERS["alice"]
        want = "uid=%d(alice) gid=%d(hpc) groups=%d(hpc),%d(gpu)" % (uid, gid, gid, GROUPS["gpu"][0])
        # SSSD comes up beside sshd: the first attempts may find it not yet online
        wait("alice logs in with her directory key", lambda: (ssh("alice", "id").returncode == 0, sshd_log()),
             180, poll=5)
        done = ssh("alice", "id; test -e /opt/soperator && echo not-in-jail; srun -N2 -l id | sort")
        assert done.returncode == 0, done.stdout + done.stderr + sshd_log()
        lines = done.stdout.strip().splitlines()
        assert lines[0] == want and "not-in-jail" not in lines, done.stdout
        assert [line.split(": ", 1)[1] for line in lines[1:]] == [want, want], done.stdout
        # a file her job writes in the jail (the shared jail volume) is owned by her directory uid and gid
        login = name + "-login-0"
        node.kubectl("-n", NS, "exec", login, "-c", "sshd", "--", "sh", "-c",
                     "mkdir -p /mnt/jail/home/alice && chown %d:%d /mnt/jail/home/alice" % (uid, gid))
        done = ssh("alice", "srun -N1 -w cpu-1 sh -c 'echo from-job > /home/alice/job-file'")
        assert done.returncode == 0, done.stdout + done.stderr
        owner = node.kubectl("-n", NS, "exec", login, "-c", "sshd", "--", "stat", "-c", "%u:%g",
                             "/mnt/jail/home/alice/job-file").stdout.strip()
        assert owner == "%d:%d" % (uid, gid)
        # root keeps the cluster's key
        assert ssh("root", "id -u").stdout.strip() == "0"
        # bob, removed from the directory, cannot log in once entryCacheTimeout (10 s) has passed
        assert ssh("bob", "id -un").stdout.strip() == "bob"
        slapd.delete_user("bob")
        wait("bob refused once removed", lambda: refused("bob"), 60, poll=5)
        # accessFilter: PAM's account step (pam_sss in the login image's common-account) refuses alice while the
        # filter excludes her, though her key is right
        slapd.set_description("alice", "blocked")
        assert ssh("alice", "id").returncode == 255
        assert "Access denied for user alice by PAM account configuration" in sshd_log(), sshd_log()
        slapd.set_description("alice")
        wait("alice in again once the filter takes her",
             lambda: (ssh("alice", "id -u").stdout.strip() == str(uid), None), 120, poll=5)
        # the directory down: alice refused (fail closed) with the key command's line in the login pod's log
        slapd.stop()
        wait("alice refused while the directory is down", lambda: refused("alice"), 120, poll=5)
        assert "does not answer" in sshd_log(), sshd_log()
        root_in()
        # the directory back: alice again
        slapd.restart()
        wait("alice logs in again", lambda: (ssh("alice", "id -u").stdout.strip() == str(uid), None), 120, poll=5)
        # the bind password rotated in the directory after alice was cached; the restart drops SSSD's bound
        # connection. SSSD can no longer bind (offline, its cache) while slapd answers: the bind watcher sees it.
        slapd.set_bind_password("rotated-pw")
        slapd.stop()
        slapd.restart()
        wait("alice refused once SSSD's bind password is rotated away", lambda: refused("alice"), 120, poll=5)
        bind_line = "SSSD cannot bind to the directory (%s: bind as %s refused: result 49 (invalidCredentials))" % (
            slapd.uri, SSSD_DN)
        log = sshd_log()
        assert bind_line in log and "sssd-bind-check: SSSD cannot bind to the directory" in log, log
        assert "rotated-pw" not in log and "sssd-bind-pw" not in log
        root_in()

        def new_login_pod(password):
            """The Secret with `password`, and a new login pod (a fresh SSSD) that reads it."""
            old = node.kubectl("-n", NS, "get", "pod", login, "-o", "jsonpath={.metadata.uid}").stdout
            secret = tmp_path / "ldap-bind.json"
            secret.write_text(node.kubectl("-n", NS, "create", "secret", "generic", "ldap-bind",
                                           "--from-literal=password=" + password, "--dry-run=client",
                                           "-o", "json").stdout)
            node.kubectl("-n", NS, "replace", "-f", str(secret))
            node.kubectl("-n", NS, "rollout", "restart", "statefulset/%s-login" % name)
            wait("a new login pod Ready", lambda: (any(
                p["metadata"]["name"] == login and p["metadata"]["uid"] != old and _ready(p) for p in pods()),
                None), 240, poll=3)

        # a wrong bind password in the Secret: the new pod's SSSD never binds (nothing cached: sshd finds no alice);
        # alice refused, root in, the watcher's line in the login pod's log
        new_login_pod("wrong-pw")
        root_in()
        wait("alice refused by the new login pod", lambda: refused("alice"), 60, poll=5)
        log = sshd_log()
        assert "sssd-bind-check: SSSD cannot bind to the directory: %s: bind as %s refused: result 49 " \
               "(invalidCredentials); logins with the directory's keys are refused" % (slapd.uri, SSSD_DN) in log, log
        assert "Invalid user alice" in log and "wrong-pw" not in log, log
        # the right one: alice again
        new_login_pod("rotated-pw")
        wait("alice logs in with the right bind password", lambda: (
            ssh("alice", "id -u").stdout.strip() == str(uid), None), 180, poll=5)
    finally:
        slapd.stop()
        real_node.kubectl("delete", "namespace", NS, "--wait=true", timeout=300, check=False)
