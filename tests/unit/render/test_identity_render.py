"""spec.identity rendered: sssd.conf (render/sssd_conf.py), sshd's key lookup, the jail's nsswitch.conf and the
Kubernetes objects (render/identity_kube.py). Real sssd reads the rendered file in tests/slurm/test_identity_ldap.py."""
import configparser
import json

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import (
    SssdConfigError, ini_value, render_nsswitch, render_sssd_conf)
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import Ldap

from specs import documents

CPU = ("cpu", {"replicas": 2})
GPU = ("gpu", {"maxReplicas": 3, "ephemeral": {"enabled": True, "minReplicas": 1}})
LDAP = {"uri": "ldaps://ldap.example.com", "searchBase": "dc=example,dc=com",
        "bindDN": "cn=sssd,ou=services,dc=example,dc=com", "bindPasswordSecret": {"name": "ldap-bind", "key": "pw"},
        "caConfigMap": {"name": "ldap-ca"}, "accessFilter": "(memberOf=cn=hpc,ou=groups,dc=example,dc=com)",
        "entryCacheTimeout": 45}


def read_ini(text):
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",), comment_prefixes=("#",))
    parser.read_string(text)
    return parser


def model_of(identity, *node_sets):
    return spec.build_model(documents(*(node_sets or (CPU,)), identity=identity))


def objects_of(model):
    material = rk.placeholder_secret_material(model)
    return rk.render_manifests(model, render_slurm_configs(model), material)


def by_name(objects, kind):
    return dict((o["metadata"]["name"], o) for o in objects if o["kind"] == kind)


def test_sssd_conf_reads_back_with_the_fail_closed_settings():
    ldap = model_of({"ldap": LDAP}).identity.ldap
    ini = read_ini(render_sssd_conf(ldap, "/etc/soperator/ldap-ca/ca.crt"))
    assert ini.sections() == ["sssd", "nss", "pam", "ssh", "domain/directory"]
    assert ini["sssd"]["services"] == "nss, pam, ssh" and ini["sssd"]["domains"] == "directory"
    assert ini["nss"]["memcache_timeout"] == "0"
    dom = ini["domain/directory"]
    assert {k: dom[k] for k in ("id_provider", "auth_provider", "access_provider", "ldap_uri", "ldap_search_base",
                                "ldap_default_bind_dn", "ldap_tls_reqcert", "ldap_tls_cacert",
                                "ldap_user_ssh_public_key", "cache_credentials", "entry_cache_timeout",
                                "ldap_access_filter", "ldap_schema")} == {
        "id_provider": "ldap", "auth_provider": "none", "access_provider": "ldap",
        "ldap_uri": "ldaps://ldap.example.com", "ldap_search_base": "dc=example,dc=com",
        "ldap_default_bind_dn": "cn=sssd,ou=services,dc=example,dc=com", "ldap_tls_reqcert": "demand",
        "ldap_tls_cacert": "/etc/soperator/ldap-ca/ca.crt", "ldap_user_ssh_public_key": "sshPublicKey",
        "cache_credentials": "false", "entry_cache_timeout": "45",
        "ldap_access_filter": "(memberOf=cn=hpc,ou=groups,dc=example,dc=com)", "ldap_schema": "rfc2307"}
    assert "ldap_default_authtok" not in dom          # the password is appended where sssd reads the file


def test_anonymous_plain_loopback_has_no_bind_and_no_tls():
    ldap = model_of({"ldap": {"uri": "ldap://127.0.0.1:3890", "searchBase": "dc=x"}}).identity.ldap
    dom = read_ini(render_sssd_conf(ldap))["domain/directory"]
    assert "ldap_default_bind_dn" not in dom and "ldap_tls_reqcert" not in dom
    assert dom["access_provider"] == "permit"


