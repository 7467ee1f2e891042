"""spec.identity in a local cluster against real daemons: Debian's slapd (ldap_server.py) holds alice and bob; the
local cluster starts its own sssd (local/identity.py) and runs slurmctld, the slurmds (their slurmstepds) and the
login sshd in its identity namespace. alice logs in with the key of her directory entry, lands in the jail as
herself, and her jobs run on both workers with her directory uid, gid and groups.

The test jail is jail_helpers' plus what a jail image with libnss-sss has: libnss_sss.so.2, `id`, and `sss` in its
nsswitch.conf (Debian's libnss-sss postinst adds it); SSSD's pipes are bound into it by the cluster.
"""
import os
import shutil
import subprocess
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import render_nsswitch
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

from jail_helpers import ROOT, _install, build_plugin, ldd, make_jail, mounts_under
from ldap_server import GROUPS, SSSD_DN, SUFFIX, USERS, Slapd
from requires import missing_programs, skip_without
from waiting import wait_for

SSH_TIMEOUT = 90
NSS_SSS = "/lib/x86_64-linux-gnu/libnss_sss.so.2"
CACHE_SECONDS = 5

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/slapd")
                                or not os.path.exists("/usr/sbin/sssd") or not os.path.exists(NSS_SSS),
                                reason="needs root, slapd, sssd-ldap and libnss-sss (make deps)")


def _spec(uri, password_secret="ldap-bind", access_filter=None):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = load_documents(f.read())
    docs[0]["spec"]["identity"] = {"ldap": {"uri": uri, "searchBase": SUFFIX, "bindDN": SSSD_DN,
                                            "bindPasswordSecret": {"name": password_secret},
                                            "entryCacheTimeout": CACHE_SECONDS}}
    if access_filter:
        docs[0]["spec"]["identity"]["ldap"]["accessFilter"] = access_filter
    return spec.build_model(docs)


@pytest.fixture(scope="module")
def plugin():
    # where directory users can read it: srun in their sessions loads it too (pytest's tmp dirs are root's, 0700)
    where = tempfile.mkdtemp(prefix="soperator-ident-spank-", dir="/var/lib")
    os.chmod(where, 0o755)
    try:
        yield build_plugin(where)
    finally:
        shutil.rmtree(where)


@pytest.fixture(scope="module")
def jail(plugin):
    missing = missing_programs(("sshd", "ssh", "ssh-keygen", "unshare", "id"))
    if missing:
        pytest.skip("needs %s" % ", ".join(missing))
    parent = tempfile.mkdtemp(prefix="soperator-ident-", dir="/var/lib")
    path = os.path.join(parent, "jail")
    try:
        make_jail(path, plugin)
        extra = [shutil.which("id"), shutil.which("sort"), shutil.which("sacct")]
        for host in extra + [NSS_SSS] + [lib for prog in extra for lib in ldd(prog)]:
            _install(path, host)
        with open(os.path.join(path, "etc", "nsswitch.conf"), "w") as f:
            f.write(render_nsswitch(["files", "sss"]))
        uid, gid = USERS["alice"]
        home = os.path.join(path, "home", "alice")
        os.makedirs(home)
        os.chown(home, uid, gid)
        os.chmod(os.path.dirname(plugin), 0o755)
        yield path
        assert mounts_under(path) == [], "mounts of the jail leaked to the host"
    finally:
        shutil.rmtree(parent)


@pytest.fixture(scope="module")
def user_keys(tmp_path_factory):
    where = tmp_path_factory.mktemp("user-keys")
    out = {}
    for name in USERS:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(where / name)],
                       check=True, timeout=60)
        out[name] = (str(where / name), (where / (name + ".pub")).read_text().strip())
    return out


@pytest.fixture
def slapd(tmp_path, user_keys):
    server = Slapd(str(tmp_path / "slapd"), dict((n, k[1]) for n, k in user_keys.items())).start()
    yield server
    server.stop()


def ssh(cluster, user, key, command):
    address = cluster.status()["login"]
    argv = ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR", "-F", "/dev/null",
            "-p", str(address["port"]), "-i", key, "%s@%s" % (user, address["host"]), command]
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=SSH_TIMEOUT, check=False)


