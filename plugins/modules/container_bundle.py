#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: container_bundle
short_description: Make an OCI runtime bundle in the jail from a container image, for srun --container
version_added: 0.1.0
description:
  - Slurm runs a job step in a container (C(srun --container=BUNDLE)) from an OCI runtime bundle already on the
    node; it pulls nothing. This module makes such a bundle from an image - a registry image (pulled with skopeo),
    an OCI archive or an OCI image layout - in a cache folder, named by the image manifest's digest
    (C(CACHE/sha256-<hex>)). Put the cache inside the jail (which every login and worker node mounts) and every
    node sees the bundle.
  - The digest is resolved first without writing anything (C(skopeo inspect --raw), an index followed to this
    machine's architecture; an archive's or layout's C(index.json)). A bundle of that name is the image's, so a second
    run changes nothing, and a tag that moved to another image makes a new bundle beside the old one. A registry
    image is pulled by that digest.
  - Nothing is written outside the cache folder. Every blob's size and digest is checked before it is read; layers
    are unpacked by the jail's writer (no C(..), nothing written or removed through a link, no device nodes), OCI
    whiteouts remove only what lower layers wrote; setuid and setgid bits are dropped unless O(keep_setuid). A bundle
    appears under its name only when complete, with a marker file (C(.soperator-bundle.json)); a failed run leaves
    nothing.
  - O(state=absent) removes the image's bundle only when it has that marker (this module or C(soperator-bundle)
    made it); a folder of that name without it fails the task and is left alone.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details:
      - Resolves the image's digest as the real run does (for a registry, C(skopeo inspect); nothing is pulled) and
        reports whether the bundle would be made or removed. Nothing is written.
  diff_mode:
    support: full
    details:
      - The bundle's path and state (present or absent) before and after.
