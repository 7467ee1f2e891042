# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The alert rule pack, over the exporter's metrics (observe/metrics.py; nothing else is needed). One definition serves the Prometheus rule
file (render.yml, `promtool check rules`) and the PrometheusRule object. Every alert says what to do."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

GROUP = "soperator-slurm"

# (name, expr, for, severity, summary, description)
_RULES = (
    ("SlurmControllerUnreachable", "soperator_slurm_up == 0", "2m", "critical",
     "slurmctld does not answer the exporter",
     "The exporter's Slurm commands ({{ $labels.instance }}) fail: users cannot submit or query jobs. Check the "
     "controller (pod <cluster>-controller-0, or the local slurmctld): its log, `scontrol ping`, munge, and that "
     "its spool volume is not full. soperator_slurm_exporter_command_failed says which command failed."),
    ("SlurmNodeNotResponding", "soperator_slurm_node_responding == 0", "5m", "warning",
     "Slurm node {{ $labels.node }} does not respond",
     "slurmctld has not heard from slurmd on {{ $labels.node }} for SlurmdTimeout. Check the worker pod (is it "
     "running, is slurmd up, can it reach slurmctld by DNS). Jobs on it will be requeued or fail when the node is "
     "set DOWN."),
    ("SlurmNodeDown", 'soperator_slurm_node_state{state=~"down|fail|failing"} == 1', "5m", "warning",
     "Slurm node {{ $labels.node }} is {{ $labels.state }}",
     "The node takes no jobs. `scontrol show node {{ $labels.node }}` gives Slurm's reason; when the cause is fixed, "
     "`scontrol update NodeName={{ $labels.node }} State=RESUME`, or let the remediation CronJob replace the "
     "worker."),
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


def rules():
    """The alerting rules, as Prometheus rule dicts."""
    out = []
    for name, expr, duration, severity, summary, description in _RULES:
        rule = {"alert": name, "expr": expr, "labels": {"severity": severity},
                "annotations": {"summary": summary, "description": description}}
        if duration != "0m":
            rule["for"] = duration
        out.append(rule)
    return out


def rule_groups():
    """The content of a Prometheus rule file (and of a PrometheusRule's spec)."""
    return {"groups": [{"name": GROUP, "rules": rules()}]}
