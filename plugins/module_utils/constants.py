# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names and in-container paths shared by the renderers, the backends and the images. One place for each."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Labels every object we render carries (see DESIGN.md); the first two select what we own and may prune.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_NODESET = "slurm.soperator.dev/nodeset"
FIELD_MANAGER = "soperator.slurm"

# Inside the images.
SLURM_CONF_DIR = "/etc/slurm"
SLURM_CONFIG_FILES = ("slurm.conf", "cgroup.conf", "gres.conf", "plugstack.conf", "mpi.conf", "topology.conf",
                      "health.json")
SLURMDBD_CONF = "slurmdbd.conf"
TOPOLOGY_YAML = "topology.yaml"      # Slurm 25.05+ (spec.topology.nodeLabels; render/topology_conf.py)
JAIL_MOUNT = "/mnt/jail"
MUNGE_KEY_DIR = "/etc/munge"
MUNGE_SOCKET_DIR = "/run/munge"
CONTROLLER_SPOOL = "/var/spool/slurmctld"
SLURMD_SPOOL = "/var/spool/slurmd"
SLURM_LOG_DIR = "/var/log/slurm"
SLURM_RUN_DIR = "/run/slurm"
HEALTH_CHECK_PROGRAM = "/opt/soperator/bin/health-check"
# Slurm's power saving programs (ephemeral NodeSets): slurmctld runs them with a hostlist of nodes.
RESUME_PROGRAM = "/opt/soperator/bin/power-resume"
SUSPEND_PROGRAM = "/opt/soperator/bin/power-suspend"
RESUME_FAIL_PROGRAM = "/opt/soperator/bin/power-resume-fail"
# slurmd's "report a boot" flag: slurmctld accepts a resumed node only once it reports a boot after the resume
# request, and a worker's container or a local slurmd does not reboot the host it runs on.
SLURMD_BOOTED_FLAG = "-b"
# Beside slurm.conf: the health check program's config (render/health_json.py).
HEALTH_CONFIG_FILE = "health.json"
# Runs one active check (plugins/module_utils/node/active_check.py) from the checks CronJob.
ACTIVE_CHECK_PROGRAM = "/opt/soperator/bin/active-check"
# The hidden partition active checks submit their jobs to (rendered only when there are active checks).
CHECKS_PARTITION = "soperator-checks"
CHECKS_DIR = "/opt/soperator/checks"
SPANK_CHROOT_PLUGIN = "/usr/lib/slurm/spank_chroot.so"
# The populate image (images/populate_jail): its program is plugins/module_utils/node/jail.py, its jail root
# filesystem a tarball.
POPULATE_JAIL_PROGRAM = "/opt/soperator/bin/jail.py"
POPULATE_JAIL_SOURCE = "/opt/soperator/jail-rootfs.tar"
# The same program in the login and worker images: their init container waits with it until the jail is populated.
NODE_JAIL_PROGRAM = "/opt/soperator/lib/jail.py"
# oci.conf's RunTimeRun wrapper (node/oci_run.py) as a container step sees it: the jail's copy (images/build.py
# JAIL_LIB), at the same path in the worker images; run by the jail's python3.
OCI_RUN_PROGRAM = "/usr/local/lib/soperator/oci_run.py"
OCI_RUN_PYTHON = "/usr/bin/python3"
SSH_HOST_KEY_DIR = "/etc/ssh/host-keys"
# spec.rest's HS256 key as slurmctld and slurmdbd read it: SlurmUser's copy (0600) the entrypoint makes of the
# Secret's file (render/rest_kube.py).
JWT_KEY = "/run/slurm-jwt/jwt_hs256.key"

SLURMD_PORT = 6818
SLURM_USER = "slurm"
# The Slurm of the images (images/build.py, Debian forky): what the Kubernetes target renders for.
IMAGES_SLURM_VERSION = (26, 5)
# Slurm 25.11 added slurmctld's own metrics endpoints (MetricsType=metrics/openmetrics, on SlurmctldPort).
SLURM_METRICS_SINCE = (25, 11)
# slurmctld answers /livez and /readyz on SlurmctldPort (its man page, "HTTP server")
SLURMCTLD_HTTP_PROBES_SINCE = (25, 11)
SLURMCTLD_METRICS_PATHS = ("/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler")

# The in-cluster accounting database (MariaDB).
MARIADB_PORT = 3306
ACCOUNTING_DB_USER = SLURM_USER
ACCOUNTING_DB_NAME = "slurm_acct_db"
