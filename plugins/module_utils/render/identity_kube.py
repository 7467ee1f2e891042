# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""spec.identity on Kubernetes: SSSD beside the login, worker and controller containers. Pure: dicts out, no I/O.

- One ConfigMap `<name>-sssd`: the sssd.conf template (render/sssd_conf.py: no bind password in it, so a ConfigMap,
  never a Secret we would have to read back) and the nsswitch.conf files. With sssdConfigSecret the user's Secret
  is mounted instead of the template.
- An `sssd` sidecar in each of those pods, from the pod's own image (each Slurm image carries sssd: images/README):
  node/sssd_config.py writes /etc/sssd/sssd.conf (0600) from the template and the bindPasswordSecret file, then
  `sssd -i` runs in the foreground with its logs on stderr (`kubectl logs <pod> -c sssd` shows a failed bind).
  A sidecar rather than the main container: it fails, restarts and logs on its own, and a restart of SSSD never
  restarts slurmd (its jobs) or sshd (its sessions).
- SSSD's clients reach it through /var/lib/sss/pipes (compiled into libnss_sss, pam_sss and sss_ssh_authorizedkeys):
  an emptyDir shared by the sidecar and the main container, and mounted again below the jail (JAIL_MOUNT/var/lib/
  sss/pipes) with the jail's nsswitch.conf (`files sss`), so login sessions and job steps, chrooted into the jail,
  resolve directory users too. SSSD's cache (/var/lib/sss/db) stays in the sidecar: a new pod starts it empty.
- Fail closed: the sidecar also writes which servers sssd.conf names (DIRECTORY_FILE, beside the pipes); the login's
  key command (node/authorized_keys.py) offers the directory's keys only while one of them answers, verified with the
  CA (mounted in the login container too). SSSD offline would otherwise keep serving its cache. The login's sidecar
  also runs the bind watcher (authorized_keys.py --watch-bind): it binds as SSSD does, with the password SSSD holds,
  and the key command wants its recent success (a bind password rotated after users were cached).
