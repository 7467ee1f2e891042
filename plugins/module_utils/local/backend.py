# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local backend: a ClusterModel as a real Slurm cluster of local processes on one machine.

Two parts:

* `adapt_configs()` is the ONLY place where the rendered Slurm configs (render_slurm.render_slurm_configs) are changed
  for local processes: hosts, ports, paths, users and the plugins that cannot work here. Every other line of every
  file stays as rendered, so the local cluster runs the same configuration as the Kubernetes one.
* `LocalCluster` runs it over one state directory (configs, munge key, spool, logs, pids, database): munged,
  slurmctld, one `slurmd -N <node>` per running worker, and slurmdbd + a private mariadbd when accounting is on.
  Every daemon binds the loopback interface only.

Scaling follows the design's rule (no slurmctld restart): each NodeSet's nodes are FUTURE nodes; a started slurmd
makes its node IDLE; a removed node is drained (reason prefixed with remediation.drain_reason_prefix), waited for
until it runs no job, its slurmd stopped, and the node set back to FUTURE (gone from sinfo).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import inspect
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import struct
import sys
import tempfile
import time

from ansible_collections.soperator.slurm.plugins.module_utils.node import active_check
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import config_syntax as cs
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.node import health_check
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as jail_files
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.nodes import SCALE_DOWN_REASON

DEFAULT_BASE_PORT = 17817
LOOPBACK = "127.0.0.1"
LOCAL_HOST = "localhost"
# Offsets from the base port. slurmd ports follow, one per possible node (max_replicas of every NodeSet).
CTLD_OFFSET, DBD_OFFSET, DB_OFFSET, SLURMD_OFFSET = 0, 1, 2, 10
LOGIN_OFFSET = 3                    # the login sshd (with a jail)
LOGIN_DAEMON = "sshd"
LOGIN_USER = "root"                 # the user the cluster's keys (login.sshRootPublicKeys) are for
# Local replacements of plugins that need what a laptop or CI box does not give: see adapt_configs().
LOCAL_PROCTRACK = "proctrack/linuxproc"
LOCAL_TASK_PLUGIN = "task/none"
LOCAL_JOBACCT = "jobacct_gather/linux"
# sun_path holds 108 bytes; slurmstepd puts `<node>_<jobid>.<stepid>` sockets into the node's spool directory.
MAX_SOCKET_PATH = 107
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"

# Debian package of each binary we run, for the error when one is missing.
PACKAGES = {
    "munged": "munge", "munge": "munge",
    "slurmctld": "slurmctld", "slurmd": "slurmd", "slurmdbd": "slurmdbd",
    "scontrol": "slurm-client", "sinfo": "slurm-client", "squeue": "slurm-client", "scancel": "slurm-client",
    "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-client",
    "sshd": "openssh-server", "unshare": "util-linux", "mount": "mount",
}
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")

# The marker that makes a directory a local cluster's state directory: written when LocalCluster creates it. Only a
# directory with it (or an earlier version's directory that proves it is one, see LocalCluster.ownership) is stopped
# or purged.
MARKER = ".soperator-local-cluster.json"
MARKER_KIND = "soperator.slurm/local-cluster"
LOCK_FILE = ".lock"
# What LocalCluster creates in a state directory; purge removes these (and the marker, the lock) and nothing else.
STATE_ENTRIES = ("etc", "bin", "secrets", "run", "log", "ctld", "spool", "db", "login", "checks", "cluster.json")
_TMP_ENTRY = re.compile(r"\A(cluster\.json|%s)\.tmp\.\d+\Z" % re.escape(MARKER))
# Paths written into slurm.conf, plugstack.conf, slurmdbd.conf and the health-check shell wrapper: a character
# outside this set could split a line or a word (space, newline, '#', '=', ',', ':'), be expanded by Slurm ('%') or
# the shell ('$', quotes, backslash).
_SAFE_PATH = re.compile(r"\A/[A-Za-z0-9_./+@-]*\Z")
# Machine-wide port claims of local clusters (one file per user: a sticky lock directory lets nobody else replace it).
PORT_REGISTRY_DIRS = ("/run/lock", "/var/lock")


class LocalClusterError(RuntimeError):
    pass


def check_path(what, path):
    """Refuse a path that would not read back as one word from the files it is written to (see _SAFE_PATH)."""
    if not isinstance(path, str) or not _SAFE_PATH.match(os.path.abspath(path)) or "\n" in path:
        raise LocalClusterError(
            "%s %r cannot be used: it is written into slurm.conf, plugstack.conf and a shell wrapper, so it may hold "
            "only letters, digits and / . _ - + @ (no space, newline, '#', '=', ',', ':', '%%', '$', quotes or "
            "backslash)" % (what, path))
    return os.path.abspath(path)


def default_state_dir(cluster_name):
    """Where a cluster's state lives unless told otherwise: $XDG_STATE_HOME (~/.local/state)/soperator/<name>."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "soperator", cluster_name)


# ------------------------------------------------------------------------------------------------------ layout

class Layout:
    """Every path of a local cluster, all under one state directory."""

    def __init__(self, state_dir):
        self.state_dir = os.path.abspath(state_dir)

        def j(*parts):
            return os.path.join(self.state_dir, *parts)
        self.etc = j("etc")                        # rendered + adapted configs (SLURM_CONF lives here)
        self.bin = j("bin")                        # the health check programs (install_health_programs)
        self.secrets = j("secrets")                # munge key, DB password, munged seed (0700)
        self.run = j("run")                        # sockets, pid files, process records (0755: munged wants o+x)
        self.log = j("log")
        self.ctld_state = j("ctld")                # StateSaveLocation
        self.spool = j("spool")                    # SlurmdSpoolDir=spool/%n
        self.db = j("db")                          # MariaDB data directory
        self.login = j("login")                    # login sshd: sshd_config, authorized-keys/<user>
        self.cluster_file = j("cluster.json")      # ports, chosen once and kept
        self.slurm_conf = os.path.join(self.etc, "slurm.conf")
        self.munge_key = os.path.join(self.secrets, "munge.key")
        self.munge_seed = os.path.join(self.secrets, "munged.seed")
        self.db_password = os.path.join(self.secrets, "db-password")
        self.munge_socket = os.path.join(self.run, "munge.socket")
        self.db_socket = os.path.join(self.run, "mariadb.socket")
        self.health_check = os.path.join(self.bin, "health-check")
        self.sshd_config = os.path.join(self.login, "sshd_config")
        self.authorized_keys = os.path.join(self.login, "authorized-keys")
        self.ssh_host_keys = self.secrets          # ssh_host_<type>_key(.pub), generated once

    def node_spool(self, node):
        return os.path.join(self.spool, node)

    def record(self, name):
        return os.path.join(self.run, "%s.proc.json" % name)


def node_ports(model, base_port):
    """{node name: slurmd port} for every node any NodeSet may have, in model order."""
    ports = {}
    port = base_port + SLURMD_OFFSET
    for ns in model.node_sets:
        for i in range(ns.max_replicas):
            ports[ns.node_name(i)] = port
            port += 1
    return ports


def ports_needed(model):
    return SLURMD_OFFSET + sum(ns.max_replicas for ns in model.node_sets)


# ------------------------------------------------------------------------------------------------ config lines

def _split_words(line):
    """Whitespace-separated words, keeping double-quoted values (Reason="a b") in one word."""
    return re.findall(r'(?:[^\s"]+|"[^"]*")+', line)


def _kv(word):
    key, sep, value = word.partition("=")
    return key, (value if sep else None)


def _set_words(file_name, words, updates):
    """Replace `Key=` words (case-insensitive) by updates {Key: value or None (remove)}; append the missing ones.
    The words we write go through the one writer of config words (config_syntax), like the rendered ones."""
    lower = dict((k.lower(), (k, v)) for k, v in updates.items())
    out, done = [], set()
    for word in words:
        key, _value = _kv(word)
        hit = lower.get(key.lower())
        if hit is None:
            out.append(word)
            continue
        done.add(key.lower())
        if hit[1] is not None:
            out.append(cs.slurm_word(file_name, key, hit[1]))
    for low, (key, value) in lower.items():
        if low not in done and value is not None:
            out.append(cs.slurm_word(file_name, key, value))
    return out


def _merge_list(value, wanted):
    items = [v for v in (value or "").split(",") if v]
    for w in wanted:
        if w.lower() not in [i.lower() for i in items]:
            items.append(w)
    return ",".join(items)


def _port_expr(ports):
    if len(ports) == 1:
        return str(ports[0])
    text = hostlist.compress([str(p) for p in ports])
    return text if text.startswith("[") else "[%s]" % text


# ----------------------------------------------------------------------------------------------- the adaptation

def _current_user():
    return pwd.getpwuid(os.getuid()).pw_name


def pmix_available():
    """Whether the PMIx library Slurm's mpi/pmix plugin loads is installed (Debian: libpmix2)."""
    import ctypes.util
    return ctypes.util.find_library("pmix") is not None


def adapt_configs(configs, model, state_dir, base_port, user=None, db_password=None,
                  have_pmix=None, jail_dir=None, spank_chroot=None):
    """The rendered configs {file: text} adapted to run as local processes under `state_dir`. Pure text in/out.

    What changes, and only this (every other line of every file is kept byte for byte):
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
        LocalCluster (install_health_programs).
      * AccountingStorageHost=localhost, AccountingStoragePort=<local slurmdbd port> and AccountingStoragePass=<our
        munge socket> (the socket slurmctld authenticates to slurmdbd with) when accounting is on.
    gres.conf: `File=` (GPU device files; there are none) becomes `Count=<number of files>`; AutoDetect=off.
    plugstack.conf: without `jail_dir` the chroot SPANK plugin line is commented out and jobs run in the host's root
      filesystem. With `jail_dir` (a local directory holding the jail's root filesystem) the line is kept, with the
      local plugin (`spank_chroot`, default the installed SPANK_CHROOT_PLUGIN) and `jail=<jail_dir>`; `nodefaults`
      replaces the images' default binds (/etc/slurm, /run/munge, /var/spool/slurmd do not belong to this cluster)
      by binds of /tmp and of state_dir's etc/ (SLURM_CONF), run/ (munge socket) and spool/ (batch scripts,
      slurmstepd sockets) at their host paths, so slurmstepd and the Slurm clients in the jail work.
    slurmdbd.conf: DbdHost/DbdAddr/DbdPort on loopback, SlurmUser, AuthInfo, LogFile/PidFile under state_dir, and
      the private MariaDB: StorageHost=127.0.0.1, StoragePort, StorageUser, StorageLoc, StoragePass (the rendered
      file has no password; in Kubernetes the entrypoint appends it from the Secret).
    health.json: the munge socket is ours; the jail path of the disk check is `jail_dir`, or left out without one.
    cgroup.conf, mpi.conf, topology.conf: unchanged.
    """
    user = user or _current_user()
    if have_pmix is None:
        have_pmix = pmix_available()
    check_path("state_dir", state_dir)
    lay = Layout(state_dir)
    ports = node_ports(model, base_port)
    out = dict(configs)
    if "slurm.conf" in configs:
        out["slurm.conf"] = _adapt_slurm_conf(configs["slurm.conf"], model, lay, base_port, ports, user, have_pmix)
    if "gres.conf" in configs:
        out["gres.conf"] = _adapt_gres_conf(configs["gres.conf"])
    if "plugstack.conf" in configs:
        out["plugstack.conf"] = _adapt_plugstack_conf(configs["plugstack.conf"], lay, jail_dir, spank_chroot)
    if c.HEALTH_CONFIG_FILE in configs:
        out[c.HEALTH_CONFIG_FILE] = _adapt_health_json(configs[c.HEALTH_CONFIG_FILE], lay, jail_dir)
    if c.SLURMDBD_CONF in configs:
        out[c.SLURMDBD_CONF] = _adapt_slurmdbd_conf(configs[c.SLURMDBD_CONF], lay, base_port, user, db_password)
    return out


