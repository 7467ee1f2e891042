# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The alert rule pack, over the exporter's metrics (observe/metrics.py) and Prometheus' own `up` of the exporter's
target (nothing else is needed). One definition serves the Prometheus rule file (render.yml, `promtool check rules`)
and the PrometheusRule object. Every alert says what to do.

Two alerts watch the exporter itself, and never fire together: SlurmControllerUnreachable when the exporter answers
but Slurm does not (soperator_slurm_up 0: a scrape answers within its timeout, observe/exporter.py), and
SlurmExporterDown when Prometheus gets no soperator_slurm_up from the exporter's target at all (the scrape fails, the
target is gone, or something else answers there) - then every other Slurm alert is blind."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import string

GROUP = "soperator-slurm"
# The exporter's scrape target in Prometheus: {job}, with {namespace} on Kubernetes (render/observe_objects.py).

# (name, expr, for, severity, summary, description); in expr, $target is the exporter target's selector, $on its labels
_RULES = (
    ("SlurmControllerUnreachable", "soperator_slurm_up == 0", "2m", "critical",
     "slurmctld does not answer the exporter",
     "The exporter's Slurm commands ({{ $labels.instance }}) fail or do not answer within the scrape timeout: users "
     "cannot submit or query jobs. Check the controller (pod <cluster>-controller-0, or the local slurmctld): its "
     "log, `scontrol ping`, munge, and that its spool volume is not full. soperator_slurm_exporter_command_failed "
     "says which command failed (after one that did not answer, the others are not run)."),
    ("SlurmExporterDown", "up$target == 0 or on ($on) absent(soperator_slurm_up$target)", "5m", "warning",
     "Prometheus gets no Slurm metrics from {{ $labels.job }}",
     "Prometheus cannot scrape the Slurm exporter (up 0), has no target for it, or the target answers without "
     "soperator_slurm_up: the other Slurm alerts cannot fire while this lasts. Check the exporter: on Kubernetes "
     "the Deployment <cluster>-exporter (its pod, its log, the Service's endpoints, the ServiceMonitor's selector "
     "and that Prometheus selects it); locally the exporter's log (<state_dir>/log/exporter.log) and your "
     "Prometheus' scrape config (job {{ $labels.job }}). A controller that is merely down does not fire this: the "
     "exporter still answers, with soperator_slurm_up 0 (SlurmControllerUnreachable)."),
    ("SlurmNodeNotResponding", "soperator_slurm_node_responding == 0", "5m", "warning",
     "Slurm node {{ $labels.node }} does not respond",
     "slurmctld has not heard from slurmd on {{ $labels.node }} for SlurmdTimeout. Check the worker pod (is it "
     "running, is slurmd up, can it reach slurmctld by DNS). Jobs on it will be requeued or fail when the node is "
     "set DOWN."),
    # Nodes power saving manages are left to SlurmNodeResumeFailed: Slurm sets a node DOWN when its resume fails.
    ("SlurmNodeDown", 'soperator_slurm_node_state{state=~"down|fail|failing"} == 1 '
                      'unless on (node) soperator_slurm_node_power == 1', "5m", "warning",
     "Slurm node {{ $labels.node }} is {{ $labels.state }}",
     "The node takes no jobs. `scontrol show node {{ $labels.node }}` gives Slurm's reason; when the cause is fixed, "
     "`scontrol update NodeName={{ $labels.node }} State=RESUME`, or let the remediation CronJob replace the "
     "worker."),
    ("SlurmNodeResumeFailed", 'soperator_slurm_node_power{power="resume_failed"} == 1', "0m", "warning",
     "Worker {{ $labels.node }} did not come up when Slurm resumed it",
     "Slurm powered up {{ $labels.node }} of an ephemeral NodeSet for a job, and its worker did not register within "
     "ResumeTimeout: the node is DOWN with our reason and the job was requeued. Read the reason with `scontrol show "
     "node {{ $labels.node }}` (on Kubernetes: the pod's events - image missing, unschedulable; locally: the "
     "slurmd's log). When the cause is fixed, `scontrol update NodeName={{ $labels.node }} State=RESUME` makes the "
     "node available to jobs again (it stays powered down until one needs it)."),
    ("SlurmNodeDrainedByHealthCheck", 'soperator_slurm_node_drain{owner="soperator",kind=~"health_check|active_check"} == 1',
     "1m", "warning",
     "{{ $labels.node }} drained by the {{ $labels.check }} {{ $labels.kind }}",
     "Our {{ $labels.kind }} '{{ $labels.check }}' failed on {{ $labels.node }} and drained it (running jobs "
     "finish, no new ones start). The remediation CronJob replaces the worker, re-checks and resumes it; if it "
     "stays drained, read the reason with `scontrol show node {{ $labels.node }}` and fix the hardware or "
     "software it names."),
    ("SlurmManyNodesDrained",
     "count(soperator_slurm_node_drain == 1) >= 3 and count(soperator_slurm_node_drain == 1) > 0.1 * count(soperator_slurm_node_state == 1)",
     "5m", "critical",
     "{{ $value }} Slurm nodes are drained at once",
     "More than a tenth of the nodes (and at least three) are drained: that points to a shared cause (a bad "
     "image or driver, storage, the network, a health check that misfires) rather than bad hardware. Group "
     "soperator_slurm_node_drain by kind and check to find it before resuming anything."),
    ("SlurmJobsPendingWhileNodesIdle",
     'sum by (partition) (soperator_slurm_partition_jobs_pending{reason=~"Resources|Priority"}) > 0 '
     'and on (partition) sum by (partition) (soperator_slurm_partition_nodes{state="idle"}) > 0',
     "15m", "warning",
     "Jobs wait for resources in {{ $labels.partition }} while nodes are idle",
     "Jobs in {{ $labels.partition }} have waited for Resources or Priority for 15 minutes though idle nodes "
     "exist there: the idle nodes cannot run them (features, GRES, memory or a node count the partition cannot "
     "hold) or the scheduler is stuck. Compare `squeue -p {{ $labels.partition }} -t PD -o '%i %r %D %b'` with "
     "`sinfo -p {{ $labels.partition }} -N -o '%N %t %G %m'`."),
    ("SlurmNodeDrainNotRemediated",
     'soperator_slurm_node_drain{owner="soperator",kind=~"health_check|active_check"} == 1', "1h", "warning",
     "{{ $labels.node }} has been drained by our checks for an hour",
     "The remediation loop has not brought {{ $labels.node }} back within an hour: the replaced worker fails its "
     "checks again, or remediation does not run. Look at the remediation CronJob's last Jobs and the "
     "SlurmCluster's events (`kubectl describe slurmcluster`), then at the node's drain reason."),
    ("SlurmRemediationFailing", "soperator_slurm_remediation_last_run_success == 0", "0m", "warning",
     "The last remediation pass failed",
     "The last remediation pass failed to bring a node back or could not run; drained nodes stay drained until a "
     "pass succeeds. soperator_slurm_remediation_actions_total{result=\"failure\"} says which step failed "
     "(replace, recheck, resume). Read the last remediation Job's log (`kubectl logs job/<name>-remediation-...`) or "
     "the local `ansible-playbook playbooks/remediate.yml` output, and the SlurmCluster's events: a replaced pod "
     "that never became Ready, a node whose checks could not run, an API permission, a Slurm command that failed."),
    ("SlurmJailFilesystemNearlyFull",
     "soperator_slurm_jail_filesystem_avail_bytes / soperator_slurm_jail_filesystem_size_bytes < 0.1", "10m", "warning",
     "The jail filesystem is over 90% full",
     "Less than 10% of the jail's filesystem is free. Users' jobs and logins write there: free space (old "
     "outputs, caches) or grow the jail's volume before jobs fail with ENOSPC."),
    ("SlurmAccountingUnreachable", "soperator_slurm_scheduler_dbd_agent_queue_size > 0", "10m", "warning",
     "slurmctld cannot deliver accounting records to slurmdbd",
     "slurmctld's queue of messages for slurmdbd has not been empty for 10 minutes: slurmdbd or its database is "
     "unreachable. Jobs still run, but sacct misses them and the queue is lost if slurmctld stops. Check the "
     "accounting pod, its database and `sacctmgr show cluster`."),
)


def target_selector(target):
    """{"job": "demo-exporter", "namespace": "hpc"} -> '{job="demo-exporter",namespace="hpc"}' (PromQL strings take
    JSON's escapes)."""
    return "{%s}" % ",".join("%s=%s" % (k, json.dumps(v)) for k, v in sorted(target.items()))


def rules(target):
    """The alerting rules, as Prometheus rule dicts. `target`: the labels of the exporter's scrape target in
    Prometheus, with a job at least ({"job": ..., "namespace": ...} for the ServiceMonitor's)."""
    if not target.get("job"):
        raise ValueError("the exporter's target needs a job label: %r" % (target,))
    where = {"target": target_selector(target), "on": ", ".join(sorted(target))}
    out = []
    for name, expr, duration, severity, summary, description in _RULES:
        rule = {"alert": name, "expr": string.Template(expr).substitute(where), "labels": {"severity": severity},
                "annotations": {"summary": summary, "description": description}}
        if duration != "0m":
            rule["for"] = duration
        out.append(rule)
    return out


def rule_groups(target):
    """The content of a Prometheus rule file (and of a PrometheusRule's spec); `target` as rules()."""
    return {"groups": [{"name": GROUP, "rules": rules(target)}]}