def test_start_tls_is_required_not_opportunistic():
    ldap = model_of({"ldap": dict(LDAP, uri="ldap://ldap.example.com", startTLS=True)}).identity.ldap
    dom = read_ini(render_sssd_conf(ldap))["domain/directory"]
    assert dom["ldap_id_use_start_tls"] == "true" and dom["ldap_tls_reqcert"] == "demand"
    # said even when off: SSSD 2.13 (the images') would otherwise try StartTLS on every ldap:// and ldaps:// server
    for uri in ("ldaps://ldap.example.com", "ldap://127.0.0.1:389"):
        fields = dict((k, v) for k, v in LDAP.items() if uri.startswith("ldaps") or k != "caConfigMap")
        ldap = model_of({"ldap": dict(fields, uri=uri)}).identity.ldap
        assert read_ini(render_sssd_conf(ldap))["domain/directory"]["ldap_id_use_start_tls"] == "false"


@pytest.mark.parametrize("value", ["a\nb", "a\rb", " a", "a ", "", "a\x00b", "a\x7f"])
def test_values_that_would_not_read_back_are_refused(value):
    with pytest.raises(SssdConfigError):
        ini_value("ldap_search_base", value)


def test_a_model_built_by_hand_with_a_newline_is_refused():
    ldap = Ldap("ldaps://x", "dc=x\n[sssd]", None, None, None, None, None, False, None, 60)
    with pytest.raises(SssdConfigError):
        render_sssd_conf(ldap)


def test_nsswitch_files_first():
    text = render_nsswitch(["files", "sss"])
    lines = dict(line.split(":", 1) for line in text.splitlines())
    assert lines["passwd"].split() == ["files", "sss"] and lines["group"].split() == ["files", "sss"]
    assert lines["shadow"].split() == ["files"]


def test_sshd_asks_sssd_for_keys_only_with_identity():
    local = render_sshd_config("/srv/jail", "/k", "/ak", identity_keys=True)
    assert "AuthorizedKeysCommand /opt/soperator/bin/authorized-keys /ak %u" in local
    local = render_sshd_config("/srv/jail", "/k", "/ak", identity_keys=True,
                               identity_command=["/usr/bin/python3", "/s/authorized-keys.py"])
    assert "AuthorizedKeysCommand /usr/bin/python3 /s/authorized-keys.py /ak %u" in local
    assert "AuthorizedKeysCommandUser nobody" in local
    assert "AuthorizedKeysFile /ak/%u /srv/jail%h/.ssh/authorized_keys" in local     # root's keys still work
    assert "AuthorizedKeysCommand" not in render_sshd_config("/srv/jail", "/k", "/ak")
    kube = render_sshd_config("/mnt/jail", "/k", "/ak", keys_by_command=True, identity_keys=True)
    assert "AuthorizedKeysCommand /opt/soperator/bin/authorized-keys /ak %u" in kube


