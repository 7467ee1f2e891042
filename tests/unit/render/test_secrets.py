"""Secret material: generated once, kept afterwards, valid keys, never printed."""
import copy

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: demo, namespace: slurm}
spec:
  jail: {volume: {size: 10Gi}}
  accounting: {enabled: %s}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec:
  clusterName: demo
  replicas: 1
  resources: {cpu: "2", memory: 1Gi}
"""

EXTERNAL = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: demo, namespace: slurm}
spec:
  jail: {volume: {size: 10Gi}}
  accounting:
    enabled: true
    database:
      external: {host: db.example, user: slurm, passwordSecret: {name: dbpass}}
"""

SSH_FILES = ["ssh_host_ed25519_key", "ssh_host_rsa_key", "ssh_host_ecdsa_key"]


def model(accounting=False):
    return build_model(load_documents(SPEC % ("true" if accounting else "false")))


@pytest.fixture(scope="module")
def fresh():
    return s.ensure_secret_material(model(accounting=True), {})


def test_generates_every_needed_secret(fresh):
    material, generated = fresh
    assert sorted(material) == ["demo-accounting-db", "demo-munge", "demo-ssh-host-keys"]
    assert generated == ["demo-accounting-db", "demo-munge", "demo-ssh-host-keys"]
    for values in material.values():
        for value in values.values():
            assert isinstance(value, bytes) and value


def test_munge_key_length(fresh):
    material, dummy = fresh
    assert list(material["demo-munge"]) == ["munge.key"]
    assert len(material["demo-munge"]["munge.key"]) == 1024


def test_passwords(fresh):
    material, dummy = fresh
    db = material["demo-accounting-db"]
    assert sorted(db) == ["password", "root-password"]
    for value in db.values():
        text = value.decode("ascii")
        assert len(text) == 32
        assert all(ch.isalnum() or ch in "-_" for ch in text)
    assert db["password"] != db["root-password"]


def test_ssh_host_keys_are_valid_openssh_keys(fresh):
    material, dummy = fresh
    keys = material["demo-ssh-host-keys"]
    assert sorted(keys) == sorted(SSH_FILES + [f + ".pub" for f in SSH_FILES])
    expected = {"ssh_host_ed25519_key": ed25519.Ed25519PrivateKey, "ssh_host_rsa_key": rsa.RSAPrivateKey,
                "ssh_host_ecdsa_key": ec.EllipticCurvePrivateKey}
    for name, cls in expected.items():
        assert keys[name].startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----\n")
        private = serialization.load_ssh_private_key(keys[name], password=None)
        assert isinstance(private, cls)
        public = serialization.load_ssh_public_key(keys[name + ".pub"].split(b" root@")[0])
        own = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        assert public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) == own
        assert keys[name + ".pub"].endswith(b" root@demo-login\n")
    rsa_key = serialization.load_ssh_private_key(keys["ssh_host_rsa_key"], password=None)
    assert rsa_key.key_size == 3072
    ecdsa_key = serialization.load_ssh_private_key(keys["ssh_host_ecdsa_key"], password=None)
    assert ecdsa_key.curve.name == "secp256r1"
    assert keys["ssh_host_ed25519_key.pub"].startswith(b"ssh-ed25519 ")
    assert keys["ssh_host_rsa_key.pub"].startswith(b"ssh-rsa ")
    assert keys["ssh_host_ecdsa_key.pub"].startswith(b"ecdsa-sha2-nistp256 ")


def test_keeps_existing_values(fresh):
    material, dummy = fresh
    existing = copy.deepcopy(dict(material))
    again, generated = s.ensure_secret_material(model(accounting=True), existing)
    assert generated == []
    assert dict(again) == existing


