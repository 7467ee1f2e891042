"""spec.identity against real daemons: Debian's slapd (tests/slurm/ldap_server.py) and the host's sssd, run with the
sssd.conf that render/sssd_conf.py writes (plus node/sssd_config.py's bind password) in a private mount namespace
(local/identity.py); clients (getent, id, sss_ssh_authorizedkeys) run in namespaces of their own where
/var/lib/sss and /etc/nsswitch.conf are the test's. The host's NSS and /var/lib/sss are never touched.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import identity as li
from ansible_collections.soperator.slurm.plugins.module_utils.node.sssd_config import with_bind_password, write_config
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import render_nsswitch, render_sssd_conf
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec

from ldap_server import GROUPS, SSSD_DN, SUFFIX, USERS, Slapd, free_port
from specs import documents

CACHE_SECONDS = 5
NEEDS = ("/usr/sbin/slapd", "/usr/sbin/slapadd", "/usr/sbin/sssd", "/usr/bin/sss_ssh_authorizedkeys",
         "/usr/bin/ldapdelete")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not all(os.path.exists(p) for p in NEEDS)
                                or not os.path.isdir("/var/lib/sss") or not os.path.isdir("/var/log/sssd"),
                                reason="needs root, slapd, ldap-utils, sssd-ldap, sssd-tools, libnss-sss (make deps)")


class Sssd(object):
    """sssd in its namespace with the rendered sssd.conf, and clients in theirs."""

    def __init__(self, workdir, ldap_model, password):
        self.dir = workdir
        li.prepare_sss_dir(workdir)
        self.config = os.path.join(workdir, "sssd.conf")
        write_config(self.config, with_bind_password(render_sssd_conf(ldap_model), password))
        self.nsswitch = os.path.join(workdir, "nsswitch.conf")
        with open(self.nsswitch, "w") as f:
            f.write(render_nsswitch(["files", "sss"]))
        self.proc = subprocess.Popen(li.sssd_argv(workdir, self.config), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(workdir, "lib", "pipes", "nss")):
            assert self.proc.poll() is None, "sssd exited: %s" % self.log()
            assert time.monotonic() < deadline, "sssd did not open its nss pipe: %s" % self.log()
            time.sleep(0.2)

    def run(self, *argv):
        """(exit status, stdout) of `argv` in a client's namespace; stderr (sss_ssh_authorizedkeys' "Error
        looking up public keys") is left out of stdout, which sshd reads as keys."""
        proc = subprocess.run(li.in_identity_namespace(list(argv), self.dir, self.nsswitch), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
        return proc.returncode, proc.stdout

    def log(self):
        logs = os.path.join(self.dir, "log")
        return "".join(open(os.path.join(logs, n), errors="replace").read() for n in sorted(os.listdir(logs)))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def user_keys(tmp_path_factory):
    """A real ed25519 key pair per directory user: name -> (private key file, public key line)."""
    where = tmp_path_factory.mktemp("user-keys")
    out = {}
    for name in USERS:
        path = str(where / name)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "%s@ldap" % name, "-f", path],
                       check=True, timeout=60)
        with open(path + ".pub") as f:
            out[name] = (path, f.read().strip())
    return out


@pytest.fixture
def slapd(tmp_path, user_keys):
    server = Slapd(str(tmp_path / "slapd"), dict((n, k[1]) for n, k in user_keys.items())).start()
    yield server
    server.stop()


@pytest.fixture
def sssd_for(tmp_path):
    started = []

    def start(slapd, password, name="sssd", cache=CACHE_SECONDS):
        model = spec.build_model(documents(("cpu", {}), identity={"ldap": {
            "uri": slapd.uri, "searchBase": SUFFIX, "bindDN": SSSD_DN, "bindPasswordSecret": {"name": "bind"},
            "entryCacheTimeout": cache}}))
        # a short path: sssd's unix sockets live below it
        work = os.path.join("/tmp", "sop-sss-%d-%d" % (os.getpid(), len(started)))
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work, mode=0o755)
        sssd = Sssd(work, model.identity.ldap, password)
        started.append((sssd, str(tmp_path / name)))
        return sssd

    yield start
    for sssd, keep in started:
        sssd.stop()
        shutil.copytree(os.path.join(sssd.dir, "log"), keep, dirs_exist_ok=True)
        shutil.rmtree(sssd.dir, ignore_errors=True)


