# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""health.json: the config of the health-check program (node/health_check.py) and the active check runner
(node/active_check.py), rendered beside the Slurm config files (render/slurm_conf.py). Pure: no I/O."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import CHECK_OUTPUT_DIR, KUBERNETES


# XIDs that mean the GPU (or its link) needs a reset or a replacement, not a user error: double-bit ECC (48),
# internal micro-controller faults (61, 62), row remap failure (64), NVLink (74), fallen off the bus (79),
# high single-bit ECC rate (92), contained / uncontained ECC (94, 95), GSP errors (119, 120).
CRITICAL_XIDS = (48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120)
# Thresholds the spec does not expose (yet): written into health.json, where the program reads them.
MAX_VOLATILE_UNCORRECTABLE_ECC = 0
XID_WINDOW_SECONDS = 600
MIN_AVAILABLE_MEMORY_MIB = 256
CHECK_TIMEOUT_SECONDS = 5


def health_check_config(model, target=KUBERNETES):
    """health.json of the HealthCheckProgram (health_check.py) and the active check runner (active_check.py)."""
    passive = model.health_checks.passive
    node_sets = {}
    for ns in parts.defined_node_sets(model):
        node_sets[ns.name] = {"nodes": ns.node_range, "gpus": ns.gpus}
    active = []
    for check in model.health_checks.active:
        entry = {"name": check.name, "type": check.type, "nodeSets": list(check.node_sets or sorted(node_sets)),
                 "timeoutSeconds": check.timeout_seconds, "drainOnFailure": check.drain_on_failure}
        for key, value in (("script", check.script), ("minBusBandwidthGBs", check.min_bus_bandwidth_gbs),
                           ("minWriteMBs", check.min_write_mbs), ("minReadMBs", check.min_read_mbs)):
            if value is not None:
                entry[key] = value
        active.append(entry)
    return {
        "generatedBy": "soperator.slurm from SlurmCluster %s (namespace %s)" % (model.name, model.namespace),
        "cluster": model.name,
        "drainReasonPrefix": model.remediation.drain_reason_prefix,
        "checkTimeoutSeconds": CHECK_TIMEOUT_SECONDS,
        "passive": {
            "enabled": passive.enabled and passive.interval > 0,
            "gpu": passive.gpu,
            "gpuErrors": {"maxVolatileUncorrectable": MAX_VOLATILE_UNCORRECTABLE_ECC,
                          "criticalXids": list(CRITICAL_XIDS), "xidWindowSeconds": XID_WINDOW_SECONDS},
            "disk": {"paths": [p for p in (target.jail, "/tmp") if p] if passive.min_free_disk_percent > 0 else [],
                     "minFreePercent": passive.min_free_disk_percent},
            "memory": {"enabled": passive.memory, "minAvailableMiB": MIN_AVAILABLE_MEMORY_MIB},
            "munge": {"enabled": passive.munge, "socket": target.munge_socket},
            "custom": [{"name": x.name, "command": x.command, "timeoutSeconds": x.timeout_seconds}
                       for x in passive.custom],
        },
        "nodeSets": node_sets,
        # The last result of every check, for the exporter (health_check.write_status).
        "statusDir": target.health_status_dir() or "",
        # Check jobs see the jail (or, without one, the host) as /; outputRoot is where the runner finds that root.
        "active": {"partition": c.CHECKS_PARTITION, "outputDir": target.check_output_dir or CHECK_OUTPUT_DIR,
                   "outputRoot": target.jail or "", "checks": active},
    }


def render_health_json(model, target=KUBERNETES):
    return json.dumps(health_check_config(model, target), indent=2, sort_keys=True) + "\n"