def test_kube_objects_with_identity():
    model = model_of({"ldap": LDAP}, CPU, GPU)
    objects = objects_of(model)
    text = json.dumps(objects)
    cm = by_name(objects, "ConfigMap")["c-sssd"]
    assert set(cm["data"]) == {"sssd.conf", "nsswitch.conf", "nsswitch-login.conf"}
    assert read_ini(cm["data"]["sssd.conf"])["domain/directory"]["ldap_tls_cacert"] == "/etc/soperator/ldap-ca/ca.crt"
    assert "extrausers" in cm["data"]["nsswitch-login.conf"] and "extrausers" not in cm["data"]["nsswitch.conf"]
    assert "ldap_default_authtok =" not in text
    sts = by_name(objects, "StatefulSet")
    for name in ("c-controller", "c-login", "cpu", "gpu"):
        pod = sts[name]["spec"]["template"]["spec"]
        containers = dict((ct["name"], ct) for ct in pod["containers"])
        assert "sssd" in containers, name
        sidecar = containers["sssd"]
        assert sidecar["image"] == pod["containers"][0]["image"]
        script = sidecar["command"][-1]
        assert "--password-file /etc/soperator/ldap-bind/password" in script and "exec /usr/sbin/sssd -i" in script
        # the servers, for the login's key command (fail closed): beside the pipes, which the login container shares
        assert "--directory-out /var/lib/sss/pipes/soperator-directory.json" in script
        assert script.startswith("install -d -m 0700 /var/lib/sss/pipes/private && ")   # an emptyDir: sssd's sockets
        # the login's key command wants the bind watcher's recent success (it binds as SSSD, with its password)
        watch = "{ /opt/soperator/bin/authorized-keys --watch-bind /etc/sssd/sssd.conf & } && exec /usr/sbin/sssd"
        assert (watch in script) == (name == "c-login")
        volumes = dict((v["name"], v) for v in pod["volumes"])
        assert volumes["ldap-bind"]["secret"] == {"secretName": "ldap-bind", "defaultMode": 0o400,
                                                  "items": [{"key": "pw", "path": "password"}]}
        assert volumes["ldap-ca"]["configMap"]["name"] == "ldap-ca"
        main_mounts = dict((m["mountPath"], m) for m in pod["containers"][0]["volumeMounts"])
        assert main_mounts["/var/lib/sss/pipes"]["name"] == "sss-pipes"
        assert main_mounts["/etc/nsswitch.conf"]["subPath"] == ("nsswitch-login.conf" if name == "c-login"
                                                                else "nsswitch.conf")
        # the login's key command probes the directory over TLS with the same CA as SSSD
        assert ("/etc/soperator/ldap-ca" in main_mounts) == (name == "c-login")
        in_jail = c.JAIL_MOUNT + "/var/lib/sss/pipes" in main_mounts
        assert in_jail == (name != "c-controller")
        if name in ("cpu", "gpu"):
            # the worker pod stays Guaranteed: every container's requests equal its limits
            assert all(ct["resources"]["requests"] == ct["resources"]["limits"] for ct in pod["containers"]
                       if "resources" in ct)
    sshd = by_name(objects, "ConfigMap")["c-sshd-config"]["data"]["sshd_config"]
    assert "AuthorizedKeysCommand /opt/soperator/bin/authorized-keys" in sshd


def test_power_pod_templates_carry_sssd_too():
    objects = objects_of(model_of({"ldap": LDAP}, CPU, GPU))
    power = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "c-power"]
    assert power and '\\"name\\": \\"sssd\\"' in json.dumps(power[0])


def test_own_sssd_conf_mounts_the_users_secret():
    objects = objects_of(model_of({"sssdConfigSecret": {"name": "mine", "key": "conf"}}))
    assert "sssd.conf" not in by_name(objects, "ConfigMap")["c-sssd"]["data"]
    pod = by_name(objects, "StatefulSet")["cpu"]["spec"]["template"]["spec"]
    volumes = dict((v["name"], v) for v in pod["volumes"])
    assert volumes["sssd-template"]["secret"]["secretName"] == "mine"
    assert "ldap-bind" not in volumes
    sidecar = [ct for ct in pod["containers"] if ct["name"] == "sssd"][0]
    assert "--password-file" not in sidecar["command"][-1]


def test_no_identity_renders_nothing_of_it():
    objects = objects_of(model_of(None))
    text = json.dumps(objects)
    assert "sssd" not in text and "sss_ssh" not in text and "authorized-keys /" not in text


def test_remediation_may_read_exactly_the_named_refs():
    rules = rk.remediation_rules(model_of({"ldap": LDAP}))
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["ldap-bind"]} in rules
    assert {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["ldap-ca"]} in rules
    assert not [r for r in rk.remediation_rules(model_of(None)) if "get" in r["verbs"] and "secrets" in r["resources"]]


def test_ca_bundle_problem():
    from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import ca_bundle_problem
    assert "not a PEM bundle" in ca_bundle_problem(b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    assert ca_bundle_problem("") is not None