def test_directory_users_resolve_with_their_groups_and_keys(slapd, sssd_for):
    sssd = sssd_for(slapd, slapd.sssd_password)
    rc, out = sssd.run("/usr/bin/getent", "passwd", "alice")
    assert rc == 0, out + sssd.log()
    assert out.strip() == "alice:*:%d:%d:alice:/home/alice:/bin/sh" % USERS["alice"]
    rc, out = sssd.run("/usr/bin/id", "alice")
    assert rc == 0, out
    assert "uid=%d(alice) gid=%d(hpc)" % USERS["alice"] in out
    assert sorted(out.split("groups=")[1].strip().split(",")) == sorted(
        "%d(%s)" % (gid, g) for g, (gid, members) in GROUPS.items() if "alice" in members)
    rc, out = sssd.run("/usr/bin/sss_ssh_authorizedkeys", "bob")
    assert rc == 0 and out.strip() == slapd.keys["bob"], out
    # files first: root still comes from the host's /etc/passwd, and the directory is never asked for it
    rc, out = sssd.run("/usr/bin/getent", "passwd", "root")
    assert rc == 0 and out.startswith("root:x:0:0:")
    rc, out = sssd.run("/usr/bin/sss_ssh_authorizedkeys", "root")
    assert out.strip() == ""
    # the host itself never sees the directory
    assert subprocess.run(["getent", "passwd", "alice"], stdout=subprocess.PIPE, check=False).returncode == 2


def test_a_user_removed_from_the_directory_is_gone_after_the_cache_time(slapd, sssd_for):
    sssd = sssd_for(slapd, slapd.sssd_password)
    assert sssd.run("/usr/bin/sss_ssh_authorizedkeys", "bob")[1].strip() == slapd.keys["bob"]
    assert sssd.run("/usr/bin/getent", "passwd", "bob")[0] == 0
    slapd.delete_user("bob")
    removed = time.monotonic()
    # within entry_cache_timeout the cached entry may still answer; after it, never again
    deadline = removed + CACHE_SECONDS + 30
    while True:
        rc, _out = sssd.run("/usr/bin/getent", "passwd", "bob")
        keys = sssd.run("/usr/bin/sss_ssh_authorizedkeys", "bob")[1].strip()
        if rc != 0 and not keys:
            break
        assert time.monotonic() < deadline, "bob still resolves %.0f s after removal" % (time.monotonic() - removed)
        time.sleep(1)
    time.sleep(CACHE_SECONDS + 1)
    assert sssd.run("/usr/bin/getent", "passwd", "bob")[0] == 2
    assert sssd.run("/usr/bin/sss_ssh_authorizedkeys", "bob")[1].strip() == ""
    assert sssd.run("/usr/bin/getent", "passwd", "alice")[0] == 0        # the others are untouched


def test_a_wrong_bind_password_fails_closed_with_a_log_line(slapd, sssd_for):
    sssd = sssd_for(slapd, "not-the-password")
    rc, out = sssd.run("/usr/bin/getent", "passwd", "alice")
    assert rc == 2, out
    assert sssd.run("/usr/bin/sss_ssh_authorizedkeys", "alice")[1].strip() == ""
    assert sssd.run("/usr/bin/getent", "passwd", "root")[0] == 0         # local root still resolves
    deadline = time.monotonic() + 30
    while "Unable to establish connection [1432158227]: Authentication Failed" not in sssd.log():
        assert time.monotonic() < deadline, sssd.log()[-3000:]
        time.sleep(0.5)
    assert "not-the-password" not in sssd.log()


