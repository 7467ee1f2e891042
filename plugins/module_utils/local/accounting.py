# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Accounting for a local cluster: a private MariaDB on loopback, its database and user, slurmdbd, and the
cluster registered in it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import socket
import subprocess
from typing import Any, Callable, List, Mapping

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c, files
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    DBD_OFFSET,
    DB_NAME,
    DB_OFFSET,
    DB_USER,
    LOOPBACK,
    Layout,
    LocalClusterError)
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import _digest
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import Daemons, find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import (
    _is_real_dir, _own_dir, current_text, read_secret)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmError, SlurmRunner


class Accounting(object):
    """A local cluster's accounting: its private MariaDB (run as `user`'s socket-authenticated admin unless root)
    and slurmdbd, started through `daemons` (local/processes.py Daemons); `slurm` gives the cluster's Slurm runner
    (sacctmgr). `timeout` bounds mariadb-install-db (at least 120 s)."""

    def __init__(self, layout: Layout, user: str, timeout: float, daemons: Daemons,
                 slurm: Callable[[], SlurmRunner]) -> None:
        self.layout = layout
        self.user = user
        self.timeout = timeout
        self.daemons = daemons
        self.slurm = slurm

    def _install_db(self, attempts=2):
        """mariadb-install-db into an empty database folder of ours, tried again once from an empty folder: its
        bootstrap server has crashed here (a segmentation fault under a loaded CI run) where the same command then
        worked. A failure that repeats is reported with the end of each attempt's output."""
        lay = self.layout
        argv = [find_binary("mariadb-install-db"), "--no-defaults", "--datadir=%s" % lay.db,
                "--auth-root-authentication-method=socket", "--skip-test-db"]
        argv += ["--user=root"] if os.getuid() == 0 else ["--auth-root-socket-user=%s" % self.user]
        outputs = []
        for _attempt in range(attempts):
            if _is_real_dir(lay.db):          # a half-made database of ours; a link there fails in _own_dir
                shutil.rmtree(lay.db)
            _own_dir(lay.db, 0o700)
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                  timeout=max(self.timeout, 120), check=False)
            if proc.returncode == 0:
                return
            outputs.append("attempt %d (exit %d): %s" % (len(outputs) + 1, proc.returncode, proc.stdout[-2000:]))
        raise LocalClusterError("mariadb-install-db failed: %s" % "\n".join(outputs))

    def _mariadb_argv(self, base_port):
        lay = self.layout
        argv = [find_binary("mariadbd"), "--no-defaults", "--datadir=%s" % lay.db, "--socket=%s" % lay.db_socket,
                "--port=%d" % (base_port + DB_OFFSET), "--bind-address=%s" % LOOPBACK,
                "--pid-file=%s" % os.path.join(lay.run, "mariadbd.pid"),
                "--log-error=%s" % lay.log_file("mariadbd"), "--skip-name-resolve",
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

    def ensure_off(self, changes: List[str]) -> None:
        """Accounting disabled: stop slurmdbd and MariaDB when they run (the database stays)."""
        for name in ("slurmdbd", "mariadbd"):
            if self.daemons.running(name):
                self.daemons.stop(name)
                changes.append("stopped %s (accounting disabled)" % name)

    def ensure(self, model: Any, base_port: int, configs: Mapping[str, str], changes: List[str]) -> None:
        """MariaDB initialized and running, the database user, slurmdbd on `configs`' slurmdbd.conf, and the cluster
        of `model` registered."""
        lay = self.layout
        if not os.path.isdir(os.path.join(lay.db, "mysql")):
            self._install_db()
            changes.append("initialized the accounting database")
        self.daemons.ensure("mariadbd", self._mariadb_argv(base_port), changes,
                            digest=_digest(*self._mariadb_argv(base_port)), ready=self._db_ready,
                            ports=[base_port + DB_OFFSET])
        password = read_secret(lay.db_password)
        marker = os.path.join(lay.db, ".soperator-user")
        user_digest = _digest(password)
        if (current_text(marker) or "").strip() != user_digest:
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
            files.atomic_write(marker, user_digest, 0o600)
            changes.append("created the accounting database user")
        self.daemons.ensure("slurmdbd", [find_binary("slurmdbd"), "-D"], changes,
                            digest=_digest(configs[c.SLURMDBD_CONF]), ready=lambda: self._dbd_ready(base_port),
                            ports=[base_port + DBD_OFFSET])
        self._ensure_cluster_registered(model.name, changes)

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

    def _ensure_cluster_registered(self, cluster, changes):
        """slurmctld registers its cluster itself on start; done here too so it exists before slurmctld starts."""
        sacctmgr = shutil.which("sacctmgr") or "/usr/bin/sacctmgr"
        if not os.path.exists(sacctmgr):
            return
        runner = self.slurm()
        try:
            listed = runner.run([sacctmgr, "-n", "-P", "list", "cluster", "format=cluster"], check=False)[0]
            if listed.rc == 0 and cluster in listed.stdout.split():
                return
            runner.run([sacctmgr, "-i", "add", "cluster", cluster], check=False)
        except SlurmError as e:
            raise LocalClusterError("cannot register cluster %s in accounting: %s" % (cluster, e))
        changes.append("registered cluster %s in accounting" % cluster)