def test_a_directory_user_logs_in_and_runs_jobs_as_the_directory_user(local_cluster, slapd, jail, plugin,
                                                                      user_keys):
    skip_without(("munged", "slurmctld", "slurmd", "srun", "sshd"))
    cluster = local_cluster(model=_spec(slapd.uri), jail_dir=jail, spank_chroot=plugin,
                            identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    assert cluster.status()["processes"]["sssd"]["running"]
    key = user_keys["alice"][0]
    uid, gid = USERS["alice"]
    want = "uid=%d(alice) gid=%d(hpc) groups=" % (uid, gid)
    proc = ssh(cluster, "alice", key, "id; cat /etc/jail-marker")
    assert proc.returncode == 0, proc.stderr
    ident, marker = proc.stdout.split("\n", 1)
    assert ident.startswith(want) and "%d(gpu)" % GROUPS["gpu"][0] in ident, ident
    assert marker.startswith("soperator jail marker")
    # both workers: the job step resolves the user in the slurmd's namespace (initgroups) and in the jail
    proc = ssh(cluster, "alice", key, "srun -N2 -l id | sort")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.split(": ", 1)[1] == ident for line in lines), proc.stdout
    proc = ssh(cluster, "alice", key, "srun -N1 sh -c 'echo from-job > /home/alice/job-file'")
    assert proc.returncode == 0, proc.stderr
    st = os.stat(os.path.join(jail, "home", "alice", "job-file"))
    assert (st.st_uid, st.st_gid) == (uid, gid)
    # bob's key does not open alice's account; root's keys still work (files, not the directory)
    assert ssh(cluster, "alice", user_keys["bob"][0], "true").returncode == 255
    # the host never sees the directory
    assert subprocess.run(["getent", "passwd", "alice"], stdout=subprocess.PIPE, check=False).returncode == 2


