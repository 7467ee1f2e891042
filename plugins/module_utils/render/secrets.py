# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secret material that is generated once and then preserved: the munge key, SSH host keys, database passwords, the
JWT key of spec.rest.

`SECRET_SPECS` says which Secrets a cluster has and how each key is made; `ensure_secret_material` keeps every value
that already exists and generates only what is missing. Values never appear in a repr, a message or a log line:
`SecretMaterial` prints key names only, and nothing here formats a value into text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import secrets as _random
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (
    accounting_db_secret_name, jwt_secret_name, munge_secret_name, ssh_host_keys_secret_name)

# Keys of the Secrets (the images and render/kube_objects.py read them by these names).
MUNGE_KEY = "munge.key"
MUNGE_KEY_BYTES = 1024
SSH_HOST_KEY_TYPES = ("ed25519", "rsa", "ecdsa")
SSH_RSA_BITS = 3072
DB_PASSWORD = "password"
DB_ROOT_PASSWORD = "root-password"
PASSWORD_BYTES = 24                    # token_urlsafe(24) is exactly 32 url-safe characters
JWT_KEY_FILE = "jwt_hs256.key"         # spec.rest's HS256 key: 32 random bytes, as Slurm's jwt.html makes it
JWT_KEY_BYTES = 32


def ssh_host_key_file(key_type):
    """File name of a host key in SSH_HOST_KEY_DIR, as sshd's HostKey lines name it."""
    return "ssh_host_%s_key" % key_type


# Every file of the SSH host keys Secret: each private key, then its public key.
SSH_HOST_KEY_FILES = tuple(name for key_type in SSH_HOST_KEY_TYPES
                           for name in (ssh_host_key_file(key_type), ssh_host_key_file(key_type) + ".pub"))


# --- generators: each returns bytes; derived ones also get the values generated or kept so far -----------------

def _munge_key(_model, _values):
    return _random.token_bytes(MUNGE_KEY_BYTES)


def _jwt_key(_model, _values):
    return _random.token_bytes(JWT_KEY_BYTES)


def _password(_model, _values):
    return _random.token_urlsafe(PASSWORD_BYTES).encode("ascii")


def _new_ssh_private_key(key_type):
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    if key_type == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=SSH_RSA_BITS)
    if key_type == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    raise ValueError("unknown SSH host key type %r" % (key_type,))


def _ssh_private(key_type):
    def generate(_model, _values):
        from cryptography.hazmat.primitives import serialization
        key = _new_ssh_private_key(key_type)
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                 serialization.NoEncryption())
    return generate


def _ssh_public(key_type):
    def derive(model, values):
        from cryptography.hazmat.primitives import serialization
        try:
            key = serialization.load_ssh_private_key(values[ssh_host_key_file(key_type)], password=None)
        except (ValueError, TypeError):
            # Never include the key text in the message.
            raise SecretMaterialError("the existing %s SSH host key of %s-ssh-host-keys is not an OpenSSH private "
                                      "key" % (key_type, model.name))
        line = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        return line + (" root@%s-login\n" % model.name).encode("ascii")
    return derive


class SecretMaterialError(SoperatorError, ValueError):
    """Raised for unusable existing material. Its message names the Secret and key, never the value."""


@dataclass(frozen=True)
class KeySpec:
    name: str
    generate: Callable                 # (model, values so far) -> bytes
    # A derived key is regenerated with its source: a public key that no longer matches anything is useless.
    derived_from: Optional[str] = None


@dataclass(frozen=True)
class SecretSpec:
    name_of: Callable                  # (model) -> the Secret's name, from names.py
    component: str                     # its app.kubernetes.io/component label
    keys: Tuple[KeySpec, ...]
    needed: Callable                   # (model) -> bool

    def name(self, model):
        return self.name_of(model)


def _in_cluster_db(model):
    return bool(model.accounting.enabled and model.accounting.in_cluster is not None)


def _ssh_keys():
    keys = []
    for key_type in SSH_HOST_KEY_TYPES:
        private = ssh_host_key_file(key_type)
        keys.append(KeySpec(private, _ssh_private(key_type)))
        keys.append(KeySpec(private + ".pub", _ssh_public(key_type), derived_from=private))
    return tuple(keys)


SECRET_SPECS = (
    SecretSpec(munge_secret_name, "munge", (KeySpec(MUNGE_KEY, _munge_key),), lambda model: True),
    SecretSpec(ssh_host_keys_secret_name, "login", _ssh_keys(), lambda model: True),
    SecretSpec(accounting_db_secret_name, "accounting-db",
               (KeySpec(DB_PASSWORD, _password), KeySpec(DB_ROOT_PASSWORD, _password)), _in_cluster_db),
    # kept while spec.rest is off, as every key here: turned on again, the tokens handed out before still work
    SecretSpec(jwt_secret_name, "rest", (KeySpec(JWT_KEY_FILE, _jwt_key),), lambda model: model.rest_api is not None),
)


def secret_specs(model):
    """name -> SecretSpec of every Secret this cluster may own (needed now or not), in a fixed order."""
    return dict((spec.name(model), spec) for spec in SECRET_SPECS)


def needed_secret_names(model):
    """Names of the Secrets the model needs now, in a fixed order."""
    return [spec.name(model) for spec in SECRET_SPECS if spec.needed(model)]


class SecretMaterial(dict):
    """name -> {key: bytes}. Its repr lists key names only, so a stray print or log line leaks nothing."""

    def __repr__(self):
        return "SecretMaterial(%s)" % ", ".join("%s: [%s]" % (name, ", ".join(sorted(values)))
                                                for name, values in sorted(self.items()))

    __str__ = __repr__


def _as_bytes(secret_name, key, value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise SecretMaterialError("the existing value of %s key %s is a %s, not bytes"
                              % (secret_name, key, type(value).__name__))


def ensure_secret_material(model, existing):
    """Keep every existing value, generate the missing ones.

    `existing` maps Secret name -> {key: bytes} (what the cluster or an earlier render holds; str values are taken as
    UTF-8). Returns (material, generated_names): material is a SecretMaterial with every Secret the model needs plus
    every existing Secret of this cluster that it no longer needs (a password kept while accounting is off still
    opens the database volume when it is turned back on); generated_names lists, sorted, the Secrets in which at
    least one key was generated. Names in `existing` that are not Secrets of this cluster are ignored.
    """
    existing = existing or {}
    specs = secret_specs(model)
    needed = set(needed_secret_names(model))
    material = SecretMaterial()
    generated = []
    for name, spec in specs.items():
        if name not in needed and name not in existing:
            continue
        values = dict((key, _as_bytes(name, key, value)) for key, value in sorted((existing.get(name) or {}).items()))
        made = set()
        for key in spec.keys:
            regenerate = key.derived_from is not None and key.derived_from in made
            if key.name in values and not regenerate:
                continue
            values[key.name] = key.generate(model, values)
            made.add(key.name)
        if made:
            generated.append(name)
        material[name] = dict(sorted(values.items()))
    return material, sorted(generated)