_LOCAL_NOTE = "# local backend: "


def _adapt_slurm_conf(text, model, lay, base_port, ports, user, have_pmix):
    replace = {
        "slurmctldhost": "%s(%s)" % (LOCAL_HOST, LOOPBACK),
        "slurmctldport": str(base_port + CTLD_OFFSET),
        "slurmuser": user,
        "statesavelocation": lay.ctld_state,
        "slurmdspooldir": os.path.join(lay.spool, "%n"),
        "slurmctldpidfile": os.path.join(lay.run, "slurmctld.pid"),
        "slurmdpidfile": os.path.join(lay.run, "slurmd-%n.pid"),
        "slurmctldlogfile": os.path.join(lay.log, "slurmctld.log"),
        "slurmdlogfile": os.path.join(lay.log, "slurmd-%n.log"),
        "plugstackconfig": os.path.join(lay.etc, "plugstack.conf"),
        "healthcheckprogram": lay.health_check,
        "authinfo": "socket=%s" % lay.munge_socket,
        "accountingstoragehost": LOCAL_HOST,
        "accountingstorageport": str(base_port + DBD_OFFSET),
        # With slurmdbd, AccountingStoragePass names the munge socket of slurmctld <-> slurmdbd (AuthInfo is not
        # used for that connection): without it slurmctld dials the system munged.
        "accountingstoragepass": lay.munge_socket,
    }
    if user != "root":
        replace["slurmduser"] = user
    merge = {
        "communicationparameters": ["NoInAddrAny", "NoCtldInAddrAny"],
        "slurmdparameters": ["config_overrides"],
    }
    plugins = {
        "proctracktype": lambda v: LOCAL_PROCTRACK if "cgroup" in v else v,
        "taskplugin": lambda v: LOCAL_TASK_PLUGIN,
        "jobacctgathertype": lambda v: LOCAL_JOBACCT if "cgroup" in v else v,
        "prologflags": lambda v: ",".join(f for f in v.split(",") if f.lower() != "contain"),
    }
    # Keys that must exist even when the rendered file relies on a default.
    required = ["SlurmctldHost", "SlurmctldPort", "SlurmUser", "StateSaveLocation", "SlurmdSpoolDir",
                "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile", "AuthInfo",
                "CommunicationParameters", "SlurmdParameters"] + (["SlurmdUser"] if user != "root" else [])
    if model.accounting.enabled:
        required.append("AccountingStoragePass")
    seen = set()
    lines = []
    ctld_host_done = False
    first_node_line = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            lines.append(line)
            continue
        words = _split_words(stripped)
        key, value = _kv(words[0])
        low = key.lower()
        if low in ("nodename", "nodeset", "partitionname") and first_node_line is None:
            first_node_line = len(lines)
        if low == "nodename" and value and value.upper() != "DEFAULT":
            names = hostlist.expand(value)
            missing = [n for n in names if n not in ports]
            if missing:
                raise LocalClusterError("slurm.conf defines nodes no NodeSet has: %s" % hostlist.compress(missing))
            lines.append(" ".join(_set_words("slurm.conf", words, {
                "Port": _port_expr([ports[n] for n in names]), "NodeAddr": LOOPBACK, "NodeHostname": LOCAL_HOST})))
            continue
        if len(words) != 1 or value is None:
            lines.append(line)
            continue
        seen.add(low)
        if low in ("slurmctldhost", "controlmachine"):
            if ctld_host_done:          # a backup controller: there is one slurmctld locally
                lines.append(_LOCAL_NOTE + "one local slurmctld, no backup: " + stripped)
                continue
            ctld_host_done = True
            seen.add("slurmctldhost")
            lines.append(cs.slurm_word("slurm.conf", "SlurmctldHost", replace["slurmctldhost"]))
        elif low in ("controladdr", "backupcontroller", "backupaddr"):
            lines.append(_LOCAL_NOTE + "one local slurmctld: " + stripped)
        elif low in replace:
            lines.append(cs.slurm_word("slurm.conf", key, replace[low]))
        elif low in merge:
            lines.append(cs.slurm_word("slurm.conf", key, _merge_list(value, merge[low])))
        elif low in plugins:
            new = plugins[low](value)
            lines.append(cs.slurm_word("slurm.conf", key, new) if new else
                         _LOCAL_NOTE + "not supported here: " + stripped)
        elif low == "mpidefault" and value.lower().startswith("pmix") and not have_pmix:
            lines.append(_LOCAL_NOTE + "the PMIx library is not installed (Debian: libpmix2): " + stripped)
            lines.append(cs.slurm_word("slurm.conf", key, "none"))
        else:
            lines.append(line)
    added = []
    for key in required:
        if key.lower() not in seen:
            low = key.lower()
            value = replace.get(low) or ",".join(merge.get(low, []))
            added.append(cs.slurm_word("slurm.conf", key, value))
    if added:
        block = ["", "# --- local backend: settings the rendered file leaves to defaults"] + added + [""]
        at = first_node_line if first_node_line is not None else len(lines)
        while at > 0 and lines[at - 1].strip().startswith("#"):
            at -= 1        # before the comments that introduce the node lines
        if at > 0 and not lines[at - 1].strip():
            block = block[1:]
        if at == len(lines):
            block = block[:-1]
        lines[at:at] = block
    return "\n".join(lines) + "\n"


def _adapt_health_json(text, lay, jail_dir):
    config = json.loads(text)
    passive = config.get("passive") or {}
    if isinstance(passive.get("munge"), dict):
        passive["munge"]["socket"] = lay.munge_socket
    disk = passive.get("disk") or {}
    if disk.get("paths"):
        disk["paths"] = [jail_dir if p == c.JAIL_MOUNT else p for p in disk["paths"] if p != c.JAIL_MOUNT or jail_dir]
    active = config.get("active")
    if active:
        # Check jobs see the jail (or, without one, the host) as /; outputRoot is where this host finds that root.
        active["outputRoot"] = jail_dir or ""
        if not jail_dir:
            active["outputDir"] = os.path.join(lay.state_dir, "checks")
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


# The program slurmd runs: it gets only SLURMD_NODENAME from slurmd, so this wrapper tells it SLURM_CONF (which
# locates health.json too) and a PATH; both stay as given when the caller has them set.
_HEALTH_WRAPPER = """#!/bin/sh
# local backend: generated by soperator.slurm; runs the health check program with this cluster's configuration.
: "${SLURM_CONF:=%(slurm_conf)s}"
: "${PATH:=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
export SLURM_CONF PATH
exec %(python)s %(program)s "$@"
"""


def install_health_programs(lay, python=None):
    """<state_dir>/bin: health_check.py and active_check.py (copies of the module_utils files the images install)
    and `health-check`, the HealthCheckProgram. Returns the names of the files it (re)wrote."""
    _own_dir(lay.bin)
    python = python or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
    files = {}
    # Their source through the import system: in a module run they live inside Ansible's payload zip, not on disk
    # (importing them here is also what puts them into that payload).
    for program in (health_check, active_check):
        files[program.__name__.rsplit(".", 1)[-1] + ".py"] = (inspect.getsource(program), 0o644)
    files["health-check"] = (_HEALTH_WRAPPER % {"slurm_conf": lay.slurm_conf, "python": python,
                                                "program": os.path.join(lay.bin, "health_check.py")}, 0o755)
    written = []
    for name, (text, mode) in sorted(files.items()):
        path = os.path.join(lay.bin, name)
        old = None
        if os.path.exists(path):
            with open(path) as f:
                old = f.read()
        if old != text or stat.S_IMODE(os.stat(path).st_mode) != mode:
            _atomic_write(path, text, mode)
            written.append(name)
    return written


def _adapt_gres_conf(text):
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            lines.append(line)
            continue
        words = _split_words(stripped)
        updates = {}
        for word in words:
            key, value = _kv(word)
            if key.lower() == "file" and value:
                updates = {"File": None, "Count": str(len(hostlist.expand(value)))}
            elif key.lower() == "autodetect":
                updates["AutoDetect"] = "off"
        lines.append(" ".join(_set_words("gres.conf", words, updates)) if updates else line)
    return "\n".join(lines) + "\n"


def _plugstack_word(path, what):
    if not os.path.isabs(path) or re.search(r"\s", path):
        raise LocalClusterError("%s must be an absolute path without whitespace (plugstack.conf), got %r"
                                % (what, path))
    return os.path.normpath(check_path(what, path))


