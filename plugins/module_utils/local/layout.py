# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a local cluster lives: its state directory's layout, its port offsets and the names it uses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import re

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

DEFAULT_BASE_PORT = 17817
LOOPBACK = "127.0.0.1"
LOCAL_HOST = "localhost"
# Offsets from the base port. slurmd ports follow, one per possible node (max_replicas of every NodeSet).
CTLD_OFFSET, DBD_OFFSET, DB_OFFSET, SLURMD_OFFSET = 0, 1, 2, 10
LOGIN_OFFSET = 3                    # the login sshd (with a jail)
REST_OFFSET = 4                     # slurmrestd (spec.rest)
REST_DAEMON = "slurmrestd"
LOGIN_DAEMON = "sshd"
EXPORTER_DAEMON = "exporter"
# Daemons whose log is what they write to stderr (munged in the foreground, sshd -e, the exporter): their standard
# output and error go to log/<name>.log. The others write log/<name>.log themselves (slurm.conf's SlurmctldLogFile and
# SlurmdLogFile, slurmdbd.conf's LogFile, mariadbd --log-error; local/configs.py) and their standard output and error,
# what a daemon prints before its log is open, go to log/<name>.out.
STDERR_LOGGERS = ("munged", LOGIN_DAEMON, EXPORTER_DAEMON, REST_DAEMON)
LOGIN_USER = "root"                 # the user the cluster's keys (login.sshRootPublicKeys) are for
# Local replacements of plugins that need what a laptop or CI box does not give: see local/configs.py.
LOCAL_PROCTRACK = "proctrack/linuxproc"
LOCAL_TASK_PLUGIN = "task/none"
LOCAL_JOBACCT = "jobacct_gather/linux"
# sun_path holds 108 bytes; slurmstepd puts `<node>_<jobid>.<stepid>` sockets into the node's spool directory.
MAX_SOCKET_PATH = 107
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"

# The marker that makes a directory a local cluster's state directory: written when LocalCluster creates it. Only a
# directory with it (or an earlier version's directory that proves it is one, see LocalCluster.ownership) is stopped
# or purged.
MARKER = ".soperator-local-cluster.json"
MARKER_KIND = "soperator.slurm/local-cluster"
LOCK_FILE = ".lock"
# What LocalCluster creates in a state directory; purge removes these (and the marker, the lock) and nothing else.
STATE_ENTRIES = ("etc", "bin", "lib", "secrets", "run", "log", "ctld", "spool", "db", "login", "checks", "status",
                 "cluster.json")
_TMP_ENTRY = re.compile(r"\A(cluster\.json|%s)\.tmp\.\d+\Z" % re.escape(MARKER))
# Paths written into slurm.conf, plugstack.conf, slurmdbd.conf and the health-check shell wrapper: a character
# outside this set could split a line or a word (space, newline, '#', '=', ',', ':'), be expanded by Slurm ('%') or
# the shell ('$', quotes, backslash).
_SAFE_PATH = re.compile(r"\A/[A-Za-z0-9_./+@-]*\Z")


class LocalClusterError(SoperatorError, RuntimeError):
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


class Layout:
    """Every path of a local cluster, all under one state directory."""

    def __init__(self, state_dir):
        self.state_dir = os.path.abspath(state_dir)

        def j(*parts):
            return os.path.join(self.state_dir, *parts)
        self.etc = j("etc")                        # rendered + adapted configs (SLURM_CONF lives here)
        self.bin = j("bin")                        # the node programs (install_node_programs)
        self.secrets = j("secrets")                # munge key, DB password, munged seed (0700)
        self.run = j("run")                        # sockets, pid files, process records (0755: munged wants o+x)
        self.log = j("log")
        self.ctld_state = j("ctld")                # StateSaveLocation
        self.spool = j("spool")                    # SlurmdSpoolDir=spool/%n
        self.db = j("db")                          # MariaDB data directory
        self.login = j("login")                    # login sshd: sshd_config, authorized-keys/<user>
        self.cluster_file = j("cluster.json")      # ports, chosen once and kept
        self.status = j("status")                  # last health check results, remediation record (the exporter's)
        self.slurm_conf = os.path.join(self.etc, "slurm.conf")
        self.munge_key = os.path.join(self.secrets, "munge.key")
        self.munge_seed = os.path.join(self.secrets, "munged.seed")
        self.db_password = os.path.join(self.secrets, "db-password")
        self.jwt_key = os.path.join(self.secrets, "jwt_hs256.key")    # spec.rest's token key
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

    def output(self, name):
        """Where daemon `name`'s standard output and error go."""
        return os.path.join(self.log, "%s.%s" % (name, "log" if name in STDERR_LOGGERS else "out"))

    def log_file(self, name):
        """Where daemon `name` (munged, slurmctld, slurmd-<node>, slurmdbd, mariadbd, sshd, exporter) logs."""
        return os.path.join(self.log, "%s.log" % name)


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


def _current_user():
    return pwd.getpwuid(os.getuid()).pw_name
