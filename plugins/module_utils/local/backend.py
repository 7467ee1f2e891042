# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local backend: a ClusterModel as a real Slurm cluster of local processes on one machine.

Two parts:

* local/configs.py `local_slurm_configs()` is the ONLY source of the Slurm configs of a local cluster (hosts, ports,
  paths, users and the plugins that cannot work here differ from a pod's); local/layout.py says where things live.
* `LocalCluster` runs it over one state directory (configs, munge key, spool, logs, pids, database): munged,
  slurmctld, one `slurmd -N <node>` per running worker, and slurmdbd + a private mariadbd when accounting is on.
  Every daemon binds the loopback interface only.

Scaling follows the design's rule (no slurmctld restart): each NodeSet's nodes are FUTURE nodes; a started slurmd
makes its node IDLE; a removed node is drained (reason prefixed with remediation.drain_reason_prefix), waited for
until it runs no job, its slurmd stopped, and the node set back to FUTURE (gone from sinfo).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
import os
import subprocess
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c, wait
from ansible_collections.soperator.slurm.plugins.module_utils.local.accounting import Accounting
from ansible_collections.soperator.slurm.plugins.module_utils.local.config_files import NO_SPACE, ConfigFiles
from ansible_collections.soperator.slurm.plugins.module_utils.local.exporter import Exporter
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    CTLD_OFFSET, Layout, LocalClusterError, LOGIN_DAEMON, _current_user, check_path, node_ports)
from ansible_collections.soperator.slurm.plugins.module_utils.local.identity import LocalIdentity
from ansible_collections.soperator.slurm.plugins.module_utils.local.login import LoginNode, require_jail_plugin
from ansible_collections.soperator.slurm.plugins.module_utils.local import controllers
from ansible_collections.soperator.slurm.plugins.module_utils.local import power
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import (
    nodes_to_remove, outdated_nodes, slurm_digest, stop_order, wanted_nodes)
from ansible_collections.soperator.slurm.plugins.module_utils.local.planner import Planner
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import PortBlock
from ansible_collections.soperator.slurm.plugins.module_utils.local.rest import RestServer
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import (
    Daemons, _record_alive, _tail, find_binary, munge_ready, munged_argv, munged_digest, slurmd_name)
from ansible_collections.soperator.slurm.plugins.module_utils.local.programs import install_node_programs
from ansible_collections.soperator.slurm.plugins.module_utils.local.rollout import Rollout, RolloutFailed
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import StateDir, _own_dir, _saved_base
from ansible_collections.soperator.slurm.plugins.module_utils.node.safe_tree import link_refusal
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import removal
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import (
    full_reason, read_sinfo, SCALE_DOWN_REASON, update_nodes_argv)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import (
    LocalTransport, SlurmError, SlurmRunner)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import ClusterModel


