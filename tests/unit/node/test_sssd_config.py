"""node/sssd_config.py (sssd.conf = template + bind password, 0600) and node/authorized_keys.py (the login's key
command with identity). The password never shows in a message."""
import os
import stat
import sys

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import authorized_keys as ak
from ansible_collections.soperator.slurm.plugins.module_utils.node import sssd_config as sc

TEMPLATE = "[sssd]\ndomains = directory\n\n[domain/directory]\nid_provider = ldap\n"


def test_password_appended_to_the_domain_section(tmp_path):
    text = sc.with_bind_password(TEMPLATE, b"s3cr=t #x\n")
    assert text.endswith("id_provider = ldap\nldap_default_authtok = s3cr=t #x\n")
    out = tmp_path / "sssd.conf"
    sc.write_config(str(out), text)
    assert stat.S_IMODE(os.stat(str(out)).st_mode) == 0o600 and out.read_text() == text


@pytest.mark.parametrize("password", [b"a\nb", b" lead", b"trail ", b"", b"\n", b"a\x00b", b"\xff\xfe"])
def test_passwords_sssd_would_not_read_back_are_refused_without_showing_them(password):
    with pytest.raises(sc.SssdConfigError) as e:
        sc.with_bind_password(TEMPLATE, password, "the bind password in /x")
    assert "/x" in str(e.value)
    if password.strip():
        assert password.decode("utf-8", "replace").strip() not in str(e.value)


def test_template_must_end_with_the_domain():
    with pytest.raises(sc.SssdConfigError):
        sc.with_bind_password("[domain/d]\na = b\n[nss]\n", b"pw")
    with pytest.raises(sc.SssdConfigError):
        sc.with_bind_password(TEMPLATE + "ldap_default_authtok = old\n", b"pw")


def test_program_writes_the_file(tmp_path):
    (tmp_path / "t").write_text(TEMPLATE)
    (tmp_path / "p").write_bytes(b"hunter2\n")
    out = tmp_path / "sssd.conf"
    os.symlink(str(tmp_path / "elsewhere"), str(out))            # a link there is replaced, never followed
    assert sc.main(["write", "--template", str(tmp_path / "t"), "--password-file", str(tmp_path / "p"),
                    "--out", str(out)]) == 0
    assert not os.path.islink(str(out)) and not (tmp_path / "elsewhere").exists()
    assert out.read_text().endswith("ldap_default_authtok = hunter2\n")


