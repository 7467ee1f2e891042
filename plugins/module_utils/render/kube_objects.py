# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every Kubernetes object of a cluster, as plain dicts in apply order, built from kube_builders.py's blocks (the
exporter's and its monitoring objects: observe_objects.py). Pure: no I/O, deterministic output.

Choices the objects encode (the images and the kube backend rely on them):
- munged runs inside each Slurm image (controller, worker, login, accounting): the image's entrypoint starts it with
  the key from the `<name>-munge` Secret, then execs the container's args. There are no munge sidecars.
- Slurm configs are one ConfigMap mounted as a directory at SLURM_CONF_DIR (never subPath), so an edit reaches every
  pod without a restart; the caller then runs `scontrol reconfigure`. Pod templates carry no config checksum: a
  restart of a worker would kill its jobs.
- Workers are one StatefulSet per NodeSet, named exactly like the NodeSet (pod `gpu-3` is Slurm node `gpu-3`), all
  governed by one headless Service `<name>-workers`; every pod searches that domain and the controller's, so short
  Slurm node names resolve. Worker StatefulSets update OnDelete: nothing restarts a worker behind Slurm's back.
  An ephemeral NodeSet's StatefulSet keeps its always-up floor; the pods of the nodes Slurm powers up are made by
  the controller's power programs from templates rendered in power_kube.py.
- PersistentVolumeClaim templates carry no managed-by label: the claims they create are data, never pruned.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy
import hashlib

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_builders as kb
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.render.identity_kube import (
    give_identity, identity_objects, identity_ref_rules)
from ansible_collections.soperator.slurm.plugins.module_utils.render.observe_objects import observability_objects
from ansible_collections.soperator.slurm.plugins.module_utils.render.power_kube import (
    give_controller_power, power_objects)
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import (
    ACCOUNTING, ACCOUNTING_DB, CHECKS, CONFIG, CONTROLLER, JAIL, KIND_ORDER, LOGIN, REMEDIATION, WORKER, labels,
    selector_labels)
from ansible_collections.soperator.slurm.plugins.module_utils.render.rest_kube import give_jwt_key, rest_objects
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import (
    accounting_storage, node_definitions)
from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import SSHD_CONFIG, render_sshd_config
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import API_GROUP
from ansible_collections.soperator.slurm.plugins.module_utils.spec.names import (
    slurm_configs_name, slurmdbd_config_name, authorized_keys_name, sshd_config_name, jail_claim_name, controller_name,
    login_name, login_headless_name, accounting_name, accounting_db_name, populate_jail_name, remediation_name,
    remediation_cluster_role_name, active_check_name, remediation_status_name, service_account_name,
    accounting_db_secret_name, jwt_secret_name, munge_secret_name, ssh_host_keys_secret_name,
    controller_spool_claim_name)

# In-container contract with the images beyond constants.py (entrypoints read these; candidates for constants.py).
SSH_PORT = 22
SSH_AUTHORIZED_KEYS_DIR = "/etc/ssh/authorized-keys"   # one file per user: sshd AuthorizedKeysFile .../%u
SSHD_CONFIG_DIR = "/etc/soperator/sshd"                # the sshd_config ConfigMap; sshd -f SSHD_CONFIG_DIR/sshd_config
# The login image's NSS reads users and groups from here too (libnss-extrausers: `passwd: files extrausers`).
EXTRAUSERS_DIR = "/var/lib/extrausers"
SSHD_CONFIG_ANNOTATION = "slurm.soperator.dev/sshd-config"
SLURMDBD_TEMPLATE_DIR = "/etc/soperator/slurmdbd"      # slurmdbd.conf without StoragePass (read-only)
ENV_POD_NAME = "POD_NAME"
ENV_SLURMDBD_TEMPLATE = "SLURMDBD_CONF_TEMPLATE"       # entrypoint: template + StoragePass -> SLURM_CONF_DIR, 0600
ENV_SLURMDBD_STORAGE_PASS = "SLURMDBD_STORAGE_PASS"
MARIADB_DATA_DIR = "/var/lib/mysql"
# A hung remediation run must not block the next ones forever (concurrencyPolicy is Forbid).
REMEDIATION_DEADLINE_SECONDS = 1800
REMEDIATION_PLAYBOOK = "soperator.slurm.remediate"
NODE_DEFINITIONS_ANNOTATION = "slurm.soperator.dev/node-definitions"

# --- components --------------------------------------------------------------------------------------------------