class LocalCluster(object):
    """A ClusterModel as local processes over `state_dir`.

    `ensure_started()` converges (idempotent), `scale()` changes replicas, `stop()` stops everything it started,
    `status()` reports, `env()` gives what clients (sinfo, srun, ...) need. Every wait is bounded by `timeout`
    (daemon start/stop), `drain_timeout` (jobs on a node being removed) or `rollout_timeout` (jobs on a node whose
    slurmd a changed configuration restarts: local/rollout.py).

    `jail_dir`: run job steps in this jail (a directory holding a root filesystem) through the chroot SPANK plugin
    at `spank_chroot` (default: the installed c.SPANK_CHROOT_PLUGIN; `make spank` builds one); see local/configs.py.
    Needs root (slurmstepd mounts the jail). The jail must hold what the jobs run, and the Slurm clients, their
    libraries and the plugin itself at the same path for srun/sbatch inside jobs.

    With a jail and `login` (default), a login sshd runs too, on 127.0.0.1:<base_port + LOGIN_OFFSET> (status()
    'login'), with the login nodes' sshd_config (render/sshd.py): key-only, every session chrooted into the jail. Root's
    keys are the spec's login.sshRootPublicKeys plus `login_authorized_keys`; other users log in with the keys in
    their ~/.ssh/authorized_keys in the jail, and are resolved by this machine's user database (sshd runs here).
    sshd runs in a private mount namespace (unshare) in which /dev, /proc, /tmp and the cluster's etc/, run/ and
    spool/ are mounted into the jail at their host paths, so sbatch/srun in a session reach this cluster; those
    mounts never show on the host and vanish with sshd. ChrootDirectory needs every component of `jail_dir` to be a
    root-owned directory not writable by group or others (so not below /tmp).

    This class is the flow (ensure_started, scale, stop, status); each concept is a collaborator with its
    dependencies passed in, none reaching back into this object: `directory` (local/state.py StateDir: ownership,
    lock, purge), `daemons` (local/processes.py Daemons: start/stop by record, one node's slurmd), `ports`
    (local/ports.py PortBlock), `config_files` (local/config_files.py), `accounting` (local/accounting.py),
    `login_node` (local/login.py), `exporter` (local/exporter.py), `rest` (local/rest.py: spec.rest's slurmrestd),
    `rollout` (local/rollout.py) and `planner` (local/planner.py: check mode).
    """

    def __init__(self, state_dir: str, model: Optional[ClusterModel] = None, base_port: Optional[int] = None,
                 user: Optional[str] = None, timeout: float = 60.0, drain_timeout: float = 300.0,
                 renderer: Optional[Callable[..., Any]] = None, jail_dir: Optional[str] = None,
                 spank_chroot: Optional[str] = None, login: bool = True, login_authorized_keys: Iterable[str] = (),
                 rollout_timeout: float = 600.0,
                 identity_secrets: Optional[Mapping[str, Mapping[str, bytes]]] = None) -> None:
        self.layout = Layout(state_dir)
        self.model = model
        self.user = user or _current_user()
        self.timeout = float(timeout)
        self.drain_timeout = float(drain_timeout)
        self.rollout_timeout = float(rollout_timeout)
        self.rollout_steps: List[Any] = []        # the last run's (or plan's) roll of slurmds, slurm/rollout.py's entries
        self.jail_dir = jail_dir
        self.spank_chroot = spank_chroot
        self.login = bool(login)
        self.login_authorized_keys = tuple(login_authorized_keys or ())
        lay = self.layout
        self.config_files = ConfigFiles(lay, self.user, jail_dir, spank_chroot, renderer)
        # the operation holding the lock may wait for jobs: on a node it removes, or on one its roll drained
        self.directory = StateDir(lay, max(self.timeout, self.drain_timeout, self.rollout_timeout) * 2)
        self.daemons = Daemons(lay, self.timeout, self.env(), jail_dir)
        self.ports = PortBlock(lay, base_port, self.timeout, self.daemons.running_records)
        self.accounting = Accounting(lay, self.user, self.timeout, self.daemons, self.slurm)
        self.login_node = LoginNode(lay, jail_dir, self.login, self.login_authorized_keys, self.daemons)
        # spec.identity: sssd and the namespace of the daemons that resolve users (local/identity.py)
        self.identity = LocalIdentity(lay.state_dir, self.daemons, identity_secrets)
        self.exporter = Exporter(lay, jail_dir, self.daemons)
        self.rest = RestServer(lay, self.daemons)         # spec.rest: slurmrestd (local/rest.py)
        self.rollout = Rollout(lay, self.daemons, self.slurm, self.timeout, self.rollout_timeout)
        self.planner = Planner(lay, self.directory, self.ports, self.daemons, self.rollout, self.login_node,
                               self.exporter, self.config_files.render, self.identity, self.rest)

    # --- public ------------------------------------------------------------------------------------------------

    @property
    def state_dir(self) -> str:
        return self.layout.state_dir

    def env(self) -> Dict[str, str]:
        """Environment for Slurm clients of this cluster (merge it over os.environ)."""
        return {"SLURM_CONF": self.layout.slurm_conf}

    def slurm(self, timeout: float = 30) -> SlurmRunner:
        """The collection's one Slurm runner (slurm/runner.py) for this cluster's clients; no retries: every
        caller here waits with its own bounded loop."""
        return SlurmRunner(LocalTransport(slurm_conf=self.layout.slurm_conf), retries=0, timeout=timeout)

    def ensure_started(self, model: Optional[ClusterModel] = None) -> Dict[str, Any]:
        """Bring the cluster to `model` (or the one given before). Returns {'changed': bool, 'changes': [str]}.

        Nothing running and nothing differing -> no change and no restart. Raises LocalClusterError (with the tail
        of the daemon's log) when a daemon does not come up within the timeout.
        """
        if model is not None:
            self.model = model
        if self.model is None:
            raise LocalClusterError("ensure_started needs a ClusterModel")
        self.check_inputs()
        self._check_binaries(self.model)
        with self._locked(create=True):
            try:
                return self._ensure_started(self.model)
            except OSError as e:
                if e.errno not in NO_SPACE:
                    raise
                raise LocalClusterError("cannot write %s: %s; it was left as it was (files here are replaced by a "
                                        "rename, never half-written). Free space on the filesystem of %s and run "
                                        "again" % (e.filename or "below %s" % self.layout.state_dir, e.strerror,
                                                   self.layout.state_dir))

    def check_inputs(self) -> None:
        """Before anything is written: refuse paths that would inject into the files they are written to, and a
        cluster the local slurmctld would refuse to start."""
        check_path("state_dir", self.layout.state_dir)
        if self.rollout_timeout < 0:
            raise LocalClusterError("rollout_timeout must be >= 0, got %s" % self.rollout_timeout)
        for what in ("jail_dir", "spank_chroot"):
            if getattr(self, what) is not None:
                check_path(what, getattr(self, what))
        linked = self.jail_dir is not None and link_refusal("jail_dir", os.path.abspath(self.jail_dir))
        if linked:
            raise LocalClusterError(linked)     # the rule of state_dir (and jail_populate's jail_dir)
        self.identity.check(self.model)
        RestServer.check(self.model)
        if self.model is not None and self.model.controller.replicas > 1 and os.geteuid() != 0:
            raise LocalClusterError("spec.controller.replicas %d needs root locally: each slurmctld runs in its own "
                                    "UTS and mount namespaces (local/controllers.py)" % self.model.controller.replicas)
        if self.model is not None and self.model.controller.replicas > 1 and self.model.identity is not None:
            raise LocalClusterError("spec.controller.replicas 2 with spec.identity: not run locally yet (the backup "
                                    "slurmctld would resolve users outside the identity namespace)")
        if self.model is not None and not any(ns.max_replicas > 0 for ns in self.model.node_sets):
            # slurmctld 22.05 exits with "read_slurm_conf: no nodes configured"
            raise LocalClusterError("the local cluster needs at least one node: give a NodeSet maxReplicas >= 1 "
                                    "(slurmctld does not start without nodes)")

    def _ensure_started(self, model):
        self.rollout_steps = []
        changes = self.directory.take_notes()
        self.directory.prepare_dirs()
        base_port = self.ports.choose(model, changes)
        self.directory.check_path_lengths(model)
        self.config_files.ensure_secrets(model, changes)
        configs = self.config_files.write(model, base_port, changes)
        slurm_hash = slurm_digest(configs)
        for name in install_node_programs(self.layout):
            changes.append("installed %s" % os.path.join(self.layout.bin, name))
        # Power saving's programs start and stop the CLOUD nodes' slurmds (local/power.py), with what the backend
        # writes here; slurmctld checks the programs when it starts.
        ports = node_ports(model, base_port)
        jail = os.path.realpath(self.jail_dir) if self.jail_dir is not None else None
        power.ensure(self.layout, dict(
            (node, power.launch(self.layout, node, ports[node], slurm_hash, self.daemons.env, jail,
                                model.remediation.drain_reason_prefix, find_binary("slurmd")))
            for node in model.cloud_nodes), changes)

        lay = self.layout
        self.daemons.ensure("munged", munged_argv(lay), changes, digest=munged_digest(lay),
                            ready=lambda: munge_ready(lay), ports=())
        self.identity.ensure(model, changes)
        self.daemons.wrap = self.identity.wrap if model.identity is not None else None
        if model.accounting.enabled:
            self.accounting.ensure(model, base_port, configs, changes)
        else:
            self.accounting.ensure_off(changes)
        self._ensure_controllers(model, slurm_hash, base_port, changes)
        self._converge_nodes(model, slurm_hash, ports, changes)
        self.login_node.ensure(model, base_port, changes)
        self.exporter.ensure(model, changes)
        self.rest.ensure(model, base_port, slurm_hash, changes)
        return {"changed": bool(changes), "changes": changes}

    def scale(self, replicas: Mapping[str, int]) -> Dict[str, Any]:
        """Set replicas of NodeSets ({name: count}) and converge. Returns like ensure_started()."""
        if self.model is None:
            raise LocalClusterError("scale needs a model: call ensure_started(model) first")
        node_sets = []
        for ns in self.model.node_sets:
            want = replicas.get(ns.name, ns.replicas)
            if want < 0 or want > ns.max_replicas:
                raise LocalClusterError("NodeSet %s: replicas must be between 0 and maxReplicas %d, got %d"
                                        % (ns.name, ns.max_replicas, want))
            node_sets.append(dataclasses.replace(ns, replicas=want))
        unknown = sorted(set(replicas) - set(ns.name for ns in self.model.node_sets))
        if unknown:
            raise LocalClusterError("no such NodeSet: %s" % ", ".join(unknown))
        return self.ensure_started(dataclasses.replace(self.model, node_sets=tuple(node_sets)))

    def stop(self, purge: bool = False) -> Dict[str, Any]:
        """Stop every process of this cluster (cancelling its jobs first); verify by pid that none is left.

        Only processes this cluster recorded (pid + start time) and their children are signalled, and only in a
        directory that is ours (ownership()); anything else fails before a signal. Keeps the state directory
        (configs, key, Slurm state, database) unless `purge`: then what the local backend created there is deleted,
        under the lock (purge_plan()). Returns {'changed': bool, 'stopped': [names]}.
        """
        stopped: List[str] = []
        kind = self.directory.ownership()
        if kind in ("absent", "empty"):
            # nothing of a cluster there (an empty folder without our marker is not ours to delete either)
            return {"changed": False, "stopped": stopped}
        if purge:
            self.directory.purge_plan()                # refuses before any signal
        with self._locked():
            stopped += self.directory.take_notes()
            self._stop_all(stopped)
            if purge:
                self.directory.purge_plan()            # again, under the lock
                stopped.append(self.directory.purge())
        return {"changed": bool(stopped), "stopped": stopped}

    def _stop_all(self, stopped):
        daemons = self.daemons
        if self.login_node.stop():                     # sessions first: they may submit jobs
            stopped.append(LOGIN_DAEMON)
        if daemons.running(controllers.PRIMARY) or daemons.running(controllers.BACKUP):
            self._cancel_all_jobs()
        for name in stop_order(daemons.records()):     # the order plan_absent() reports
            if daemons.stop(name):
                stopped.append(name)
        steps = daemons.stop_step_daemons()            # of jobs that could not be cancelled (no slurmctld)
        stopped += ["slurmstepd[%d] (leftover of %s)" % (pid, os.path.basename(path)) for pid, _s, path in steps]
        alive = ["%s[%d]" % (comm, pid) for pid, comm in self.leftover_processes()]
        if alive:
            raise LocalClusterError("processes still running after stop: %s" % ", ".join(alive))

    def status(self) -> Dict[str, Any]:
        """{'state_dir', 'processes': {name: {pid, running}}, 'nodes': [sinfo --json nodes] or None, 'env'}."""
        procs = {}
        for name, rec in sorted(self.daemons.records().items()):
            procs[name] = {"pid": rec["pid"], "running": _record_alive(rec)}
        nodes = None
        if any(procs.get(n, {}).get("running") for n in (controllers.PRIMARY, controllers.BACKUP)):
            try:
                nodes = self.sinfo_nodes()
            except LocalClusterError:
                nodes = None
        return {"state_dir": self.layout.state_dir, "processes": procs, "nodes": nodes, "env": self.env(),
                "running": any(p["running"] for p in procs.values()), "login": self.login_address(),
                "rest": self.rest_url()}

    def restart_node(self, node: str) -> Dict[str, Any]:
        """Restart the slurmd of `node` with the command it was started with: what replacing a worker pod is on
        Kubernetes (remediation). Returns {'node', 'old_pid', 'new_pid'}. The node keeps its Slurm state (a drain
        stays); the caller waits for the new slurmd to register. The new slurmd reads the config files there are
        now, so it is recorded with their digest (a later run sees it current)."""
        with self._locked():
            return self.restart_node_locked(node, slurm_digest(self.config_files.current()))

    def restart_node_locked(self, node: str, digest: str) -> Dict[str, Any]:
        """restart_node's work for a caller that holds the state directory's lock already (a rollout inside a run);
        the new slurmd recorded with `digest`."""
        return self.daemons.restart_slurmd(node, digest)

    # --- Slurm clients -----------------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout: Optional[float] = None, check: bool = True,
            stdin_text: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
        """Run a command (srun, sbatch...) as a client of this cluster, for callers and tests; the backend itself
        goes through slurm(). Returns CompletedProcess (text)."""
        env = dict(os.environ)
        env.update(self.env())
        try:
            proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, timeout=timeout or self.timeout, input=stdin_text, check=False)
        except subprocess.TimeoutExpired:
            raise LocalClusterError("%s did not finish within %ss" % (" ".join(argv), timeout or self.timeout))
        if check and proc.returncode != 0:
            raise LocalClusterError("%s failed (rc %d): %s" % (" ".join(argv), proc.returncode,
                                                               (proc.stderr or proc.stdout).strip()))
        return proc

    def sinfo_nodes(self) -> List[Dict[str, Any]]:
        """Nodes sinfo lists (FUTURE nodes are not), as {name, state (lower case), state_flags, reason, partitions}."""
        try:
            records = read_sinfo(self.slurm())
        except SlurmError as e:
            raise LocalClusterError(str(e))
        return [{"name": r.name, "state": r.base_state.lower(), "state_flags": list(r.flags), "reason": r.reason,
                 "partitions": list(r.partitions)} for r in records.values()]

    # --- check mode (local/planner.py) -------------------------------------------------------------------------

    def plan_present(self, model: ClusterModel, status: Mapping[str, Any]) -> List[str]:
        """What ensure_started(model) would do, as 'would ...' actions, from status() and the files under
        state_dir; changes nothing (rollout_steps: the roll it would make). A directory that is not ours fails
        here, as the run would."""
        try:
            actions, self.rollout_steps = self.planner.present(model, status)
        except RolloutFailed as e:
            self.rollout_steps = e.steps
            raise
        return actions

    def plan_absent(self, purge: bool, status: Mapping[str, Any]) -> List[str]:
        """What stop(purge) would do, as 'would ...' actions, in the order it would do it. Raises, before anything,
        for a directory that is not ours, as stop() would."""
        return self.planner.absent(purge, status)

    def plan_exporter(self, model: ClusterModel) -> List[str]:
        """What ensure_started() would do about the exporter, as 'would ...' actions. Reads only."""
        return self.exporter.plan(model)

    # --- the state directory, the daemons, the login node, the exporter ------------------------------------------

    def _locked(self, create=False):
        """The state directory's lock for one operation (StateDir.locked); a new directory's marker names the
        model's cluster."""
        return self.directory.locked(create, self.model.name if self.model is not None else None)

    def ownership(self) -> str:
        """'absent', 'empty', 'marked' or 'legacy'; raises LocalClusterError for a directory that is not ours
        (StateDir.ownership)."""
        return self.directory.ownership()

    def purge_plan(self) -> List[str]:
        """What stop(purge=True) would delete ([paths]); raises where purge is refused (StateDir.purge_plan)."""
        return self.directory.purge_plan()

    def pid(self, name: str) -> Optional[int]:
        """The pid of this cluster's daemon `name` while it runs (its recorded pid and start time), else None."""
        return self.daemons.pid(name)

    def leftover_processes(self) -> List[Tuple[int, str]]:
        """(pid, name) of this cluster's processes still alive (empty after stop()): Daemons.leftover_processes."""
        return self.daemons.leftover_processes()

    def log_files(self, names: Optional[Iterable[str]] = None) -> Dict[str, str]:
        """{daemon: its log file} of `names` (default: every daemon this cluster recorded)."""
        return self.daemons.log_files(names)

    def slurmds_behind(self) -> List[str]:
        """Running slurmds that did not register with the running slurmctld (Daemons.slurmds_behind)."""
        return self.daemons.slurmds_behind()

    def wants_login(self) -> bool:
        """Whether this cluster runs a login sshd (a jail, and login on)."""
        return self.login_node.wanted()

    def login_address(self) -> Optional[Dict[str, Any]]:
        """{'host', 'port', 'user'} of the login sshd (when this cluster has one and its ports are chosen), else None."""
        return self.login_node.address()

    def restart_login(self) -> Optional[Dict[str, Any]]:
        """Restart the running login sshd with the command it was started with: after its jail was replaced
        (jail_populate overwrite=always force=true), its mount namespace held /dev, /proc and the binds in the old
        jail's directories, now gone. The mount points are made in the jail as it is now; its sessions end.
        -> {'old_pid', 'new_pid'}, or None when no login sshd of this cluster runs."""
        with self._locked():
            return self.login_node.restart()

    def rest_url(self) -> Optional[str]:
        """slurmrestd's base URL (http://127.0.0.1:<port>) when the model enables spec.rest, else None."""
        return RestServer.url(self.model, _saved_base(self.layout))

    def exporter_address(self) -> Optional[str]:
        """The exporter's /metrics URL when the model enables it, else None."""
        return self.exporter.address(self.model)

    def monitoring_paths(self) -> Optional[Dict[str, Any]]:
        """The rule file, scrape job and dashboards for the admin's Prometheus and Grafana when the model enables the
        exporter, else None (local/exporter.py)."""
        return self.exporter.monitoring_paths(self.model)

    # --- pieces of ensure_started ------------------------------------------------------------------------------

    def _check_binaries(self, model):
        names = ["munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "scancel"]
        if model.accounting.enabled:
            names += ["slurmdbd", "mariadbd", "mariadb-install-db", "mariadb"]
        if self.login_node.wanted():
            names += ["sshd", "unshare", "mount"]
        for name in names:
            find_binary(name)
        if self.login_node.wanted():
            self.login_node.jail()             # refused before anything starts
        if self.jail_dir is not None:
            plugin = self.spank_chroot or c.SPANK_CHROOT_PLUGIN
            if not os.path.isfile(plugin):
                raise LocalClusterError("chroot SPANK plugin %s not found: build it with `make spank` (or install it "
                                        "with `make -C images/spank_chroot install`)" % plugin)
            if os.getuid() != 0:
                raise LocalClusterError("a jail needs root: slurmd and slurmstepd mount the jail for each job step")
            require_jail_plugin(self.jail_dir, plugin)

    # --- nodes -------------------------------------------------------------------------------------------------

    def _converge_nodes(self, model, slurm_hash, ports, changes):
        """`ports`: {node: slurmd port} (local/layout.py node_ports)."""
        lay = self.layout
        desired = wanted_nodes(model)
        all_nodes = set(ns.node_name(i) for ns in model.node_sets for i in range(ns.max_replicas))
        daemons = self.daemons
        records = daemons.records()
        running = set(n[len("slurmd-"):] for n, r in records.items()
                      if n.startswith("slurmd-") and _record_alive(r))
        behind = set(daemons.slurmds_behind())
        # The running slurmds on an old configuration are restarted by the roll (4.), in batches, not here.
        outdated = outdated_nodes(desired, daemons.running_records(), slurm_hash)
        if outdated:
            # one Slurm does not list (not registered, not behind) is no node in service: it just restarts
            listed = set(n["name"] for n in self.sinfo_nodes())
            outdated = [n for n in outdated if n in listed or "slurmd-%s" % n in behind]
        signalled = []
        # 1. workers to have: start missing slurmds, restart current ones registered with an earlier slurmctld; an
        #    outdated one registered with an earlier slurmctld registers again without a restart (SIGHUP).
        for node in desired:
            _own_dir(lay.node_spool(node))
            name = slurmd_name(node)
            if node in outdated:
                if name not in behind:
                    continue
                if self.rollout.register_again(name, changes):
                    signalled.append(name)
                    continue
                outdated.remove(node)       # not signalled: it restarts here, as a slurmd behind does
            daemons.ensure_slurmd(node, ports[node], slurm_hash, changes,
                                  stale="slurmctld restarted: the node registers again" if name in behind else None)
        # 2. nodes to remove: running slurmds not wanted, and nodes slurmctld still lists (recovered state).
        visible = dict((n["name"], n) for n in self.sinfo_nodes())
        remove = nodes_to_remove(model, running, visible)   # the order plan_present() reports
        if remove:
            self._scale_down(remove, visible, changes)
        # Records of nodes that left the model entirely.
        for name in list(daemons.records()):
            if name.startswith("slurmd-") and name[len("slurmd-"):] not in all_nodes:
                daemons.stop(name)
        # 3. wait until every wanted node answers; undrain ours left over from an unfinished scale-down.
        self._wait_nodes_up(desired, changes)
        self.rollout.registered_again(signalled)
        # 4. restart the outdated slurmds in batches (slurm/rollout.py's plan), busy ones drained first.
        try:
            self.rollout_steps = self.rollout.roll(model, slurm_hash, outdated, changes)
        except RolloutFailed as e:
            self.rollout_steps = e.steps
            raise

    def _scale_down(self, nodes, visible, changes):
        """The shared removal (slurm/removal.py) for the nodes slurmctld lists; every slurmd of `nodes` stopped."""
        known = [n for n in nodes if n in visible]

        def stop_slurmds(_present):
            return ["stopped slurmd %s" % n for n in nodes if self.daemons.stop_slurmd(n)]
        try:
            changes += removal.remove_nodes(self.slurm(), known, self.model.remediation.drain_reason_prefix,
                                            self.drain_timeout, poll=1.0, stop_nodes=stop_slurmds)
        except removal.ScaleDownError as e:
            changes += e.actions
            raise LocalClusterError(str(e))
        except SlurmError as e:
            raise LocalClusterError("scale-down of %s: %s" % (hostlist.compress(nodes), e))
        changes += stop_slurmds(nodes)          # those slurmctld did not list (its restart forgot them)
        if known:
            def gone():
                still = [n["name"] for n in self.sinfo_nodes() if n["name"] in known]
                return not still, ", ".join(still)
            wait.wait_until(gone, "removed nodes to leave sinfo", self.timeout, poll=0.5,
                            timeout_error=lambda left: LocalClusterError(
                                "nodes still listed by sinfo after scale-down: %s" % left))

    def _wait_nodes_up(self, desired, changes):
        if not desired:
            return
        ours = full_reason(self.model.remediation.drain_reason_prefix, SCALE_DOWN_REASON)
        resumed = set()
        seen = {}

        def all_up():
            seen.clear()
            seen.update((n["name"], n) for n in self.sinfo_nodes())
            pending = []
            for name in desired:
                node = seen.get(name)
                if node is None or not _responding(node):
                    pending.append(name)
                    continue
                if _drained(node) and node.get("reason") == ours and name not in resumed:
                    try:
                        self.slurm().run(update_nodes_argv([name], "RESUME"))
                    except SlurmError as e:
                        raise LocalClusterError(str(e))
                    resumed.add(name)
                    changes.append("resumed %s (left drained by an unfinished scale-down)" % name)
                    pending.append(name)
            for name in pending:
                if not self.daemons.running(slurmd_name(name)):
                    raise LocalClusterError("slurmd %s exited:\n%s"
                                            % (name, _tail(self.layout.log_file("slurmd-%s" % name))))
            return not pending, pending

        def not_up(pending):
            return LocalClusterError("nodes not up after %ss: %s\n%s" % (
                self.timeout, ", ".join(pending),
                "\n".join("%s: %s %s" % (n, seen[n].get("state"), seen[n].get("state_flags"))
                          for n in pending if n in seen)))
        wait.wait_until(all_up, "nodes up", self.timeout, poll=0.5, timeout_error=not_up)

    # --- Slurm's side of stopping and starting -----------------------------------------------------------------

    def _ensure_controllers(self, model, slurm_hash, base_port, changes):
        """slurmctld, and with spec.controller.replicas 2 the backup too (local/controllers.py)."""
        replicas = model.controller.replicas
        if replicas == 1:
            self.daemons.ensure(controllers.PRIMARY, [find_binary("slurmctld"), "-D"], changes, digest=slurm_hash,
                                ready=self._ctld_ready, ports=[base_port + CTLD_OFFSET])
        for index, name in enumerate(controllers.daemon_names(replicas) if replicas > 1 else []):
            argv = controllers.controller_argv(self.layout.run, model.controller_hosts[index], index,
                                               find_binary("unshare"), find_binary("mount"), find_binary("slurmctld"))
            host = model.controller_hosts[index]
            self.daemons.ensure(name, argv, changes, digest=slurm_hash, ready=lambda h=host: self._ctld_up(h),
                                ports=[base_port + CTLD_OFFSET] if index == 0 else [])
        if replicas == 1 and self.daemons.stop(controllers.BACKUP):
            changes.append("stopped %s (spec.controller.replicas 1)" % controllers.BACKUP)

    def _ctld_up(self, host):
        """`scontrol ping` says the controller of `host` is UP (in control or standing by)."""
        try:
            result = self.slurm(timeout=15).run(["scontrol", "ping"], check=False)[0]
        except SlurmError:
            return False
        return controllers.ping_states(result.stdout).get(host) == "UP"

    def _ctld_ready(self):
        try:
            result = self.slurm(timeout=15).run(["scontrol", "ping"], check=False)[0]
        except SlurmError:
            return False
        return result.rc == 0 and "is UP" in result.stdout

    def _cancel_all_jobs(self):
        """Best effort before stopping: cancel every job and wait a little for them to go."""
        runner = self.slurm()

        def jobs():
            result = runner.run(["squeue", "-h", "-o", "%A"], check=False)[0]
            return result.stdout.split() if result.rc == 0 else []
        try:
            ids = jobs()
            if not ids:
                return
            runner.run(["scancel"] + ids, check=False)
            wait.wait_until(lambda: (not jobs(), "jobs"), "jobs cancelled", min(self.timeout, 60), poll=0.5)
        except (SlurmError, wait.WaitTimeout):
            return


# ------------------------------------------------------------------------------------------------ node states

def _flags(node):
    return set(f.upper() for f in (node.get("state_flags") or []))


def _drained(node):
    return "DRAIN" in _flags(node) or node.get("state", "").lower().startswith("drain")


def _responding(node):
    state = (node.get("state") or "").lower()
    return state not in ("down", "future", "unknown") and "NOT_RESPONDING" not in _flags(node)
