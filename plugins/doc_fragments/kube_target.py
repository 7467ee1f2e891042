# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Options of the Kubernetes target shared by slurm_cluster and slurm_nodeset. Use together with
    # kubernetes.core.k8s_auth_options (how the API server is reached).
    DOCUMENTATION = r"""
options:
  wait:
    description:
      - With the Kubernetes target, wait until the StatefulSets are ready and the populate Job has completed, and
        wait for the populate Job before applying the workloads that mount the jail. The waits and their durations
        are returned in RV(waited); a timeout fails with what is not ready.
    type: bool
    default: false
  create_namespace:
    description:
      - With the Kubernetes target, create the cluster's namespace when it does not exist.
      - V(false) does not read the namespace either (namespaces are cluster-scoped); it must exist.
    type: bool
    default: true
  purge_volumes:
    description:
      - With the Kubernetes target, also delete PersistentVolumeClaims we created that are no longer rendered (or,
        with O(state=absent), all of them). Destructive, opt-in; claims created by StatefulSets (spool, database) and
        an existing jail claim are never deleted.
    type: bool
    default: false
  recreate_statefulsets:
    description:
      - With the Kubernetes target, what to do when a StatefulSet's spec changes a field the API server does not let
        change in place (C(spec.volumeClaimTemplates) such as a spool size, C(spec.serviceName), C(spec.selector),
        C(spec.podManagementPolicy)). The plan finds it before anything is written.
      - V(false) fails the task before any write, naming the StatefulSet and the fields.
      - V(true) deletes that StatefulSet with C(propagationPolicy=Orphan) - its pods keep running, so Slurm jobs are
        not killed at this step - waits until it is gone (at most O(wait_timeout) seconds), and applies the new one,
        which adopts the running pods. It is reported as C(recreated) with the C(fields) that forced it. In check
        mode the delete is a server-side dry run and nothing else is sent.
      - PersistentVolumeClaims the StatefulSet created from its volume claim templates are never deleted, and
        Kubernetes does not resize them; a new size applies to claims created afterwards (a new replica).
      - Pods then follow the StatefulSet's update strategy. The controller and login nodes use C(RollingUpdate), so a
        changed pod template replaces their pods one by one. Workers use C(OnDelete), so Kubernetes never replaces them
        by itself; a NodeSet with C(spec.updateStrategy.type=slurmAware) (the default) is rolled by this module,
        Slurm-aware (see RV(rollout)), one with V(onDelete) keeps the old template until its pods are replaced - by
        remediation (M(soperator.slurm.slurm_remediate)), a scale-down and scale-up, or deleting the pod by hand.
    type: bool
    default: false
  drain_timeout:
    description:
      - With the Kubernetes target, how long in seconds to wait for the jobs on nodes being removed (a smaller
        C(replicas), a deleted NodeSet) to finish. At the timeout the task fails and changes nothing else; the nodes
        stay drained, and a re-run goes on.
    type: int
    default: 3600
  force:
    description:
      - With the Kubernetes target, remove nodes without waiting for their jobs (the jobs are killed with the pods).
    type: bool
    default: false
  reconfigure:
    description:
      - With the Kubernetes target, run C(scontrol reconfigure) in the controller after slurm.conf changed. A change
        of node definitions restarts the controller pod instead (slurmctld reads them only when it starts).
      - The kubelet updates a mounted ConfigMap only on its next sync (often a minute or more after the apply), so
        with O(slurm_transport=kubernetes) the module first reads the SHA-256 of every file of the ConfigMap under
        C(/etc/slurm) in the controller pod, every O(wait_sleep) seconds, until all match the applied ones (at most
        O(wait_timeout) seconds), and reports the wait in RV(actions). At the timeout the task fails naming the pod
        and the files and runs no reconfigure; the ConfigMap stays applied.
      - The SlurmCluster's C(status.slurmConfigDigest) records the configs slurmctld is known to have loaded (after a
        reconfigure, when a new cluster's controller starts, or when a roll of the controller finished under
        O(wait=true)). A run that finds the ConfigMap unchanged but a different digest recorded (an earlier run
        timed out or failed before its reconfigure, or a cluster deployed before the digest was kept) waits for the
        files and reconfigures the same way, so a re-run finishes the reload. A run with nothing owed runs no command.
      - With O(slurm_transport=local) there is no pod to wait for; the reconfigure runs at once.
    type: bool
    default: true
  wait_sleep:
    description:
      - With the Kubernetes target, seconds between two reads while waiting (readiness, jobs on nodes being removed,
        slurm.conf reaching the controller pod).
    type: float
    default: 2.0
  slurm_transport:
    description:
      - How Slurm commands (drain, remove nodes, reconfigure) reach the cluster's slurmctld.
      - V(kubernetes) runs them in the controller pod C(<name>-controller-0) through the exec API.
      - V(local) runs them on the host that runs the module, with C(SLURM_CONF) from O(slurm_conf) (a controller
        reachable from there, for example through the local backend).
    type: str
    choices: [kubernetes, local]
    default: kubernetes
  slurm_conf:
    description:
      - With O(slurm_transport=local), the C(slurm.conf) the Slurm commands use.
    type: path
  rollout_timeout:
    description:
      - How long in seconds the rolling upgrade of a NodeSet with C(spec.updateStrategy.type=slurmAware) (on
        Kubernetes of the workers whose pod template changed, on a local cluster of the slurmds a changed Slurm
        config restarts) waits for the jobs on workers it drained (with the reason
        C(<prefix> upgrade)) to end. At the timeout the task does not fail - those nodes stay drained, are reported
        in RV(rollout) as V(waiting), and no further batch starts; a later run, or the remediation pass, replaces,
        re-checks and resumes them once they run no job. V(0) does not wait. With
        C(spec.updateStrategy.type=scheduled) the wait also ends with the maintenance window.
    type: int
    default: 600
  health_check_program:
    description:
      - With the Kubernetes target, the health-check program the rolling upgrade runs (C(--check-only --node NAME))
        on a replaced worker before resuming it; with O(slurm_transport=kubernetes) in the worker pod, with
        O(slurm_transport=local) on this host in the node's environment.
      - Defaults to C(/opt/soperator/bin/health-check), where the worker image installs it.
    type: path
  allow_unversioned_images:
    description:
      - With the Kubernetes target, a slurmdbd or slurmctld image whose tag does not start with its Slurm version
        (C(<YY.MM.micro>-...), as C(make images) tags them) fails the run when that image changes, before any write -
        a wrong guess could make slurmdbd or slurmctld convert the accounting database or their state with a version
        Slurm does not support. V(true) upgrades anyway, in Slurm's order with the same backups (RV(upgrade)), but
        without the version check. A worker or login image without a version is a plain image change (they convert
        no database or state).
    type: bool
    default: false
  backup_size:
    description:
      - With the Kubernetes target, the size of the backup claim C(<name>-backups) a Slurm version upgrade makes for
        the accounting database dump and slurmctld's saved state, when it does not exist yet (an existing one is never
        resized).
      - Defaults to the in-cluster database's C(storage), V(10Gi) with an external database.
    type: str
  backup_storage_class:
    description:
      - With the Kubernetes target, the StorageClass of the backup claim (default that of the in-cluster database,
        else the cluster's default).
    type: str
notes:
  - Objects are applied with server-side apply under the field manager C(soperator.slurm), with conflicts forced (the
    spec is the source of truth). An object is sent only when it differs from what we applied last or someone changed
    a field we set, so a run that changes nothing makes no write request.
  - Check mode sends every write as a server-side dry run (C(dryRun=All)), so the diff is the API server's own
    answer. Where the namespace or a CRD does not exist yet, the plan is shown without the server's view.
  - Writing C(.status) of the SlurmCluster and its NodeSets is reported in RV(status_updated), not as C(changed).
  - "A change of the Slurm version of a daemon (the version its image tag starts with) runs in Slurm's documented
    order (U(https://slurm.schedmd.com/upgrades.html)): the accounting database is dumped (C(mariadb-dump
    --single-transaction)) onto the claim C(<name>-backups) by a Job, then slurmdbd is applied and waited for, then
    slurmctld is stopped, its StateSaveLocation copied onto the same claim, and applied and waited for, then the
    workers and login. Such a run waits for each step whatever O(wait) says (at most O(wait_timeout) each). A jump
    beyond what the new release accepts (the previous two major releases; three since 24.11), a downgrade, or a
    slurmctld newer than slurmdbd (slurmd or login newer than slurmctld) fails the run before any write. The backup
    claim and Jobs are never deleted by this collection, O(purge_volumes) included."
requirements:
  - The C(kubernetes) Python client (24.2 or newer) on the host that runs the module.
"""

    # How API requests are retried and bounded: every module that talks to the API server (with kube_target, or
    # alone where a module has no other Kubernetes target option).
    API = r"""
options:
  api_retries:
    description:
      - With the Kubernetes target, how many times an API request is retried after a server error (5xx), throttling
        (429), a write conflict (409) or a timeout. Other errors are not retried.
    type: int
    default: 3
  api_timeout:
    description:
      - With the Kubernetes target, seconds one API request may take before it counts as timed out.
    type: int
    default: 30
"""