def _service_accounts(model):
    components = [CONTROLLER, LOGIN, WORKER, JAIL]
    if model.accounting.enabled:
        components.append(ACCOUNTING)
    out = [kb.obj("ServiceAccount", kb.meta(model, service_account_name(model, comp), comp),
                  automountServiceAccountToken=False) for comp in components]
    if model.remediation.enabled:
        out.append(kb.obj("ServiceAccount", kb.meta(model, remediation_name(model), REMEDIATION),
                          automountServiceAccountToken=True))
    return out


def _observed(model):
    return model is not None and model.observability.exporter.enabled


def _rest(model):
    return model is not None and model.rest_api is not None


def remediation_rules(model=None):
    """The namespaced permissions of the remediation CronJob: exactly the calls of playbooks/remediate.yml, which
    reconciles with slurm_cluster (manage_rbac, install_crds and create_namespace off: no RBAC object, CRD or
    namespace is read or written, nothing cluster-scoped at all) and then runs slurm_remediate. No watch: nothing
    watches. tests/integration/test_remediation_real.py runs remediate.yml with the ServiceAccount's own token and
    compares the requests in the API server's audit log with these rules."""
    return [
        # slurm_cluster_info reads the cluster (get) and its NodeSets (list); the reconcile lists what it owns,
        # applies what they say (server-side apply: a patch; they exist, they are its input), prunes NodeSets no
        # longer there and writes .status.
        {"apiGroups": [API_GROUP], "resources": ["slurmclusters"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [API_GROUP], "resources": ["nodesets"], "verbs": ["list", "patch", "delete"]},
        {"apiGroups": [API_GROUP], "resources": ["slurmclusters/status", "nodesets/status"], "verbs": ["patch"]},
        # Everything else the reconcile owns: listed by label, applied, pruned when no longer rendered. Secrets
        # are read too: their material (munge key, host keys, passwords) is reused to render, never regenerated.
        # Applying an object that is missing makes it again, and the API server authorizes that patch as a create
        # too: without `create` a deleted ConfigMap failed every later pass with 403.
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services", "serviceaccounts"],
         "verbs": ["list", "create", "patch", "delete"]},
        # Volume claims are never pruned (purge_volumes stays off); a missing one (deleted by hand) is made again.
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "create", "patch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["list", "create", "patch", "delete"]},
        {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["list", "create", "patch", "delete"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
         "verbs": ["list", "create", "patch", "delete"]},
        # spec.observability's exporter Deployment, spec.rest's slurmrestd Deployment and prometheus-operator
        # objects: listed on every run (one that was switched off is pruned), written only by the cluster that has
        # them.
        {"apiGroups": ["apps"], "resources": ["deployments"],
         "verbs": ["list", "create", "patch", "delete"] if _observed(model) or _rest(model) else ["list"]},
        {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors", "prometheusrules"],
         "verbs": ["list", "create", "patch", "delete"] if _observed(model) else ["list"]},
        # Replacing a node: read its worker pod (uid, the Kubernetes node it runs on), delete it, wait for the new one.
        # A rolling upgrade lists a NodeSet's worker pods (their revisions) by its StatefulSet's selector.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
        # Slurm commands in the controller pod and checks in worker pods. The python client execs over a websocket
        # (an HTTP GET, authorized as get before Kubernetes 1.31 and as create since).
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        # What it did, as core/v1 Events on the SlurmCluster.
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        # spec.identity: the reconcile checks that the Secrets and ConfigMaps it names exist (exactly those).
    ] + (identity_ref_rules(model) if model is not None else [])


def _rbac(model):
    if not model.remediation.enabled:
        return []
    name = remediation_name(model)
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": model.namespace}]
    out = [
        kb.obj("Role", kb.meta(model, name, REMEDIATION), rules=remediation_rules(model)),
        kb.obj("RoleBinding", kb.meta(model, name, REMEDIATION), subjects=subject,
               roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}),
    ]
    # Cordoning a Kubernetes node (a server-side apply of spec.unschedulable) and listing the nodes whose labels make
    # spec.topology.nodeLabels' tree are cluster-scoped; nothing else is.
    node_verbs = (["patch"] if model.remediation.cordon_kubernetes_node else []) + (
        ["list"] if model.topology.node_labels is not None else [])
    if node_verbs:
        cluster_name = remediation_cluster_role_name(model)
        out.append(kb.obj("ClusterRole", kb.meta(model, cluster_name, REMEDIATION, namespaced=False),
                          rules=[{"apiGroups": [""], "resources": ["nodes"], "verbs": node_verbs}]))
        out.append(kb.obj("ClusterRoleBinding", kb.meta(model, cluster_name, REMEDIATION, namespaced=False),
                          subjects=subject,
                          roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                   "name": cluster_name}))
    return out


