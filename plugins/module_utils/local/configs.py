# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Slurm configs of a local cluster: the configs rendered for a local target (render/target.py), the daemons as
local processes under one state directory. local_slurm_configs() is the one entry point the local backend calls.

What the local target changes from the pods' configs, and why:
slurm.conf
  * SlurmctldHost=localhost(127.0.0.1), SlurmctldPort=base_port; each NodeName line gets its own slurmd ports
    (Port=[..]), NodeAddr=127.0.0.1 and NodeHostname=localhost, since all nodes share one host.
  * CommunicationParameters += NoInAddrAny,NoCtldInAddrAny: slurmctld and slurmd bind 127.0.0.1 only.
  * StateSaveLocation, SlurmdSpoolDir (spool/%n), pid and log files (%n per slurmd), PlugStackConfig: under
    state_dir; AuthInfo=socket=<our munged socket>.
  * SlurmUser (and SlurmdUser when not root) = the current user: no `slurm` account needed.
  * SlurmdParameters += config_overrides: the nodes are emulated, so a NodeSet may declare more CPUs/memory than
    this machine has.
  * proctrack/cgroup -> proctrack/linuxproc, task/cgroup(+affinity) -> task/none, jobacct_gather/cgroup ->
    jobacct_gather/linux: several slurmds share one host and this Debian build has no multiple-slurmd support,
    so their cgroup trees would collide; cgroup/v2 also needs systemd, which the local backend does not assume.
    (task/affinity is left out as well: an emulated node may have more CPUs than exist to bind to.)
  * PrologFlags: Contain is removed (it needs a cgroup proctrack to hold the extern step).
  * MpiDefault=pmix* becomes none when the PMIx library is not installed (Debian: libpmix2): otherwise every
    srun fails with "Invalid MPI type".
  * HealthCheckProgram=<state_dir>/bin/health-check: the program the images install, copied there by
    LocalCluster (install_node_programs).
  * AccountingStorageHost=localhost, AccountingStoragePort=<local slurmdbd port> and AccountingStoragePass=<our
    munge socket> (the socket slurmctld authenticates to slurmdbd with) when accounting is on.
  * One slurmctld: a ControlAddr/BackupAddr from spec.slurmConfig is left out. With spec.controller.replicas 2:
    SlurmctldHost=<cluster>-controller-0(127.0.0.1) and -1(127.0.0.2), SlurmctldPidFile=run/ctld/slurmctld.pid
    (local/controllers.py).
gres.conf: `File=` (GPU device files; there are none) becomes `Count=<number of GPUs>`.
plugstack.conf: without `jail_dir` the chroot SPANK plugin line is commented out and jobs run in the host's root
  filesystem. With `jail_dir` (a local directory holding the jail's root filesystem) the line loads the local
  plugin (`spank_chroot`, default the installed SPANK_CHROOT_PLUGIN) with `jail=<jail_dir>`; `nodefaults` replaces
  the images' default binds (/etc/slurm, /run/munge, /var/spool/slurmd do not belong to this cluster) by binds of
  /tmp and of state_dir's etc/ (SLURM_CONF), run/ (munge socket) and spool/ (batch scripts, slurmstepd sockets) at
  their host paths, so slurmstepd and the Slurm clients in the jail work.
slurmdbd.conf: DbdHost/DbdAddr/DbdPort on loopback, SlurmUser, AuthInfo, LogFile/PidFile under state_dir, and
  the private MariaDB: StorageHost=127.0.0.1, StoragePort, StorageUser, StorageLoc, StoragePass (the pods' file has
  no password; in Kubernetes the entrypoint appends it from the Secret).
health.json: the munge socket is ours; the jail path of the disk check is `jail_dir`, or left out without one;
  check jobs write under the jail, or without one under state_dir/checks; the checks record their last results in
  state_dir/status (the pods: in the jail).
oci.conf (spec.containers): RunTimeRun runs <state_dir>/bin/oci_run.py (copied there like the health check) with
  the host's python3; with `jail_dir` the jail's /usr/bin/python3, and bin/ is bound into the jail at its host path.
cgroup.conf, mpi.conf, topology.conf: as in the pods.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import os
import re
import shutil
import subprocess

from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import SSS_PIPES_DIR
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import AccountingStorage, SlurmTarget
from ansible_collections.soperator.slurm.plugins.module_utils.local import controllers
from ansible_collections.soperator.slurm.plugins.module_utils.local.programs import node_python
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    CTLD_OFFSET, DBD_OFFSET, DB_NAME, DB_OFFSET, DB_USER, LOCAL_HOST, LOCAL_JOBACCT, LOCAL_PROCTRACK, LOCAL_TASK_PLUGIN,
    LOOPBACK, Layout, LocalClusterError, check_path, node_ports, _current_user)

LOCAL_NOTE = "local backend: "


OLDEST_SLURM = (22, 5)
_VERSION = re.compile(r"^slurm(?:-wlm)? (\d+)\.(\d+)\b")


