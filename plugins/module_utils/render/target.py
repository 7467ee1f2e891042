# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the rendered Slurm daemons run: the renderers' second input, beside the ClusterModel.

A SlurmTarget holds only what differs between Slurm in pods (the images' paths, the pods' names) and Slurm as local
processes on one host (loopback, a port per slurmd, paths under one state directory, plugins that work without
cgroups). `KUBERNETES` is the pods' target: every default below is the images' contract, and a field left None means
"what the model says" (its hosts and ports). local/configs.py builds the local target (local_target).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c

# Where active check jobs write their output, as the jobs see it: a directory of the jail (the workers' /tmp is their
# own), read by the active check runner under the jail's mount (outputRoot).
CHECK_OUTPUT_DIR = "/var/lib/soperator/checks"
# Where the health checks record their last results (node/health_check.py, write_status), as the jail sees it: the
# programs (the workers' health check, the checks CronJob) and the exporter reach it under the jail's mount.
STATUS_DIR = "/var/lib/soperator/status"


@dataclass(frozen=True)
class AccountingStorage:
    """The database slurmdbd stores accounting in (slurmdbd.conf Storage*)."""
    host: str
    port: int
    user: str
    database: str


@dataclass(frozen=True)
class SlurmTarget:
    # --- the Slurm that reads the files: a key an older Slurm does not know is left out for it
    slurm_version: Tuple[int, int] = c.IMAGES_SLURM_VERSION
    # --- hosts and ports (None: the pods' names and the model's ports)
    controller_hosts: Optional[Tuple[str, ...]] = None   # SlurmctldHost lines, `host(address)`, primary first
    controller_port: Optional[int] = None
    node_address: Optional[str] = None             # NodeAddr= of every node (pods: their DNS names)
    node_hostname: Optional[str] = None            # NodeHostname= of every node
    node_ports: Optional[Dict[str, int]] = None    # {node: slurmd port}; pods: all on SlurmdPort
    extra_communication_parameters: Tuple[str, ...] = ()
    slurmd_parameters: Tuple[str, ...] = ()
    single_controller: bool = False                # no backup controller or ControlAddr from spec.slurmConfig
    accounting_host: Optional[str] = None          # slurmdbd as slurmctld reaches it (AccountingStorageHost)
    accounting_port: Optional[int] = None
    dbd_host: Optional[str] = None                 # slurmdbd.conf DbdHost
    dbd_address: Optional[str] = None              # slurmdbd.conf DbdAddr (pods: none, DbdHost resolves)
    storage: Optional[AccountingStorage] = None    # None: the model's (its in-cluster MariaDB or external database)
    storage_password: Optional[str] = None         # pods: none (the entrypoint appends it from the Secret)
    # --- users
    slurm_user: str = c.SLURM_USER
    slurmd_user: Optional[str] = None              # pods: none (slurmd runs as root)
    # --- paths
    state_save_location: str = c.CONTROLLER_SPOOL
    slurmd_spool_dir: str = c.SLURMD_SPOOL
    slurmctld_pid_file: str = "%s/slurmctld.pid" % c.SLURM_RUN_DIR
    slurmd_pid_file: str = "%s/slurmd.pid" % c.SLURM_RUN_DIR
    slurmctld_log_file: str = "%s/slurmctld.log" % c.SLURM_LOG_DIR
    slurmd_log_file: str = "%s/slurmd.log" % c.SLURM_LOG_DIR
    slurmdbd_log_file: str = "%s/slurmdbd.log" % c.SLURM_LOG_DIR
    slurmdbd_pid_file: str = "%s/slurmdbd.pid" % c.SLURM_RUN_DIR
    plugstack_config: str = "%s/plugstack.conf" % c.SLURM_CONF_DIR
    health_check_program: str = c.HEALTH_CHECK_PROGRAM
    resume_program: str = c.RESUME_PROGRAM
    suspend_program: str = c.SUSPEND_PROGRAM
    resume_fail_program: str = c.RESUME_FAIL_PROGRAM
    oci_run_program: str = c.OCI_RUN_PROGRAM         # oci.conf's RunTimeRun wrapper, as a container step sees it
    oci_run_python: str = c.OCI_RUN_PYTHON
    munge_socket: Optional[str] = None             # pods: munge's default socket (no AuthInfo)
    jwt_key: str = c.JWT_KEY                       # spec.rest's token key (render/rest.py)
    # --- plugins: None keeps the rendered choice
    proctrack: Optional[str] = None                # replaces proctrack/cgroup
    task_plugin: Optional[str] = None              # replaces any TaskPlugin
    jobacct_gather: Optional[str] = None           # replaces jobacct_gather/cgroup
    prolog_contain: bool = True                    # PrologFlags Contain (needs a cgroup proctrack)
    pmix: bool = True                              # MpiDefault=pmix* can load (the PMIx library is there)
    gres_device_files: bool = True                 # gres.conf File= (device files exist) or Count=
    # --- the jail: None runs job steps in the host's root filesystem (the chroot plugin is left out)
    jail: Optional[str] = c.JAIL_MOUNT
    spank_chroot: str = c.SPANK_CHROOT_PLUGIN
    jail_binds: Optional[Tuple[str, ...]] = None   # None: the plugin's default binds; else only these
    check_output_dir: Optional[str] = None         # None: CHECK_OUTPUT_DIR in the jail
    status_dir: Optional[str] = None               # None: STATUS_DIR under the jail's mount (no jail: not recorded)
    # --- why: a comment prefix for the lines this target changes or leaves out ("" for the pods: no notes)
    note: str = ""

    def health_status_dir(self):
        """The status records' directory as the health programs reach it, or None."""
        if self.status_dir:
            return self.status_dir
        return self.jail.rstrip("/") + STATUS_DIR if self.jail else None


KUBERNETES = SlurmTarget()
