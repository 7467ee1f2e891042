"""spec.identity on the real API server: a Secret or ConfigMap it names but that is missing fails slurm_cluster before
anything is written (its field path in the message, nothing in the audit log); once they exist, the rendered objects
(the sssd ConfigMap, the SSSD sidecars and their mounts) are accepted by the server and applied. The bind password
never shows in the result. SSSD itself runs in tests/slurm/test_identity_*.py; pods with the images: not here."""
import copy
import json

from slurm_specs import admin_user, api
from test_slurm_cluster_real import namespace_of, present, read, writes

IDENTITY = {"ldap": {"uri": "ldaps://ldap.example.com", "searchBase": "dc=example,dc=com",
                     "bindDN": "cn=sssd,dc=example,dc=com", "bindPasswordSecret": {"name": "ldap-bind"},
                     "caConfigMap": {"name": "ldap-ca"}}}
PASSWORD = "very-secret-bind-pw"


def _ca_pem():
    """A self-signed CA certificate (PEM)."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "test ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _with_identity(docs):
    docs = copy.deepcopy(docs)
    docs[0]["spec"]["identity"] = copy.deepcopy(IDENTITY)
    return docs


def test_missing_refs_fail_with_their_fields_and_nothing_is_written(namespaced_spec, kubeconfig, audit):
    docs = _with_identity(namespaced_spec())
    namespace = namespace_of(docs)
    user = admin_user(kubeconfig)
    mark = audit.mark()
    failed = present(docs, kubeconfig, expect_failed=True)
    msg = failed["msg"]
    assert "SlurmCluster/small spec.identity.ldap.bindPasswordSecret: Secret 'ldap-bind' does not exist" in msg
    assert "spec.identity.ldap.caConfigMap: ConfigMap 'ldap-ca' does not exist" in msg
    assert writes(audit.requests(mark, user=user)) == []
    assert read(kubeconfig, "CoreV1Api.read_namespace", namespace) is None
    # check mode says the same
    assert "bindPasswordSecret" in present(docs, kubeconfig, check=True, expect_failed=True)["msg"]


def test_with_the_refs_the_sidecars_are_applied_and_the_password_never_shows(namespaced_spec, kubeconfig):
    from kubernetes import client
    docs = _with_identity(namespaced_spec())
    namespace = namespace_of(docs)
    with api(kubeconfig) as a:
        core = client.CoreV1Api(a)
        core.create_namespace({"metadata": {"name": namespace}})
        core.create_namespaced_secret(namespace, {"metadata": {"name": "ldap-bind"},
                                                  "stringData": {"other": "x"}})
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "ldap-ca"}, "data": {"ca.crt": "PEM"}})
        failed = present(docs, kubeconfig, expect_failed=True)
        assert "bindPasswordSecret: Secret 'ldap-bind' has no key 'password'" in failed["msg"]
        assert "caConfigMap: ConfigMap 'ldap-ca' key 'ca.crt' is not a PEM bundle" in failed["msg"]
        core.patch_namespaced_secret("ldap-bind", namespace, {"stringData": {"password": PASSWORD}})
        core.patch_namespaced_config_map("ldap-ca", namespace, {"data": {"ca.crt": _ca_pem()}})
    done = present(docs, kubeconfig, diff=True)
    assert done["changed"] and PASSWORD not in json.dumps(done)
    cm = read(kubeconfig, "CoreV1Api.read_namespaced_config_map", "small-sssd", namespace)
    assert "ldap_uri = ldaps://ldap.example.com" in cm.data["sssd.conf"] and PASSWORD not in cm.data["sssd.conf"]
    for name in ("small-login", "small-controller", "cpu"):
        sts = read(kubeconfig, "AppsV1Api.read_namespaced_stateful_set", name, namespace)
        pod = sts.spec.template.spec
        assert [c.name for c in pod.containers][-1] == "sssd", name
        volumes = dict((v.name, v) for v in pod.volumes)
        assert volumes["ldap-bind"].secret.secret_name == "ldap-bind"
        assert volumes["ldap-ca"].config_map.name == "ldap-ca"
    # a re-run writes nothing new
    assert not present(docs, kubeconfig)["changed"]