def _required_keys(model):
    required = {munge_secret_name(model): [s.MUNGE_KEY],
                ssh_host_keys_secret_name(model): list(s.SSH_HOST_KEY_FILES)}
    if model.accounting.enabled and model.accounting.in_cluster is not None:
        required[accounting_db_secret_name(model)] = [s.DB_PASSWORD, s.DB_ROOT_PASSWORD]
    if model.rest_api is not None:
        required[jwt_secret_name(model)] = [s.JWT_KEY_FILE]
    return required


def placeholder_secret_material(model):
    """Secret material with every required key empty: renders every other object without generating a key (the
    size check before the first write, render/kube_limits.py)."""
    return dict((name, dict((k, b"") for k in keys)) for name, keys in _required_keys(model).items())


def _secrets(model, material):
    specs = s.secret_specs(model)
    unknown = sorted(set(material) - set(specs))
    if unknown:
        raise ValueError("secret material holds Secrets that are not this cluster's: %s" % ", ".join(unknown))
    for name, keys in _required_keys(model).items():
        missing = [k for k in keys if k not in (material.get(name) or {})]
        if missing:
            raise ValueError("secret material lacks %s key(s) %s (run ensure_secret_material first)"
                             % (name, ", ".join(missing)))
    out = []
    for name, spec in specs.items():
        if name not in material:
            continue
        data = dict((k, base64.b64encode(v).decode("ascii")) for k, v in sorted(material[name].items()))
        out.append(kb.obj("Secret", kb.meta(model, name, spec.component), type="Opaque", data=data))
    return out


def slurm_configs_config_map(model, slurm_configs):
    """The ConfigMap of the Slurm configs (every file but slurmdbd.conf, which has its own)."""
    if "slurm.conf" not in slurm_configs:
        raise ValueError("slurm_configs lacks slurm.conf")
    data = dict((k, slurm_configs[k]) for k in sorted(slurm_configs) if k != c.SLURMDBD_CONF)
    return kb.obj("ConfigMap", kb.meta(model, slurm_configs_name(model), CONFIG), data=data)


def _config_maps(model, slurm_configs):
    out = [slurm_configs_config_map(model, slurm_configs)]
    keys = "".join(k + "\n" for k in model.login.ssh_root_public_keys)
    out.append(kb.obj("ConfigMap", kb.meta(model, authorized_keys_name(model), LOGIN), data={"root": keys}))
    out.append(kb.obj("ConfigMap", kb.meta(model, sshd_config_name(model), LOGIN),
                      data={SSHD_CONFIG: login_sshd_config(model)}))
    if model.accounting.enabled:
        if c.SLURMDBD_CONF not in slurm_configs:
            raise ValueError("accounting is enabled but slurm_configs lacks %s" % c.SLURMDBD_CONF)
        out.append(kb.obj("ConfigMap", kb.meta(model, slurmdbd_config_name(model), ACCOUNTING),
                          data={c.SLURMDBD_CONF: slurm_configs[c.SLURMDBD_CONF]}))
    return out


def _jail_claim(model):
    volume = model.jail.volume
    if volume.existing_claim:
        return []
    spec = {"accessModes": list(volume.access_modes), "resources": {"requests": {"storage": volume.size}}}
    if volume.storage_class_name:
        spec["storageClassName"] = volume.storage_class_name
    return [kb.obj("PersistentVolumeClaim", kb.meta(model, jail_claim_name(model), JAIL), spec=spec)]


def _services(model):
    out = [kb.headless_service(model, controller_name(model), CONTROLLER, [("slurmctld", model.controller.port)])]
    if model.accounting.enabled:
        if model.accounting.in_cluster is not None:
            out.append(kb.headless_service(model, accounting_db_name(model), ACCOUNTING_DB,
                                           [("mysql", c.MARIADB_PORT)], publish_not_ready=False))
        out.append(kb.headless_service(model, accounting_name(model), ACCOUNTING,
                                       [("slurmdbd", model.accounting.port)]))
    svc = model.login.service
    port = {"name": "ssh", "port": svc.port, "targetPort": "ssh", "protocol": "TCP"}
    if svc.node_port is not None and svc.type != "ClusterIP":
        port["nodePort"] = svc.node_port
    spec = {"type": svc.type, "selector": selector_labels(model, LOGIN), "ports": [port]}
    if svc.type == "LoadBalancer" and svc.source_ranges:
        spec["loadBalancerSourceRanges"] = list(svc.source_ranges)
    out.append(kb.obj("Service", kb.meta(model, login_name(model), LOGIN, annotations=svc.annotations), spec=spec))
    out.append(kb.headless_service(model, login_headless_name(model), LOGIN, [("ssh", SSH_PORT)],
                                   publish_not_ready=False))
    out.append(kb.headless_service(model, model.worker_service, WORKER, [("slurmd", c.SLURMD_PORT)]))
    return out


