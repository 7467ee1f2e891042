# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sssd.conf from spec.identity.ldap, and the jail's nsswitch.conf with SSSD. Pure: text out, no I/O.

The bind password is not in the text: sssd.conf is rendered as a template whose last section is the domain, and the
SSSD container (or the local backend) appends `ldap_default_authtok = <password>` when it writes the file sssd reads
(node/sssd_config.py), so no object, diff or log of ours ever holds the password.

Fail closed, and the cache policy:
- Only keys log in (auth_provider = none): no password is ever checked or cached (cache_credentials = false).
- An entry read from the directory is trusted for entry_cache_timeout seconds (spec default 60); after that SSSD asks
  the directory again, and a user removed there is gone: `getent`, sshd's key lookup (sss_ssh_authorizedkeys) and
  PAM's account check fail, so the user cannot log in. The NSS fast cache (memcache) is off: nothing answers for a
  user without the responder, which applies that timeout.
- A directory SSSD could never reach (down, wrong bind password, bad CA) leaves nothing cached: directory users do
  not resolve and cannot log in; root and the jail's own users come from files first (nsswitch `files sss`) and keep
  their access. SSSD logs the failed bind in its domain log: "sdap_cli_connect_recv ... Unable to establish
  connection ...: Authentication Failed", then "Failed to connect, going offline".
- When the directory becomes unreachable, or refuses SSSD's bind, AFTER a user was looked up, SSSD (offline) keeps
  answering from its cache, expired entries too (measured; docs/identity.md): the login's key command
  (node/authorized_keys.py) then withholds the directory's keys (a server probe and the bind watcher's last check).
  A restarted SSSD starts empty.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import List, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import Ldap

SSSD_CONF = "sssd.conf"
DOMAIN = "directory"
# The attribute of the openssh-lpk schema that holds a user's public keys.
SSH_PUBLIC_KEY_ATTRIBUTE = "sshPublicKey"
# sss_ssh_authorizedkeys prints a user's keys from SSSD (sssd-tools; the login image and the local host).
SSS_AUTHORIZED_KEYS = "/usr/bin/sss_ssh_authorizedkeys"
# Where SSSD's clients find it (compiled into libnss_sss, pam_sss and sss_ssh_authorizedkeys): the directory the
# SSSD container shares with the login, worker and controller containers and with the jail.
SSS_PIPES_DIR = "/var/lib/sss/pipes"
SSS_STATE_DIR = "/var/lib/sss"
# Seconds libldap waits for a server before a lookup fails (then SSSD is offline and retries later).
NETWORK_TIMEOUT = 5


class SssdConfigError(SoperatorError, ValueError):
    """A value sssd's INI parser would not read back as written (a bug: spec/identity.py refuses them first)."""


def ini_value(key: str, value: str) -> str:
    """`key = value` of sssd.conf. libini_config reads a value to the end of its line with the spaces around it
    trimmed, and a line that begins with a space continues the one before: a value with a line break or another
    control character, or with a space at either end, would not read back as written."""
    text = str(value)
    if not text:
        raise SssdConfigError("sssd.conf: the value of %s is empty" % key)
    if text != text.strip(" "):
        raise SssdConfigError("sssd.conf: the value of %s begins or ends with a space" % key)
    for char in text:
        if ord(char) < 0x20 or ord(char) == 0x7f:
            raise SssdConfigError("sssd.conf: the value of %s holds the control character %r" % (key, char))
    return "%s = %s" % (key, text)


def _section(name: str, pairs: List[Tuple[str, str]]) -> List[str]:
    return ["[%s]" % name] + [ini_value(k, v) for k, v in pairs] + [""]


def render_sssd_conf(ldap: Ldap, ca_file: Optional[str] = None) -> str:
    """sssd.conf (without the bind password: see the module's doc) for `ldap`; `ca_file`: where the CA bundle of
    ldap.caConfigMap is, as SSSD sees it (None: the system's CAs). The domain is the last section."""
    # (no config_file_version: SSSD 2.13 refuses the attribute in its log, 2.8 does not need it)
    sssd = [("services", "nss, pam, ssh"), ("domains", DOMAIN)]
    nss = [("filter_users", "root"), ("filter_groups", "root"),
           # off: every lookup goes through the responder, which applies entry_cache_timeout
           ("memcache_timeout", "0")]
    pam = [("offline_credentials_expiration", "0")]
    domain = [
        ("id_provider", "ldap"),
        ("auth_provider", "none"),
        ("chpass_provider", "none"),
        ("sudo_provider", "none"),
        ("autofs_provider", "none"),
        ("access_provider", "ldap" if ldap.access_filter else "permit"),
        ("ldap_uri", ldap.uri),
        ("ldap_schema", "rfc2307"),
        ("ldap_search_base", ldap.search_base),
    ]
    if ldap.user_search_base:
        domain.append(("ldap_user_search_base", ldap.user_search_base))
    if ldap.group_search_base:
        domain.append(("ldap_group_search_base", ldap.group_search_base))
    if ldap.access_filter:
        domain += [("ldap_access_order", "filter"), ("ldap_access_filter", ldap.access_filter)]
    if ldap.bind_dn:
        domain += [("ldap_default_bind_dn", ldap.bind_dn), ("ldap_default_authtok_type", "password")]
    tls = ldap.uri.startswith("ldaps://") or ldap.start_tls
    # Always said: SSSD 2.13 (the images') defaults it to true, 2.8 (bookworm's) to false. false on ldaps:// (TLS
    # already) and on the plain ldap:// allowed to a loopback host only.
    domain.append(("ldap_id_use_start_tls", "true" if ldap.start_tls else "false"))
    if tls:
        domain.append(("ldap_tls_reqcert", "demand"))
        if ca_file:
            domain.append(("ldap_tls_cacert", ca_file))
    domain += [
        ("ldap_user_ssh_public_key", SSH_PUBLIC_KEY_ATTRIBUTE),
        ("cache_credentials", "false"),
        ("entry_cache_timeout", "%d" % ldap.entry_cache_timeout),
        ("enumerate", "false"),
        ("ldap_network_timeout", "%d" % NETWORK_TIMEOUT),
        ("ldap_opt_timeout", "%d" % NETWORK_TIMEOUT),
    ]
    lines = ["# sssd.conf of the cluster's nodes (rendered by soperator.slurm from spec.identity.ldap; the bind "
             "password is appended where sssd reads it).", ""]
    lines += _section("sssd", sssd) + _section("nss", nss) + _section("pam", pam) + _section("ssh", [])
    lines += _section("domain/%s" % DOMAIN, domain)
    return "\n".join(lines).rstrip("\n") + "\n"


def ca_bundle_problem(data) -> Optional[str]:
    """Why `data` (bytes or text) is not a PEM bundle of CA certificates libldap can load, or None."""
    from cryptography import x509
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        certs = x509.load_pem_x509_certificates(raw)
    except ValueError:
        return "is not a PEM bundle of certificates"
    if not certs:
        return "holds no certificate"
    return None


def render_nsswitch(sources):
    """nsswitch.conf of a node or the jail: users and groups from `sources` in order (["files", "sss"]). Files first:
    root and the jail's own users never wait on the directory."""
    source = " ".join(sources)
    return "".join("%s %s\n" % (("%s:" % db).ljust(12), value) for db, value in (
        ("passwd", source), ("group", source), ("shadow", "files"), ("hosts", "files dns"),
        ("networks", "files"), ("protocols", "db files"), ("services", "db files"), ("ethers", "db files"),
        ("rpc", "db files"), ("netgroup", "files")))
