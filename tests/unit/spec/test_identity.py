"""spec.identity (spec/identity.py): what the spec accepts and refuses, each refusal with its field path, and the
model it gives. sssd.conf itself: tests/unit/render/test_sssd_conf.py; against real sssd and slapd: tests/slurm."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.identity import filter_problem
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

from specs import documents

CPU = ("cpu", {"replicas": 2})
LDAP = {"uri": "ldaps://ldap.example.com", "searchBase": "dc=example,dc=com",
        "bindDN": "cn=sssd,ou=services,dc=example,dc=com", "bindPasswordSecret": {"name": "ldap-bind"},
        "caConfigMap": {"name": "ldap-ca"}}
PATH = "SlurmCluster/c spec.identity"


def model_of(identity):
    return spec.build_model(documents(CPU, identity=identity))


def issues_of(identity):
    with pytest.raises(SpecError) as e:
        model_of(identity)
    return dict((i.path, i.message) for i in e.value.issues)


def test_no_identity_is_off():
    assert spec.build_model(documents(CPU)).identity is None
    assert model_of({}).identity is None


def test_ldap_gives_the_model_with_defaults():
    ident = model_of({"ldap": LDAP}).identity
    ldap = ident.ldap
    assert ident.sssd_config_secret is None
    assert (ldap.uri, ldap.search_base, ldap.bind_dn) == (LDAP["uri"], LDAP["searchBase"], LDAP["bindDN"])
    assert (ldap.bind_password_secret.name, ldap.bind_password_secret.key) == ("ldap-bind", "password")
    assert (ldap.ca_config_map.name, ldap.ca_config_map.key) == ("ldap-ca", "ca.crt")
    assert (ldap.start_tls, ldap.access_filter, ldap.entry_cache_timeout) == (False, None, 60)


def test_anonymous_bind_and_own_sssd_conf():
    anon = model_of({"ldap": {"uri": "ldaps://10.0.0.5:636", "searchBase": "dc=x"}}).identity.ldap
    assert anon.bind_dn is None and anon.bind_password_secret is None
    own = model_of({"sssdConfigSecret": {"name": "my-sssd"}}).identity
    assert own.ldap is None and (own.sssd_config_secret.name, own.sssd_config_secret.key) == ("my-sssd", "sssd.conf")


@pytest.mark.parametrize("uri", ["ldaps://ldap.example.com:636", "ldaps://[fd00::5]:636", "ldap://127.0.0.1:3890",
                                 "ldap://localhost/", "ldap://[::1]:389"])
def test_uris_accepted(uri):
    assert model_of({"ldap": dict(LDAP, uri=uri, caConfigMap=None) if uri.startswith("ldap:")
                     else dict(LDAP, uri=uri)}).identity.ldap.uri == uri


@pytest.mark.parametrize("uri, fragment", [
    ("http://ldap.example.com", "is not an LDAP URI"),
    ("ldaps://ldap.example.com/dc=x?uid", "is not an LDAP URI"),
    ("ldaps://a.example.com ldaps://b.example.com", "is not an LDAP URI"),
    ("ldaps://ldap.example.com\n", "is not an LDAP URI"),
    ("ldaps://ldap.example.com:70000", "the port must be 1-65535"),
    ("ldap://ldap.example.com", "plain LDAP to another host"),
])
def test_bad_uris_name_the_field(uri, fragment):
    got = issues_of({"ldap": dict(LDAP, uri=uri, caConfigMap=None)})
    assert fragment in got[PATH + ".ldap.uri"]


@pytest.mark.parametrize("dn", ["dc=example,dc=com", "cn=Smith\\, John,ou=people,dc=example,dc=com",
                                "uid=a+cn=b,dc=x", "dc=example, dc=com", "2.5.4.3=x,dc=y", "cn=\\23hash,dc=x"])
def test_dns_accepted(dn):
    assert model_of({"ldap": dict(LDAP, searchBase=dn)}).identity.ldap.search_base == dn


@pytest.mark.parametrize("dn", ["example.com", "dc=example,,dc=com", "dc=exa,mple", "dc=x\ncn=y", "dc=x ",
                                " dc=x", "dc=x;cn=y", "cn=a\tb,dc=x", "dc=", "dc=x,"])
def test_bad_dns_name_the_field(dn):
    got = issues_of({"ldap": dict(LDAP, bindDN=dn, userSearchBase=dn)})
    assert "is not a distinguished name" in got[PATH + ".ldap.bindDN"]
    assert "is not a distinguished name" in got[PATH + ".ldap.userSearchBase"]


def test_the_two_forms_are_exclusive():
    got = issues_of({"ldap": LDAP, "sssdConfigSecret": {"name": "mine"}})
    assert "at most one of ldap or sssdConfigSecret" in got[PATH + ".sssdConfigSecret"]


def test_bind_dn_and_password_secret_go_together():
    no_secret = dict(LDAP)
    del no_secret["bindPasswordSecret"]
    assert "is required with ldap.bindDN" in issues_of({"ldap": no_secret})[PATH + ".ldap.bindPasswordSecret"]
    no_dn = dict(LDAP)
    del no_dn["bindDN"]
    assert "is required with ldap.bindPasswordSecret" in issues_of({"ldap": no_dn})[PATH + ".ldap.bindDN"]


def test_tls_rules():
    got = issues_of({"ldap": dict(LDAP, startTLS=True)})
    assert "TLS already" in got[PATH + ".ldap.startTLS"]
    got = issues_of({"ldap": dict(LDAP, uri="ldap://127.0.0.1")})
    assert "used only over TLS" in got[PATH + ".ldap.caConfigMap"]
    # ldap:// with StartTLS to another host, with a CA: fine
    ok = model_of({"ldap": dict(LDAP, uri="ldap://ldap.example.com", startTLS=True)}).identity.ldap
    assert ok.start_tls


def test_refs_and_bounds():
    got = issues_of({"ldap": dict(LDAP, bindPasswordSecret={"name": "Bad_Name", "key": "a/b"},
                                  entryCacheTimeout=0)})
    assert "DNS subdomain" in got[PATH + ".ldap.bindPasswordSecret.name"]
    assert "is not a key" in got[PATH + ".ldap.bindPasswordSecret.key"]
    assert ">= 1" in got[PATH + ".ldap.entryCacheTimeout"]
    assert "unknown field" in issues_of({"ldap": dict(LDAP, bindPassword="hunter2")})[PATH + ".ldap.bindPassword"]
    assert "is required" in issues_of({"ldap": {"uri": "ldaps://x"}})[PATH + ".ldap.searchBase"]


@pytest.mark.parametrize("text, ok", [("(memberOf=cn=hpc,dc=x)", True), ("(&(a=b)(c=d))", True),
                                      ("(a=\\29)", True), ("(a=b))(", False), ("((a=b)", False),
                                      ("(a=b)(c=d)", False)])
def test_access_filter(text, ok):
    assert (filter_problem(text) is None) == ok
    if ok:
        assert model_of({"ldap": dict(LDAP, accessFilter=text)}).identity.ldap.access_filter == text
    else:
        assert "LDAP filter" in issues_of({"ldap": dict(LDAP, accessFilter=text)})[PATH + ".ldap.accessFilter"]


def test_newline_in_filter_refused():
    got = issues_of({"ldap": dict(LDAP, accessFilter="(a=b\n)")})
    assert "not an LDAP filter" in got[PATH + ".ldap.accessFilter"]
