# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Grafana dashboards over the exporter's metrics: cluster health, nodes and drains, jobs and queues, GPU
allocation, scheduler. Plain dashboard JSON with a Prometheus datasource variable, so Grafana's dashboard sidecar
(ConfigMaps labelled grafana_dashboard=1) or an import loads them as they are."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

UID_PREFIX = "soperator-slurm-"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# dashboard key -> (title, [(panel title, kind, unit, [(expr, legend)])])
_DASHBOARDS = {
    "cluster": ("Slurm cluster health", [
        ("Controller answering", "stat", "none", [("min(soperator_slurm_up)", "up")]),
        ("Nodes by state", "timeseries", "none", [("sum by (state) (soperator_slurm_node_state)", "{{state}}")]),
        ("Nodes drained", "stat", "none", [("count(soperator_slurm_node_drain == 1) or vector(0)", "drained")]),
        ("CPU allocation", "gauge", "percentunit",
         [("sum(soperator_slurm_node_cpus_allocated) / clamp_min(sum(soperator_slurm_node_cpus), 1)", "allocated")]),
        ("Jobs by state", "timeseries", "none", [("sum by (state) (soperator_slurm_partition_jobs)", "{{state}}")]),
        ("Jail filesystem free", "gauge", "percentunit",
         [("soperator_slurm_jail_filesystem_avail_bytes / soperator_slurm_jail_filesystem_size_bytes", "free")]),
        ("Last remediation pass succeeded", "stat", "none",
         [("soperator_slurm_remediation_last_run_success", "succeeded")]),
    ]),
    "nodes": ("Slurm nodes and drains", [
        ("Drained nodes by owner and kind", "timeseries", "none",
         [("sum by (owner, kind) (soperator_slurm_node_drain)", "{{owner}} {{kind}}")]),
        ("Drains by our checks", "table", "none",
         [('soperator_slurm_node_drain{owner="soperator",kind=~"health_check|active_check"} == 1',
           "{{node}} {{kind}} {{check}}")]),
        ("Nodes not responding", "timeseries", "none",
         [("count(soperator_slurm_node_responding == 0) or vector(0)", "not responding")]),
        ("CPUs allocated per node", "timeseries", "percentunit",
         [("soperator_slurm_node_cpus_allocated / clamp_min(soperator_slurm_node_cpus, 1)", "{{node}}")]),
        ("Memory allocated per node", "timeseries", "percentunit",
         [("soperator_slurm_node_memory_allocated_bytes / clamp_min(soperator_slurm_node_memory_bytes, 1)", "{{node}}")]),
        ("Health checks failing now", "table", "none",
         [("soperator_slurm_health_check_last_result == 0", "{{node}} {{kind}} {{check}}")]),
        ("Ephemeral NodeSets: nodes by power state", "timeseries", "none",
         [("sum by (nodeset, power) (soperator_slurm_nodeset_power_nodes)", "{{nodeset}} {{power}}")]),
        ("Ephemeral NodeSets: resume latency (request to slurmd start)", "timeseries", "s",
         [("max by (nodeset) (soperator_slurm_node_resume_seconds)", "{{nodeset}} slowest node"),
          ("avg by (nodeset) (soperator_slurm_node_resume_seconds)", "{{nodeset}} mean")]),
        ("Remediation steps per hour", "timeseries", "none",
         [("sum by (action, result) (increase(soperator_slurm_remediation_actions_total[1h]))",
           "{{action}} {{result}}")]),
    ]),
    "jobs": ("Slurm jobs and queues", [
        ("Jobs by partition and state", "timeseries", "none",
         [("sum by (partition, state) (soperator_slurm_partition_jobs)", "{{partition}} {{state}}")]),
        ("Pending jobs by reason", "timeseries", "none",
         [("sum by (reason) (soperator_slurm_partition_jobs_pending)", "{{reason}}")]),
        ("Jobs started and completed per minute", "timeseries", "none",
         [("rate(soperator_slurm_jobs_started_total[5m]) * 60", "started"),
          ("rate(soperator_slurm_jobs_completed_total[5m]) * 60", "completed"),
          ("rate(soperator_slurm_jobs_failed_total[5m]) * 60", "failed")]),
        ("Idle nodes per partition", "timeseries", "none",
         [('sum by (partition) (soperator_slurm_partition_nodes{state="idle"})', "{{partition}}")]),
    ]),
    "gpus": ("Slurm GPU allocation", [
        ("GPUs allocated", "gauge", "percentunit",
         [("sum(soperator_slurm_node_gpus_allocated) / clamp_min(sum(soperator_slurm_node_gpus), 1)", "allocated")]),
        ("GPUs by partition", "timeseries", "none",
         [("sum by (partition) (soperator_slurm_partition_gpus_allocated)", "{{partition}} allocated"),
          ("sum by (partition) (soperator_slurm_partition_gpus)", "{{partition}} total")]),
        ("GPU nodes drained", "timeseries", "none",
         [("count(soperator_slurm_node_drain * on (node) group_left () (soperator_slurm_node_gpus > 0)) or vector(0)", "drained")]),
        ("Idle GPUs per node", "table", "none",
         [("soperator_slurm_node_gpus - soperator_slurm_node_gpus_allocated > 0", "{{node}}")]),
    ]),
    "scheduler": ("Slurm scheduler", [
        ("Main scheduler cycle", "timeseries", "s",
         [("soperator_slurm_scheduler_last_cycle_seconds", "last"), ("soperator_slurm_scheduler_mean_cycle_seconds", "mean")]),
        ("Backfill cycle", "timeseries", "s", [("soperator_slurm_backfill_last_cycle_seconds", "last")]),
        ("Server threads and agent queue", "timeseries", "none",
         [("soperator_slurm_scheduler_threads", "threads"), ("soperator_slurm_scheduler_agent_queue_size", "agent queue"),
          ("soperator_slurm_scheduler_dbd_agent_queue_size", "slurmdbd queue")]),
        ("RPCs per second by type", "timeseries", "reqps",
         [("topk(10, rate(soperator_slurm_rpc_calls_total[5m]))", "{{type}}")]),
        ("RPC time per call by type", "timeseries", "s",
         [("topk(10, rate(soperator_slurm_rpc_duration_seconds_total[5m]) / clamp_min(rate(soperator_slurm_rpc_calls_total[5m]), "
           "1e-9))", "{{type}}")]),
        ("Exporter scrape time", "timeseries", "s",
         [("soperator_slurm_exporter_scrape_seconds", "scrape"), ("soperator_slurm_exporter_command_seconds", "{{command}}")]),
    ]),
}


def _panel(index, title, kind, unit, targets):
    return {
        "id": index + 1, "type": kind, "title": title, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(targets)],
    }


def dashboards():
    """{file name: dashboard JSON (dict)}."""
    out = {}
    for key, (title, panels) in _DASHBOARDS.items():
        out["slurm-%s.json" % key] = {
            "uid": UID_PREFIX + key, "title": title, "tags": ["slurm", "soperator"], "schemaVersion": 39,
            "editable": True, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                     "label": "Prometheus"}]},
            "panels": [_panel(i, *p) for i, p in enumerate(panels)],
        }
    return out


def dashboard_text(board):
    """A dashboard as the JSON text Grafana loads (the dashboards ConfigMap's values, render's grafana/ files)."""
    return json.dumps(board, indent=1, sort_keys=True)


def expressions():
    """Every PromQL expression of every dashboard: (dashboard file, panel title, expr)."""
    return [(name, panel["title"], target["expr"]) for name, board in sorted(dashboards().items())
            for panel in board["panels"] for target in panel["targets"]]