def _adapt_plugstack_conf(text, lay, jail_dir=None, spank_chroot=None):
    if jail_dir is None and spank_chroot is not None:
        raise LocalClusterError("spank_chroot needs jail_dir: the plugin runs job steps in a jail")
    if jail_dir is not None:
        jail = _plugstack_word(jail_dir, "jail_dir")
        plugin = _plugstack_word(spank_chroot or c.SPANK_CHROOT_PLUGIN, "spank_chroot")
        binds = ["nodefaults", "bind=/tmp"] + ["bind=%s" % d for d in (lay.etc, lay.run, lay.spool)]
    lines = []
    for line in text.splitlines():
        if not line.strip().startswith("#") and c.SPANK_CHROOT_PLUGIN in line:
            if jail_dir is not None:
                words = [plugin if w == c.SPANK_CHROOT_PLUGIN else "jail=%s" % jail if w.startswith("jail=") else w
                         for w in line.split()]
                lines.append(_LOCAL_NOTE + "the local jail; node paths of this cluster bound into it at the same "
                             "paths:")
                lines.append(" ".join(words + [b for b in binds if b not in words]))
                continue
            lines.append(_LOCAL_NOTE + "the chroot SPANK plugin is left out: no jail directory given "
                         "(LocalCluster jail_dir); jobs run in the host's root filesystem:")
            lines.append("# " + line)
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def _adapt_slurmdbd_conf(text, lay, base_port, user, db_password):
    replace = {
        "dbdhost": LOCAL_HOST,
        "dbdaddr": LOOPBACK,
        "dbdport": str(base_port + DBD_OFFSET),
        "slurmuser": user,
        "authinfo": "socket=%s" % lay.munge_socket,
        "storagehost": LOOPBACK,
        "storageport": str(base_port + DB_OFFSET),
        "storageuser": DB_USER,
        "storageloc": DB_NAME,
        "logfile": os.path.join(lay.log, "slurmdbd.log"),
        "pidfile": os.path.join(lay.run, "slurmdbd.pid"),
    }
    if db_password is not None:
        replace["storagepass"] = db_password
    order = ["DbdHost", "DbdAddr", "DbdPort", "SlurmUser", "AuthInfo", "StorageHost", "StoragePort", "StorageUser",
             "StorageLoc", "StoragePass", "LogFile", "PidFile"]
    seen = set()
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        key, value = _kv(stripped)
        if stripped and not stripped.startswith("#") and value is not None and key.lower() in replace:
            seen.add(key.lower())
            lines.append(cs.slurm_word("slurmdbd.conf", key, replace[key.lower()]))
        else:
            lines.append(line)
    added = [cs.slurm_word("slurmdbd.conf", k, replace[k.lower()])
             for k in order if k.lower() in replace and k.lower() not in seen]
    if added:
        lines += ["", "# --- local backend: the local slurmdbd and its private MariaDB"] + added
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------- login

def unsafe_path_components(path):
    """Components of `path`, from / down, that sshd refuses for ChrootDirectory (and, with StrictModes, above an
    authorized_keys file): not a directory owned by root, or writable by group or others. [] when it is safe; the
    check ends at the first component that does not exist (yet)."""
    bad = []
    current = "/"
    for part in [""] + [p for p in os.path.normpath(path).split("/") if p]:
        current = os.path.join(current, part)
        try:
            st = os.stat(current)
        except OSError:
            break
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            bad.append("%s (owner uid %d, mode %04o)" % (current, st.st_uid, stat.S_IMODE(st.st_mode)))
    return bad


def login_binds(lay):
    """Host directories a login session needs at the same path inside the jail, like the plugin's binds for job
    steps (see _adapt_plugstack_conf): /tmp, and the cluster's configs (SLURM_CONF), munge socket and spool. A
    directory inside an earlier one comes along with it and is left out."""
    binds = []
    for path in ("/tmp", lay.etc, lay.run, lay.spool):
        if not any(path == b or path.startswith(b.rstrip("/") + "/") for b in binds):
            binds.append(path)
    return binds


def render_login_sshd_config(jail_dir, lay, base_port):
    """The login nodes' sshd_config (render_sshd, as on Kubernetes) with this cluster's local paths: it listens on
    127.0.0.1:<base_port + LOGIN_OFFSET>, host keys and authorized keys live under state_dir, sessions get
    SLURM_CONF (the cluster's slurm.conf, bound into the jail at the same path)."""
    from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config
    notes = ["local backend: the login node of the local cluster in %s (LocalCluster)." % lay.state_dir]
    strict = not unsafe_path_components(lay.authorized_keys)
    if not strict:
        notes.append("local backend: StrictModes off: the state directory lies below a directory that others can "
                     "write to (e.g. /tmp); the key files are ours and written 0644/0600.")
    return render_sshd_config(jail_dir, lay.ssh_host_keys, lay.authorized_keys, port=base_port + LOGIN_OFFSET,
                              listen_address=LOOPBACK, pid_file=os.path.join(lay.run, "sshd.pid"),
                              set_env={"SLURM_CONF": lay.slurm_conf}, strict_modes=strict, notes=notes)


def _open_below(root, path, create=False):
    """A descriptor of the directory `root + path`, walked one component at a time without following a link (and
    made, when `create`, inside the directory just opened; jail.py's walker): the jail's content, which its users
    can change, can never redirect a mkdir or a mount onto a host path, not even between a check and the use."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LocalClusterError("mount point %s%s climbs out of the jail" % (root, path))
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return jail_files.open_dirs(root_fd, parts, create)
    except OSError as e:
        raise LocalClusterError("mount point %s%s crosses a symbolic link or a file in the jail: %s"
                                % (root, path, e.strerror))
    finally:
        os.close(root_fd)


def _jail_mount_point(jail, path):
    """Make `jail + path` a directory to mount on; refuse a path that crosses a symbolic link in the jail."""
    os.close(_open_below(jail, path, create=True))


# sshd's mount namespace: every mount goes onto the directory opened without following links (mount(8)
# --no-canonicalize onto /proc/self/fd/N reaches exactly that directory), then sshd replaces this program.
# Standard library only; run by the host's Python inside `unshare --mount`.
_LOGIN_NAMESPACE_PROGRAM = """
import os, subprocess, sys
jail, mount, sshd, config = sys.argv[1:5]
def below(path):
    fd = os.open(jail, os.O_PATH | os.O_DIRECTORY)
    for part in [p for p in path.split("/") if p]:
        child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd
def mount_on(path, args, check=True):
    fd = below(path)
    try:
        return subprocess.run([mount, "--no-canonicalize"] + args + ["/proc/self/fd/%d" % fd], pass_fds=(fd,),
                              stderr=subprocess.DEVNULL if not check else None, check=check).returncode
    finally:
        os.close(fd)
mount_on("/dev", ["--rbind", "/dev"])
# a fresh procfs, or the host's where the kernel refuses one (masked /proc in a container)
if mount_on("/proc", ["-t", "proc", "proc"], check=False) != 0:
    mount_on("/proc", ["--rbind", "/proc"])
for path in sys.argv[5:]:
    mount_on(path, ["--bind", path])
os.execv(sshd, [sshd, "-D", "-e", "-f", config])
"""


def _read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def _descendants(pid):
    """Pids of every live descendant of `pid` (children first)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                data = f.read()
        except (IOError, OSError):
            continue
        children.setdefault(int(data[data.rindex(")") + 2:].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


# --------------------------------------------------------------------------------------------------- processes

def find_binary(name):
    """Absolute path of a binary (PATH, then the sbin directories); a clear error naming the Debian package."""
    path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN_DIRS))
    if not path:
        raise LocalClusterError("%s not found: install the Debian package '%s' (apt-get install %s)"
                                % (name, PACKAGES.get(name, name), PACKAGES.get(name, name)))
    return path


def _proc_start_time(pid):
    """Start time (clock ticks since boot) of a live, non-zombie process; None when there is none."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except (IOError, OSError):
        return None
    fields = data[data.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _pid_alive(pid, start_time=None):
    """Whether a live process has this pid (and, given one, this start time)."""
    now = _proc_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


def _record_alive(rec):
    """Whether the process of a record still runs: the pid with the recorded start time. A record without a start
    time proves nothing (the pid may be another process by now): not alive, never signalled."""
    return rec.get("start_time") is not None and _pid_alive(rec["pid"], rec["start_time"])


def _tail(path, lines=25):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return "(no log at %s)" % path
    return "\n".join(text.splitlines()[-lines:])


def _port_free(port):
    """Whether a daemon could listen on 127.0.0.1:port now. SO_REUSEADDR as Slurm, sshd and MariaDB set it: a port
    left in TIME_WAIT by our own stopped daemon counts as free, one another socket is bound to does not."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((LOOPBACK, port))
        s.listen(1)
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_free_base_port(count, start=DEFAULT_BASE_PORT, stop=60000):
    """First base port from `start` whose `count` consecutive loopback ports are all free and claimed by no local
    cluster (a hint for a caller's base_port; LocalCluster claims its block itself, see PortClaims)."""
    return find_free_block(count, PortClaims().read(), None, start, stop)


def _atomic_write(path, data, mode=0o644):
    """Write `path` by a rename: the temporary file is created new (O_EXCL, no link followed), a symlink at `path`
    is replaced, never written through."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        os.unlink(tmp)                 # a leftover of a killed run of this pid; unlink never follows a link
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        data = data if isinstance(data, bytes) else data.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_own_file(path, limit=1 << 20):
    """Bytes of a regular file owned by us, opened without following a link; None when it is not that."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > limit:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_marker(state_dir):
    """The marker of a state directory LocalCluster created ({'kind', 'id', 'cluster', ...}), or None."""
    data = _read_own_file(os.path.join(state_dir, MARKER))
    try:
        marker = json.loads(data.decode("utf-8")) if data is not None else None
    except ValueError:
        return None
    if not isinstance(marker, dict) or marker.get("kind") != MARKER_KIND or not isinstance(marker.get("id"), str):
        return None
    return marker


def _is_real_dir(path):
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _saved_base(layout):
    data = _read_own_file(layout.cluster_file)
    try:
        base = json.loads(data.decode("utf-8")).get("base_port") if data is not None else None
    except (ValueError, AttributeError):
        return None
    return base if isinstance(base, int) and not isinstance(base, bool) else None


def _legacy_state_dir(layout):
    """Whether a directory without a marker was made by an earlier version for this very path: only our entries,
    our cluster.json, and an etc/slurm.conf that adapt_configs wrote for this state directory (its
    StateSaveLocation is <state_dir>/ctld). Nothing less proves it is ours."""
    try:
        entries = set(os.listdir(layout.state_dir))
    except OSError:
        return False
    if not entries or not entries <= set(STATE_ENTRIES) | {LOCK_FILE}:
        return False
    if _saved_base(layout) is None or not _is_real_dir(layout.etc):
        return False
    conf = _read_own_file(layout.slurm_conf)
    return conf is not None and ("\nStateSaveLocation=%s\n" % layout.ctld_state).encode() in b"\n" + conf


def _nested_markers(state_dir):
    """Markers of other local clusters below `state_dir` (no link followed)."""
    found = []
    for root, dirs, files in os.walk(state_dir, followlinks=False):
        if root != state_dir and MARKER in files:
            found.append(root)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return found


def _marked_ancestor(state_dir):
    """The nearest directory above `state_dir` that is another local cluster's state directory, or None."""
    current = os.path.dirname(state_dir)
    while True:
        if read_marker(current) is not None:
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _own_dir(path, mode=0o755):
    """`path` as a directory of ours: made when missing; a link or anything else there fails (never written
    through)."""
    if os.path.lexists(path) and not _is_real_dir(path):
        raise LocalClusterError("%s is not a directory (a link?): not writing through it" % path)
    if not os.path.lexists(path):
        os.mkdir(path, mode)
    return path


