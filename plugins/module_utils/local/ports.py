# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The loopback ports of local clusters: one block per cluster, claimed machine-wide under a lock, so two clusters
(or two test runs) never pick the same ports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import socket
import stat
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils import files
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    CTLD_OFFSET,
    DBD_OFFSET,
    DB_OFFSET,
    DEFAULT_BASE_PORT,
    LOGIN_DAEMON,
    LOGIN_OFFSET,
    LOOPBACK,
    Layout,
    LocalClusterError,
    node_ports,
    ports_needed)
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import _flock
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import (
    _read_own_file,
    _saved_base,
    read_marker)


# Machine-wide port claims of local clusters (one file per user: a sticky lock directory lets nobody else replace it).
PORT_REGISTRY_DIRS = ("/run/lock", "/var/lock")


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


def _registry_paths():
    for directory in PORT_REGISTRY_DIRS + (tempfile.gettempdir(),):
        if os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK):
            base = os.path.join(directory, "soperator-slurm-ports.%d" % os.geteuid())
            return base + ".lock", base + ".json"
    raise LocalClusterError("no writable directory for the port claims of local clusters (tried %s)"
                            % ", ".join(PORT_REGISTRY_DIRS + (tempfile.gettempdir(),)))


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
        files.atomic_write(self.path, json.dumps({"claims": claims}, indent=1, sort_keys=True) + "\n", 0o600)


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


class PortBlock(object):
    """A local cluster's block of loopback ports: the one it holds (cluster.json), `requested_base_port` when given,
    or a free one it claims (PortClaims). `running_records` gives the records of the cluster's running daemons
    (local/processes.py Daemons.running_records): the ports they hold count as the cluster's own."""

    def __init__(self, layout: Layout, requested_base_port: Optional[int], timeout: float,
                 running_records: Callable[[], Dict[str, Dict[str, Any]]]) -> None:
        self.layout = layout
        self.requested_base_port = requested_base_port
        self.timeout = timeout
        self.running_records = running_records

    def _own_ports(self, model, base):
        """Ports this cluster's running daemons listen on: from their records, or for a record of an earlier
        version (no 'ports') from the block `base` they were started on."""
        fixed = {"slurmctld": CTLD_OFFSET, "slurmdbd": DBD_OFFSET, "mariadbd": DB_OFFSET, LOGIN_DAEMON: LOGIN_OFFSET}
        nodes = node_ports(model, base)
        ports = set()
        for name, rec in self.running_records().items():
            if "ports" in rec:
                ports.update(rec["ports"])
            elif name in fixed:
                ports.add(base + fixed[name])
            elif name.startswith("slurmd-") and name[len("slurmd-"):] in nodes:
                ports.add(nodes[name[len("slurmd-"):]])
        return ports

    def plan(self, model: Any) -> Tuple[Optional[int], List[str]]:
        """(base port a run would use or None when it would choose one, [what it would do]); reads only. Raises
        like a run would when the stored block is no longer usable while the cluster runs."""
        saved = _saved_base(self.layout)
        base = self.requested_base_port or saved
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
        if self.requested_base_port:
            raise LocalClusterError("base_port %d cannot be used for %s (ports %s): %s"
                                    % (base, self.layout.state_dir, block, "; ".join(problems)))
        running = sorted(self.running_records())
        if running:
            raise LocalClusterError(
                "the ports of the local cluster in %s (%s) are no longer all its own: %s. Its daemons %s still run "
                "on them; stop it (state=absent / teardown.yml) and run it again: a stopped cluster moves to a free "
                "block" % (self.layout.state_dir, block, "; ".join(problems), ", ".join(running)))

    def choose(self, model: Any, changes: List[str]) -> int:
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
            base = self.requested_base_port or saved
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
                files.atomic_write(self.layout.cluster_file, json.dumps({"base_port": base}, indent=1) + "\n")
                if saved is None:
                    changes.append("ports from %d" % base)
        return base