def _populate_job(model, overwrite=None, timeout=None):
    """The populate image's program is plugins/module_utils/node/jail.py: it fills the jail from the root filesystem
    tarball in the image, under the overwrite rule and within `timeout` seconds (None: the program's own default,
    jail.py DEFAULT_TIMEOUT), and prints the jail's sentinel as a JSON line."""
    container = kb.container(
        model, "populate-jail", model.jail.populate_image, command=["python3", c.POPULATE_JAIL_PROGRAM],
        args=["populate", "--source", c.POPULATE_JAIL_SOURCE, "--jail", c.JAIL_MOUNT,
              "--overwrite", overwrite or model.jail.overwrite, "--label", model.jail.populate_image]
        + (["--timeout", str(timeout)] if timeout else []),
        mounts=[kb.mount("jail", c.JAIL_MOUNT)])
    pod = kb.pod_spec(model, JAIL, [container], [kb.jail_volume(model)], restartPolicy="Never")
    return kb.obj("Job", kb.meta(model, populate_jail_name(model), JAIL),
                  spec={"backoffLimit": model.jail.populate_backoff_limit, "template": kb.template(model, JAIL, pod)})


def populate_job(model, overwrite=None, timeout=None):
    """The populate Job as rendered, with another overwrite mode (jail_populate overwrite=always) and time bound
    (jail_populate timeout) when given."""
    return _populate_job(model, overwrite, timeout)


def _accounting_db(model):
    db = model.accounting.in_cluster
    secret = accounting_db_secret_name(model)
    # The user and database slurmdbd.conf names: both come from the one accounting_storage(model).
    storage = accounting_storage(model)
    env = [
        kb.env_secret("MARIADB_ROOT_PASSWORD", secret, s.DB_ROOT_PASSWORD),
        {"name": "MARIADB_USER", "value": storage.user},
        kb.env_secret("MARIADB_PASSWORD", secret, s.DB_PASSWORD),
        {"name": "MARIADB_DATABASE", "value": storage.database},
    ]
    container = kb.container(
        model, "mariadb", model.images.mariadb, ports=[("mysql", c.MARIADB_PORT)],
        # slurmdbd's documented tuning: long lock waits during upgrades and purges.
        args=["--innodb-lock-wait-timeout=900"],
        env=env, mounts=[kb.mount("data", MARIADB_DATA_DIR)], resources=kb.requests_with_memory_limit(db.resources),
        security={"allowPrivilegeEscalation": False}, probe_port="mysql")
    pod = kb.pod_spec(model, ACCOUNTING, [container], [])
    return kb.stateful_set(model, accounting_db_name(model), ACCOUNTING_DB, accounting_db_name(model), 1, pod,
                           claims=[kb.claim_template(model, "data", ACCOUNTING_DB, db.storage, db.storage_class_name)])


def _accounting(model):
    acc = model.accounting
    if acc.in_cluster is not None:
        password = kb.env_secret(ENV_SLURMDBD_STORAGE_PASS, accounting_db_secret_name(model), s.DB_PASSWORD)
    else:
        ref = acc.external.password_secret
        password = kb.env_secret(ENV_SLURMDBD_STORAGE_PASS, ref.name, ref.key)
    env = [{"name": ENV_SLURMDBD_TEMPLATE, "value": "%s/%s" % (SLURMDBD_TEMPLATE_DIR, c.SLURMDBD_CONF)}, password]
    volumes = [
        {"name": "slurmdbd-template", "configMap": {"name": slurmdbd_config_name(model)}},
        # The entrypoint writes slurmdbd.conf (template + StoragePass, mode 0600) here; slurmdbd reads it here.
        {"name": "slurm-conf-dir", "emptyDir": {}},
        kb.munge_volume(model),
    ]
    mounts = [kb.mount("slurmdbd-template", SLURMDBD_TEMPLATE_DIR, True), kb.mount("slurm-conf-dir", c.SLURM_CONF_DIR),
              kb.mount("munge-key", c.MUNGE_KEY_DIR, True)]
    container = kb.container(
        model, "slurmdbd", model.images.accounting, ports=[("slurmdbd", acc.port)], args=["slurmdbd", "-D"],
        env=env, mounts=mounts, resources=kb.requests_with_memory_limit(acc.resources),
        security={"allowPrivilegeEscalation": False}, probe_port="slurmdbd")
    pod = kb.pod_spec(model, ACCOUNTING, [container], volumes)
    return kb.stateful_set(model, accounting_name(model), ACCOUNTING, accounting_name(model), 1, pod)