def test_generates_only_missing(fresh):
    material, dummy = fresh
    existing = copy.deepcopy(dict(material))
    del existing["demo-munge"]
    del existing["demo-accounting-db"]["root-password"]
    again, generated = s.ensure_secret_material(model(accounting=True), existing)
    assert generated == ["demo-accounting-db", "demo-munge"]
    assert again["demo-ssh-host-keys"] == material["demo-ssh-host-keys"]
    assert again["demo-accounting-db"]["password"] == material["demo-accounting-db"]["password"]
    assert again["demo-accounting-db"]["root-password"] != material["demo-accounting-db"]["root-password"]
    assert again["demo-munge"]["munge.key"] != material["demo-munge"]["munge.key"]


def test_missing_public_key_is_derived_from_the_kept_private_key(fresh):
    material, dummy = fresh
    existing = copy.deepcopy(dict(material))
    del existing["demo-ssh-host-keys"]["ssh_host_rsa_key.pub"]
    again, generated = s.ensure_secret_material(model(accounting=True), existing)
    assert generated == ["demo-ssh-host-keys"]
    assert again["demo-ssh-host-keys"] == material["demo-ssh-host-keys"]


def test_missing_private_key_regenerates_its_public_key(fresh):
    material, dummy = fresh
    existing = copy.deepcopy(dict(material))
    del existing["demo-ssh-host-keys"]["ssh_host_ed25519_key"]
    again, dummy = s.ensure_secret_material(model(accounting=True), existing)
    keys = again["demo-ssh-host-keys"]
    assert keys["ssh_host_ed25519_key"] != material["demo-ssh-host-keys"]["ssh_host_ed25519_key"]
    private = serialization.load_ssh_private_key(keys["ssh_host_ed25519_key"], password=None)
    own = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert keys["ssh_host_ed25519_key.pub"].startswith(own + b" ")
    assert keys["ssh_host_rsa_key"] == material["demo-ssh-host-keys"]["ssh_host_rsa_key"]


def test_extra_existing_keys_are_kept_and_str_values_accepted(fresh):
    material, dummy = fresh
    existing = copy.deepcopy(dict(material))
    existing["demo-munge"]["extra"] = b"x"
    existing["demo-accounting-db"]["password"] = "plain-text"
    again, generated = s.ensure_secret_material(model(accounting=True), existing)
    assert generated == []
    assert again["demo-munge"]["extra"] == b"x"
    assert again["demo-accounting-db"]["password"] == b"plain-text"


def test_no_db_secret_without_in_cluster_accounting():
    material, generated = s.ensure_secret_material(model(accounting=False), {})
    assert sorted(material) == ["demo-munge", "demo-ssh-host-keys"]
    assert generated == ["demo-munge", "demo-ssh-host-keys"]
    external = build_model(load_documents(EXTERNAL))
    assert s.needed_secret_names(external) == ["demo-munge", "demo-ssh-host-keys"]


def test_db_secret_kept_when_accounting_is_turned_off(fresh):
    material, dummy = fresh
    again, generated = s.ensure_secret_material(model(accounting=False), copy.deepcopy(dict(material)))
    assert generated == []
    assert again["demo-accounting-db"] == material["demo-accounting-db"]


def test_foreign_secrets_are_ignored(fresh):
    material, dummy = fresh
    existing = copy.deepcopy(dict(material))
    existing["other-munge"] = {"munge.key": b"k" * 1024}
    again, dummy = s.ensure_secret_material(model(accounting=True), existing)
    assert "other-munge" not in again


def test_values_never_in_repr(fresh):
    material, dummy = fresh
    text = repr(material) + str(material)
    assert "munge.key" in text
    for values in material.values():
        for value in values.values():
            assert value.decode("latin-1") not in text
            assert repr(value) not in text


def test_bad_existing_private_key_message_hides_value():
    secret_text = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key-TOPSECRET\n-----END OPENSSH PRIVATE KEY-----\n"
    existing = {"demo-ssh-host-keys": {"ssh_host_rsa_key": secret_text.encode()}}
    with pytest.raises(s.SecretMaterialError) as err:
        s.ensure_secret_material(model(), existing)
    assert "TOPSECRET" not in str(err.value)
    assert "demo-ssh-host-keys" in str(err.value)
