"""A real OpenLDAP server for the identity tests: Debian's slapd, started by the test from a cn=config it writes
(slapadd -n0) in a temp directory, on loopback, stopped by its pid. Nothing of the Debian service or its debconf
state is used. Schemas: core, cosine, nis, inetorgperson (slapd's LDIF files) and openssh-lpk's sshPublicKey, which
we write as LDIF here. Directory: two users (alice, bob) in two groups (hpc: both; gpu: alice), each with an SSH key.
"""
import os
import signal
import socket
import subprocess
import time

SUFFIX = "dc=test,dc=soperator"
ADMIN = "cn=admin," + SUFFIX
SSSD_DN = "cn=sssd,ou=services," + SUFFIX
SCHEMAS = "/etc/ldap/schema"

# openssh-lpk (the sshPublicKey attribute and the ldapPublicKey class), as cn=config LDIF.
OPENSSH_LPK = """dn: cn=openssh-lpk,cn=schema,cn=config
objectClass: olcSchemaConfig
cn: openssh-lpk
olcAttributeTypes: ( 1.3.6.1.4.1.24552.500.1.1.1.13 NAME 'sshPublicKey' DESC 'MANDATORY: OpenSSH Public key'
  EQUALITY octetStringMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 )
olcObjectClasses: ( 1.3.6.1.4.1.24552.500.1.1.2.0 NAME 'ldapPublicKey' SUP top AUXILIARY
  DESC 'MANDATORY: OpenSSH LPK objectclass' MAY ( sshPublicKey $ uid ) )
"""

CONFIG = """dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {run}/slapd.pid
olcArgsFile: {run}/slapd.args

dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: /usr/lib/ldap
olcModuleLoad: back_mdb

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file://{schemas}/core.ldif

include: file://{schemas}/cosine.ldif

include: file://{schemas}/nis.ldif

include: file://{schemas}/inetorgperson.ldif

include: file://{lpk}

dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: {{0}}to * by * none

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcDbDirectory: {data}
olcSuffix: {suffix}
olcRootDN: {admin}
olcRootPW: {admin_password}
olcAccess: {{0}}to attrs=userPassword by anonymous auth by * none
olcAccess: {{1}}to * by dn.exact="{sssd}" read by * none
"""


def _entries(keys, sssd_password):
    people, groups = "ou=people," + SUFFIX, "ou=groups," + SUFFIX
    out = ["dn: %s\nobjectClass: dcObject\nobjectClass: organization\no: test\ndc: test\n" % SUFFIX]
    for ou in ("people", "groups", "services"):
        out.append("dn: ou=%s,%s\nobjectClass: organizationalUnit\nou: %s\n" % (ou, SUFFIX, ou))
    out.append("dn: %s\nobjectClass: person\nobjectClass: simpleSecurityObject\ncn: sssd\nsn: sssd\n"
               "userPassword: %s\n" % (SSSD_DN, sssd_password))
    for name, (uid, gid) in sorted(USERS.items()):
        out.append("dn: uid=%s,%s\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\nobjectClass: "
                   "ldapPublicKey\nuid: %s\ncn: %s\nsn: %s\nuidNumber: %d\ngidNumber: %d\nhomeDirectory: /home/%s\n"
                   "loginShell: /bin/sh\nsshPublicKey: %s\n" % (name, people, name, name, name, uid, gid, name,
                                                                keys[name]))
    for name, (gid, members) in sorted(GROUPS.items()):
        out.append("dn: cn=%s,%s\nobjectClass: posixGroup\ncn: %s\ngidNumber: %d\n%s" % (
            name, groups, name, gid, "".join("memberUid: %s\n" % m for m in members)))
    return "\n".join(out)


# name -> (uidNumber, gidNumber); group name -> (gidNumber, members). Numbers no host user or group has.
USERS = {"alice": (47101, 47001), "bob": (47102, 47001)}
GROUPS = {"hpc": (47001, ["alice", "bob"]), "gpu": (47002, ["alice"])}


def free_port():
    base = 32000 + (os.getpid() % 100) * 20
    for port in range(base, base + 20):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in %d-%d" % (base, base + 19))