def node_definitions_hash(model):
    """A digest of slurm.conf's NodeName lines (slurm_conf.node_definitions). slurmctld 22.05 reads node
    definitions only when it starts, so the controller's pod template carries this digest: a change rolls the
    controller, any other change of slurm.conf is applied with `scontrol reconfigure` and restarts nothing."""
    return hashlib.sha256("\n".join(node_definitions(model)).encode("utf-8")).hexdigest()[:16]


def _controller(model):
    ctl = model.controller
    volumes, mounts = kb.slurm_volumes(model)
    mounts.append(kb.mount("spool", c.CONTROLLER_SPOOL))
    container = kb.container(
        model, "slurmctld", model.images.controller, ports=[("slurmctld", ctl.port)], args=["slurmctld", "-D"],
        mounts=mounts, resources=kb.requests_with_memory_limit(ctl.resources),
        security={"allowPrivilegeEscalation": False}, probe_port="slurmctld")
    if ctl.replicas == 1:
        pod = kb.pod_spec(model, CONTROLLER, [container], volumes, scheduling=ctl.scheduling)
        return kb.stateful_set(model, controller_name(model), CONTROLLER, controller_name(model), 1, pod,
                               pod_annotations={NODE_DEFINITIONS_ANNOTATION: node_definitions_hash(model)},
                               claims=[kb.claim_template(model, "spool", CONTROLLER, ctl.spool_size,
                                                         ctl.spool_storage_class_name)])
    return _controllers(model, container, volumes)


def _controllers(model, container, volumes):
    """spec.controller.replicas 2: a primary (pod 0, the first SlurmctldHost) and a backup (pod 1).

    - One spool claim of ours (controller_spool_claim), not a claim template: Slurm needs both to read and write
      the same StateSaveLocation.
    - Probes: a standby slurmctld is alive but not in control. Slurm 25.11 on answers HTTP on SlurmctldPort: /livez
      (204 once loaded, a standby too) and /readyz (500 on a standby: src/slurmctld/controller.c's "primary" probe).
      Liveness and readiness both ask /livez: a standby never killed, and counted ready, because Kubernetes' rolling
      update of a StatefulSet waits for every updated pod to be ready (a standby never would be by /readyz) and so
      does every wait of the backend. Which one is in control: `scontrol ping` (the exec transport reaches it).
    - Parallel pod management: with OrderedReady a pod 0 that is not ready would keep a deleted pod 1 from
      coming back, leaving no backup for the next failover.
    - Anti-affinity preferred, not required: the backup then runs on another node where one is free, and a one-node
      cluster (or one whose other nodes are full) still runs both.
    """
    ctl = model.controller
    if tuple(c.IMAGES_SLURM_VERSION) >= c.SLURMCTLD_HTTP_PROBES_SINCE:
        for key in ("readinessProbe", "livenessProbe"):
            probe = container[key]
            del probe["tcpSocket"]
            probe["httpGet"] = {"path": "/livez", "port": "slurmctld"}
    volumes = volumes + [{"name": "spool", "persistentVolumeClaim": {
        "claimName": controller_spool_claim_name(model)}}]
    pod = kb.pod_spec(model, CONTROLLER, [container], volumes, scheduling=ctl.scheduling)
    affinity = pod.setdefault("affinity", {})
    anti = affinity.setdefault("podAntiAffinity", {})
    anti.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append({
        "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": selector_labels(model, CONTROLLER)}}})
    return kb.stateful_set(model, controller_name(model), CONTROLLER, controller_name(model), ctl.replicas, pod,
                           parallel=True, pod_annotations={NODE_DEFINITIONS_ANNOTATION: node_definitions_hash(model)})


def _controller_spool_claim(model):
    """With a backup controller: the one ReadWriteMany claim of both controllers' StateSaveLocation."""
    ctl = model.controller
    if ctl.replicas == 1:
        return []
    spec = {"accessModes": list(ctl.spool_access_modes), "resources": {"requests": {"storage": ctl.spool_size}}}
    if ctl.spool_storage_class_name:
        spec["storageClassName"] = ctl.spool_storage_class_name
    return [kb.obj("PersistentVolumeClaim", kb.meta(model, controller_spool_claim_name(model), CONTROLLER),
                   spec=spec)]