def _remove_entry(path):
    """Remove a file, link or directory tree without following any link (rmtree works on directory fds)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return
        raise
    if stat.S_ISDIR(st.st_mode):
        if not shutil.rmtree.avoids_symlink_attacks:
            raise LocalClusterError("this platform's shutil.rmtree can follow links: not deleting %s" % path)
        shutil.rmtree(path)
    else:
        os.unlink(path)


# ------------------------------------------------------------------------------------------------- port claims

def _registry_paths():
    for directory in PORT_REGISTRY_DIRS + (tempfile.gettempdir(),):
        if os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK):
            base = os.path.join(directory, "soperator-slurm-ports.%d" % os.geteuid())
            return base + ".lock", base + ".json"
    raise LocalClusterError("no writable directory for the port claims of local clusters (tried %s)"
                            % ", ".join(PORT_REGISTRY_DIRS + (tempfile.gettempdir(),)))


def _flock(fd, timeout, what):
    deadline = time.time() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError:
            if time.time() > deadline:
                raise LocalClusterError("another operation holds %s (waited %ss)" % (what, timeout))
            time.sleep(0.1)


class PortClaims:
    """The blocks of loopback ports local clusters of this user have chosen, machine-wide, in one JSON file
    guarded by a lock file (both in /run/lock, /var/lock or the temp directory). Choosing a block and recording it
    happen under that lock, so two runs never choose the same block; a claim counts while the state directory it
    names still carries the marker with the claim's id (a purged or foreign directory frees it)."""

    def __init__(self, timeout=60.0):
        self.lock_path, self.path = _registry_paths()
        self.timeout = timeout

    def read(self):
        """{state_dir: {'id', 'base', 'count'}} of live claims (read only; no lock needed for a plan)."""
        data = _read_own_file(self.path)
        try:
            claims = json.loads(data.decode("utf-8")).get("claims", {}) if data else {}
        except (ValueError, AttributeError):
            claims = {}
        live = {}
        for state_dir, claim in claims.items() if isinstance(claims, dict) else ():
            if not isinstance(claim, dict) or not all(isinstance(claim.get(k), int) for k in ("base", "count")):
                continue
            marker = read_marker(state_dir)
            if marker is not None and marker["id"] == claim.get("id"):
                live[state_dir] = claim
        return live

    @contextlib.contextmanager
    def locked(self):
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise LocalClusterError("%s is not a regular file of ours: not using it to claim ports"
                                        % self.lock_path)
            _flock(fd, self.timeout, self.lock_path)
            yield self
        finally:
            os.close(fd)

    def write(self, claims):
        _atomic_write(self.path, json.dumps({"claims": claims}, indent=1, sort_keys=True) + "\n", 0o600)


def block_problems(base, count, claims, state_dir, own_ports=()):
    """Why the ports base .. base+count-1 cannot be the block of the cluster in `state_dir`: [str], [] if it can.
    Every port is probed with a bind on 127.0.0.1, except `own_ports` (held by this cluster's running daemons)."""
    problems = []
    if base < 1024 or base + count > 65536:
        return ["ports %d-%d are outside 1024-65535" % (base, base + count - 1)]
    for other, claim in sorted(claims.items()):
        if other != state_dir and base < claim["base"] + claim["count"] and claim["base"] < base + count:
            problems.append("ports %d-%d are claimed by the local cluster in %s"
                            % (claim["base"], claim["base"] + claim["count"] - 1, other))
    held = [p for p in range(base, base + count) if p not in own_ports and not _port_free(p)]
    if held:
        problems.append("port%s %s %s in use by another process" % (
            "s" if len(held) > 1 else "", ", ".join(str(p) for p in held[:5]) + (", ..." if len(held) > 5 else ""),
            "are" if len(held) > 1 else "is"))
    return problems


def find_free_block(count, claims, state_dir, start=DEFAULT_BASE_PORT, stop=60000):
    """The first block from `start` free of claims and listeners (call it under PortClaims.locked())."""
    step = max(count, 50)
    for base in range(start, stop - count, step):
        if not block_problems(base, count, claims, state_dir):
            return base
    raise LocalClusterError("no %d free consecutive ports on %s between %d and %d" % (count, LOOPBACK, start, stop))


# ------------------------------------------------------------------------------------------------ step daemons