class Slapd(object):
    def __init__(self, workdir, keys, sssd_password="sssd-bind-pw", admin_password="admin-pw", host="127.0.0.1",
                 tls=None):
        """tls: (certificate file, key file): ldaps:// on `host` (an address pods reach, for the real node)."""
        self.host, self.tls = host, tls
        self.dir = workdir
        self.sssd_password = sssd_password
        self.admin_password = admin_password
        self.keys = keys
        self.port = None
        self.proc = None

    @property
    def uri(self):
        return "%s://%s:%d" % ("ldaps" if self.tls else "ldap", self.host, self.port)

    @property
    def admin_uri(self):
        """What the tests' ldap tools use: loopback when it listens there (no TLS to set up for them)."""
        return self.uri if not self.tls else "ldap://127.0.0.1:%d" % (self.port + 1)

    def _listen(self):
        return self.uri + "/" + ((" ldap://127.0.0.1:%d/" % (self.port + 1)) if self.tls else "")

    def start(self, timeout=60):
        conf, data, run = (os.path.join(self.dir, n) for n in ("slapd.d", "data", "run"))
        for d in (conf, data, run):
            os.makedirs(d, mode=0o700, exist_ok=True)
        lpk = os.path.join(self.dir, "openssh-lpk.ldif")
        with open(lpk, "w") as f:
            f.write(OPENSSH_LPK)
        config = os.path.join(self.dir, "config.ldif")
        with open(config, "w") as f:
            text = CONFIG.format(run=run, schemas=SCHEMAS, lpk=lpk, data=data, suffix=SUFFIX, admin=ADMIN,
                                 admin_password=self.admin_password, sssd=SSSD_DN)
            if self.tls:
                text = text.replace("olcArgsFile: %s/slapd.args\n" % run, "olcArgsFile: %s/slapd.args\n"
                                    "olcTLSCertificateFile: %s\nolcTLSCertificateKeyFile: %s\n" % ((run,) + self.tls))
            f.write(text)
        subprocess.run(["slapadd", "-n0", "-F", conf, "-l", config], check=True, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        entries = os.path.join(self.dir, "entries.ldif")
        with open(entries, "w") as f:
            f.write(_entries(self.keys, self.sssd_password))
        subprocess.run(["slapadd", "-n1", "-F", conf, "-l", entries], check=True, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _attempt in range(5):
            self.port = free_port()
            if self._launch(conf, timeout):
                return self
        raise RuntimeError("slapd did not start on loopback")

    def restart(self, timeout=60):
        """slapd again on the same directory and port (after stop()): what sssd knows as the server comes back."""
        if self._launch(os.path.join(self.dir, "slapd.d"), timeout):
            return self
        raise RuntimeError("slapd did not start again on port %d" % self.port)

    def _launch(self, conf, timeout):
        """slapd on self.port until it accepts a connection (True), or stopped again (False)."""
        # -d 0: stays in the foreground (our child, stopped by its pid) and logs nothing
        self.proc = subprocess.Popen(["slapd", "-d", "0", "-F", conf, "-h", self._listen()],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.2)
        self.stop()
        return False

    def ldap(self, tool, *args, input_text=None):
        return subprocess.run([tool, "-x", "-H", self.admin_uri, "-D", ADMIN, "-w", self.admin_password] + list(args),
                              input=input_text, universal_newlines=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=60, check=True).stdout

    def delete_user(self, name):
        self.ldap("ldapdelete", "uid=%s,ou=people,%s" % (name, SUFFIX))
        for group, (_gid, members) in GROUPS.items():
            if name in members:
                self.ldap("ldapmodify", input_text="dn: cn=%s,ou=groups,%s\nchangetype: modify\ndelete: memberUid\n"
                                                   "memberUid: %s\n" % (group, SUFFIX, name))

    def set_description(self, name, value=None):
        """A user's description attribute (None: removed): what an accessFilter may test."""
        change = "replace: description\ndescription: %s\n" % value if value else "delete: description\n"
        self.ldap("ldapmodify", "-c", input_text="dn: uid=%s,ou=people,%s\nchangetype: modify\n%s" % (
            name, SUFFIX, change))

    def set_bind_password(self, password):
        """The sssd service account's password in the directory (a rotation: SSSD still has the old one)."""
        self.ldap("ldapmodify", input_text="dn: %s\nchangetype: modify\nreplace: userPassword\nuserPassword: %s\n"
                                           % (SSSD_DN, password))
        self.sssd_password = password

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