def _wait_for_jail(model, image, guaranteed):
    """Init container of login and worker pods: waits until the jail is populated (node/jail.py settled), so their
    mounts below it are made in a populated jail - in an empty one they made the populate Job refuse it (wait=false).
    In a worker (guaranteed), requests equal to limits keep the pod in the Guaranteed QoS class; the login pod's
    gets none, so the wait adds nothing to what the login pod asks of its node."""
    small = {"cpu": "100m", "memory": "64Mi"}
    return kb.container(model, "wait-for-jail", image, command=["python3", c.NODE_JAIL_PROGRAM],
                        args=["wait", "--jail", c.JAIL_MOUNT], mounts=[kb.mount("jail", c.JAIL_MOUNT, True)],
                        resources={"requests": dict(small), "limits": dict(small)} if guaranteed else None,
                        security={"allowPrivilegeEscalation": False})


def login_sshd_config(model=None):
    """The login pods' sshd_config (the same renderer as the local backend's login): chroot into the jail mount,
    host keys from the SSH host keys Secret, root's keys from the authorized-keys ConfigMap; with spec.identity the
    directory's keys too (render/identity_kube.py). shared_source: the login Service's users may all arrive from the
    node's address (the images' OpenSSH, 10.x, reads PerSourcePenalties)."""
    return render_sshd_config(c.JAIL_MOUNT, c.SSH_HOST_KEY_DIR, SSH_AUTHORIZED_KEYS_DIR, port=SSH_PORT,
                              keys_by_command=True, identity_keys=model is not None and model.identity is not None,
                              shared_source=True)


def _login(model):
    """sshd in the login image; every session is chrooted into the jail.

    Users: sshd resolves a user (getpwnam) before it chroots, so the login container must know the jail's users.
    The jail's /etc is mounted (read-only, the directory, not single files) at EXTRAUSERS_DIR, where the login image's
    libnss-extrausers reads passwd, group and shadow after its own files (nsswitch: `passwd: files extrausers`).
    Mounting the directory keeps it current: `useradd` in the jail replaces /etc/passwd by a rename, which a
    bind-mounted file (subPath of a file) would never show. Home directories are the jail's, since sessions are in it.
    Inside the jail, Slurm clients find slurm.conf and munged's socket at the paths they use on every node: the
    configs ConfigMap and the munge socket directory (an emptyDir the container's munged puts its socket in) are also
    mounted below the jail mount, at JAIL_MOUNT/etc/slurm and JAIL_MOUNT/run/munge; nothing is copied into the jail.
    The jail itself provides /dev and /proc for sessions (its root filesystem image).
    """
    login = model.login
    volumes, mounts = kb.slurm_volumes(model)
    ssh_keys = list(s.SSH_HOST_KEY_FILES)
    volumes += [
        kb.jail_volume(model),
        # sshd refuses host keys that others can read.
        {"name": "ssh-host-keys", "secret": {"secretName": ssh_host_keys_secret_name(model), "defaultMode": 0o600,
                                             "items": [{"key": k, "path": k} for k in ssh_keys]}},
        {"name": "authorized-keys", "configMap": {"name": authorized_keys_name(model), "defaultMode": 0o644}},
        {"name": "sshd-config", "configMap": {"name": sshd_config_name(model), "defaultMode": 0o644}},
        {"name": "munge-socket", "emptyDir": {}},
    ]
    mounts += [kb.mount("jail", c.JAIL_MOUNT), kb.mount("ssh-host-keys", c.SSH_HOST_KEY_DIR, True),
               kb.mount("authorized-keys", SSH_AUTHORIZED_KEYS_DIR, True),
               kb.mount("sshd-config", SSHD_CONFIG_DIR, True),
               dict(kb.mount("jail", EXTRAUSERS_DIR, True), subPath="etc"),
               kb.mount("munge-socket", c.MUNGE_SOCKET_DIR),
               kb.mount("slurm-configs", c.JAIL_MOUNT + c.SLURM_CONF_DIR, True),
               kb.mount("munge-socket", c.JAIL_MOUNT + c.MUNGE_SOCKET_DIR)]
    container = kb.container(
        model, "sshd", model.images.login, ports=[("ssh", SSH_PORT)],
        args=["/usr/sbin/sshd", "-D", "-e", "-f", "%s/%s" % (SSHD_CONFIG_DIR, SSHD_CONFIG)],
        mounts=mounts, resources=kb.requests_with_memory_limit(login.resources),
        # sshd's ChrootDirectory puts every session into the jail.
        security={"capabilities": {"add": ["SYS_CHROOT"]}}, probe_port="ssh")
    pod = kb.pod_spec(model, LOGIN, [container], volumes, scheduling=login.scheduling,
                      initContainers=[_wait_for_jail(model, model.images.login, False)])
    # sshd reads its config only when it starts: a changed config rolls the login pods (sessions end).
    digest = hashlib.sha256(login_sshd_config(model).encode("utf-8")).hexdigest()[:16]
    return give_identity(model, kb.stateful_set(model, login_name(model), LOGIN, login_headless_name(model),
                                                login.replicas, pod, parallel=True,
                                                pod_annotations={SSHD_CONFIG_ANNOTATION: digest}), LOGIN)


