#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_cluster
short_description: Render a Slurm cluster (SlurmCluster + NodeSets), or run it as a real Slurm cluster on this machine
version_added: 0.1.0
description:
  - Validates a SlurmCluster and its NodeSets (the C(slurm.soperator.dev/v1alpha1) custom resources), fills in every
    default, and renders the whole cluster or runs it.
  - Every problem of the spec is reported at once, each with the field path and the rule it breaks; nothing is written
    or started from an invalid spec.
  - With O(state=rendered), writes every Kubernetes object as YAML under O(dest)/manifests/ and every Slurm config
    (slurm.conf, cgroup.conf, gres.conf, plugstack.conf, mpi.conf, topology.conf, slurmdbd.conf) under O(dest)/slurm/,
    without contacting any cluster; with C(spec.observability.exporter.enabled), also the alert rules as a Prometheus
    rule file (O(dest)/prometheus/soperator-slurm-rules.yml) and the Grafana dashboards as JSON (O(dest)/grafana/),
    for a Prometheus and a Grafana that run without the prometheus-operator. The module removes files it rendered
    earlier that are no longer rendered.
  - Secrets (munge key, SSH host keys, database passwords) are generated the first time and read back from O(dest) on
    later runs, so re-rendering the same spec gives byte-identical files. Secret manifests are written with mode 0600
    and their data never appears in the diff or the result.
  - With O(state=present) and O(target=local), runs the same cluster as local processes under O(state_dir) (the
    "embedded default") - munged with a generated key, slurmctld, one C(slurmd -N <node>) per worker of every
    NodeSet, and slurmdbd with a private MariaDB when accounting is enabled. The rendered Slurm configs are used unchanged
    except for hosts, ports and paths. Every daemon binds the loopback interface only.
  - Re-running O(state=present) on a running, identical cluster changes nothing and restarts nothing. A changed
    C(replicas) scales the running cluster without restarting slurmctld; removed nodes are drained first, waited for
    until they run no job, then stopped and removed from Slurm. A changed Slurm config restarts the daemons that read it -
    slurmctld at once, the running slurmds in batches (see RV(rollout)) - a NodeSet with
    C(spec.updateStrategy.type=slurmAware) (the default) has at most C(spec.updateStrategy.maxUnavailable) of them out
    of service at once, idle nodes first, each drained with C(<prefix> upgrade), restarted, waited for until it
    registers, health-checked and resumed only when its checks pass; a busy node is drained and restarted only once
    it runs no job (O(rollout_timeout); then it is reported V(waiting) and left drained for a later run or the
    remediation pass). No job is killed. Outdated slurmds are sent SIGHUP when slurmctld restarted (slurmctld 22.05
    forgets nodes registered before it; slurmd re-reads the configs and registers again, keeping its jobs). With
    C(onDelete) or C(scheduled) no slurmd is restarted and the outdated ones are reported.
  - With O(state=absent) and O(target=local), cancels the cluster's jobs and stops every process of it; the state
    directory (configs, munge key, Slurm state, accounting database) is kept unless O(purge=true).
  - With O(state=present) and O(target=kubernetes), applies the CRDs (O(install_crds)), the SlurmCluster and NodeSet
    custom resources and every object of the cluster with server-side apply, in dependency order (Secrets and
    ConfigMaps before workloads, the jail's populate Job before the login and worker StatefulSets). Objects we own
    (labels C(app.kubernetes.io/managed-by=soperator.slurm) and C(app.kubernetes.io/instance=<name>)) that are no
    longer rendered are pruned; PersistentVolumeClaims are kept unless O(purge_volumes=true).
  - A change of a StatefulSet field that Kubernetes does not let change in place (for example the controller's spool
    size, a volume claim template) fails before anything is written, unless O(recreate_statefulsets=true) - then that
    StatefulSet is deleted with its pods orphaned (kept running) and created again, and its claims are kept.
  - Secrets (munge key, SSH host keys, database passwords) are generated on the first apply and read back from the
    cluster afterwards; they are never rotated by a re-run.
  - A smaller C(replicas) or a deleted NodeSet removes workers safely - the highest ordinals are drained with the
    cluster's drain reason prefix, waited for (O(drain_timeout)) until they run no job, and taken out of Slurm
    before their pods go. A changed slurm.conf is applied with C(scontrol reconfigure), once the controller pod
    sees the new file (see O(reconfigure)).
  - With O(state=present) and O(target=kubernetes), workers of a NodeSet whose C(spec.updateStrategy.type) is
    C(slurmAware) (the default) and whose pod template changed (image, resources, env, mounts) are rolled onto it
    after the apply, in batches of at most C(spec.updateStrategy.maxUnavailable) workers out of service (counting
    those already drained or down) - idle nodes first, each drained with C(<prefix> upgrade), its pod deleted so the
    StatefulSet recreates it from the new template, its new slurmd waited for (O(wait_timeout)), its health checks
    run, and resumed only when they pass. A busy node is drained and replaced only once it runs no job
    (O(rollout_timeout); then it is reported V(waiting) and left drained for a later run or the remediation pass).
    No job is killed. With C(onDelete) nothing is rolled.
  - With C(spec.updateStrategy.type=scheduled) the roll happens only inside the NodeSet's maintenance window
    (C(spec.updateStrategy.window), UTC on Slurm's side). Before it, the outdated workers are put in a Slurm
    reservation C(soperator-upgrade-<NodeSet>) with C(Flags=MAINT) for the window (C(IGNORE_JOBS) added when one of
    them runs a job then), so the scheduler starts no job there that would still run when the window opens. Inside
    the window each run (this module, or the remediation pass) rolls as C(slurmAware) does, waiting no longer than
    the window lasts; the reservation shrinks to the workers still outdated and is deleted once none is (see
    RV(reservations)). After the window nothing more is started until a new window is set. A reservation of that
    name that is not ours (without MAINT or with other users) fails the run and is left alone.
  - With O(state=absent) and O(target=kubernetes), deletes every object we own of the cluster - slurmctld and the
    workers go together, so running jobs end with them; PersistentVolumeClaims (the jail, spools, the database) are kept unless O(purge_volumes=true), and the
    CRDs always stay.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details:
      - O(state=rendered) reports which files would be created, updated or removed, and writes nothing.
      - O(state=present) and O(state=absent) compare the desired cluster with the running one (processes, Slurm nodes,
        config files under O(state_dir)) and list in RV(actions) what would be started, restarted, scaled, stopped or
        deleted, without starting, stopping or writing anything. With O(target=local), RV(rollout) lists the batches
        in which the slurmds of a changed Slurm config would be restarted, which nodes would be drained, and why.
      - With O(target=kubernetes), every write is sent as a server-side dry run; RV(objects) lists what would be
        created, updated or pruned, RV(actions) which nodes would be drained and removed, and RV(rollout) the
        batches of the rolling upgrade, which nodes would be replaced or drained, and why.
  diff_mode:
    support: partial
    details:
      - O(state=rendered) shows the before and after text of every changed file; Secret data is hidden.
      - O(state=present) and O(state=absent) show the running daemons and Slurm nodes before and after, not file text.
      - With O(target=kubernetes), the before and after of every object that changes, as YAML (the slurm.conf text
        change shows in the ConfigMap); Secret values are hidden.
options:
  state:
    description:
      - V(rendered) writes the manifests and Slurm configs to O(dest).
      - V(present) makes the cluster run on O(target); V(absent) stops it there.
    type: str
    required: true
    choices: [rendered, present, absent]
  target:
    description:
      - Where O(state=present) or O(state=absent) runs the cluster. Required with those states; ignored with
        O(state=rendered).
      - V(kubernetes) applies it to the Kubernetes cluster of the kubernetes.core auth options.
      - V(local) runs it as processes on the machine the module runs on.
    type: str
    choices: [kubernetes, local]
  definition:
    description:
      - The SlurmCluster and its NodeSets, as a list of documents, a single document, or a string of
        multi-document YAML.
      - Mutually exclusive with O(src). One of them is required, except with O(state=absent) and O(state_dir) set.
    type: raw
  src:
    description:
      - Path of a multi-document YAML file holding the SlurmCluster and its NodeSets.
      - Mutually exclusive with O(definition).
      - Read as UTF-8 only (a file in UTF-16 or another encoding is refused, naming it). Each document may nest
        at most 64 levels and expand to at most 1.5 MiB (what YAML aliases repeat counted each time).
    type: path
  dest:
    description:
      - Folder to render into. Required with O(state=rendered).
      - Manifests go to C(manifests/), Slurm configs to C(slurm/), with the exporter on the rule file to
        C(prometheus/) and the dashboards to C(grafana/); C(.soperator-render.json) records what was
        written. Only a file an earlier render wrote, and nobody changed since, is removed when it is no longer
        rendered; other files in the folder are left alone. A symlink where a rendered file or folder goes fails the
        task before anything is written.
    type: path
  state_dir:
    description:
      - With O(target=local), the directory holding everything of the local cluster (configs, munge key, spool, logs,
        pid records, accounting database). Slurm's unix sockets live under it, so keep it short (the error says how
        short when it is too long).
      - Defaults to C($XDG_STATE_HOME/soperator/<cluster name>), that is C(~/.local/state/soperator/<cluster name>).
      - The path may hold only letters, digits and C(/ . _ - + @) (it is written into slurm.conf, plugstack.conf and
        a shell wrapper); anything else is refused before any write.
      - A state directory carries the marker C(.soperator-local-cluster.json), written when the module creates it.
        O(state=present) takes only a new or empty directory, or one with that marker; O(state=absent) acts only on
        one with that marker. A directory made by a version before the marker is taken (and marked) only when it
        proves it is one - nothing but the local backend's folders, its C(cluster.json) and an C(etc/slurm.conf)
        whose C(StateSaveLocation) is C(<state_dir>/ctld) -; any other directory (a parent folder of clusters, a
        Slurm install prefix) fails the task before a process is signalled or a file written or deleted.
      - Only processes the cluster started and recorded (pid and start time), their children, and the slurmstepds
        listening on step sockets in its spool are ever signalled.
      - Each cluster's loopback ports are chosen and claimed under a machine-wide lock (a claims file in
        C(/run/lock), C(/var/lock) or the temp directory), so clusters started at the same time get distinct blocks.
        When a port of the stored block is taken by another process or claimed by another cluster, a stopped cluster
        moves to a free block (its configs follow) and a running one fails, naming the port.
    type: path
  purge:
    description:
      - With O(state=absent), also delete what the local backend created in O(state_dir) (its folders, files, marker
        and lock; the directory itself when nothing else is left in it), under the cluster's lock once every process
        is stopped. Destructive, opt-in. Refused, with nothing deleted, for a directory without the marker (see
        O(state_dir)) or one that holds another local cluster's state directory.
    type: bool
    default: false
  wait_timeout:
    description:
      - With O(target=local), the longest wait in seconds for each step - a daemon to start or stop, the nodes to come up,
        and the jobs on a node being scaled down to finish.
      - With O(target=kubernetes) and O(wait=true), the longest wait for the cluster to become ready; with
        O(target=kubernetes), also the longest wait for a changed slurm.conf to reach the controller pod before
        C(scontrol reconfigure) (see O(reconfigure)), and for each step of a staggered scale-up (RV(scale_up)).
    type: int
    default: 300
  jail_dir:
    description:
      - With O(target=local), the jail - a directory holding the users' root filesystem (fill it with
        M(soperator.slurm.jail_populate)). Job steps run in it through the chroot SPANK plugin (O(spank_chroot)), and
        with O(login) a login sshd chroots every session into it. Needs root.
      - sshd chroots only into a path whose every directory is owned by root and not writable by group or others,
        so not below C(/tmp).
      - A symbolic link is refused, as a linked O(state_dir) is (and
        O(soperator.slurm.jail_populate#module:jail_dir)); pass the directory it points to.
      - Omitted, jobs run in this machine's root filesystem and there is no login node.
    type: path
  spank_chroot:
    description:
      - With O(jail_dir), the chroot SPANK plugin the local slurmds load (C(make spank) builds one).
      - Defaults to the installed C(/usr/lib/slurm/spank_chroot.so).
    type: path
  login:
    description:
      - With O(jail_dir), also run the login node - sshd on 127.0.0.1 (port in RV(login)), public keys only, every
        session chrooted into the jail, with the cluster's Slurm configs and munge socket mounted in it so
        C(sbatch) and C(srun) work. It runs in a private mount namespace - nothing is mounted on the host.
      - Root's keys are C(spec.login.sshRootPublicKeys) and O(login_authorized_keys); other users log in with the
        keys in their C(~/.ssh/authorized_keys) in the jail. Host keys are generated once under O(state_dir).
    type: bool
    default: true
  login_authorized_keys:
    description:
      - With O(login), more public keys (OpenSSH C(authorized_keys) lines) that may log in as root, besides
        C(spec.login.sshRootPublicKeys).
    type: list
    elements: str
    default: []
  identity_secrets:
    description:
      - With O(target=local) and C(spec.identity), the contents of the Secrets and ConfigMaps it names (a local
        cluster has no Kubernetes objects to read them from), as a mapping of object names to mappings of keys to
        values; for example the key C(password) of the object C(ldap-bind) for
        C(spec.identity.ldap.bindPasswordSecret) with name C(ldap-bind). A name or key the spec needs and that is
        missing here is refused with its field path before anything is written. Never logged.
      - Ignored with O(target=kubernetes), which reads nothing but whether the named objects exist.
    type: dict
  install_crds:
    description:
      - With O(target=kubernetes), apply the SlurmCluster and NodeSet CustomResourceDefinitions first (needs the
        right to manage CRDs, which are cluster-wide). They are never deleted by this module.
    type: bool
    default: true
  manage_rbac:
    description:
      - With O(target=kubernetes), apply and prune the cluster's RBAC objects (the remediation Role and RoleBinding,
        the ClusterRole and ClusterRoleBinding of C(cordonKubernetesNode), the power programs' Role and RoleBinding
        of ephemeral NodeSets) and the ServiceAccounts they bind (remediation's, the power programs').
      - V(false) leaves them alone - neither read, applied nor pruned - so a run needs no RBAC rights. The
        in-cluster remediation CronJob reconciles this way (with O(install_crds=false) and
        O(create_namespace=false)); it may not grant itself rights, so whoever deploys the cluster applies them.
    type: bool
    default: true
extends_documentation_fragment:
  - soperator.slurm.attributes
  - soperator.slurm.kube_target
  - soperator.slurm.kube_target.api
  - kubernetes.core.k8s_auth_options
notes:
  - Scaling a NodeSet up to its C(maxReplicas) changes no Slurm config; Slurm nodes are defined as FUTURE nodes up to
    that number and join when their slurmd starts.
  - O(target=local) needs the Debian packages slurm-wlm (slurmctld, slurmd, slurm-client) and munge, plus slurmdbd and
    mariadb-server with accounting; a missing binary fails with the package to install.
  - Processes started with O(target=local) outlive the Ansible run; stop them with O(state=absent).
seealso:
  - name: The SlurmCluster and NodeSet CRDs
    description: Shipped in the collection's crds/ folder, generated from the same schema this module validates with.
    link: https://github.com/soperator-slurm/soperator.slurm
"""

EXAMPLES = r"""
- name: Render a cluster spec file into manifests and Slurm configs
  soperator.slurm.slurm_cluster:
    state: rendered
    src: examples/gpu-accounting.yml
    dest: /tmp/gpu-demo

- name: Render from Ansible variables
  soperator.slurm.slurm_cluster:
    state: rendered
    dest: "{{ playbook_dir }}/rendered"
    definition:
      - apiVersion: slurm.soperator.dev/v1alpha1
        kind: SlurmCluster
        metadata: {name: demo, namespace: slurm}
        spec:
          jail: {volume: {size: 100Gi}}
      - apiVersion: slurm.soperator.dev/v1alpha1
        kind: NodeSet
        metadata: {name: cpu, namespace: slurm}
        spec:
          clusterName: demo
          replicas: 2
          resources: {cpu: "16", memory: 64Gi}

- name: Run the cluster as local processes (re-running it changes nothing; new replicas scale it)
  soperator.slurm.slurm_cluster:
    state: present
    target: local
    src: examples/small-cpu.yml
    state_dir: /tmp/slurm-small
  register: cluster

- name: Run a job on it
  ansible.builtin.command: srun -N2 hostname
  environment: "{{ cluster.env }}"
  changed_when: false

- name: Run it with a jail and a login node (root; the jail is filled beforehand)
  soperator.slurm.slurm_cluster:
    state: present
    target: local
    src: examples/small-cpu.yml
    state_dir: /tmp/slurm-small
    jail_dir: /srv/jail
    login_authorized_keys: ["{{ lookup('ansible.builtin.file', '~/.ssh/id_ed25519.pub') }}"]
  register: cluster

- name: Submit a job from the login node
  ansible.builtin.command: >-
    ssh -p {{ cluster.login.port }} {{ cluster.login.user }}@{{ cluster.login.host }} sbatch --wrap hostname
  changed_when: true

- name: Stop it, keeping its state
  soperator.slurm.slurm_cluster:
    state: absent
    target: local
    state_dir: /tmp/slurm-small

- name: Deploy a cluster to Kubernetes and wait until it is ready
  soperator.slurm.slurm_cluster:
    state: present
    target: kubernetes
    src: examples/gpu-accounting.yml
    kubeconfig: ~/.kube/config
    wait: true
    wait_timeout: 900

- name: Show the plan (objects, slurm.conf change, nodes that would be drained) without changing anything
  soperator.slurm.slurm_cluster:
    state: present
    target: kubernetes
    src: examples/gpu-accounting.yml
  check_mode: true
  diff: true

- name: Remove it from Kubernetes, keeping the jail and the accounting database volumes
  soperator.slurm.slurm_cluster:
    state: absent
    target: kubernetes
    src: examples/gpu-accounting.yml

- name: Stop it and delete its state directory
  soperator.slurm.slurm_cluster:
    state: absent
    target: local
    state_dir: /tmp/slurm-small
    purge: true
"""

RETURN = r"""
files:
  description: Every file of the render, with what was done to it.
  returned: when O(state=rendered)
  type: list
  elements: dict
  contains:
    path:
      description: Path relative to O(dest).
      type: str
      sample: slurm/slurm.conf
    action:
      description: >-
        created, updated, unchanged, removed (written by an earlier render, no longer rendered), or kept (written by
        an earlier render and changed since, so left alone). In check mode, what would be done.
      type: str
      sample: unchanged
cluster:
  description: A summary of the validated, defaulted cluster.
  returned: success, when a definition or src was given
  type: dict
  sample:
    name: demo
    namespace: slurm
    node_sets: [{name: cpu, replicas: 2, max_replicas: 4, nodes: "cpu-[0-3]"}]
    partitions: [{name: main, node_sets: [cpu], default: true}]
generated_secrets:
  description: Names of the Secrets whose material was generated by this run (their data is never returned).
  returned: when O(state=rendered)
  type: list
  elements: str
  sample: [demo-munge, demo-ssh-host-keys]
actions:
  description:
    - What was done to the local cluster, in order; in check mode what would be done (each item starts with
      C(would)). Empty when nothing changed.
    - With O(target=kubernetes), what was done in Slurm - nodes drained, waited for and removed, C(scontrol
      reconfigure) - in check mode what would be done.
  returned: when O(state=present) or O(state=absent)
  type: list
  elements: str
  sample: ["started munged", "started slurmctld", "started slurmd-cpu-0", "started slurmd-cpu-1"]
state_dir:
  description: The local cluster's state directory.
  returned: when O(target=local)
  type: str
  sample: /root/.local/state/soperator/small
env:
  description: Environment Slurm clients (sinfo, sbatch, srun, squeue) need to reach the local cluster; export it.
  returned: when O(target=local)
  type: dict
  sample: {SLURM_CONF: /root/.local/state/soperator/small/etc/slurm.conf}
login:
  description:
    - Where the login node listens, with O(jail_dir) and O(login); null otherwise (or before the first start).
  returned: when O(target=local) and O(state=present)
  type: dict
  sample: {host: 127.0.0.1, port: 17820, user: root}
exporter:
  description:
    - The URL of the cluster's Prometheus exporter when C(spec.observability.exporter.enabled); null otherwise.
  returned: when O(target=local) and O(state=present)
  type: str
  sample: http://127.0.0.1:9341/metrics
monitoring:
  description:
    - With C(spec.observability.exporter.enabled), the files for a Prometheus and a Grafana the admin runs, under
      O(state_dir) (written in the run, also in check mode's report as C(would write)); null otherwise.
  returned: when O(target=local) and O(state=present)
  type: dict
  contains:
    rules:
      description: The alert rule file (name it in Prometheus' C(rule_files)).
      type: str
      sample: /var/lib/soperator/demo/prometheus/soperator-slurm-rules.yml
    job:
      description: The scrape job name the rules expect for the exporter's target.
      type: str
      sample: demo-exporter
    dashboards:
      description: The Grafana dashboards, one JSON file each.
      type: list
      elements: str
logs:
  description:
    - Where each daemon of the local cluster logs, all under C(<state_dir>/log) - the daemons running after the run
      (in check mode, those that would run); when the run fails, every daemon it had recorded. The Slurm daemons and
      MariaDB write their own log file (C(SlurmctldLogFile), C(SlurmdLogFile), slurmdbd's C(LogFile)), munged, sshd
      and the exporter log to their standard error, which goes to the same name; what a Slurm daemon prints before
      its log file is open is in C(<name>.out) beside it.
  returned: when O(target=local) and O(state=present)
  type: dict
  sample: {munged: /root/.local/state/soperator/small/log/munged.log,
           slurmctld: /root/.local/state/soperator/small/log/slurmctld.log,
           slurmd-cpu-0: /root/.local/state/soperator/small/log/slurmd-cpu-0.log}
nodes:
  description:
    - Slurm nodes as C(sinfo --json) reports them after the run (in check mode, as they are now). Empty when
      slurmctld does not run.
  returned: when O(state=present) and O(target=local)
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
      sample: cpu-0
    state:
      description: Base state, lower case.
      type: str
      sample: idle
    state_flags:
      description: State flags such as DRAIN.
      type: list
      elements: str
      sample: []
    partitions:
      description: Partitions the node is in.
      type: list
      elements: str
      sample: [main]
objects:
  description:
    - With O(target=kubernetes), every object of the cluster in apply order and what was done to it - created,
      updated, unchanged, pruned, kept (a volume not purged), or recreated (a StatefulSet whose immutable C(fields)
      changed, see O(recreate_statefulsets)) - in check mode what would be done.
  returned: when O(target=kubernetes)
  type: list
  elements: dict
  sample: [{kind: ConfigMap, namespace: slurm, name: demo-slurm-configs, action: updated},
           {kind: StatefulSet, namespace: slurm, name: demo-controller, action: recreated,
            fields: [spec.volumeClaimTemplates]}]
waited:
  description: With O(target=kubernetes) and O(wait=true), what was waited for and how long (seconds).
  returned: when O(target=kubernetes)
  type: list
  elements: dict
  sample: [{for: "the cluster to be ready", seconds: 42.0}]
status:
  description: With O(target=kubernetes), the SlurmCluster C(.status) written by this run (phase, conditions,
    C(slurmConfigDigest) - the digest of the Slurm configs slurmctld is known to have loaded).
  returned: when O(target=kubernetes) and O(state=present), not in check mode
  type: dict
  sample: {phase: Ready, conditions: [{type: ControllerReady, status: "True"}]}
status_updated:
  description: Whether C(.status) of the SlurmCluster or a NodeSet was written (not counted as C(changed)).
  returned: when O(target=kubernetes)
  type: bool
requests:
  description: With O(target=kubernetes), API requests made - reads, writes, and dry-run writes.
  returned: when O(target=kubernetes)
  type: dict
  sample: {reads: 17, writes: 0, dry_run_writes: 0}
upgrade:
  description:
    - With O(target=kubernetes), the Slurm version change of this run, done in Slurm's order; V(null) when no daemon's
      Slurm version changes (a re-run after an upgrade - no new dump).
    - C(versions) maps each moving component (C(slurmdbd/<StatefulSet>), C(slurmctld/...), C(slurmd/...),
      C(login/...)) to C(from -> to).
    - C(phases) in order - V(backup-database) (C(job), C(claim), C(file)), V(slurmdbd), V(save-slurmctld-state)
      (C(job), C(claim), C(folder)), V(slurmctld), V(slurmd and login) - each with C(status) V(planned) (check mode),
      V(done), V(done earlier) (an earlier run's backup Job was found), V(ready) or V(applied).
    - C(backup) names the backup claim, the dump's file (C(dump)) and slurmctld's saved state (C(state)) on it, and
      their Jobs. C(unverified) is V(true) when O(allow_unversioned_images) let an image without a version through.
  returned: when O(target=kubernetes) and O(state=present)
  type: dict
  sample: {versions: {slurmdbd/demo-accounting: "25.11.2 -> 26.05.5", slurmctld/demo-controller: "25.11.2 -> 26.05.5"},
           phases: [{phase: backup-database, status: done, job: demo-dbdump-1a2b3c4d, claim: demo-backups,
                     file: accounting/dbdump-25.11.2-to-26.05.5-1a2b3c4d.sql},
                    {phase: slurmdbd, status: ready, objects: [demo-accounting-db, demo-accounting]},
                    {phase: save-slurmctld-state, status: done, job: demo-slurmctld-state-5e6f7a8b, claim: demo-backups,
                     folder: slurmctld/slurmctld-state-25.11.2-to-26.05.5-5e6f7a8b},
                    {phase: slurmctld, status: ready, objects: [demo-controller]},
                    {phase: slurmd and login, status: applied, objects: [demo-login, cpu]}],
           backup: {claim: demo-backups, dump: accounting/dbdump-25.11.2-to-26.05.5-1a2b3c4d.sql,
                    dump_job: demo-dbdump-1a2b3c4d, state: slurmctld/slurmctld-state-25.11.2-to-26.05.5-5e6f7a8b,
                    state_job: demo-slurmctld-state-5e6f7a8b}}
rollout:
  description:
    - With O(target=kubernetes), the Slurm-aware rolling upgrade of the workers whose pod template changed, one
      entry per node it concerns, in batch order; empty when every worker runs its NodeSet's current template.
    - C(step) in check mode is the plan - V(replace) (idle), V(drain) (busy - drained, replaced once it runs no
      job), V(wait) (drained by an earlier run, still busy), V(recheck) (replaced already, still drained), or
      V(skipped) (with C(batch) 0 and the reason, such as a drain of someone else's or maxUnavailable reached).
    - After a real run C(step) is the outcome - V(resumed), V(left-drained) (its checks failed or could not run),
      V(waiting) (drained, jobs still ran at O(rollout_timeout)), V(pending) (its batch did not start in this run),
      or V(skipped); C(steps) lists what was done (drained, replaced, placed, rechecked, resumed; V(placed) - with
      C(spec.topology.nodeLabels) the new pod runs under another switch, and the topology files were rewritten and
      slurmctld reconfigured before the resume, as C(topology) of the entry says).
    - With O(target=local), the same entries for the slurmds a changed Slurm config restarts (a node is outdated
      when its slurmd runs an older configuration; replaced means its slurmd was restarted); a NodeSet whose
      C(spec.updateStrategy.type) is not C(slurmAware) lists its outdated nodes as V(skipped).
    - With C(spec.updateStrategy.type=scheduled), before the window opens each outdated worker has C(step)
      V(scheduled) (in the reservation of RV(reservations)); after it closes, V(skipped).
  returned: when O(state=present)
  type: list
  elements: dict
  sample: [{node: cpu-1, node_set: cpu, batch: 1, step: resumed, reason: "checks pass after the replacement",
            steps: [drained, replaced, rechecked, resumed]},
           {node: cpu-0, node_set: cpu, batch: 3, step: waiting, steps: [drained],
            reason: "drained (soperator: upgrade); jobs still run on it after 600s: ..."}]
scale_up:
  description:
    - With O(target=kubernetes) and O(wait=true), the worker StatefulSets this run raised in steps so that at most
      C(spec.workers.maxStartingPods) worker pods of the cluster (all NodeSets) were asked for and not Ready at once;
      V(null) when the room held the whole scale-up (one apply, as without a bound), with O(wait=false) (the replicas
      are applied at once) and with a bound of 0.
    - C(targets) the replicas wanted per StatefulSet, C(steps) the replicas each step set (in check mode the steps
      the real run would take if each step became Ready before the next; the diff shows the final replicas),
      C(step_count) how many. Each step after the first waits (up to O(wait_timeout)) until the step's pods are
      Ready; a timed-out run leaves the replicas of its last step, and a re-run continues from them.
  returned: when O(target=kubernetes) and O(state=present)
  type: dict
  sample: {max_starting_pods: 100, targets: {gpu: 250}, steps: [{gpu: 100}, {gpu: 200}, {gpu: 250}], step_count: 3}
topology:
  description:
    - With O(target=kubernetes) and C(spec.topology.nodeLabels), the topology this run computed from the labels of
      the Kubernetes nodes the workers run on (the tree written to topology.conf and, for Slurm 25.05+,
      topology.yaml); V(null) without nodeLabels.
    - C(units) top first, each a switch (C(plugin) V(topology/tree)) or a block (V(topology/block)) with its Slurm
      C(nodes) or its C(children) switches. C(unplaced) lists the workers left out of the tree, with the reason (no
      pod on a node yet, a tier label missing on its node, a switch under two parents); Slurm gives them no job until
      a run finds their place.
  returned: when O(target=kubernetes) and O(state=present)
  type: dict
  sample: {plugin: topology/tree, units: [{name: root, children: [spine-a, spine-b]}, {name: spine-a, children: [leaf-1]},
           {name: leaf-1, nodes: [gpu-0, gpu-1]}], unplaced: [{node: gpu-2, reason: "Kubernetes node n7 has no label
           example.com/leaf"}]}
reservations:
  description:
    - With O(target=kubernetes), for each NodeSet with C(spec.updateStrategy.type=scheduled) whose reservation this
      run looked at, what became of it - C(action) V(created), V(updated), V(removed) (every worker runs the new
      template), V(unchanged) or V(absent) (would be, in check mode), the C(scontrol) C(commands) run (to be run, in
      check mode), the reserved C(nodes) and the C(window) (UTC); C(before) is the reservation as it was.
    - Workers waiting for their window are listed in RV(rollout) with C(step) V(scheduled).
  returned: when O(target=kubernetes) and O(state=present)
  type: list
  elements: dict
  sample: [{node_set: cpu, reservation: soperator-upgrade-cpu, action: created, nodes: "cpu-[0-2]",
            window: {start: "2026-11-28T02:00:00Z", end: "2026-11-28T06:00:00Z"},
            commands: ["scontrol create reservation ReservationName=soperator-upgrade-cpu StartTime=2026-11-28T02:00:00
                        EndTime=2026-11-28T06:00:00 Nodes=cpu-[0-2] Flags=MAINT Users=root"]}]
errors:
  description: On an invalid spec, every problem found, each with its field path.
  returned: failure
  type: list
  elements: dict
  sample: [{path: "NodeSet/gpu spec.replicas", message: "must be >= 0, got -1"}]
"""


from operator import methodcaller

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils import module_support as ms
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import (
    RenderDestError, read_secret_material, render_cluster, write_rendered)
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_limits import check_kube_sizes

OPTIONS = dict(
    state=dict(type="str", required=True, choices=["rendered", "present", "absent"]),
    target=dict(type="str", choices=args.TARGETS),
    dest=dict(type="path"),
    state_dir=dict(type="path"),
    purge=dict(type="bool", default=False),
    wait_timeout=dict(type="int", default=300),
    jail_dir=dict(type="path"),
    spank_chroot=dict(type="path"),
    login=dict(type="bool", default=True),
    login_authorized_keys=dict(type="list", elements="str", default=[], no_log=False),
    identity_secrets=dict(type="dict", no_log=True),
    install_crds=dict(type="bool", default=True),
    manage_rbac=dict(type="bool", default=True),
)


def _rendered(module):
    model = ms.model_from_options(module.params)
    check_kube_sizes(model)                     # the manifests are for Kubernetes: what it would refuse is not written
    dest = module.params["dest"]
    try:
        rendered = render_cluster(model, read_secret_material(dest))
        files, diffs = write_rendered(dest, rendered, check_mode=module.check_mode)
    except RenderDestError as e:
        raise SoperatorError("dest: %s" % e)
    changed = any(f["action"] != "unchanged" for f in files)
    result = dict(changed=changed, files=files, cluster=model.summary(),
                  generated_secrets=sorted(rendered.generated_secrets) if changed else [])
    if module._diff:
        result["diff"] = diffs
    return result


# --------------------------------------------------------------------------------------------- target=local

def _local(module):
    params = module.params
    model = None
    if params["src"] or params["definition"] is not None:
        model = ms.model_from_options(params)
    elif params["state"] == "present" or not params["state_dir"]:
        raise SoperatorError("state=%s needs the cluster: pass src or definition%s"
                             % (params["state"], "" if params["state"] == "present" else " (or state_dir)"))
    # Each target's backend is imported where it runs: a module run compiles what it imports anew (AnsiballZ's zip
    # keeps no bytecode), and the other backend is a quarter of that.
    from ansible_collections.soperator.slurm.plugins.module_utils.local import operations as local_ops
    return local_ops.run(model, params, check_mode=module.check_mode, diff=module._diff)


# --------------------------------------------------------------------------------------------- target=kubernetes

def _kubernetes(module):
    params = module.params
    if not params["src"] and params["definition"] is None:
        raise SoperatorError("target=kubernetes needs the cluster: pass src or definition")
    model = ms.model_from_options(params)
    args.require_positive(params, "drain_timeout", "api_timeout", "wait_sleep")
    args.require_non_negative(params, "rollout_timeout")
    present_or_absent = methodcaller(params["state"])
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import module as km  # as in _local
    return km.result_of(module, lambda: km.make_cluster(module, model), present_or_absent,
                        {"cluster": model.summary()})


def _run(module):
    ms.require_yaml()
    args.require_positive(module.params, "wait_timeout")
    if module.params["state"] == "rendered":
        return _rendered(module)
    if module.params["target"] == "kubernetes":
        return _kubernetes(module)
    return _local(module)


def main():
    module = SoperatorModule(
        OPTIONS, shared=(args.SPEC_SOURCE_SPEC, args.KUBE_TARGET_SPEC, args.KUBE_API_SPEC, args.AUTH_ARG_SPEC),
        uses_kubernetes=lambda p: p["state"] != "rendered" and p["target"] == "kubernetes",
        mutually_exclusive=[("definition", "src")],
        required_if=[("state", "rendered", ("dest",)), ("state", "rendered", ("definition", "src"), True),
                     ("state", "present", ("target",)), ("state", "absent", ("target",))],
        supports_check_mode=True,
    )
    module.run(_run)


if __name__ == "__main__":
    main()