@functools.lru_cache(maxsize=None)     # one `slurmctld -V` per process, not one per render
def host_slurm_version():
    """(major, minor) of the host's slurmctld (`slurmctld -V`: "slurm 22.05.8"), or None when there is none."""
    slurmctld = shutil.which("slurmctld") or next(
        (p for p in ("/usr/sbin/slurmctld", "/usr/local/sbin/slurmctld") if os.access(p, os.X_OK)), None)
    if slurmctld is None:
        return None
    try:
        out = subprocess.run([slurmctld, "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.match(out.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def pmix_available():
    """Whether the PMIx library Slurm's mpi/pmix plugin loads is installed (Debian: libpmix2)."""
    import ctypes.util
    return ctypes.util.find_library("pmix") is not None


def _plugstack_word(path, what):
    if not os.path.isabs(path) or re.search(r"\s", path):
        raise LocalClusterError("%s must be an absolute path without whitespace (plugstack.conf), got %r"
                                % (what, path))
    return os.path.normpath(check_path(what, path))


def local_target(model, state_dir, base_port, user=None, db_password=None, have_pmix=None, jail_dir=None,
                 spank_chroot=None, slurm_version=None):
    """The SlurmTarget of `model`'s daemons as local processes under `state_dir` (see this file's docstring).
    Every argument is checked before anything is rendered."""
    user = user or _current_user()
    if have_pmix is None:
        have_pmix = pmix_available()
    check_path("state_dir", state_dir)
    if jail_dir is None and spank_chroot is not None:
        raise LocalClusterError("spank_chroot needs jail_dir: the plugin runs job steps in a jail")
    lay = Layout(state_dir)
    jail = plugin = binds = None
    if jail_dir is not None:
        jail = _plugstack_word(jail_dir, "jail_dir")
        plugin = _plugstack_word(spank_chroot or c.SPANK_CHROOT_PLUGIN, "spank_chroot")
        binds = ("/tmp", lay.etc, lay.run, lay.spool)
        if model.identity is not None:
            # SSSD's pipes (in slurmstepd's identity namespace: this cluster's sssd, local/identity.py)
            binds += (SSS_PIPES_DIR,)
        if model.containers is not None and model.containers.enabled:
            # oci.conf's RunTimeRun wrapper in bin/ (install_node_programs): a container step runs it in the jail
            binds += (lay.bin,)
    # the host's Slurm (unknown: the oldest we support, which reads only keys every version knows)
    version = slurm_version or host_slurm_version() or OLDEST_SLURM
    return SlurmTarget(
        slurm_version=version,
        controller_hosts=(("%s(%s)" % (LOCAL_HOST, LOOPBACK),) if model.controller.replicas == 1
                          else controllers.controller_lines(model.controller_hosts)),
        controller_port=base_port + CTLD_OFFSET,
        node_address=LOOPBACK,
        node_hostname=LOCAL_HOST,
        node_ports=node_ports(model, base_port),
        extra_communication_parameters=("NoInAddrAny", "NoCtldInAddrAny"),
        slurmd_parameters=("config_overrides",),
        single_controller=True,
        accounting_host=LOCAL_HOST,
        accounting_port=base_port + DBD_OFFSET,
        dbd_host=LOCAL_HOST,
        dbd_address=LOOPBACK,
        storage=AccountingStorage(LOOPBACK, base_port + DB_OFFSET, DB_USER, DB_NAME),
        storage_password=db_password,
        slurm_user=user,
        slurmd_user=user if user != "root" else None,
        state_save_location=lay.ctld_state,
        slurmd_spool_dir=os.path.join(lay.spool, "%n"),
        slurmctld_pid_file=os.path.join(lay.run, "slurmctld.pid") if model.controller.replicas == 1
        else os.path.join(controllers.pid_dir(lay.run), "slurmctld.pid"),
        slurmd_pid_file=os.path.join(lay.run, "slurmd-%n.pid"),
        slurmctld_log_file=lay.log_file("slurmctld"),
        slurmd_log_file=lay.log_file("slurmd-%n"),
        slurmdbd_log_file=lay.log_file("slurmdbd"),
        slurmdbd_pid_file=os.path.join(lay.run, "slurmdbd.pid"),
        plugstack_config=os.path.join(lay.etc, "plugstack.conf"),
        health_check_program=lay.health_check,
        resume_program=os.path.join(lay.bin, "power-resume"),
        suspend_program=os.path.join(lay.bin, "power-suspend"),
        resume_fail_program=os.path.join(lay.bin, "power-resume-fail"),
        oci_run_program=os.path.join(lay.bin, "oci_run.py"),
        # in a jail its own python3; on the host the one the health check wrapper runs (programs.py)
        oci_run_python=c.OCI_RUN_PYTHON if jail else node_python(),
        munge_socket=lay.munge_socket,
        jwt_key=lay.jwt_key,
        proctrack=LOCAL_PROCTRACK,
        task_plugin=LOCAL_TASK_PLUGIN,
        jobacct_gather=LOCAL_JOBACCT,
        prolog_contain=False,
        pmix=bool(have_pmix),
        gres_device_files=False,
        jail=jail,
        spank_chroot=plugin or c.SPANK_CHROOT_PLUGIN,
        jail_binds=binds,
        check_output_dir=None if jail else os.path.join(lay.state_dir, "checks"),
        status_dir=lay.status,
        note=LOCAL_NOTE,
    )


def local_slurm_configs(model, state_dir, base_port, user=None, db_password=None, have_pmix=None, jail_dir=None,
                        spank_chroot=None, renderer=None):
    """{file name: text} of the Slurm configs the local cluster of `model` runs under `state_dir`.
    `renderer(model, target)`: render/slurm_conf.render_slurm_configs unless given (tests wrap it)."""
    target = local_target(model, state_dir, base_port, user=user, db_password=db_password, have_pmix=have_pmix,
                          jail_dir=jail_dir, spank_chroot=spank_chroot)
    return (renderer or render_slurm_configs)(model, target)