def _worker(model, node_set):
    volumes, mounts = kb.slurm_volumes(model)
    volumes += [kb.jail_volume(model), {"name": "spool", "emptyDir": {}}]
    mounts += [kb.mount("jail", c.JAIL_MOUNT), kb.mount("spool", c.SLURMD_SPOOL)]
    if model.containers is not None and model.containers.enabled:
        # `srun --container=BUNDLE`: slurmstepd reads BUNDLE/config.json on the node's root filesystem, before the
        # step enters the jail (where the runtime then runs); bundles live in the jail's /home (oci_bundle.py), so
        # the node sees that directory at the same path. Read-only: slurmstepd only reads there.
        mounts.append(dict(kb.mount("jail", "/home", True), subPath="home"))
    if node_set.shared_memory:
        volumes.append({"name": "dev-shm", "emptyDir": {"medium": "Memory", "sizeLimit": node_set.shared_memory}})
        mounts.append(kb.mount("dev-shm", "/dev/shm"))
    resources = dict(sorted(node_set.resources.items()))
    container = kb.container(
        model, "slurmd", node_set.image, ports=[("slurmd", c.SLURMD_PORT)],
        args=["slurmd", "-D", "-N", "$(%s)" % ENV_POD_NAME],
        # POD_IP: the entrypoint tells slurmctld the pod's address before slurmd starts (a recreated pod has a
        # new one; slurmctld keeps the first it resolved).
        env=[{"name": ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
             {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        mounts=mounts, resources={"requests": resources, "limits": dict(resources)},
        # Privileged: slurmd creates a cgroup per job (the runtime mounts cgroupfs read-only otherwise), the chroot
        # SPANK plugin unshares a mount namespace and bind-mounts /proc, /sys and /dev into the jail, and job steps
        # must reach every device the node exposes. CAP_SYS_ADMIN alone does not make cgroupfs writable.
        security={"privileged": True},
        # No liveness probe: restarting slurmd's container kills its jobs; unhealthy workers are drained and
        # replaced by remediation instead.
        probe_port="slurmd", liveness=False)
    pod = kb.pod_spec(model, WORKER, [container], volumes, scheduling=node_set.scheduling,
                      initContainers=[_wait_for_jail(model, node_set.image, True)])
    return give_identity(model, kb.stateful_set(model, node_set.name, WORKER, model.worker_service,
                                                node_set.replicas, pod, node_set=node_set.name, on_delete=True,
                                                parallel=True), WORKER)


def _disruption_budgets(model):
    out = [kb.pdb(model, login_name(model), LOGIN, 1)]
    if model.controller.replicas > 1:
        # a node drain takes one controller at a time: the other stays in (or takes) control
        out.append(kb.pdb(model, controller_name(model), CONTROLLER, 1))
    for node_set in model.node_sets:
        out.append(kb.pdb(model, node_set.name, WORKER, node_set.max_unavailable, node_set.name))
    return out


def _remediation_cron_job(model):
    rem = model.remediation
    container = kb.container(
        model, "remediate", model.images.remediation,
        command=["ansible-playbook", REMEDIATION_PLAYBOOK, "-e", "cluster=%s" % model.name,
                 "-e", "slurm_namespace=%s" % model.namespace],
        security={"allowPrivilegeEscalation": False})
    pod = kb.pod_spec(model, REMEDIATION, [container], [], api_access=True, restartPolicy="Never")
    job = {"backoffLimit": 0, "activeDeadlineSeconds": REMEDIATION_DEADLINE_SECONDS,
           "template": kb.template(model, REMEDIATION, pod)}
    return kb.obj("CronJob", kb.meta(model, remediation_name(model), REMEDIATION), spec={
        "schedule": rem.schedule,
        "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": rem.successful_jobs_history_limit,
        "failedJobsHistoryLimit": rem.failed_jobs_history_limit,
        "jobTemplate": {"metadata": {"labels": labels(model, REMEDIATION)}, "spec": job},
    })


def _remediation_status(model):
    """The remediation record's ConfigMap (observe/remediation_record.py). Rendered without data: the remediation run
    owns its one key (its own field manager), so a reconcile neither compares nor takes it back."""
    return kb.obj("ConfigMap", kb.meta(model, remediation_status_name(model), REMEDIATION))


# A pending check job is cancelled after this (the node stays busy); a running one ends at its Slurm time limit.
CHECK_PENDING_SECONDS = 300
CHECK_HISTORY_LIMIT = 3


def _active_checks(model):
    """One CronJob per active health check: active_check.py in the login image (Slurm clients, munged started by the
    entrypoint from the munge Secret, the configs ConfigMap with health.json, the jail for the jobs' output files).
    It needs no Kubernetes API: its ServiceAccount gets no token."""
    checks = model.health_checks.active
    if not checks:
        return []
    out = [kb.obj("ServiceAccount", kb.meta(model, service_account_name(model, CHECKS), CHECKS),
                  automountServiceAccountToken=False)]
    volumes, mounts = kb.slurm_volumes(model)
    volumes.append(kb.jail_volume(model))
    mounts.append(kb.mount("jail", c.JAIL_MOUNT))
    for check in checks:
        container = kb.container(
            model, "active-check", model.images.login,
            args=[c.ACTIVE_CHECK_PROGRAM, "--check", check.name, "--pending-timeout", str(CHECK_PENDING_SECONDS)],
            mounts=copy.deepcopy(mounts), security={"allowPrivilegeEscalation": False})
        pod = kb.pod_spec(model, CHECKS, [container], copy.deepcopy(volumes), restartPolicy="Never")
        job = {"backoffLimit": 0,
               "activeDeadlineSeconds": CHECK_PENDING_SECONDS + check.timeout_seconds + 300,
               "template": kb.template(model, CHECKS, pod)}
        out.append(kb.obj("CronJob", kb.meta(model, active_check_name(model, check.name), CHECKS), spec={
            "schedule": check.schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": CHECK_HISTORY_LIMIT,
            "failedJobsHistoryLimit": CHECK_HISTORY_LIMIT,
            "jobTemplate": {"metadata": {"labels": labels(model, CHECKS)}, "spec": job},
        }))
    return out


# --- entry point -------------------------------------------------------------------------------------------------

def render_manifests(model, slurm_configs, secret_material):
    """Every Kubernetes object of the cluster, as plain dicts, in apply order (see KIND_ORDER).

    slurm_configs: file name -> text (slurm_conf.render_slurm_configs); slurmdbd.conf goes to its own ConfigMap.
    secret_material: Secret name -> {key: bytes} (secrets.ensure_secret_material); each becomes an Opaque Secret.
    Raises ValueError when an input lacks something the objects need, or when two objects would share a name.
    """
    objects = _service_accounts(model) + _rbac(model)
    objects += _secrets(model, secret_material)
    objects += _config_maps(model, slurm_configs)
    objects += _jail_claim(model) + _controller_spool_claim(model)
    objects += _services(model)
    objects.append(_populate_job(model))
    if model.accounting.enabled:
        if model.accounting.in_cluster is not None:
            objects.append(_accounting_db(model))
        objects.append(give_jwt_key(model, _accounting(model), "slurmdbd"))
    objects += identity_objects(model)
    controller = give_jwt_key(model, give_controller_power(model, _controller(model)), "slurmctld")
    objects.append(give_identity(model, controller, CONTROLLER))
    objects.append(_login(model))
    workers = dict((node_set.name, _worker(model, node_set)) for node_set in model.node_sets)
    objects += [workers[node_set.name] for node_set in model.node_sets]
    objects += power_objects(model, workers)
    objects += _disruption_budgets(model)
    if model.remediation.enabled:
        objects += [_remediation_cron_job(model), _remediation_status(model)]
    objects += _active_checks(model)
    objects += observability_objects(model)
    objects += rest_objects(model)
    objects.sort(key=lambda o: KIND_ORDER.index(o["kind"]))   # stable: keeps the order within a kind
    seen = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in seen:
            raise ValueError("two %s objects would be named %r (rename the NodeSet)" % key)
        seen.add(key)
    return objects
