# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The alert rules and the Grafana dashboards as plain files, for a Prometheus and a Grafana that run without the
prometheus-operator: the same rule pack as the PrometheusRule (observe/alerts.py) and the same dashboards as the
dashboards ConfigMap (observe/dashboards.py). Pure: {path relative to a folder: text}."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.soperator.slurm.plugins.module_utils.observe import alerts, dashboards
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import to_yaml

PROMETHEUS_DIR = "prometheus"
GRAFANA_DIR = "grafana"
RULES_FILE = posixpath.join(PROMETHEUS_DIR, "soperator-slurm-rules.yml")

_RULES_HEADER = """\
# Alert rules of soperator.slurm (cluster %(cluster)s), generated: name this file in Prometheus' rule_files.
# The rules find the exporter as the scrape target with the labels %(target)s: scrape it under
# that job%(and_namespace)s, or SlurmExporterDown fires.
"""


def observe_files(cluster, target):
    """{relative path: text}: the rule file (RULES_FILE) and one JSON file per dashboard under GRAFANA_DIR.
    `target`: the labels of the exporter's scrape target in Prometheus (alerts.rules)."""
    header = _RULES_HEADER % {"cluster": cluster, "target": alerts.target_selector(target),
                              "and_namespace": " and namespace label" if "namespace" in target else ""}
    out = {RULES_FILE: header + to_yaml(alerts.rule_groups(target))}
    for name, board in sorted(dashboards.dashboards().items()):
        out[posixpath.join(GRAFANA_DIR, name)] = dashboards.dashboard_text(board) + "\n"
    return out


def observe_file_names():
    """(RULES_FILE, [the dashboards' relative paths]): what observe_files() writes, whatever the cluster."""
    return RULES_FILE, [posixpath.join(GRAFANA_DIR, name) for name in sorted(dashboards.dashboards())]