- The controller runs SSSD as well: slurmctld maps the user names of accounting (sacctmgr's users) to uids and checks
  a job's user and groups (AllowGroups, PrivateData) by uid. Slurm's auth/slurm with use_client_ids would spare
  it, but munge is our one AuthType, and the local backend's Slurm 22.05 has no auth/slurm: one way for both.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.node.sssd_config import DIRECTORY_FILE
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_builders as kb
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import CONFIG, LOGIN, WORKER
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import AUTHORIZED_KEYS_PROGRAM
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import (
    SSS_PIPES_DIR, SSSD_CONF, render_nsswitch, render_sssd_conf)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import sssd_config_name

# In the sidecar: where the template (or the user's sssd.conf), the bind password and the CA bundle are mounted.
SSSD_TEMPLATE_DIR = "/etc/soperator/sssd"
SSSD_BIND_DIR = "/etc/soperator/ldap-bind"
SSSD_CA_DIR = "/etc/soperator/ldap-ca"
SSSD_CA_FILE = SSSD_CA_DIR + "/ca.crt"
SSSD_BIND_FILE = SSSD_BIND_DIR + "/password"
# The images' copy of node/sssd_config.py.
SSSD_CONFIG_PROGRAM = "/opt/soperator/lib/sssd_config.py"
NSSWITCH = "nsswitch.conf"
NSSWITCH_LOGIN = "nsswitch-login.conf"      # the login container's: its extrausers (the jail's /etc) too
# Requests = limits: a worker pod stays in the Guaranteed QoS class with the sidecar.
SIDECAR_RESOURCES = {"cpu": "100m", "memory": "128Mi"}


def identity_on(model):
    return model.identity is not None


def identity_objects(model):
    """The `<name>-sssd` ConfigMap (when identity is on)."""
    if not identity_on(model):
        return []
    data = {NSSWITCH: render_nsswitch(["files", "sss"]),
            NSSWITCH_LOGIN: render_nsswitch(["files", "extrausers", "sss"])}
    ldap = model.identity.ldap
    if ldap is not None:
        data[SSSD_CONF] = render_sssd_conf(ldap, SSSD_CA_FILE if ldap.ca_config_map else None)
    return [kb.obj("ConfigMap", kb.meta(model, sssd_config_name(model), CONFIG), data=dict(sorted(data.items())))]


def _volumes(model):
    identity = model.identity
    if identity.ldap is None:
        ref = identity.sssd_config_secret
        source = {"name": "sssd-template", "secret": {"secretName": ref.name, "defaultMode": 0o400,
                                                      "items": [{"key": ref.key, "path": SSSD_CONF}]}}
    else:
        source = {"name": "sssd-template", "configMap": {"name": sssd_config_name(model),
                                                         "items": [{"key": SSSD_CONF, "path": SSSD_CONF}]}}
    volumes = [source,
               {"name": "sssd-nsswitch", "configMap": {"name": sssd_config_name(model), "defaultMode": 0o644}},
               {"name": "sss-pipes", "emptyDir": {}}]
    ldap = identity.ldap
    if ldap is not None and ldap.bind_password_secret is not None:
        ref = ldap.bind_password_secret
        volumes.append({"name": "ldap-bind", "secret": {"secretName": ref.name, "defaultMode": 0o400,
                                                        "items": [{"key": ref.key, "path": "password"}]}})
    if ldap is not None and ldap.ca_config_map is not None:
        ref = ldap.ca_config_map
        volumes.append({"name": "ldap-ca", "configMap": {"name": ref.name, "defaultMode": 0o444,
                                                         "items": [{"key": ref.key, "path": "ca.crt"}]}})
    return volumes


def _sidecar(model, image, component):
    ldap = model.identity.ldap
    mounts = [kb.mount("sssd-template", SSSD_TEMPLATE_DIR, True), kb.mount("sss-pipes", SSS_PIPES_DIR)]
    write = ["python3", SSSD_CONFIG_PROGRAM, "write", "--template", "%s/%s" % (SSSD_TEMPLATE_DIR, SSSD_CONF),
             "--out", "/etc/sssd/%s" % SSSD_CONF, "--directory-out", DIRECTORY_FILE]
    if ldap is not None and ldap.bind_password_secret is not None:
        mounts.append(kb.mount("ldap-bind", SSSD_BIND_DIR, True))
        write += ["--password-file", SSSD_BIND_FILE]
    if ldap is not None and ldap.ca_config_map is not None:
        mounts.append(kb.mount("ldap-ca", SSSD_CA_DIR, True))
    # Fixed words only (no spec value reaches the shell): write the config, then sssd in the foreground. The pipes are
    # an emptyDir: sssd binds its private sockets in pipes/private, which the image's directory had.
    # The login's: the bind watcher too (node/authorized_keys.py --watch-bind, in the background: if it dies its
    # status goes stale and the key command fails closed), which binds as SSSD does for the key command.
    watch = "{ %s --watch-bind /etc/sssd/%s & } && " % (AUTHORIZED_KEYS_PROGRAM, SSSD_CONF) if component == LOGIN \
        else ""
    script = "install -d -m 0700 %s/private && %s && %sexec /usr/sbin/sssd -i --logger=stderr" % (
        SSS_PIPES_DIR, " ".join(write), watch)
    guaranteed = component == WORKER
    resources = {"requests": dict(SIDECAR_RESOURCES), "limits": dict(SIDECAR_RESOURCES)} if guaranteed else \
        {"requests": dict(SIDECAR_RESOURCES), "limits": {"memory": SIDECAR_RESOURCES["memory"]}}
    return kb.container(model, "sssd", image, command=["/bin/sh", "-c", script], mounts=mounts,
                        resources=resources, security={"allowPrivilegeEscalation": False})


def give_identity(model, stateful_set, component):
    """`stateful_set` (login, worker or controller) with the SSSD sidecar and its mounts when identity is on."""
    if not identity_on(model):
        return stateful_set
    pod = stateful_set["spec"]["template"]["spec"]
    main = pod["containers"][0]
    pod.setdefault("volumes", []).extend(_volumes(model))
    nsswitch = NSSWITCH_LOGIN if component == LOGIN else NSSWITCH
    mounts = main.setdefault("volumeMounts", [])
    mounts += [kb.mount("sss-pipes", SSS_PIPES_DIR),
               dict(kb.mount("sssd-nsswitch", "/etc/nsswitch.conf", True), subPath=nsswitch)]
    if component == LOGIN and model.identity.ldap is not None and model.identity.ldap.ca_config_map is not None:
        # the key command's probe verifies the directory's certificate as SSSD does (node/authorized_keys.py)
        mounts.append(kb.mount("ldap-ca", SSSD_CA_DIR, True))
    if component in (LOGIN, WORKER):
        # Sessions and job steps are chrooted into the jail: its NSS finds SSSD there too.
        mounts += [kb.mount("sss-pipes", c.JAIL_MOUNT + SSS_PIPES_DIR),
                   dict(kb.mount("sssd-nsswitch", c.JAIL_MOUNT + "/etc/nsswitch.conf", True), subPath=NSSWITCH)]
    pod["containers"].append(_sidecar(model, main["image"], component))
    return stateful_set


def identity_refs(model):
    """[(field path, kind, ref)] of what spec.identity names."""
    identity = model.identity
    if identity is None:
        return []
    base = "SlurmCluster/%s spec.identity" % model.name
    if identity.ldap is None:
        return [(base + ".sssdConfigSecret", "Secret", identity.sssd_config_secret)]
    out = []
    if identity.ldap.bind_password_secret is not None:
        out.append((base + ".ldap.bindPasswordSecret", "Secret", identity.ldap.bind_password_secret))
    if identity.ldap.ca_config_map is not None:
        out.append((base + ".ldap.caConfigMap", "ConfigMap", identity.ldap.ca_config_map))
    return out


def identity_ref_rules(model):
    """The remediation Role's rule to read exactly these objects (its reconcile runs the same check)."""
    names = {}
    for _path, kind, ref in identity_refs(model):
        names.setdefault(kind, set()).add(ref.name)
    return [{"apiGroups": [""], "resources": ["secrets" if kind == "Secret" else "configmaps"], "verbs": ["get"],
             "resourceNames": sorted(names[kind])} for kind in sorted(names)]