def test_a_removed_user_cannot_log_in_after_the_cache_time(local_cluster, slapd, jail, plugin, user_keys):
    skip_without(("munged", "slurmctld", "slurmd", "sshd"))
    cluster = local_cluster(model=_spec(slapd.uri), jail_dir=jail, spank_chroot=plugin,
                            identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    key = user_keys["bob"][0]
    assert ssh(cluster, "bob", key, "true").returncode == 0
    slapd.delete_user("bob")
    import time
    time.sleep(CACHE_SECONDS + 2)
    proc = ssh(cluster, "bob", key, "true")
    assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def root_key(tmp_path_factory):
    where = tmp_path_factory.mktemp("root-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "root", "-f", str(where / "root")],
                   check=True, timeout=60)
    return str(where / "root"), (where / "root.pub").read_text().strip()


def _sshd_log(cluster):
    with open(cluster.layout.output("sshd")) as f:
        return f.read()


def test_a_directory_that_goes_down_fails_closed_and_root_keeps_its_access(local_cluster, slapd, jail, plugin,
                                                                           user_keys, root_key):
    """SSSD, offline, keeps answering from its cache (expired entries too): the login's key command takes the
    directory's keys only while the directory answers, so alice, looked up before slapd stopped, cannot log in
    once it is down; root (the cluster's keys) still can; alice logs in again once slapd is back."""
    skip_without(("munged", "slurmctld", "slurmd", "sshd"))
    cluster = local_cluster(model=_spec(slapd.uri), jail_dir=jail, spank_chroot=plugin,
                            login_authorized_keys=[root_key[1]],
                            identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    key = user_keys["alice"][0]
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 0 and proc.stdout.strip() == str(USERS["alice"][0]), proc.stderr + _sshd_log(cluster)
    slapd.stop()
    import time
    time.sleep(CACHE_SECONDS + 2)
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stdout + proc.stderr
    log = _sshd_log(cluster)
    assert "directory %s does not answer" % slapd.uri in log and "alice" in log, log[-3000:]
    proc = ssh(cluster, "root", root_key[0], "id -u")
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stdout + proc.stderr
    slapd.restart()
    # the next login once the bind watcher has seen the directory again (every 5 s)
    wait_for(lambda: ssh(cluster, "alice", key, "id -u"), "alice logs in again", 60,
             done=lambda p: p.returncode == 0 and p.stdout.strip() == str(USERS["alice"][0]))


def test_a_wrong_bind_password_fails_closed(local_cluster, slapd, jail, plugin, user_keys):
    skip_without(("munged", "slurmctld", "slurmd", "sshd"))
    cluster = local_cluster(model=_spec(slapd.uri), jail_dir=jail, spank_chroot=plugin,
                            identity_secrets={"ldap-bind": {"password": b"wrong"}})
    proc = ssh(cluster, "alice", user_keys["alice"][0], "true")
    assert proc.returncode == 255 and "Permission denied" in proc.stderr
    log = os.path.join(cluster.state_dir, "sss", "log", "sssd_directory.log")
    with open(log) as f:
        assert "Authentication Failed" in f.read()


def test_a_bind_password_rotated_after_users_were_cached_fails_closed(local_cluster, slapd, jail, plugin, user_keys,
                                                                      root_key):
    """The bind password changes in the directory after alice was looked up: SSSD cannot bind any more, goes offline
    and answers from its cache, while the directory itself still answers LDAP. The bind watcher binds as SSSD does
    and the key command wants its recent success, so alice is refused; root (the cluster's keys) still gets in;
    sshd's log and the watcher's say why. Without the watcher alice logged in here (SSSD's cache)."""
    skip_without(("munged", "slurmctld", "slurmd", "sshd"))
    cluster = local_cluster(model=_spec(slapd.uri), jail_dir=jail, spank_chroot=plugin,
                            login_authorized_keys=[root_key[1]],
                            identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    # check mode of the running cluster: nothing to do for sssd or its watcher
    assert not [a for a in cluster.plan_present(cluster.model, cluster.status()) if "sssd" in a]
    key = user_keys["alice"][0]
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 0 and proc.stdout.strip() == str(USERS["alice"][0]), proc.stderr + _sshd_log(cluster)
    slapd.set_bind_password("rotated-pw")
    # a restart drops the connection SSSD bound with the old password (as a server restart or an idle timeout does)
    slapd.stop()
    slapd.restart()
    import time
    time.sleep(CACHE_SECONDS + 2)
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stdout + proc.stderr
    log = _sshd_log(cluster)
    assert "SSSD cannot bind to the directory (%s: bind as %s refused: result 49 (invalidCredentials))" % (
        slapd.uri, SSSD_DN) in log and "alice" in log, log[-3000:]
    with open(cluster.layout.output("sssd-bind-check")) as f:
        watcher = f.read()
    assert "sssd-bind-check: SSSD cannot bind to the directory: %s: bind as %s refused" % (slapd.uri, SSSD_DN) \
        in watcher and "rotated-pw" not in watcher + log, watcher
    proc = ssh(cluster, "root", root_key[0], "id -u")
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stdout + proc.stderr


def test_the_access_filter_refuses_a_user_it_excludes_at_login(local_cluster, slapd, jail, plugin, user_keys,
                                                               root_key):
    """spec.identity.ldap.accessFilter: PAM's account step (pam_sss in sshd's stack; SSSD's ldap access provider)
    refuses a directory user the filter excludes, though their key is right; the filter is asked at each login."""
    skip_without(("munged", "slurmctld", "slurmd", "sshd"))
    cluster = local_cluster(model=_spec(slapd.uri, access_filter="(!(description=blocked))"), jail_dir=jail,
                            spank_chroot=plugin, login_authorized_keys=[root_key[1]],
                            identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    key = user_keys["alice"][0]
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 0 and proc.stdout.strip() == str(USERS["alice"][0]), proc.stderr + _sshd_log(cluster)
    slapd.set_description("alice", "blocked")
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 255 and proc.stdout == "", proc.stdout + proc.stderr
    assert "Access denied for user alice by PAM account configuration" in _sshd_log(cluster), _sshd_log(cluster)
    assert ssh(cluster, "root", root_key[0], "id -u").stdout.strip() == "0"
    slapd.set_description("alice")
    proc = ssh(cluster, "alice", key, "id -u")
    assert proc.returncode == 0 and proc.stdout.strip() == str(USERS["alice"][0]), proc.stderr + _sshd_log(cluster)


def test_check_mode_lists_the_start_of_sssd_and_its_bind_watcher(tmp_path, jail, plugin, slapd):
    """Check mode plans from the same daemons ensure() starts: sssd and the bind watcher, before slurmctld."""
    state = str(tmp_path / "state")
    cluster = lb.LocalCluster(state, _spec(slapd.uri), jail_dir=jail, spank_chroot=plugin,
                              identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    actions = cluster.plan_present(cluster.model, cluster.status())
    assert "would start sssd" in actions and "would start sssd-bind-check" in actions, actions
    assert actions.index("would start sssd") < actions.index("would start slurmctld"), actions
    assert not os.path.exists(state)


def test_a_missing_secret_is_refused_with_its_field_before_anything_is_written(tmp_path, jail, plugin):
    state = str(tmp_path / "state")
    cluster = lb.LocalCluster(state, _spec("ldap://127.0.0.1:1", password_secret="nope"), jail_dir=jail,
                              spank_chroot=plugin, identity_secrets={"ldap-bind": {"password": b"x"}})
    with pytest.raises(LocalClusterError) as e:
        cluster.ensure_started()
    assert "SlurmCluster/small spec.identity.ldap.bindPasswordSecret: Secret 'nope' with key 'password'" in str(e.value)
    assert not os.path.exists(state)


def test_a_directory_users_job_shows_in_sacct_under_that_user(local_cluster, slapd, jail, plugin, user_keys):
    skip_without(("munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd", "srun", "sacct", "sshd"))
    model = _spec(slapd.uri)
    docs = [dict(model.cluster_spec)] + list(model.node_set_specs.values())
    docs[0]["spec"] = dict(docs[0]["spec"], accounting={"enabled": True})
    cluster = local_cluster(model=spec.build_model(docs), jail_dir=jail, spank_chroot=plugin,
                            identity_secrets={"ldap-bind": {"password": slapd.sssd_password.encode()}})
    key = user_keys["alice"][0]
    proc = ssh(cluster, "alice", key, "srun -N1 --job-name=ldap-job hostname && echo done")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("done"), proc.stderr
    uid = USERS["alice"][0]

    def recorded():
        return cluster.run(["sacct", "-a", "-X", "-n", "-P", "--name=ldap-job", "-o", "UID,State"],
                           check=False).stdout.strip()
    wait_for(recorded, "alice's job in accounting", 120, done=lambda out: out == "%d|COMPLETED" % uid)
    # in alice's session (the jail resolves her name): sacct names her job's user
    proc = ssh(cluster, "alice", key, "sacct -X -n -P --name=ldap-job -o User,State")
    assert proc.returncode == 0 and proc.stdout.strip() == "alice|COMPLETED", proc.stdout + proc.stderr


def test_an_unreachable_uri_and_a_bad_ca_are_refused_with_their_fields_before_anything_is_written(tmp_path, jail,
                                                                                                  plugin):
    state = str(tmp_path / "state")
    secrets = {"ldap-bind": {"password": b"x"}}
    closed = lb.LocalCluster(state, _spec("ldap://127.0.0.1:1"), jail_dir=jail, spank_chroot=plugin,
                             identity_secrets=secrets)
    with pytest.raises(LocalClusterError) as e:
        closed.ensure_started()
    assert "SlurmCluster/small spec.identity.ldap.uri: cannot reach ldap://127.0.0.1:1 from this host" in str(e.value)
    model = _spec("ldap://127.0.0.1:1")
    docs = [dict(model.cluster_spec)] + list(model.node_set_specs.values())
    docs[0]["spec"]["identity"]["ldap"].update(uri="ldaps://127.0.0.1:1", caConfigMap={"name": "ca"})
    bad_ca = lb.LocalCluster(state, spec.build_model(docs), jail_dir=jail, spank_chroot=plugin,
                             identity_secrets=dict(secrets, ca={"ca.crt": b"-----BEGIN CERTIFICATE-----\nnope\n"}))
    with pytest.raises(LocalClusterError) as e:
        bad_ca.ensure_started()
    assert "spec.identity.ldap.caConfigMap: ConfigMap 'ca' key 'ca.crt' is not a PEM bundle" in str(e.value)
    assert not os.path.exists(state)