def test_program_fails_on_a_bad_password_without_printing_it(tmp_path, capsys):
    (tmp_path / "t").write_text(TEMPLATE)
    (tmp_path / "p").write_bytes(b"two\nlines-secret")
    assert sc.main(["write", "--template", str(tmp_path / "t"), "--password-file", str(tmp_path / "p"),
                    "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "lines-secret" not in err and str(tmp_path / "p") in err and not (tmp_path / "o").exists()


def test_key_command_prints_cluster_then_directory_keys(tmp_path):
    (tmp_path / "root").write_bytes(b"ssh-ed25519 AAAA root@x")
    fake = tmp_path / "sss"
    fake.write_text("#!%s\nimport sys\nprint('ssh-ed25519 BBBB ' + sys.argv[1])\n" % sys.executable)
    fake.chmod(0o755)
    assert ak.cluster_keys(str(tmp_path), "root") == b"ssh-ed25519 AAAA root@x"
    assert ak.cluster_keys(str(tmp_path), "../etc/passwd") == b""
    assert ak.directory_keys("alice", str(fake)) == b"ssh-ed25519 BBBB alice\n"
    assert ak.directory_keys("root", str(fake)) == b""            # root: the cluster's keys only
    assert ak.directory_keys("-rf", str(fake)) == b""
    assert ak.directory_keys("alice", str(tmp_path / "missing")) == b""     # no SSSD: no directory key


SSSD_CONF = """[sssd]
services = nss, ssh
domains = directory

[domain/directory]
id_provider = ldap
ldap_uri = ldaps://ldap1.example.com, ldaps://ldap2.example.com:1636
ldap_backup_uri = ldaps://backup.example.com
ldap_tls_cacert = /etc/soperator/ldap-ca/ca.crt
ldap_default_bind_dn = cn=sssd,dc=example,dc=com
ldap_default_authtok = secret%value
"""


def test_directory_description_names_the_servers_and_no_secret():
    got = sc.directory_description(SSSD_CONF)
    assert got == {"uris": ["ldaps://ldap1.example.com", "ldaps://ldap2.example.com:1636",
                            "ldaps://backup.example.com"],
                   "start_tls": False, "ca_file": "/etc/soperator/ldap-ca/ca.crt", "tls_reqcert": None,
                   "bind_dn": "cn=sssd,dc=example,dc=com"}
    assert "secret" not in repr(got)
    assert ak.sssd_bind(SSSD_CONF) == ("cn=sssd,dc=example,dc=com", "secret%value")
    assert sc.directory_description(SSSD_CONF.replace("ldap_default_authtok = secret%value\n", ""))["bind_dn"] is None
    start = sc.directory_description("[domain/x]\nldap_uri = ldap://h\nldap_id_use_start_tls = True\n")
    assert start["uris"] == ["ldap://h"] and start["start_tls"] is True
    ipa = sc.directory_description("[sssd]\ndomains = a\n[domain/a]\nid_provider = ipa\nipa_server = _srv_, ipa1.x\n")
    assert ipa["uris"] == ["ldap://ipa1.x"]
    assert sc.directory_description("not an ini [")["uris"] == []
    assert sc.DIRECTORY_FILE == ak.DIRECTORY_FILE


def test_program_writes_the_directory_file_readable_by_all(tmp_path):
    (tmp_path / "t").write_text(SSSD_CONF.replace("ldap_default_authtok = secret%value\n", ""))
    (tmp_path / "p").write_text("pw-value\n")
    assert sc.main(["write", "--template", str(tmp_path / "t"), "--password-file", str(tmp_path / "p"),
                    "--out", str(tmp_path / "o"), "--directory-out", str(tmp_path / "d.json")]) == 0
    st = os.stat(str(tmp_path / "d.json"))
    assert stat.S_IMODE(st.st_mode) == 0o644
    text = (tmp_path / "d.json").read_text()
    assert "ldap1.example.com" in text and "pw-value" not in text


class FakeLdap(object):
    """A loopback server answering each LDAPMessage it reads with `answer` (None: it reads and says nothing)."""

    def __init__(self, answer, context=None):
        import socket
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.answer, self.context = answer, context
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(5)
                if self.context is not None:
                    conn = self.context.wrap_socket(conn, server_side=True)
                if conn.recv(4096) and self.answer is not None:
                    conn.sendall(self.answer)
                    conn.recv(4096)
                else:
                    conn.recv(4096)
            except OSError:
                pass
            finally:
                conn.close()

    def close(self):
        import socket
        try:
            self.sock.shutdown(socket.SHUT_RDWR)     # wakes the accept() and stops listening (a bare close does not)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(10)


BIND_RESPONSE = ak.ldap_message(1, ak._tlv(0x61, ak._tlv(0x0a, b"\x31") + ak._tlv(0x04, b"") + ak._tlv(0x04, b"")))


def test_probe_wants_an_ldap_bind_response():
    server = FakeLdap(BIND_RESPONSE)
    try:
        assert ak.probe("ldap://127.0.0.1:%d" % server.port, {}) is None
    finally:
        server.close()
    closed = ak.probe("ldap://127.0.0.1:%d" % server.port, {})
    assert closed.startswith("connect: ") and "refused" in closed
    silent = FakeLdap(None)
    try:
        import time
        started = time.monotonic()
        why = ak.probe("ldap://127.0.0.1:%d" % silent.port, {}, timeout=1)
        assert why == "no answer within 1s" and time.monotonic() - started < 5
    finally:
        silent.close()
    http = FakeLdap(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        assert ak.probe("ldap://127.0.0.1:%d" % http.port, {}) == "an answer that is not LDAP"
    finally:
        http.close()


def test_probe_over_tls_checks_the_certificate_as_sssd_conf_says(tmp_path):
    import shutil
    import ssl
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl")
    cert, key = str(tmp_path / "c.pem"), str(tmp_path / "k.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ldap",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, timeout=60, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = FakeLdap(BIND_RESPONSE, context)
    uri = "ldaps://127.0.0.1:%d" % server.port
    try:
        assert ak.probe(uri, {"ca_file": cert}) is None
        assert ak.probe(uri, {}).startswith("TLS: ")                       # not a CA the system trusts
        assert ak.probe(uri, {"tls_reqcert": "never"}) is None            # sssd.conf itself skips the check
    finally:
        server.close()


def test_key_command_withholds_directory_keys_while_the_directory_is_down(tmp_path, monkeypatch, capsys):
    import json
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "root").write_text("ssh-ed25519 AAAA root@x\n")
    fake = tmp_path / "sss"
    fake.write_text("#!%s\nimport sys\nprint('ssh-ed25519 BBBB ' + sys.argv[1])\n" % sys.executable)
    fake.chmod(0o755)
    monkeypatch.setattr(ak, "SSS_AUTHORIZED_KEYS", str(fake))
    server = FakeLdap(BIND_RESPONSE)
    directory = tmp_path / "d.json"
    directory.write_text(json.dumps({"uris": ["ldap://127.0.0.1:%d" % server.port]}))
    try:
        assert ak.main([str(tmp_path / "keys"), "alice", str(directory)]) == 0
        assert capsys.readouterr().out == "ssh-ed25519 BBBB alice\n"
    finally:
        server.close()
    assert ak.main([str(tmp_path / "keys"), "alice", str(directory)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "authorized-keys: directory ldap://127.0.0.1:%d does not answer (" % server.port in captured.err
    assert "the directory's keys of alice are not offered (fail closed" in captured.err
    assert ak.main([str(tmp_path / "keys"), "root", str(directory)]) == 0        # root: no probe, its keys
    captured = capsys.readouterr()
    assert captured.out == "ssh-ed25519 AAAA root@x\n" and captured.err == ""
    assert ak.main([str(tmp_path / "keys"), "alice", str(tmp_path / "missing.json")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no description of the directory at" in captured.err


def _bind_answer(code):
    return ak.ldap_message(1, ak._tlv(0x61, ak._tlv(0x0a, bytes([code])) + ak._tlv(0x04, b"") + ak._tlv(0x04, b"")))


def test_the_bind_watcher_binds_as_sssd_does_and_the_key_command_follows_its_last_check(
        tmp_path, monkeypatch, capsys):
    """SSSD's bind password refused by the directory (result 49): the watcher says so (never the password), and
    the key command withholds the directory's keys; a successful check lets them through only while it is fresh."""
    import json
    (tmp_path / "keys").mkdir()
    fake = tmp_path / "sss"
    fake.write_text("#!%s\nimport sys\nprint('ssh-ed25519 BBBB ' + sys.argv[1])\n" % sys.executable)
    fake.chmod(0o755)
    monkeypatch.setattr(ak, "SSS_AUTHORIZED_KEYS", str(fake))
    config, directory, status = tmp_path / "sssd.conf", tmp_path / "d.json", tmp_path / "bind.json"
    good, refused = FakeLdap(_bind_answer(0)), FakeLdap(_bind_answer(49))
    try:
        for server, ok in ((good, True), (refused, False)):
            uri = "ldap://127.0.0.1:%d" % server.port
            config.write_text("[domain/d]\nldap_uri = %s\nldap_default_bind_dn = cn=sssd,dc=x\n"
                              "ldap_default_authtok = hunter2\n" % uri)
            directory.write_text(json.dumps(sc.directory_description(config.read_text())))
            ak.watch_bind(str(config), str(directory), str(status), interval=0, rounds=1)
            written = json.loads(status.read_text())
            assert written["ok"] is ok and "hunter2" not in status.read_text()
            assert stat.S_IMODE(os.stat(str(status)).st_mode) == 0o644
            err = capsys.readouterr().err
            assert "hunter2" not in err
            assert ak.main([str(tmp_path / "keys"), "alice", str(directory), str(status)]) == 0
            captured = capsys.readouterr()
            if ok:
                assert captured.out == "ssh-ed25519 BBBB alice\n" and captured.err == ""
            else:
                assert "SSSD cannot bind to the directory: %s: bind as cn=sssd,dc=x refused: result 49 " \
                       "(invalidCredentials)" % uri in err
                assert captured.out == ""
                assert "SSSD cannot bind to the directory (%s: bind as cn=sssd,dc=x refused: result 49 " \
                       "(invalidCredentials)): the directory's keys of alice are not offered" % uri in captured.err
        # a successful check that is too old (the watcher stopped) is no check
        status.write_text(json.dumps({"at": 1.0, "ok": True, "why": "ok"}))
        directory.write_text(json.dumps(dict(json.loads(directory.read_text()),
                                             uris=["ldap://127.0.0.1:%d" % good.port])))
        assert ak.main([str(tmp_path / "keys"), "alice", str(directory), str(status)]) == 0
        captured = capsys.readouterr()
        assert captured.out == "" and "the last check of SSSD's bind as cn=sssd,dc=x is" in captured.err
        status.unlink()
        assert ak.main([str(tmp_path / "keys"), "alice", str(directory), str(status)]) == 0
        captured = capsys.readouterr()
        assert captured.out == "" and "no check of SSSD's bind as cn=sssd,dc=x" in captured.err
        # an anonymous bind has no watcher to wait for
        directory.write_text(json.dumps({"uris": ["ldap://127.0.0.1:%d" % good.port]}))
        assert ak.main([str(tmp_path / "keys"), "alice", str(directory), str(status)]) == 0
        assert capsys.readouterr().out == "ssh-ed25519 BBBB alice\n"
    finally:
        good.close()
        refused.close()