def _socket_peer(path):
    """(pid, uid) of the process listening on the unix socket `path` (SO_PEERCRED), or None."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        pid, uid, _gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
        return pid, uid
    except OSError:
        return None
    finally:
        s.close()


def _digest(*texts):
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") if isinstance(t, str) else t)
        h.update(b"\0")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------- cluster

class LocalCluster:
    """A ClusterModel as local processes over `state_dir`.

    `ensure_started()` converges (idempotent), `scale()` changes replicas, `stop()` stops everything it started,
    `status()` reports, `env()` gives what clients (sinfo, srun, ...) need. Every wait is bounded by `timeout`
    (daemon start/stop) or `drain_timeout` (jobs on a node being removed).

    `jail_dir`: run job steps in this jail (a directory holding a root filesystem) through the chroot SPANK plugin
    at `spank_chroot` (default: the installed c.SPANK_CHROOT_PLUGIN; `make spank` builds one); see adapt_configs().
    Needs root (slurmstepd mounts the jail). The jail must hold what the jobs run, and the Slurm clients, their
    libraries and the plugin itself at the same path for srun/sbatch inside jobs.

    With a jail and `login` (default), a login sshd runs too, on 127.0.0.1:<base_port + LOGIN_OFFSET> (status()
    'login'), with the login nodes' sshd_config (render_sshd): key-only, every session chrooted into the jail. Root's
    keys are the spec's login.sshRootPublicKeys plus `login_authorized_keys`; other users log in with the keys in
    their ~/.ssh/authorized_keys in the jail, and are resolved by this machine's user database (sshd runs here).
    sshd runs in a private mount namespace (unshare) in which /dev, /proc, /tmp and the cluster's etc/, run/ and
    spool/ are mounted into the jail at their host paths, so sbatch/srun in a session reach this cluster; those
    mounts never show on the host and vanish with sshd. ChrootDirectory needs every component of `jail_dir` to be a
    root-owned directory not writable by group or others (so not below /tmp).
    """

    def __init__(self, state_dir, model=None, base_port=None, user=None, timeout=60.0, drain_timeout=300.0,
                 renderer=None, jail_dir=None, spank_chroot=None, login=True, login_authorized_keys=()):
        self.layout = Layout(state_dir)
        self.model = model
        self.user = user or _current_user()
        self.timeout = float(timeout)
        self.drain_timeout = float(drain_timeout)
        self._renderer = renderer
        self._requested_base_port = base_port
        self.jail_dir = jail_dir
        self.spank_chroot = spank_chroot
        self.login = bool(login)
        self.login_authorized_keys = tuple(login_authorized_keys or ())
        self._children = {}            # pid -> Popen of daemons this object started (reaped when they end)
        self._notes = []               # what taking the state directory did (created, adopted), for changes

    # --- public ------------------------------------------------------------------------------------------------

    @property
    def state_dir(self):
        return self.layout.state_dir

    def env(self):
        """Environment for Slurm clients of this cluster (merge it over os.environ)."""
        return {"SLURM_CONF": self.layout.slurm_conf}

    def ensure_started(self, model=None):
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
            return self._ensure_started(self.model)

    def check_inputs(self):
        """Before anything is written: refuse paths that would inject into the files they are written to, and a
        cluster the local slurmctld would refuse to start."""
        check_path("state_dir", self.layout.state_dir)
        for what in ("jail_dir", "spank_chroot"):
            if getattr(self, what) is not None:
                check_path(what, getattr(self, what))
        if self.model is not None and not any(ns.max_replicas > 0 for ns in self.model.node_sets):
            # slurmctld 22.05 exits with "read_slurm_conf: no nodes configured"
            raise LocalClusterError("the local cluster needs at least one node: give a NodeSet maxReplicas >= 1 "
                                    "(slurmctld does not start without nodes)")

    def _ensure_started(self, model):
        changes = self._notes
        self._notes = []
        self._prepare_dirs(changes)
        base_port = self._base_port(model, changes)
        self._check_path_lengths(model)
        self._ensure_secrets(model, changes)
        configs = self._write_configs(model, base_port, changes)
        # health.json is read at each health check run: a change of it restarts nothing.
        slurm_hash = _digest(*["%s\n%s" % (k, v) for k, v in sorted(configs.items())
                               if k not in (c.SLURMDBD_CONF, c.HEALTH_CONFIG_FILE)])
        for name in install_health_programs(self.layout):
            changes.append("installed %s" % os.path.join(self.layout.bin, name))

        self._ensure_daemon("munged", self._munged_argv(), changes, digest=_digest(*self._munged_argv()),
                            ready=self._munge_ready, ports=())
        if model.accounting.enabled:
            self._ensure_accounting(base_port, configs, changes)
        else:
            for name in ("slurmdbd", "mariadbd"):
                if self._running(name):
                    self._stop_daemon(name)
                    changes.append("stopped %s (accounting disabled)" % name)
        self._ensure_daemon("slurmctld", [find_binary("slurmctld"), "-D"], changes, digest=slurm_hash,
                            ready=self._ctld_ready, ports=[base_port + CTLD_OFFSET])
        self._converge_nodes(model, slurm_hash, base_port, changes)
        self._ensure_login(model, base_port, changes)
        return {"changed": bool(changes), "changes": changes}

    def scale(self, replicas):
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

    def stop(self, purge=False):
        """Stop every process of this cluster (cancelling its jobs first); verify by pid that none is left.

        Only processes this cluster recorded (pid + start time) and their children are signalled, and only in a
        directory that is ours (ownership()); anything else fails before a signal. Keeps the state directory
        (configs, key, Slurm state, database) unless `purge`: then what the local backend created there is deleted,
        under the lock (purge_plan()). Returns {'changed': bool, 'stopped': [names]}.
        """
        stopped = []
        kind = self.ownership()
        if kind in ("absent", "empty"):
            # nothing of a cluster there (an empty folder without our marker is not ours to delete either)
            return {"changed": False, "stopped": stopped}
        if purge:
            self.purge_plan()                          # refuses before any signal
        with self._locked():
            stopped += self._notes
            self._notes = []
            self._stop_all(stopped)
            if purge:
                self.purge_plan()                      # again, under the lock
                stopped.append(self._purge())
        return {"changed": bool(stopped), "stopped": stopped}

    def ownership(self):
        """What `state_dir` is: 'absent', 'empty' (nothing but our lock file), 'marked' (it carries our marker) or
        'legacy' (made by a version before the marker: only our entries, our cluster.json and an etc/slurm.conf that
        adapt_configs wrote for this very path; it gets the marker on the next operation). Anything else - a folder
        without the marker, a parent of clusters, a Slurm install prefix - raises LocalClusterError: it is not ours."""
        path = self.layout.state_dir
        try:
            st = os.lstat(path)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return "absent"
            raise LocalClusterError("state_dir %s: %s" % (path, e))
        if stat.S_ISLNK(st.st_mode):
            raise LocalClusterError("state_dir %s is a symbolic link: pass the directory it points to" % path)
        if not stat.S_ISDIR(st.st_mode):
            raise LocalClusterError("state_dir %s is not a directory" % path)
        if read_marker(path) is not None:
            return "marked"
        if set(os.listdir(path)) <= {LOCK_FILE}:
            return "empty"
        if _legacy_state_dir(self.layout):
            return "legacy"
        raise LocalClusterError(
            "%s is not the state directory of a local cluster: it has no %s (the marker the local backend writes "
            "when it creates one) and is not a state directory of an earlier version (only the local backend's "
            "folders, its cluster.json and an etc/slurm.conf written for this path); nothing was stopped or deleted"
            % (path, MARKER))

    def purge_plan(self):
        """What purge would delete ([paths]); raises LocalClusterError (nothing deleted) where purge is refused: a
        directory that is not ours, or one holding another local cluster's state directory."""
        path = self.layout.state_dir
        kind = self.ownership()
        if kind == "absent":
            return []
        nested = _nested_markers(path)
        if nested:
            raise LocalClusterError("refusing to purge %s: it holds the state directory of other local clusters "
                                    "(%s); nothing was deleted" % (path, ", ".join(nested)))
        names = set(os.listdir(path))
        ours = [n for n in sorted(names) if n in STATE_ENTRIES or n in (MARKER, LOCK_FILE) or _TMP_ENTRY.match(n)]
        return [os.path.join(path, n) for n in ours]

    def _purge(self):
        """Delete what the local backend created (under the lock, processes stopped); the directory itself when
        nothing else is left in it. A link is removed, never followed."""
        path = self.layout.state_dir
        for entry in self.purge_plan():
            if os.path.basename(entry) not in (MARKER, LOCK_FILE):
                _remove_entry(entry)
        _remove_entry(os.path.join(path, MARKER))      # last but the lock: a half-done purge stays ours
        os.unlink(os.path.join(path, LOCK_FILE))       # we still hold it (our fd): a waiter sees it gone
        left = sorted(os.listdir(path))
        if left:
            return "purged %s (kept the directory: it also holds %s, which the local backend did not create)" % (
                path, ", ".join(left))
        os.rmdir(path)
        return "purged %s" % path

    def _stop_all(self, stopped):
        if self._stop_login():                         # sessions first: they may submit jobs
            stopped.append(LOGIN_DAEMON)
        if self._running("slurmctld"):
            self._cancel_all_jobs()
        for name in sorted(self._records()):
            if name.startswith("slurmd-"):
                if self._stop_daemon(name):
                    stopped.append(name)
        for name in ("slurmctld", "slurmdbd", "mariadbd", "munged"):
            if self._stop_daemon(name):
                stopped.append(name)
        for name in sorted(self._records()):          # anything else we ever recorded
            if self._stop_daemon(name):
                stopped.append(name)
        steps = self._step_daemons()                   # of jobs that could not be cancelled (no slurmctld)
        # their job's processes (children of a slurmstepd of ours) go with them, taken while it is verified alive
        family = [(child, _proc_start_time(child)) for pid, start, _path in steps for child in _descendants(pid)
                  if _pid_alive(pid, start)]
        self._stop_pids([(pid, start) for pid, start, _path in steps])
        self._stop_pids(family)
        stopped += ["slurmstepd[%d] (leftover of %s)" % (pid, os.path.basename(path)) for pid, _s, path in steps]
        alive = ["%s[%d]" % (comm, pid) for pid, comm in self.leftover_processes()]
        if alive:
            raise LocalClusterError("processes still running after stop: %s" % ", ".join(alive))

    @contextlib.contextmanager
    def _locked(self, create=False):
        """One operation at a time per state directory (two playbook runs must not start two slurmctlds), and only
        on a directory that is ours (ownership()). `create`: make the directory (with our marker) when there is
        none. Yields the lock's fd, or None when there is no state directory (and not `create`)."""
        lay = self.layout
        kind = self.ownership()
        if kind == "absent" and not create:
            yield None
            return
        if kind in ("absent", "empty") and create:
            self._check_not_nested()
            if kind == "absent":
                os.makedirs(lay.state_dir, 0o755)
                self._notes.append("created state directory %s" % lay.state_dir)
        lock = os.path.join(lay.state_dir, LOCK_FILE)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _flock(fd, max(self.timeout, self.drain_timeout) * 2, lock)
            try:
                same = os.fstat(fd).st_ino == os.lstat(lock).st_ino
            except OSError:
                same = False
            if not same:
                raise LocalClusterError("%s was purged by another operation meanwhile" % lay.state_dir)
            kind = self.ownership()                    # again, now that nobody else acts on it
            if kind == "legacy" or (kind == "empty" and create):
                self._write_marker(adopted=kind == "legacy")
                if kind == "legacy":
                    self._notes.append("marked %s as this cluster's state directory (made by an earlier version)"
                                       % lay.state_dir)
            yield fd
        finally:
            os.close(fd)

    def _check_not_nested(self):
        other = _marked_ancestor(self.layout.state_dir)
        if other is not None:
            raise LocalClusterError("state_dir %s is inside the state directory of the local cluster in %s"
                                    % (self.layout.state_dir, other))

    def plan_take(self):
        """ownership(), and for a new or empty folder the check ensure_started() makes before creating it (not inside
        another cluster's state directory); reads only, raises as a run would."""
        kind = self.ownership()
        if kind in ("absent", "empty"):
            self._check_not_nested()
        return kind

    def _write_marker(self, adopted=False):
        marker = {"kind": MARKER_KIND, "id": secrets.token_hex(16), "state_dir": self.layout.state_dir,
                  "cluster": self.model.name if self.model is not None else None, "adopted": adopted,
                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _atomic_write(os.path.join(self.layout.state_dir, MARKER), json.dumps(marker, indent=1) + "\n", 0o644)

    def status(self):
        """{'state_dir', 'processes': {name: {pid, running}}, 'nodes': [sinfo --json nodes] or None, 'env'}."""
        procs = {}
        for name, rec in sorted(self._records().items()):
            procs[name] = {"pid": rec["pid"], "running": _record_alive(rec)}
        nodes = None
        if procs.get("slurmctld", {}).get("running"):
            try:
                nodes = self.sinfo_nodes()
            except LocalClusterError:
                nodes = None
        return {"state_dir": self.layout.state_dir, "processes": procs, "nodes": nodes, "env": self.env(),
                "running": any(p["running"] for p in procs.values()), "login": self.login_address()}

    def wants_login(self):
        return self.jail_dir is not None and self.login

    def login_address(self):
        """{'host', 'port', 'user'} of the login sshd (when this cluster has one and its ports are chosen), else None."""
        if not self.wants_login() or not os.path.exists(self.layout.cluster_file):
            return None
        with open(self.layout.cluster_file) as f:
            base = json.load(f).get("base_port")
        return {"host": LOOPBACK, "port": base + LOGIN_OFFSET, "user": LOGIN_USER} if base else None

    def leftover_processes(self):
        """(pid, name) of this cluster's processes still alive (empty after stop()): the daemons it recorded and the
        slurmstepds listening on step sockets in its spool. Found by what we recorded and created, never by a
        command line or an open file."""
        found = [(r["pid"], n) for n, r in sorted(self._records().items()) if _record_alive(r)]
        found += [(pid, "slurmstepd") for pid, _start, _path in self._step_daemons()]
        return found

    def pid(self, name):
        rec = self._records().get(name)
        if rec and _record_alive(rec):
            return rec["pid"]
        return None

    def restart_node(self, node):
        """Restart the slurmd of `node` with the command and configuration it was started with: what replacing a
        worker pod is on Kubernetes (remediation). Returns {'node', 'old_pid', 'new_pid'}. The node keeps its Slurm
        state (a drain stays); the caller waits for the new slurmd to register."""
        name = "slurmd-%s" % node
        with self._locked():
            rec = self._records().get(name)
            if rec is None:
                raise LocalClusterError("no slurmd of node %s was started in %s" % (node, self.state_dir))
            old_pid = self.pid(name)
            self._stop_daemon(name)
            self._start_daemon(name, rec["argv"], rec.get("digest"), ready=None, ports=rec.get("ports") or ())
            return {"node": node, "old_pid": old_pid, "new_pid": self.pid(name)}

    # --- Slurm clients -----------------------------------------------------------------------------------------

    def run(self, argv, timeout=None, check=True, stdin_text=None):
        """Run a Slurm client command against this cluster; returns CompletedProcess (text)."""
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

    def sinfo_nodes(self):
        """Nodes as `sinfo --json` lists them (FUTURE nodes are not listed)."""
        proc = self.run([find_binary("sinfo"), "--json"], timeout=30)
        try:
            return json.loads(proc.stdout).get("nodes", [])
        except ValueError:
            raise LocalClusterError("sinfo --json printed no JSON: %s" % proc.stdout[:200])

    def jobs_on(self, nodes):
        """{node: [job ids]} of jobs running or completing on these nodes."""
        result = dict((n, []) for n in nodes)
        if not nodes:
            return result
        proc = self.run([find_binary("squeue"), "-h", "-t", "RUNNING,COMPLETING,SUSPENDED,CONFIGURING",
                         "-o", "%A %N", "-w", ",".join(nodes)], timeout=30)
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                for n in hostlist.expand(parts[1]):
                    if n in result:
                        result[n].append(parts[0])
        return result

    # --- pieces of ensure_started ------------------------------------------------------------------------------

    def _check_binaries(self, model):
        names = ["munged", "munge", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "scancel"]
        if model.accounting.enabled:
            names += ["slurmdbd", "mariadbd", "mariadb-install-db", "mariadb"]
        if self.wants_login():
            names += ["sshd", "unshare", "mount"]
        for name in names:
            find_binary(name)
        if self.wants_login():
            self._login_jail()                 # refused before anything starts
        if self.jail_dir is not None:
            plugin = self.spank_chroot or c.SPANK_CHROOT_PLUGIN
            if not os.path.isfile(plugin):
                raise LocalClusterError("chroot SPANK plugin %s not found: build it with `make spank` (or install it "
                                        "with `make -C images/spank_chroot install`)" % plugin)
            if os.getuid() != 0:
                raise LocalClusterError("a jail needs root: slurmd and slurmstepd mount the jail for each job step")

    def _prepare_dirs(self, changes):
        lay = self.layout
        for path, mode in ((lay.state_dir, 0o755), (lay.etc, 0o755), (lay.secrets, 0o700), (lay.run, 0o755),
                           (lay.log, 0o755), (lay.ctld_state, 0o700), (lay.spool, 0o755)):
            os.chmod(_own_dir(path, mode), mode)

    def _own_ports(self, model, base):
        """Ports this cluster's running daemons listen on: from their records, or for a record of an earlier
        version (no 'ports') from the block `base` they were started on."""
        fixed = {"slurmctld": CTLD_OFFSET, "slurmdbd": DBD_OFFSET, "mariadbd": DB_OFFSET, LOGIN_DAEMON: LOGIN_OFFSET}
        nodes = node_ports(model, base)
        ports = set()
        for name, rec in self._running_records().items():
            if "ports" in rec:
                ports.update(rec["ports"])
            elif name in fixed:
                ports.add(base + fixed[name])
            elif name.startswith("slurmd-") and name[len("slurmd-"):] in nodes:
                ports.add(nodes[name[len("slurmd-"):]])
        return ports

    def _running_records(self):
        return dict((n, r) for n, r in self._records().items() if _record_alive(r))

    def plan_ports(self, model):
        """(base port a run would use or None when it would choose one, [what it would do]); reads only. Raises
        like a run would when the stored block is no longer usable while the cluster runs."""
        saved = _saved_base(self.layout)
        base = self._requested_base_port or saved
        if base is None:
            return None, []
        claims = PortClaims(self.timeout).read()
        problems = block_problems(base, ports_needed(model), claims, self.layout.state_dir,
                                  self._own_ports(model, base) if base == saved else ())
        if not problems:
            return base, []
        self._refuse_block(base, model, problems)
        return None, ["would move the ports from %d to a free block: %s" % (base, "; ".join(problems))]

    def _refuse_block(self, base, model, problems):
        """A block with problems: an error for a requested base port, or while a daemon of this cluster runs (moving
        would restart everything under clients that use the ports); a stopped cluster moves to a new block."""
        block = "%d-%d" % (base, base + ports_needed(model) - 1)
        if self._requested_base_port:
            raise LocalClusterError("base_port %d cannot be used for %s (ports %s): %s"
                                    % (base, self.layout.state_dir, block, "; ".join(problems)))
        running = sorted(self._running_records())
        if running:
            raise LocalClusterError(
                "the ports of the local cluster in %s (%s) are no longer all its own: %s. Its daemons %s still run "
                "on them; stop it (state=absent / teardown.yml) and run it again: a stopped cluster moves to a free "
                "block" % (self.layout.state_dir, block, "; ".join(problems), ", ".join(running)))

    def _base_port(self, model, changes):
        """The cluster's block of ports, chosen and recorded under the machine-wide PortClaims lock: kept while it is
        still this cluster's alone (every port not held by our daemons binds, no other live claim overlaps); a
        stopped cluster whose block is taken moves to a free one (configs and daemons follow, as on any port change);
        a running one fails with the reason (_refuse_block)."""
        saved = _saved_base(self.layout)
        marker = read_marker(self.layout.state_dir)
        count = ports_needed(model)
        registry = PortClaims(self.timeout)
        with registry.locked():
            claims = registry.read()
            base = self._requested_base_port or saved
            if base is not None:
                problems = block_problems(base, count, claims, self.layout.state_dir,
                                          self._own_ports(model, base) if base == saved else ())
                if problems:
                    self._refuse_block(base, model, problems)
                    new = find_free_block(count, claims, self.layout.state_dir)
                    changes.append("moved the ports from %d to %d: %s" % (base, new, "; ".join(problems)))
                    base = new
            else:
                base = find_free_block(count, claims, self.layout.state_dir)
            claim = {"id": marker["id"], "base": base, "count": count}
            if claims.get(self.layout.state_dir) != claim:
                claims[self.layout.state_dir] = claim
                registry.write(claims)
            if saved != base:
                _atomic_write(self.layout.cluster_file, json.dumps({"base_port": base}, indent=1) + "\n")
                if saved is None:
                    changes.append("ports from %d" % base)
        return base

    def _check_path_lengths(self, model):
        longest = max([len(ns.node_name(max(ns.max_replicas - 1, 0))) for ns in model.node_sets] or [1])
        sock = len(self.layout.spool) + 2 + 2 * longest + len("_4294967295.4294967295")
        if sock > MAX_SOCKET_PATH:
            raise LocalClusterError(
                "state directory %s is too long: slurmstepd sockets under it would exceed %d bytes; use a shorter "
                "path (at most %d characters for these node names)"
                % (self.layout.state_dir, MAX_SOCKET_PATH, len(self.layout.state_dir) - (sock - MAX_SOCKET_PATH)))

    def _ensure_secrets(self, model, changes):
        lay = self.layout
        if not os.path.exists(lay.munge_key):
            _atomic_write(lay.munge_key, secrets.token_bytes(1024), 0o400)
            changes.append("generated munge key")
        if model.accounting.enabled and not os.path.exists(lay.db_password):
            _atomic_write(lay.db_password, secrets.token_urlsafe(24), 0o600)
            changes.append("generated database password")

    def _render(self, model):
        if self._renderer is not None:
            return self._renderer(model)
        from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
        return render_slurm_configs(model)

    def _write_configs(self, model, base_port, changes):
        password = None
        if model.accounting.enabled:
            with open(self.layout.db_password) as f:
                password = f.read().strip()
        configs = adapt_configs(self._render(model), model, self.layout.state_dir, base_port, user=self.user,
                                db_password=password, jail_dir=self.jail_dir, spank_chroot=self.spank_chroot)
        etc = self.layout.etc
        for name, text in sorted(configs.items()):
            path = os.path.join(etc, name)
            mode = 0o600 if name == c.SLURMDBD_CONF else 0o644
            old = None
            if os.path.exists(path):
                with open(path) as f:
                    old = f.read()
            if old != text:
                _atomic_write(path, text, mode)
                changes.append("%s %s" % ("updated" if old is not None else "wrote", name))
        for name in sorted(os.listdir(etc)):
            if name not in configs and not name.startswith("."):
                os.remove(os.path.join(etc, name))
                changes.append("removed %s" % name)
        return configs

    def _munged_argv(self):
        lay = self.layout
        argv = [find_binary("munged"), "--foreground", "--key-file=%s" % lay.munge_key,
                "--socket=%s" % lay.munge_socket, "--pid-file=%s" % os.path.join(lay.run, "munged.pid"),
                "--log-file=%s" % os.path.join(lay.log, "munged.log"), "--seed-file=%s" % lay.munge_seed]
        if not self._socket_path_open(lay.run):
            # munged refuses a socket whose directory path is not o+x all the way up (pytest's tmp dirs are 0700);
            # --force turns that into a warning. Nobody else can reach the socket then, which is fine here.
            argv.append("--force")
        return argv

    @staticmethod
    def _socket_path_open(path):
        while True:
            try:
                if not os.stat(path).st_mode & stat.S_IXOTH:
                    return False
            except OSError:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent

    def _munge_ready(self):
        if not os.path.exists(self.layout.munge_socket):
            return False
        try:
            proc = subprocess.run([find_binary("munge"), "--socket=%s" % self.layout.munge_socket, "-n"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    def _ctld_ready(self):
        try:
            proc = self.run([find_binary("scontrol"), "ping"], timeout=15, check=False)
        except LocalClusterError:
            return False
        return proc.returncode == 0 and "is UP" in proc.stdout

    # --- accounting --------------------------------------------------------------------------------------------

    def _mariadb_argv(self, base_port):
        lay = self.layout
        argv = [find_binary("mariadbd"), "--no-defaults", "--datadir=%s" % lay.db, "--socket=%s" % lay.db_socket,
                "--port=%d" % (base_port + DB_OFFSET), "--bind-address=%s" % LOOPBACK,
                "--pid-file=%s" % os.path.join(lay.run, "mariadbd.pid"),
                "--log-error=%s" % os.path.join(lay.log, "mariadbd.log"), "--skip-name-resolve",
                # the values slurmdbd recommends (it logs an error for less)
                "--innodb-buffer-pool-size=128M", "--innodb-lock-wait-timeout=900", "--max-connections=64"]
        if os.getuid() == 0:
            argv.append("--user=root")
        return argv

    def _db_ready(self):
        if not os.path.exists(self.layout.db_socket):
            return False
        proc = subprocess.run([find_binary("mariadb"), "--no-defaults", "--socket=%s" % self.layout.db_socket,
                               "-u", self._db_admin(), "-e", "SELECT 1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15, check=False)
        return proc.returncode == 0

    def _db_admin(self):
        return "root" if os.getuid() == 0 else self.user

    def _ensure_accounting(self, base_port, configs, changes):
        lay = self.layout
        if not os.path.isdir(os.path.join(lay.db, "mysql")):
            if _is_real_dir(lay.db):          # a half-made database of ours; a link there fails in _own_dir
                shutil.rmtree(lay.db)
            _own_dir(lay.db, 0o700)
            argv = [find_binary("mariadb-install-db"), "--no-defaults", "--datadir=%s" % lay.db,
                    "--auth-root-authentication-method=socket", "--skip-test-db"]
            argv += ["--user=root"] if os.getuid() == 0 else ["--auth-root-socket-user=%s" % self.user]
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                  timeout=max(self.timeout, 120), check=False)
            if proc.returncode != 0:
                raise LocalClusterError("mariadb-install-db failed: %s" % proc.stdout[-2000:])
            changes.append("initialized the accounting database")
        self._ensure_daemon("mariadbd", self._mariadb_argv(base_port), changes,
                            digest=_digest(*self._mariadb_argv(base_port)), ready=self._db_ready,
                            ports=[base_port + DB_OFFSET])
        with open(lay.db_password) as f:
            password = f.read().strip()
        marker = os.path.join(lay.db, ".soperator-user")
        user_digest = _digest(password)
        current = None
        if os.path.exists(marker):
            with open(marker) as f:
                current = f.read().strip()
        if current != user_digest:
            sql = ("CREATE DATABASE IF NOT EXISTS {db};"
                   "CREATE USER IF NOT EXISTS '{u}'@'127.0.0.1' IDENTIFIED BY '{p}';"
                   "CREATE USER IF NOT EXISTS '{u}'@'localhost' IDENTIFIED BY '{p}';"
                   "ALTER USER '{u}'@'127.0.0.1' IDENTIFIED BY '{p}';"
                   "ALTER USER '{u}'@'localhost' IDENTIFIED BY '{p}';"
                   "GRANT ALL ON {db}.* TO '{u}'@'127.0.0.1';"
                   "GRANT ALL ON {db}.* TO '{u}'@'localhost';"
                   "FLUSH PRIVILEGES;").format(db=DB_NAME, u=DB_USER, p=password)
            proc = subprocess.run([find_binary("mariadb"), "--no-defaults", "--socket=%s" % lay.db_socket,
                                   "-u", self._db_admin()], input=sql, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
            if proc.returncode != 0:
                # the error text holds no password: mariadb reports the statement's position, not its text
                raise LocalClusterError("creating the accounting database user failed (rc %d)" % proc.returncode)
            _atomic_write(marker, user_digest, 0o600)
            changes.append("created the accounting database user")
        self._ensure_daemon("slurmdbd", [find_binary("slurmdbd"), "-D"], changes,
                            digest=_digest(configs[c.SLURMDBD_CONF]), ready=lambda: self._dbd_ready(base_port),
                            ports=[base_port + DBD_OFFSET])
        self._ensure_cluster_registered(changes)

    def _dbd_ready(self, base_port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect((LOOPBACK, base_port + DBD_OFFSET))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _ensure_cluster_registered(self, changes):
        """slurmctld registers its cluster itself on start; done here too so it exists before slurmctld starts."""
        sacctmgr = shutil.which("sacctmgr") or "/usr/bin/sacctmgr"
        if not os.path.exists(sacctmgr):
            return
        proc = self.run([sacctmgr, "-n", "-P", "list", "cluster", "format=cluster"], timeout=30, check=False)
        if proc.returncode == 0 and self.model.name in proc.stdout.split():
            return
        self.run([sacctmgr, "-i", "add", "cluster", self.model.name], timeout=30, check=False)
        changes.append("registered cluster %s in accounting" % self.model.name)

    # --- login -------------------------------------------------------------------------------------------------

    def _ensure_login(self, model, base_port, changes):
        if not self.wants_login():
            if self._stop_login():
                changes.append("stopped %s (no jail or login off)" % LOGIN_DAEMON)
            return
        lay = self.layout
        jail = self._login_jail()
        _own_dir(lay.login)
        _own_dir(lay.authorized_keys)
        self._ensure_host_keys(model, changes)
        if self._write_if_changed(os.path.join(lay.authorized_keys, LOGIN_USER), self._root_keys(model), 0o644):
            changes.append("wrote the login's authorized keys of %s" % LOGIN_USER)
        config = render_login_sshd_config(jail, lay, base_port)
        if self._write_if_changed(lay.sshd_config, config, 0o644):
            changes.append("wrote the login's sshd_config")
        sshd = find_binary("sshd")
        # sshd's privilege separation directory (compiled in; Debian's service creates it at boot).
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        proc = subprocess.run([sshd, "-t", "-f", lay.sshd_config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=30, check=False)
        if proc.returncode != 0:
            raise LocalClusterError("sshd -t rejects %s: %s" % (lay.sshd_config, proc.stdout.strip()))
        binds = login_binds(lay)
        for point in ["/dev", "/proc"] + binds:
            _jail_mount_point(jail, point)
        argv = self._login_argv(sshd, lay.sshd_config, jail, binds)
        self._ensure_daemon(LOGIN_DAEMON, argv, changes, digest=_digest(config, *argv),
                            ready=lambda: self._login_ready(base_port + LOGIN_OFFSET),
                            ports=[base_port + LOGIN_OFFSET])

    def plan_login(self, model):
        """What ensure_started() would do about the login sshd, as 'would ...' actions. Reads only."""
        lay = self.layout
        running = self._running(LOGIN_DAEMON)
        if not self.wants_login():
            return ["would stop %s (no jail or login off)" % LOGIN_DAEMON] if running else []
        actions = []
        jail = os.path.normpath(self.jail_dir)
        if os.path.isdir(jail):
            self._login_jail()
        else:
            # In a check run an earlier task (jail_populate) may be what makes it: judge the directories it has.
            bad = unsafe_path_components(jail)
            if bad:
                raise LocalClusterError("the login sshd cannot chroot into %s: not so: %s (owned by root, not "
                                        "writable by group or others)" % (jail, ", ".join(bad)))
            actions.append("the jail %s does not exist yet; it must when the cluster starts" % jail)
        from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
        if not all(os.path.exists(os.path.join(lay.ssh_host_keys, k)) for k in s.SSH_HOST_KEY_FILES):
            actions.append("would generate the login's SSH host keys")
        if _read_text(os.path.join(lay.authorized_keys, LOGIN_USER)) != self._root_keys(model):
            actions.append("would write the login's authorized keys of %s" % LOGIN_USER)
        address = self.login_address()
        if address is None:
            return actions + ["would write the login's sshd_config", "would start %s" % LOGIN_DAEMON]
        config = render_login_sshd_config(jail, lay, address["port"] - LOGIN_OFFSET)
        if _read_text(lay.sshd_config) != config:
            actions.append("would write the login's sshd_config")
        if not running:
            return actions + ["would start %s" % LOGIN_DAEMON]
        argv = self._login_argv(find_binary("sshd"), lay.sshd_config, jail, login_binds(lay))
        if self._records()[LOGIN_DAEMON].get("digest") != _digest(config, *argv):
            actions.append("would restart %s (configuration changed)" % LOGIN_DAEMON)
        return actions

    def _login_jail(self):
        jail = os.path.normpath(self.jail_dir)
        if not os.path.isdir(jail):
            raise LocalClusterError("the login sshd cannot chroot into %s: no such directory" % jail)
        bad = unsafe_path_components(jail)
        if bad:
            raise LocalClusterError("the login sshd cannot chroot into %s: every directory of its path must be owned "
                                    "by root and not writable by group or others (sshd's ChrootDirectory rule); "
                                    "not so: %s" % (jail, ", ".join(bad)))
        return jail

    def _root_keys(self, model):
        return "".join(k.strip() + "\n" for k in tuple(model.login.ssh_root_public_keys) + self.login_authorized_keys)

    @staticmethod
    def _login_argv(sshd, config, jail, binds):
        """sshd in a mount namespace of its own: the jail's /dev, /proc and the binds exist only there."""
        return [find_binary("unshare"), "--mount", "--propagation", "private", sys.executable, "-c",
                _LOGIN_NAMESPACE_PROGRAM, jail, find_binary("mount"), sshd, config] + list(binds)

    def _ensure_host_keys(self, model, changes):
        """The login's SSH host keys: generated once (secrets.py, as the Kubernetes Secret), then kept."""
        from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
        lay = self.layout
        name = s.ssh_host_keys_secret_name(model)
        existing = {}
        for key in s.SSH_HOST_KEY_FILES:
            path = os.path.join(lay.ssh_host_keys, key)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    existing[key] = f.read()
        if len(existing) == len(s.SSH_HOST_KEY_FILES):
            return
        material, generated = s.ensure_secret_material(model, {name: existing})
        for key, value in material[name].items():
            if key not in existing:
                _atomic_write(os.path.join(lay.ssh_host_keys, key), value, 0o644 if key.endswith(".pub") else 0o600)
        if name in generated:
            changes.append("generated the login's SSH host keys")

    @staticmethod
    def _write_if_changed(path, text, mode):
        if os.path.exists(path):
            with open(path) as f:
                if f.read() == text and stat.S_IMODE(os.stat(path).st_mode) == mode:
                    return False
        _atomic_write(path, text, mode)
        return True

    def _login_ready(self, port):
        """sshd answers with its banner."""
        try:
            with socket.create_connection((LOOPBACK, port), timeout=2) as conn:
                return conn.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def _stop_login(self):
        """Stop the login sshd and its sessions (sshd leaves running sessions alone; _stop_daemon stops the
        children it had). True if it ran."""
        return self._stop_daemon(LOGIN_DAEMON)

    # --- nodes -------------------------------------------------------------------------------------------------

    def _ctld_instance(self):
        """[pid, start time] of the running slurmctld, or None."""
        rec = self._records().get("slurmctld")
        if rec and _record_alive(rec):
            return [rec["pid"], rec.get("start_time")]
        return None

    def slurmds_behind(self):
        """Running slurmds started before the running slurmctld (or while none ran). A slurmd registers once, when it
        starts: a slurmctld started after it - e.g. after one that refused its configuration - keeps its node FUTURE
        until the slurmd starts again. ensure_started() restarts these; their jobs' slurmstepds keep running."""
        ctld = self._ctld_instance()
        return sorted((n for n, r in self._running_records().items()
                       if n.startswith("slurmd-") and (ctld is None or r.get("ctld") != ctld)), key=_natural)

    def _converge_nodes(self, model, slurm_hash, base_port, changes):
        lay = self.layout
        desired = [ns.node_name(i) for ns in model.node_sets for i in range(ns.replicas)]
        all_nodes = set(ns.node_name(i) for ns in model.node_sets for i in range(ns.max_replicas))
        records = self._records()
        running = set(n[len("slurmd-"):] for n, r in records.items()
                      if n.startswith("slurmd-") and _record_alive(r))
        ports = node_ports(model, base_port)
        behind = set(self.slurmds_behind())
        # 1. workers to have: start missing slurmds, restart those on an old configuration or registered with an
        #    earlier slurmctld.
        for node in desired:
            _own_dir(lay.node_spool(node))
            name = "slurmd-%s" % node
            self._ensure_daemon(name, [find_binary("slurmd"), "-D", "-N", node], changes, digest=slurm_hash,
                                ready=None, ports=[ports[node]],
                                stale="slurmctld restarted: the node registers again" if name in behind else None)
        # 2. nodes to remove: running slurmds not wanted, and nodes slurmctld still lists (recovered state).
        visible = dict((n["name"], n) for n in self.sinfo_nodes())
        remove = sorted((running | set(visible)) - set(desired), key=_natural)
        if remove:
            self._scale_down(remove, visible, changes)
        # Records of nodes that left the model entirely.
        for name in list(self._records()):
            if name.startswith("slurmd-") and name[len("slurmd-"):] not in all_nodes:
                self._stop_daemon(name)
        # 3. wait until every wanted node answers; undrain ours left over from an unfinished scale-down.
        self._wait_nodes_up(desired, changes)

    def _scale_down(self, nodes, visible, changes):
        prefix = self.model.remediation.drain_reason_prefix
        reason = "%s %s" % (prefix, SCALE_DOWN_REASON) if prefix else SCALE_DOWN_REASON
        scontrol = find_binary("scontrol")
        to_drain = [n for n in nodes if n in visible and not _drained(visible[n])]
        if to_drain:
            self.run([scontrol, "update", "nodename=%s" % hostlist.compress(to_drain), "state=DRAIN",
                      "reason=%s" % reason])
            changes.append("drained %s" % hostlist.compress(to_drain))
        watched = [n for n in nodes if n in visible]
        deadline = time.time() + self.drain_timeout
        busy = self.jobs_on(watched)
        while any(busy.values()):
            if time.time() > deadline:
                left = dict((n, j) for n, j in busy.items() if j)
                raise LocalClusterError(
                    "scale-down: nodes still run jobs after %ss (they stay drained; run again to finish): %s"
                    % (self.drain_timeout, ", ".join("%s (jobs %s)" % (n, ",".join(j))
                                                     for n, j in sorted(left.items()))))
            time.sleep(1)
            busy = self.jobs_on(watched)
        for node in nodes:
            if self._stop_daemon("slurmd-%s" % node):
                changes.append("stopped slurmd %s" % node)
        if watched:
            self.run([scontrol, "update", "nodename=%s" % hostlist.compress(watched), "state=FUTURE"])
            changes.append("removed %s from Slurm (FUTURE)" % hostlist.compress(watched))
            deadline = time.time() + self.timeout
            while True:
                still = [n["name"] for n in self.sinfo_nodes() if n["name"] in watched]
                if not still:
                    break
                if time.time() > deadline:
                    raise LocalClusterError("nodes still listed by sinfo after scale-down: %s" % ", ".join(still))
                time.sleep(0.5)

    def _wait_nodes_up(self, desired, changes):
        if not desired:
            return
        prefix = self.model.remediation.drain_reason_prefix
        ours = "%s %s" % (prefix, SCALE_DOWN_REASON) if prefix else SCALE_DOWN_REASON
        scontrol = find_binary("scontrol")
        deadline = time.time() + self.timeout
        resumed = set()
        while True:
            nodes = dict((n["name"], n) for n in self.sinfo_nodes())
            pending = []
            for name in desired:
                node = nodes.get(name)
                if node is None or not _responding(node):
                    pending.append(name)
                    continue
                if _drained(node) and node.get("reason") == ours and name not in resumed:
                    self.run([scontrol, "update", "nodename=%s" % name, "state=RESUME"])
                    resumed.add(name)
                    changes.append("resumed %s (left drained by an unfinished scale-down)" % name)
                    pending.append(name)
            if not pending:
                return
            for name in pending:
                if not self._running("slurmd-%s" % name):
                    raise LocalClusterError("slurmd %s exited:\n%s"
                                            % (name, _tail(os.path.join(self.layout.log, "slurmd-%s.log" % name))))
            if time.time() > deadline:
                raise LocalClusterError("nodes not up after %ss: %s\n%s" % (
                    self.timeout, ", ".join(pending),
                    "\n".join("%s: %s %s" % (n, nodes[n].get("state"), nodes[n].get("state_flags"))
                              for n in pending if n in nodes)))
            time.sleep(0.5)

    # --- daemon bookkeeping ------------------------------------------------------------------------------------

    def _records(self):
        out = {}
        try:
            names = os.listdir(self.layout.run)
        except OSError:
            return out
        for fn in names:
            if fn.endswith(".proc.json"):
                try:
                    with open(os.path.join(self.layout.run, fn)) as f:
                        out[fn[:-len(".proc.json")]] = json.load(f)
                except (IOError, OSError, ValueError):
                    continue
        return out

    def _running(self, name):
        return self.pid(name) is not None

    def _ensure_daemon(self, name, argv, changes, digest, ready, ports, stale=None):
        """Start `name` unless it runs with the same digest (configuration); restart it when the digest changed or
        `stale` (the reason) says it must. Returns True when it was (re)started.
        """
        rec = self._records().get(name)
        if rec and _record_alive(rec):
            if rec.get("digest") == digest and not stale:
                return False
            self._stop_daemon(name)
            changes.append("restarted %s (%s)" % (name, "configuration changed" if rec.get("digest") != digest
                                                  else stale))
        else:
            changes.append("started %s" % name)
        self._start_daemon(name, argv, digest, ready, ports)
        return True

    def _start_daemon(self, name, argv, digest, ready, ports=()):
        lay = self.layout
        held = [p for p in ports if not _port_free(p)]
        if held:
            raise LocalClusterError("cannot start %s of %s: port %s on %s is in use by another process (not a daemon "
                                    "of this cluster)" % (name, lay.state_dir, ", ".join(map(str, held)), LOOPBACK))
        extra = {"ports": list(ports)}
        if name.startswith("slurmd-"):
            extra["ctld"] = self._ctld_instance()       # the slurmctld it registers with (slurmds_behind)
        env = dict(os.environ)
        env.update(self.env())
        out_path = os.path.join(lay.log, "%s.out" % name)
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise LocalClusterError("%s is a symbolic link: not writing through it" % out_path)
            raise
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, cwd=lay.state_dir, close_fds=True, start_new_session=True)
        self._children[proc.pid] = proc
        start_time = None
        for dummy in range(100):
            start_time = _proc_start_time(proc.pid)
            if start_time is not None or proc.poll() is not None:
                break
            time.sleep(0.01)
        record = {"pid": proc.pid, "start_time": start_time, "argv": argv, "digest": digest}
        record.update(extra)
        _atomic_write(lay.record(name), json.dumps(record) + "\n")
        if ready is None:
            time.sleep(0.05)
            if proc.poll() is not None:
                raise LocalClusterError("%s exited at once (rc %s):\n%s"
                                        % (name, proc.returncode, self._logs_of(name)))
            return
        deadline = time.time() + self.timeout
        while not ready():
            if proc.poll() is not None:
                raise LocalClusterError("%s exited (rc %s) while starting:\n%s" % (name, proc.returncode,
                                                                                   self._logs_of(name)))
            if time.time() > deadline:
                raise LocalClusterError("%s not ready after %ss:\n%s" % (name, self.timeout, self._logs_of(name)))
            time.sleep(0.2)

    def _logs_of(self, name):
        lay = self.layout
        logs = [os.path.join(lay.log, "%s.out" % name)]
        base = name.split("-", 1)
        if base[0] == "slurmd" and len(base) == 2:
            logs.append(os.path.join(lay.log, "slurmd-%s.log" % base[1]))
        else:
            logs.append(os.path.join(lay.log, "%s.log" % name))
        return "\n".join("== %s\n%s" % (p, _tail(p)) for p in logs if os.path.exists(p))

    def _stop_daemon(self, name, sig=signal.SIGTERM):
        """Stop a recorded daemon (SIGTERM, then SIGKILL after the timeout); drop its record. True if it ran."""
        path = self.layout.record(name)
        rec = self._records().get(name)
        if rec is None:
            return False
        pid, start = rec["pid"], rec.get("start_time")
        if start is None:
            # no start time was recorded: nothing proves the pid is still ours, so it is never signalled
            was_alive = False
        else:
            was_alive = _pid_alive(pid, start)
        if was_alive:
            # Its children (slurmscriptd, login sessions, helpers) are ours too: taken with their start times while
            # it is verified alive; those that outlive it are stopped after it.
            family = [(child, _proc_start_time(child)) for child in _descendants(pid)]
            family = [(child, t) for child, t in family if t is not None and _pid_alive(pid, start)]
            self._signal(pid, sig)
            if not self._wait_gone(pid, start, self.timeout):
                self._signal(pid, signal.SIGKILL)
                if not self._wait_gone(pid, start, 10):
                    raise LocalClusterError("%s (pid %d) does not exit even on SIGKILL" % (name, pid))
            self._stop_pids(family)
        try:
            os.remove(path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
        return was_alive

    @staticmethod
    def _signal(pid, sig):
        try:
            os.kill(pid, sig)
        except OSError as e:
            if e.errno != errno.ESRCH:
                raise

    def _wait_gone(self, pid, start, timeout):
        deadline = time.time() + timeout
        while True:
            child = self._children.get(pid)
            if child is not None and child.poll() is not None:
                self._children.pop(pid, None)
            if not _pid_alive(pid, start):
                return True
            if time.time() > deadline:
                return False
            time.sleep(0.05)

    def _cancel_all_jobs(self):
        try:
            proc = self.run([find_binary("squeue"), "-h", "-o", "%A"], timeout=30, check=False)
            jobs = proc.stdout.split() if proc.returncode == 0 else []
            if not jobs:
                return
            self.run([find_binary("scancel")] + jobs, timeout=30, check=False)
            deadline = time.time() + min(self.timeout, 60)
            while time.time() < deadline:
                proc = self.run([find_binary("squeue"), "-h", "-o", "%A"], timeout=30, check=False)
                if proc.returncode != 0 or not proc.stdout.split():
                    return
                time.sleep(0.5)
        except LocalClusterError:
            return

    def _stop_pids(self, procs):
        """SIGTERM, then SIGKILL after 10s, the (pid, start time) still alive with that start time."""
        procs = [(pid, t) for pid, t in procs if t is not None and _pid_alive(pid, t)]
        for pid, t in procs:
            if _pid_alive(pid, t):
                self._signal(pid, signal.SIGTERM)
        for pid, t in procs:
            if not self._wait_gone(pid, t, 10) and _pid_alive(pid, t):
                self._signal(pid, signal.SIGKILL)
                self._wait_gone(pid, t, 10)

    def _step_daemons(self):
        """(pid, start time, socket) of the slurmstepds of this cluster's jobs: the processes of our user listening
        on the step sockets (<node>_<job>.<step>) in this cluster's spool directories (SO_PEERCRED)."""
        found = []
        spool = self.layout.spool
        try:
            nodes = sorted(os.listdir(spool))
        except OSError:
            return found
        for node in nodes:
            directory = os.path.join(spool, node)
            if not _is_real_dir(directory):
                continue
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            for name in names:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not stat.S_ISSOCK(st.st_mode) or not name.startswith(node + "_"):
                    continue
                peer = _socket_peer(path)
                if peer is None or peer[1] != os.geteuid():
                    continue
                start = _proc_start_time(peer[0])
                comm = _read_text("/proc/%d/comm" % peer[0]) or ""
                if start is not None and comm.startswith("slurmstepd"):
                    found.append((peer[0], start, path))
        return found


# ------------------------------------------------------------------------------------------------ node states

def _flags(node):
    return set(f.upper() for f in (node.get("state_flags") or []))


def _drained(node):
    return "DRAIN" in _flags(node) or node.get("state", "").lower().startswith("drain")


def _responding(node):
    state = (node.get("state") or "").lower()
    return state not in ("down", "future", "unknown") and "NOT_RESPONDING" not in _flags(node)


def _natural(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