options:
  source:
    description:
      - The image. A registry image is V(docker://HOST/NAME:TAG), V(docker://HOST/NAME@sha256:HEX) or
        V(HOST/NAME@sha256:HEX) (then it must not be a path on this machine); anything else is a path, to an OCI
        archive (C(podman save --format oci-archive)) or an OCI image layout directory (C(skopeo copy ... oci:DIR)).
    type: str
    required: true
  cache:
    description:
      - The folder of bundles, one per manifest digest; made when missing. A symbolic link is refused.
    type: path
    required: true
  jail_dir:
    description:
      - The jail's root on this machine, when O(cache) is inside it; then RV(container_path) is the bundle's path as
        users and job steps see it (what C(srun --container=) takes).
    type: path
  state:
    description:
      - V(present) makes the bundle unless it is there; V(absent) removes it if this module made it.
    type: str
    choices: [present, absent]
    default: present
  ref:
    description:
      - With an archive or layout holding several images, the one to use (its C(org.opencontainers.image.ref.name)).
    type: str
  keep_setuid:
    description:
      - Keep the image's setuid and setgid bits. Off by default, because the cache is inside the jail that every user
        sees as /, where a setuid-root file of an image would be a way up.
    type: bool
    default: false
  user:
    description:
      - Whose job steps run the bundle, as V(UID:GID). The bundle's C(config.json) is rootless for that one user
        (Slurm runs the runtime as the job's user and never sets the id mappings), so its user namespace maps the
        container's 0 to this uid and gid only. Defaults to the user running the module.
      - A cache that holds the image's bundle for another user (or other O(mounts)) fails the task; give each user
        a cache of their own, for example under their home in the jail.
    type: str
  mounts:
    description:
      - The jail's paths bind-mounted at the same path inside the container (absolute, normalized, not C(/proc),
        C(/dev), C(/sys) or C(/)).
    type: list
    elements: str
    default: [/home]
  auth_file:
    description:
      - Registry credentials in skopeo's auth file format (C(skopeo login --authfile FILE HOST) writes one). Without
        it and without O(registry_username), skopeo's own default auth file is used.
    type: path
  registry_username:
    description:
      - A user name for the image's registry; with O(registry_password). Written to a private temporary auth file
        for skopeo, removed after the run. Mutually exclusive with O(auth_file).
    type: str
  registry_password:
    description:
      - The password or token for O(registry_username). Never logged nor returned.
    type: str
  tls_verify:
    description:
      - Verify the registry's TLS certificate. V(false) also allows plain HTTP; only for a registry you trust.
    type: bool
    default: true
  timeout:
    description:
      - The longest time in seconds one skopeo command may take.
    type: int
    default: 1800
extends_documentation_fragment:
  - soperator.slurm.attributes
notes:
  - Registry images need skopeo (Debian package skopeo) on the machine the module runs on. Layers must be plain or
    gzip tarballs; zstd layers are refused, naming the layer (Python's tarfile does not read zstd).
  - Owners of the image's files are kept only when the module runs as root.
  - With the Kubernetes backend, workers read the bundle's C(config.json) under the jail's C(/home) before the step
    enters the jail, so put O(cache) there.
  - Users make bundles themselves on the login node with C(soperator-bundle IMAGE), the same code, in the jail image.
seealso:
  - module: soperator.slurm.jail_populate
"""

EXAMPLES = r"""
- name: Make alice's bundle in the jail from a registry image (a second run changes nothing)
  soperator.slurm.container_bundle:
    source: docker://registry.example.com/ml/pytorch:2.4
    cache: /srv/slurm/jail/home/alice/bundles     # workers read config.json under the jail's /home
    jail_dir: /srv/slurm/jail
    user: "1500:1500"                              # alice's uid and gid: her steps run it
  register: bundle

- name: Users run steps in it
  ansible.builtin.debug:
    msg: "srun --container={{ bundle.container_path }} python3 train.py"

- name: From a private registry, credentials from the vault
  soperator.slurm.container_bundle:
    source: docker://registry.example.com/team/image@sha256:4f1c0e8b9b2d9a1a3f0c7e6d5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a
    cache: /srv/slurm/jail/home/alice/bundles
    registry_username: robot
    registry_password: "{{ vault_registry_token }}"

- name: From an OCI archive made with podman save --format oci-archive
  soperator.slurm.container_bundle:
    source: /srv/images/tool.tar
    cache: /srv/slurm/jail/home/alice/bundles

- name: Remove the bundle of an image (only one this module made)
  soperator.slurm.container_bundle:
    source: /srv/images/tool.tar
    cache: /srv/slurm/jail/home/alice/bundles
    state: absent
"""

RETURN = r"""
bundle:
  description: The bundle's path on this machine (in check mode, the path it would have).
  returned: success
  type: str
  sample: /srv/slurm/jail/opt/bundles/sha256-9b59c1b3d2f4a0e6c8b7a5d4e3f2c1b0a9d8e7f6c5b4a3d2e1f0c9b8a7d6e5f4
container_path:
  description: With O(jail_dir), the bundle's path inside the jail, for C(srun --container=).
  returned: when O(jail_dir) is given
  type: str
  sample: /opt/bundles/sha256-9b59c1b3d2f4a0e6c8b7a5d4e3f2c1b0a9d8e7f6c5b4a3d2e1f0c9b8a7d6e5f4
digest:
  description: The image manifest's digest the bundle is named by (a registry's as it serves it).
  returned: success
  type: str
  sample: sha256:9b59c1b3d2f4a0e6c8b7a5d4e3f2c1b0a9d8e7f6c5b4a3d2e1f0c9b8a7d6e5f4
state:
  description: The state asked for.
  returned: success
  type: str
  sample: present
commands:
  description:
    - The skopeo commands run, in order (C(inspect) resolves the digest, C(copy) pulls). An auth file appears as its
      path; credentials never do.
  returned: success
  type: list
  elements: str
  sample: ["skopeo inspect --raw docker://registry.example.com/ml/pytorch:2.4"]
"""

import tempfile
import shutil

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle, safe_tree

OPTIONS = dict(
    source=dict(type="str", required=True),
    cache=dict(type="path", required=True),
    jail_dir=dict(type="path"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    ref=dict(type="str"),
    keep_setuid=dict(type="bool", default=False),
    user=dict(type="str"),
    mounts=dict(type="list", elements="str", default=["/home"]),
    auth_file=dict(type="path", no_log=False),
    registry_username=dict(type="str"),
    registry_password=dict(type="str", no_log=True),
    tls_verify=dict(type="bool", default=True),
    timeout=dict(type="int", default=1800),
)


def _user(text):
    """(uid, gid) of the option user (UID:GID), None when not given."""
    if text is None:
        return None
    uid, sep, gid = text.partition(":")
    if not (sep and uid.isdigit() and gid.isdigit()):
        raise SoperatorError("user %r is not UID:GID" % text)
    return int(uid), int(gid)


def _run(module):
    p = module.params
    private = None
    try:
        if p["jail_dir"]:
            oci_bundle.container_path(p["cache"], p["jail_dir"])     # refused before anything is written
        auth_file = p["auth_file"]
        if p["registry_username"] is not None:
            pulled = oci_bundle.registry_reference(p["source"])
            if pulled is None:
                raise SoperatorError("registry_username is for a registry image; %s is a path" % p["source"])
            private = tempfile.mkdtemp(prefix="soperator-auth-")
            auth_file = oci_bundle.write_auth_file(private, pulled, p["registry_username"], p["registry_password"])
        registry = oci_bundle.Registry(auth_file, p["tls_verify"], timeout=p["timeout"])
        result = oci_bundle.ensure(p["source"], p["cache"], p["state"], module.check_mode, p["ref"],
                                   p["keep_setuid"], registry, user=_user(p["user"]), mounts=p["mounts"])
    except (safe_tree.JailError, OSError) as e:
        raise SoperatorError(str(e), changed=False)
    finally:
        if private is not None:
            shutil.rmtree(private)
    if p["jail_dir"]:
        result["container_path"] = oci_bundle.container_path(result["bundle"], p["jail_dir"])
    diff = result.pop("diff")
    if module._diff:       # pylint: disable=protected-access  # AnsibleModule's own flag for --diff
        result["diff"] = diff
    return result


def main():
    module = SoperatorModule(
        OPTIONS,
        mutually_exclusive=[("auth_file", "registry_username")],
        required_together=[("registry_username", "registry_password")],
        supports_check_mode=True,
    )
    module.run(_run)


if __name__ == "__main__":
    main()