class LoginSshd(object):
    """The login nodes' sshd_config (render/sshd.py with identity_keys) run by a real sshd in the identity namespace
    of `sssd` on loopback; no jail here (ChrootDirectory /): the local cluster's login adds the jail."""

    def __init__(self, workdir, sssd):
        keys_dir = os.path.join(workdir, "authorized-keys")
        os.makedirs(keys_dir, exist_ok=True)
        host_keys = os.path.join(workdir, "host-keys")
        os.makedirs(host_keys, exist_ok=True)
        for key_type in ("ed25519", "rsa", "ecdsa"):
            subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-f",
                            os.path.join(host_keys, "ssh_host_%s_key" % key_type)], check=True, timeout=120)
        self.port = free_port()
        # the key command (as the local cluster's login runs it), where nobody can read it: pytest's dirs are 0700
        self.command_dir = tempfile.mkdtemp(prefix="soperator-keys-", dir="/var/lib")
        os.chmod(self.command_dir, 0o755)
        with open(sssd.config) as f:
            li.write_key_command(sssd.dir, f.read())
        shutil.copy(os.path.join(sssd.dir, li.KEYS_COMMAND), self.command_dir)
        config = os.path.join(workdir, "sshd_config")
        with open(config, "w") as f:
            f.write(render_sshd_config("/", host_keys, keys_dir, port=self.port, listen_address="127.0.0.1",
                                       pid_file=os.path.join(workdir, "sshd.pid"), strict_modes=False,
                                       identity_keys=True, identity_command=li.keys_command(self.command_dir)))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        # the bind watcher beside sssd (as the login's SSSD container runs it): the key command wants its check
        self.watch_log = os.path.join(workdir, "watch.log")
        with open(self.watch_log, "w") as log:
            self.watcher = subprocess.Popen(li.in_identity_namespace(li.keys_command(self.command_dir) + [
                "--watch-bind", sssd.config], sssd.dir), stdout=log, stderr=subprocess.STDOUT)
        status = os.path.join(sssd.dir, "lib", "pipes", "soperator-bind.json")
        deadline = time.monotonic() + 60
        while not os.path.exists(status):
            assert self.watcher.poll() is None and time.monotonic() < deadline, open(self.watch_log).read()
            time.sleep(0.2)
        self.log = os.path.join(workdir, "sshd.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(li.in_identity_namespace(["/usr/sbin/sshd", "-D", "-e", "-f", config],
                                                                  sssd.dir, sssd.nsswitch),
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, open(self.log).read()
                time.sleep(0.2)

    def ssh(self, user, key, *command):
        return subprocess.run(["ssh", "-i", key, "-p", str(self.port), "-o", "BatchMode=yes", "-o",
                               "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
                               "IdentitiesOnly=yes", "-o", "ConnectTimeout=20", "%s@127.0.0.1" % user] + list(command),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=90,
                              check=False)

    def stop(self):
        for proc in (self.proc, self.watcher):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        shutil.rmtree(self.command_dir, ignore_errors=True)


@pytest.fixture
def login_sshd(tmp_path):
    made = []

    def start(sssd):
        sshd = LoginSshd(str(tmp_path / ("sshd-%d" % len(made))), sssd)
        made.append(sshd)
        return sshd

    yield start
    for sshd in made:
        sshd.stop()


@pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="needs openssh-server")
def test_ssh_with_the_directory_key_logs_in_as_the_directory_user(slapd, sssd_for, login_sshd, user_keys):
    sssd = sssd_for(slapd, slapd.sssd_password)
    sshd = login_sshd(sssd)
    proc = sshd.ssh("alice", user_keys["alice"][0], "id")
    assert proc.returncode == 0, proc.stderr + open(sshd.log).read()
    assert proc.stdout.startswith("uid=%d(alice) gid=%d(hpc) groups=" % USERS["alice"]), proc.stdout
    assert "%d(gpu)" % GROUPS["gpu"][0] in proc.stdout
    # bob's key is not alice's
    assert sshd.ssh("alice", user_keys["bob"][0], "id").returncode == 255


@pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="needs openssh-server")
def test_ssh_fails_closed_with_a_wrong_bind_password(slapd, sssd_for, login_sshd, user_keys):
    sssd = sssd_for(slapd, "not-the-password")
    sshd = login_sshd(sssd)
    proc = sshd.ssh("alice", user_keys["alice"][0], "id")
    assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stdout + proc.stderr
    assert "Invalid user alice" in open(sshd.log).read()
    # the bind watcher says why, without the password
    watched = open(sshd.watch_log).read()
    assert "SSSD cannot bind to the directory: %s: bind as %s refused: result 49 (invalidCredentials)" % (
        slapd.uri, SSSD_DN) in watched and "not-the-password" not in watched, watched
