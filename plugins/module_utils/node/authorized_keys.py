# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sshd's AuthorizedKeysCommand on a login node with spec.identity: a user's keys are the cluster's
(`<keys_dir>/<user>`, the authorized-keys ConfigMap: root's) and then the directory's (sss_ssh_authorizedkeys: the
sshPublicKey of the user's LDAP entry). sshd allows one command, and the ConfigMap's directory (mode 0777 from the
kubelet) cannot be an AuthorizedKeysFile under StrictModes: this program prints both. The local backend runs it too.

    authorized_keys.py KEYS_DIR USER [DIRECTORY_FILE [BIND_STATUS_FILE]]
    authorized_keys.py --watch-bind SSSD_CONF [DIRECTORY_FILE [BIND_STATUS_FILE]]   (root, beside sssd)

Fails closed. SSSD, once offline, keeps answering from its cache, expired entries too (a user looked up before the
directory went away still resolves, with their keys). So the directory's keys are printed only when the directory
answers NOW: a bounded probe of the servers SSSD uses (DIRECTORY_FILE, written next to SSSD's pipes from the sssd.conf
SSSD reads: node/sssd_config.py): a TCP connection, TLS for ldaps:// (or StartTLS when sssd.conf asks for it),
verified against the CA sssd.conf names unless sssd.conf itself skips the check (ldap_tls_reqcert never/allow/try),
then an anonymous LDAP bind request that must get a BindResponse (any result: the server answers LDAP). When no
server answers (or the file is missing), only the cluster's keys print, and one line on stderr (sshd's log, the
login pod's log) says why. A user name that is not a plain name prints nothing; root's keys are never the
directory's. Standard library only (node/); runs as AuthorizedKeysCommandUser (nobody).

SSSD's own bind, too. A server that answers is not enough: when the bind password changes in the directory after
users were looked up, SSSD cannot bind, goes offline and answers from its cache while the server answers LDAP. SSSD
says whether it is online only over the system D-Bus (sssctl domain-status: InfoPipe), which a pod has not, and the
key command (nobody) cannot read the password. So `--watch-bind`, run as root beside sssd (the login's SSSD
container; the local cluster's own daemon), binds every WATCH_INTERVAL seconds as sssd.conf's ldap_default_bind_dn
with its ldap_default_authtok, the very password SSSD holds, and writes the outcome (no secret: ok, the time, why
not) to BIND_STATUS_FILE beside the pipes. With a bind DN, the key command offers the directory's keys only when
that file says the bind succeeded less than STATUS_MAX_AGE seconds ago; a refused bind, a missing or stale file:
the cluster's keys only, and the line on stderr says why. The watcher logs each change of the outcome on stderr.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time

SSS_AUTHORIZED_KEYS = "/usr/bin/sss_ssh_authorizedkeys"
# The servers SSSD talks to, as node/sssd_config.py writes them (keep the two in step): beside SSSD's pipes, which the
# SSSD container shares with the login container (and the local backend binds to the cluster's own).
DIRECTORY_FILE = "/var/lib/sss/pipes/soperator-directory.json"
# What --watch-bind writes, beside it: {"at": epoch seconds, "ok": bool, "why": text}.
BIND_STATUS_FILE = "/var/lib/sss/pipes/soperator-bind.json"
WATCH_INTERVAL = 5.0
# A check older than this is no check (the watcher died or hangs): three intervals and a probe's time.
STATUS_MAX_AGE = 3 * WATCH_INTERVAL + 5.0
# The names the cluster's keys are filed under, and what we hand to sss_ssh_authorizedkeys.
USER_NAME = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9_.]*\Z")
TIMEOUT = 20
PROBE_TIMEOUT = 5.0
STARTTLS_OID = b"1.3.6.1.4.1.1466.20037"
NO_VERIFY = ("never", "allow", "try")


def cluster_keys(keys_dir, user):
    """The content of keys_dir/user (b"" when there is none); the name is one plain component."""
    if not USER_NAME.match(user):
        return b""
    try:
        with open(os.path.join(keys_dir, user), "rb") as f:
            return f.read()
    except OSError:
        return b""


def directory_keys(user, program=SSS_AUTHORIZED_KEYS):
    """The user's keys from SSSD (b"" when SSSD does not know them, fails or does not answer)."""
    if not USER_NAME.match(user) or user == "root":
        return b""
    try:
        proc = subprocess.run([program, user], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return b""
    return proc.stdout if proc.returncode == 0 else b""


class ProbeError(Exception):
    pass


def _length(n):
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _tlv(tag, body):
    return bytes([tag]) + _length(len(body)) + body


def ldap_message(message_id, op):
    """An LDAPMessage (RFC 4511) with `op`, BER-encoded."""
    return _tlv(0x30, _tlv(0x02, bytes([message_id])) + op)


def bind_request(dn=b"", password=b""):
    """A simple BindRequest (LDAPv3); empty DN and password: anonymous."""
    return _tlv(0x60, _tlv(0x02, b"\x03") + _tlv(0x04, dn) + _tlv(0x80, password))


ANONYMOUS_BIND = bind_request()
# The result codes a refused bind gets most often (RFC 4511), to name them in the log.
RESULT_NAMES = {32: "noSuchObject", 48: "inappropriateAuthentication", 49: "invalidCredentials",
                50: "insufficientAccessRights", 53: "unwillingToPerform"}
START_TLS = _tlv(0x77, _tlv(0x80, STARTTLS_OID))


def _read_tlv(data, at):
    """(tag, start of the value, end of the value) of the element at `at`; ProbeError when `data` is short."""
    if at + 2 > len(data):
        raise ProbeError("a truncated LDAP message")
    tag, first = data[at], data[at + 1]
    at += 2
    if first & 0x80:
        count = first & 0x7f
        if count == 0 or count > 4 or at + count > len(data):
            raise ProbeError("a malformed LDAP message")
        size = int.from_bytes(data[at:at + count], "big")
        at += count
    else:
        size = first
    if at + size > len(data):
        raise ProbeError("a truncated LDAP message")
    return tag, at, at + size


def read_response(sock, deadline):
    """(protocolOp tag, resultCode) of the next LDAPMessage on `sock`."""
    data = b""
    while True:
        if data[:1] not in (b"", b"\x30"):
            raise ProbeError("an answer that is not LDAP")
        try:
            _tag, start, end = _read_tlv(data, 0)
            break
        except ProbeError:
            if len(data) > 65536:
                raise
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = sock.recv(4096)
        if not chunk:
            raise ProbeError("the server closed the connection")
        data += chunk
    _tag, _start, after_id = _read_tlv(data[:end], start)
    op, op_start, _op_end = _read_tlv(data[:end], after_id)
    code_tag, code_start, code_end = _read_tlv(data[:end], op_start)
    if code_tag != 0x0a or code_end == code_start:
        raise ProbeError("an LDAP answer without a result code")
    return op, int.from_bytes(data[code_start:code_end], "big")


def split_uri(uri):
    """(scheme, host, port) of ldap[s]://host[:port][/]."""
    match = re.match(r"(ldaps?)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+)(?::([0-9]{1,5}))?/?\Z", uri.strip())
    if not match:
        raise ProbeError("%r is not an ldap:// or ldaps:// URI" % uri)
    scheme, host, port = match.groups()
    return scheme, host.strip("[]"), int(port) if port else (636 if scheme == "ldaps" else 389)


def _tls_context(directory):
    reqcert = (directory.get("tls_reqcert") or "demand").lower()
    if reqcert in NO_VERIFY:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    ca = directory.get("ca_file")
    context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    # No stricter than SSSD's libldap: Python 3.13 on adds X.509 strict checks (a CA-signed certificate without an
    # Authority Key Identifier fails them) that OpenSSL's default verification, and so SSSD, does not make.
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    return context


def probe(uri, directory, timeout=PROBE_TIMEOUT, bind=None):
    """None when the LDAP server at `uri` answers an anonymous bind request within `timeout` seconds (over TLS as
    sssd.conf has it); otherwise why not, in a few words. `bind`: (dn, password) as text: that bind must succeed
    (result 0); the password is never part of the answer."""
    deadline = time.monotonic() + timeout
    try:
        scheme, host, port = split_uri(uri)
        sock = socket.create_connection((host, port), timeout=timeout)
    except ProbeError as e:
        return str(e)
    except OSError as e:
        return "connect: %s" % (e.strerror or e)
    try:
        message_id = 1
        if scheme == "ldap" and directory.get("start_tls"):
            sock.sendall(ldap_message(message_id, START_TLS))
            message_id += 1
            op, code = read_response(sock, deadline)
            if op != 0x78 or code != 0:
                return "StartTLS refused (result %d)" % code
        if scheme == "ldaps" or directory.get("start_tls"):
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock = _tls_context(directory).wrap_socket(sock, server_hostname=host)
        request = ANONYMOUS_BIND if bind is None else bind_request(bind[0].encode("utf-8"), bind[1].encode("utf-8"))
        sock.sendall(ldap_message(message_id, request))
        op, code = read_response(sock, deadline)
        if op != 0x61:
            return "no bind response"
        if bind is not None and code != 0:
            return "bind as %s refused: result %d (%s)" % (bind[0], code, RESULT_NAMES.get(code, "see RFC 4511"))
        try:
            sock.sendall(ldap_message(message_id + 1, b"\x42\x00"))   # unbind
        except OSError:
            pass
        return None
    except ssl.SSLError as e:
        return "TLS: %s" % (e.reason or e)
    except socket.timeout:
        return "no answer within %gs" % timeout
    except (OSError, ProbeError) as e:
        return str(e.strerror if isinstance(e, OSError) and e.strerror else e)
    finally:
        sock.close()


def read_directory(path=DIRECTORY_FILE):
    """(description, None) of the directory SSSD uses, or (None, why not)."""
    try:
        with open(path) as f:
            directory = json.load(f)
        uris = [str(u) for u in directory.get("uris") or []]
    except (OSError, ValueError, AttributeError) as e:
        return None, "no description of the directory at %s (%s)" % (path, getattr(e, "strerror", None) or e)
    if not uris:
        return None, "no LDAP server named in %s" % path
    return directory, None


def first_answer(directory, timeout=PROBE_TIMEOUT, bind=None):
    """None when one of the directory's servers (at most 4) answers (and takes `bind`); otherwise why not."""
    uris = [str(u) for u in directory.get("uris") or []][:4]
    reasons = []
    for uri in uris:
        why = probe(uri, directory, timeout, bind)
        if why is None:
            return None
        reasons.append("%s: %s" % (uri, why))
    return "; ".join(reasons)


def bind_refused(directory, status_path=BIND_STATUS_FILE, now=None):
    """None when SSSD binds anonymously, or the watcher saw its bind succeed less than STATUS_MAX_AGE seconds ago;
    otherwise why not."""
    dn = directory.get("bind_dn")
    if not dn:
        return None
    now = time.time() if now is None else now
    try:
        with open(status_path) as f:
            status = json.load(f)
        at, ok, why = float(status["at"]), status["ok"] is True, str(status.get("why") or "")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return "no check of SSSD's bind as %s at %s (%s)" % (dn, status_path, getattr(e, "strerror", None) or e)
    if not now - STATUS_MAX_AGE <= at <= now + WATCH_INTERVAL:
        return "the last check of SSSD's bind as %s is %d s old (the watcher beside sssd is not running)" % (
            dn, now - at)
    if not ok:
        return "SSSD cannot bind to the directory (%s)" % why
    return None


def directory_down(path=DIRECTORY_FILE, timeout=PROBE_TIMEOUT, status_path=BIND_STATUS_FILE):
    """None when one of the directory's servers answers now and SSSD's bind works; otherwise the line to log
    (without the user)."""
    directory, why = read_directory(path)
    if directory is None:
        return why
    why = first_answer(directory, timeout)
    if why is not None:
        return "directory %s does not answer (%s)" % (", ".join(directory["uris"][:4]), why)
    return bind_refused(directory, status_path)


def sssd_bind(config_text):
    """(dn, password) of the first domain of sssd.conf `config_text` that binds with a password, or None (an
    anonymous bind; a bind this check cannot make, such as an obfuscated password, is None too: the server probe
    alone then gates the keys)."""
    import configparser
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(config_text)
    except configparser.Error:
        return None
    for section in parser.sections():
        if not section.startswith("domain/"):
            continue
        options = dict(parser.items(section))
        dn, password = options.get("ldap_default_bind_dn"), options.get("ldap_default_authtok")
        if dn and password and options.get("ldap_default_authtok_type", "password").strip() == "password":
            return dn.strip(), password.strip()
    return None


def write_status(path, ok, why):
    """{"at", "ok", "why"} at `path` (0644) through a new file renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, json.dumps({"at": time.time(), "ok": ok, "why": why}, sort_keys=True).encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def check_bind_once(config_path, directory_path=DIRECTORY_FILE, timeout=PROBE_TIMEOUT):
    """(ok, why) of a bind as SSSD binds now: the DN and password of `config_path` (the sssd.conf sssd reads)."""
    try:
        with open(config_path) as f:
            bind = sssd_bind(f.read())
    except OSError as e:
        return False, "cannot read %s (%s)" % (config_path, e.strerror or e)
    if bind is None:
        return True, "no bind DN with a password in %s" % config_path
    directory, why = read_directory(directory_path)
    if directory is None:
        return False, why
    why = first_answer(directory, timeout, bind)
    return why is None, why or "bind as %s accepted" % bind[0]


def watch_bind(config_path, directory_path=DIRECTORY_FILE, status_path=BIND_STATUS_FILE, interval=WATCH_INTERVAL,
               rounds=None):
    """Check SSSD's bind every `interval` seconds (forever, or `rounds` times), write each outcome to `status_path`
    and log each change on stderr."""
    last = None
    done = 0
    while rounds is None or done < rounds:
        started = time.monotonic()
        ok, why = check_bind_once(config_path, directory_path)
        write_status(status_path, ok, why)
        if (ok, why) != last:
            sys.stderr.write("sssd-bind-check: %s\n" % (
                why if ok else "SSSD cannot bind to the directory: %s; logins with the directory's keys are "
                               "refused until it can (fail closed)" % why))
            sys.stderr.flush()
            last = (ok, why)
        done += 1
        if rounds is None or done < rounds:
            time.sleep(max(0.0, interval - (time.monotonic() - started)))


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: authorized_keys.py KEYS_DIR USER [DIRECTORY_FILE [BIND_STATUS_FILE]]\n"
             "       authorized_keys.py --watch-bind SSSD_CONF [DIRECTORY_FILE [BIND_STATUS_FILE]]\n")
    if args in (["-h"], ["--help"]):
        sys.stdout.write(usage)
        return 0
    if len(args) not in (2, 3, 4):
        sys.stderr.write(usage)
        return 2
    if args[0] == "--watch-bind":
        watch_bind(*args[1:])
        return 0
    keys_dir, user = args[:2]
    out = cluster_keys(keys_dir, user)
    if out and not out.endswith(b"\n"):
        out += b"\n"
    if USER_NAME.match(user) and user != "root":
        files = args[2:] + [DIRECTORY_FILE, BIND_STATUS_FILE][len(args) - 2:]
        down = directory_down(files[0], PROBE_TIMEOUT, files[1])
        if down is None:
            out += directory_keys(user, SSS_AUTHORIZED_KEYS)
        else:
            sys.stderr.write("authorized-keys: %s: the directory's keys of %s are not offered (fail closed; the "
                             "cluster's keys still are)\n" % (down, user))
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
