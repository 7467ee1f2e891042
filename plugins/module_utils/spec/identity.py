# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A SlurmCluster's `spec.identity`: users and groups from a directory through SSSD (one place for its schema, its
rules across fields, and its model; render/sssd_conf.py writes sssd.conf from the model).

Two forms, exclusive: `ldap` (we write sssd.conf from its fields) or `sssdConfigSecret` (a ready sssd.conf the user
owns, used as it is). The bind password is never a spec value: `ldap.bindPasswordSecret` names the Secret that holds
it, and only the SSSD container reads it (render/kube_objects.py); nothing of ours formats it into text.

Every value reaches sssd.conf, whose parser (ding-libs' libini_config) reads `key = value` to the end of the line and
trims the spaces around it: the patterns below refuse line breaks, control characters and spaces at either end.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, List, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import (
    Bool, Int, Node, Obj, SpecIssue, Str, compile_pattern)

# ldap:// or ldaps://, a host name, an IPv4 address or a bracketed IPv6 address, an optional port, nothing else (a
# path, a query or a second URI would be read by libldap as more than one server or as search defaults).
LDAP_URI = r"^ldaps?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?$"
LDAP_URI_HELP = "is not an LDAP URI (ldap://host[:port] or ldaps://host[:port], one server, no path)"
# A distinguished name (RFC 4514): attribute=value pairs separated by ',' (or '+' inside one RDN); specials in a
# value escaped with '\'. One space may follow a separator; none may end a value. No control characters.
_ATTR = r"([A-Za-z][-A-Za-z0-9]*|[0-9]+(\.[0-9]+)+)"
_ESCAPED = r"\\[ ,+\"\\<>;=#]|\\[0-9A-Fa-f]{2}"
_EDGE = r"[^ ,+\"\\<>;=\x00-\x1f\x7f]|" + _ESCAPED        # a value's first and last character: no bare space
_INNER = r"[^,+\"\\<>;=\x00-\x1f\x7f]|" + _ESCAPED
_VALUE = "(%s)((%s)*(%s))?" % (_EDGE, _INNER, _EDGE)
_AVA = _ATTR + "=" + _VALUE
LDAP_DN = "^" + _AVA + "( ?[,+] ?" + _AVA + ")*$"
LDAP_DN_HELP = "is not a distinguished name (attribute=value pairs separated by ',', like dc=example,dc=com; " \
               "escape ',', '+', '\"', '\\', '<', '>', ';' and '=' in a value with '\\')"
# An LDAP filter: '(' ... ')', printable, no control characters; balanced parentheses are checked in Python.
LDAP_FILTER = r"^\([^\x00-\x1f\x7f]*\)$"
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY = r"^[-._A-Za-z0-9]+$"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
# How long SSSD trusts an entry it read before it asks the directory again (entry_cache_timeout): a user removed from
# the directory can log in for at most this long, then no more.
DEFAULT_ENTRY_CACHE_TIMEOUT = 60
MAX_ENTRY_CACHE_TIMEOUT = 86400


def uri_host_port(uri: str) -> Optional[Tuple[str, str, Optional[int]]]:
    """(scheme, host, port) of a URI that matched LDAP_URI; port None when not given."""
    match = compile_pattern(LDAP_URI).match(uri)
    if match is None:
        return None
    port = match.group(3)
    return uri.split("://", 1)[0], match.group(1), int(port[1:]) if port else None


def _port_problem(uri):
    parts = uri_host_port(uri)
    if parts is not None and parts[2] is not None and not 1 <= parts[2] <= 65535:
        return "%r: the port must be 1-65535" % uri
    return None


def filter_problem(text: str) -> Optional[str]:
    """Why `text` is not one balanced LDAP filter, or None."""
    depth = 0
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0 or (depth == 0 and index != len(text) - 1):
                return "%r is not one LDAP filter: its parentheses do not balance" % text
    if depth != 0:
        return "%r is not one LDAP filter: its parentheses do not balance" % text
    return None


def _ref(what, default_key):
    kind = "Secret" if "Secret" in what else "ConfigMap"
    return Obj("The %s: a %s in the SlurmCluster's namespace." % (what, kind), {
        "name": Str("Its name.", pattern=K8S_NAME, pattern_help="must be a lowercase DNS subdomain name",
                    max_length=253),
        "key": Str("The key that holds it.", default=default_key, pattern=SECRET_KEY,
                   pattern_help="is not a key (letters, digits, '-', '_' and '.')", max_length=253),
    }, required=("name",), optional=True)


def _dn(description):
    return Str(description, pattern=LDAP_DN, pattern_help=LDAP_DN_HELP, max_length=1024)


def identity_schema() -> Node:
    return Obj("Users and groups from a directory through SSSD on the login, worker and controller nodes: a user "
               "defined once in LDAP logs in to the login node with the sshPublicKey of their entry and runs jobs "
               "with the directory's uid, gid and groups. Give ldap (we write sssd.conf) or sssdConfigSecret (your "
               "own sssd.conf), not both; neither: users only from the jail's /etc/passwd.", {
                   "ldap": Obj("An LDAP directory (RFC 2307: posixAccount, posixGroup with memberUid; keys in "
                               "sshPublicKey of the openssh-lpk schema).", {
                                   "uri": Str("The server: ldaps://host[:port], or ldap://host[:port] with startTLS "
                                              "(plain ldap:// only to a loopback host).", pattern=LDAP_URI,
                                              pattern_help=LDAP_URI_HELP, max_length=512, checks=[_port_problem]),
                                   "searchBase": _dn("Where users and groups are looked up."),
                                   "userSearchBase": _dn("Where users are looked up (default: searchBase)."),
                                   "groupSearchBase": _dn("Where groups are looked up (default: searchBase)."),
                                   "bindDN": _dn("The DN SSSD binds as (absent: an anonymous bind)."),
                                   "bindPasswordSecret": _ref("Secret holding bindDN's password", "password"),
                                   "caConfigMap": _ref("ConfigMap holding the CA certificates (PEM) that sign "
                                                       "the server's certificate", "ca.crt"),
                                   "startTLS": Bool("Upgrade an ldap:// connection with StartTLS (required: a "
                                                    "failed upgrade fails the lookup).", default=False),
                                   "accessFilter": Str("Only users matching this LDAP filter may log in "
                                                       "(ldap_access_filter), like (memberOf=cn=hpc,ou=groups,"
                                                       "dc=example,dc=com).", pattern=LDAP_FILTER,
                                                       pattern_help="is not an LDAP filter: '(' ... ')' without "
                                                                    "control characters", max_length=4096,
                                                       checks=[filter_problem]),
                                   "entryCacheTimeout": Int("Seconds SSSD trusts a user or group it read before "
                                                            "it asks the directory again: a user removed from the "
                                                            "directory can log in for at most this long.",
                                                            minimum=1, maximum=MAX_ENTRY_CACHE_TIMEOUT,
                                                            default=DEFAULT_ENTRY_CACHE_TIMEOUT),
                               }, required=("uri", "searchBase"), optional=True),
                   "sssdConfigSecret": _ref("Secret holding a complete sssd.conf you own (used as it is; it must "
                                            "enable the nss, pam and ssh services)", "sssd.conf"),
               }, cel=CEL_RULES)


CEL_RULES = [
    ("!(has(self.ldap) && has(self.sssdConfigSecret))", "set at most one of ldap or sssdConfigSecret"),
    ("!has(self.ldap) || has(self.ldap.bindDN) == has(self.ldap.bindPasswordSecret)",
     "ldap.bindDN and ldap.bindPasswordSecret go together (neither: an anonymous bind)", ".ldap.bindPasswordSecret"),
    ("!has(self.ldap) || !self.ldap.startTLS || self.ldap.uri.startsWith('ldap://')",
     "ldap.startTLS upgrades an ldap:// connection; an ldaps:// one is TLS already", ".ldap.startTLS"),
]


def _loopback(uri):
    parts = uri_host_port(uri)
    return parts is not None and parts[1].lower() in LOOPBACK_HOSTS


def identity_issues(cluster_label: str, identity: Any) -> List[SpecIssue]:
    """Rules of spec.identity across its fields (what CEL_RULES say, each at its own path, and what CEL cannot)."""
    issues: List[SpecIssue] = []
    if not isinstance(identity, dict):
        return issues
    path = "%s spec.identity" % cluster_label
    ldap = identity.get("ldap")
    if isinstance(ldap, dict) and identity.get("sssdConfigSecret") is not None:
        issues.append(SpecIssue(path + ".sssdConfigSecret", "set at most one of ldap or sssdConfigSecret: with "
                                "your own sssd.conf the ldap fields would not be used"))
    if not isinstance(ldap, dict):
        return issues
    uri = ldap.get("uri")
    if (ldap.get("bindDN") is None) != (ldap.get("bindPasswordSecret") is None):
        missing = "bindPasswordSecret" if ldap.get("bindDN") is not None else "bindDN"
        issues.append(SpecIssue("%s.ldap.%s" % (path, missing), "is required with ldap.%s (neither: an anonymous "
                                "bind)" % ("bindDN" if missing == "bindPasswordSecret" else "bindPasswordSecret")))
    if not isinstance(uri, str) or uri_host_port(uri) is None:
        return issues
    tls = uri.startswith("ldaps://") or ldap.get("startTLS") is True
    if ldap.get("startTLS") is True and uri.startswith("ldaps://"):
        issues.append(SpecIssue(path + ".ldap.startTLS", "upgrades an ldap:// connection; %r is TLS already" % uri))
    if not tls and not _loopback(uri):
        issues.append(SpecIssue(path + ".ldap.uri", "%r is plain LDAP to another host: use ldaps://, or startTLS, "
                                "so that lookups and the bind password are not sent in clear text" % uri))
    if not tls and ldap.get("caConfigMap") is not None:
        issues.append(SpecIssue(path + ".ldap.caConfigMap", "is used only over TLS (ldaps:// or startTLS), and %r "
                                "is plain LDAP" % uri))
    return issues


def identity_model(spec: Any) -> Optional[m.Identity]:
    """spec.identity of a validated SlurmCluster spec, or None when it is off."""
    identity = spec.get("identity") or {}
    ldap, own = identity.get("ldap"), identity.get("sssdConfigSecret")
    if own is not None:
        return m.Identity(sssd_config_secret=m.PasswordSecretRef(own["name"], own["key"]))
    if ldap is None:
        return None

    def ref(value):
        return m.PasswordSecretRef(value["name"], value["key"]) if value is not None else None

    return m.Identity(ldap=m.Ldap(
        uri=ldap["uri"], search_base=ldap["searchBase"], user_search_base=ldap.get("userSearchBase"),
        group_search_base=ldap.get("groupSearchBase"), bind_dn=ldap.get("bindDN"),
        bind_password_secret=ref(ldap.get("bindPasswordSecret")), ca_config_map=ref(ldap.get("caConfigMap")),
        start_tls=ldap["startTLS"], access_filter=ldap.get("accessFilter"),
        entry_cache_timeout=ldap["entryCacheTimeout"]))
