# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local cluster's state directory: made ours by a marker, locked while changed, purged only of what we created;
files read and written without following links.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import stat
import time
from typing import Any, Iterator, List, Optional

from ansible_collections.soperator.slurm.plugins.module_utils import files, wait
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    LOCK_FILE,
    Layout,
    LocalClusterError,
    MARKER,
    MARKER_KIND,
    MAX_SOCKET_PATH,
    STATE_ENTRIES,
    _TMP_ENTRY)
from ansible_collections.soperator.slurm.plugins.module_utils.node.safe_tree import link_refusal


def current_text(path):
    """Text of one of our files as a run would compare it: None when absent; a link or anything unreadable reads as
    text no run writes, so it is replaced (never followed)."""
    try:
        return files.read_text(path)
    except files.UnsafeFile:
        return "\0unreadable"


def _read_own_file(path, limit=1 << 20):
    """Bytes of a regular file owned by us, opened without following a link; None when it is not that."""
    try:
        return files.read_regular(path, limit=limit, owner=os.geteuid())
    except files.UnsafeFile:
        return None


def read_secret(path):
    """A secret this cluster generated (stripped text); a missing, linked or foreign one fails (never guessed)."""
    data = _read_own_file(path, limit=64 << 10)
    if data is None:
        raise LocalClusterError("%s is not a regular file of ours: not using it" % path)
    return data.decode("utf-8", "replace").strip()


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
    for root, dirs, names in os.walk(state_dir, followlinks=False):
        if root != state_dir and MARKER in names:
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


MOUNT_POINT_STAYS = "kept the directory: it is a mount point; its contents were deleted"


class StateDir(object):
    """A local cluster's state directory (`layout.state_dir`): ownership, the lock, its folders, purge. An operation
    waits up to `lock_timeout` for another's lock. What taking it did (created, adopted) is kept for the run's
    changes: take_notes()."""

    def __init__(self, layout: Layout, lock_timeout: float) -> None:
        self.layout = layout
        self.lock_timeout = lock_timeout
        self._notes: List[str] = []

    def take_notes(self) -> List[str]:
        """What taking the directory did since the last call ('created state directory ...', 'marked ...')."""
        notes, self._notes = self._notes, []
        return notes

    def ownership(self) -> str:
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
        linked = link_refusal("state_dir", path)
        if linked is not None:
            raise LocalClusterError(linked)
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

    def purge_plan(self) -> List[str]:
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

    def purge(self) -> str:
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
        if os.path.ismount(path):                      # rmdir would fail with EBUSY
            return "purged %s (%s)" % (path, MOUNT_POINT_STAYS)
        os.rmdir(path)
        return "purged %s" % path

    @contextlib.contextmanager
    def locked(self, create: bool = False, cluster_name: Optional[str] = None) -> Iterator[Optional[int]]:
        """One operation at a time per state directory (two playbook runs must not start two slurmctlds), and only
        on a directory that is ours (ownership()). `create`: make the directory (with our marker naming
        `cluster_name`) when there is none. Yields the lock's fd, or None when there is no state directory (and not
        `create`)."""
        lay = self.layout
        kind = self.ownership()
        if kind == "absent" and not create:
            yield None
            return
        if kind in ("absent", "empty") and create:
            self.check_not_nested()
            if kind == "absent":
                os.makedirs(lay.state_dir, 0o755)
                self._notes.append("created state directory %s" % lay.state_dir)
        lock = os.path.join(lay.state_dir, LOCK_FILE)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _flock(fd, self.lock_timeout, lock)
            try:
                same = os.fstat(fd).st_ino == os.lstat(lock).st_ino
            except OSError:
                same = False
            if not same:
                raise LocalClusterError("%s was purged by another operation meanwhile" % lay.state_dir)
            kind = self.ownership()                    # again, now that nobody else acts on it
            if kind == "legacy" or (kind == "empty" and create):
                self.write_marker(cluster_name, adopted=kind == "legacy")
                if kind == "legacy":
                    self._notes.append("marked %s as this cluster's state directory (made by an earlier version)"
                                       % lay.state_dir)
            yield fd
        finally:
            os.close(fd)

    def check_not_nested(self) -> None:
        other = _marked_ancestor(self.layout.state_dir)
        if other is not None:
            raise LocalClusterError("state_dir %s is inside the state directory of the local cluster in %s"
                                    % (self.layout.state_dir, other))

    def plan_take(self) -> str:
        """ownership(), and for a new or empty folder the check ensure_started() makes before creating it (not inside
        another cluster's state directory); reads only, raises as a run would."""
        kind = self.ownership()
        if kind in ("absent", "empty"):
            self.check_not_nested()
        return kind

    def write_marker(self, cluster_name: Optional[str] = None, adopted: bool = False) -> None:
        """Make the directory ours: the marker with a new id (a port claim names it), the cluster's name, whether an
        earlier version's directory was adopted."""
        marker = {"kind": MARKER_KIND, "id": secrets.token_hex(16), "state_dir": self.layout.state_dir,
                  "cluster": cluster_name, "adopted": adopted,
                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        files.atomic_write(os.path.join(self.layout.state_dir, MARKER), json.dumps(marker, indent=1) + "\n", 0o644)

    def prepare_dirs(self) -> None:
        """The folders every run needs, ours (a link there fails) and with their modes."""
        lay = self.layout
        for path, mode in ((lay.state_dir, 0o755), (lay.etc, 0o755), (lay.secrets, 0o700), (lay.run, 0o755),
                           (lay.log, 0o755), (lay.ctld_state, 0o700), (lay.spool, 0o755)):
            os.chmod(_own_dir(path, mode), mode)

    def check_path_lengths(self, model: Any) -> None:
        """Refuse a state directory so long that slurmstepd's sockets under it would not fit in sun_path."""
        longest = max([len(ns.node_name(max(ns.max_replicas - 1, 0))) for ns in model.node_sets] or [1])
        sock = len(self.layout.spool) + 2 + 2 * longest + len("_4294967295.4294967295")
        if sock > MAX_SOCKET_PATH:
            raise LocalClusterError(
                "state directory %s is too long: slurmstepd sockets under it would exceed %d bytes; use a shorter "
                "path (at most %d characters for these node names)"
                % (self.layout.state_dir, MAX_SOCKET_PATH, len(self.layout.state_dir) - (sock - MAX_SOCKET_PATH)))


def _flock(fd, timeout, what):
    def locked():
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True, ""
        except OSError:
            return False, what
    wait.wait_until(locked, what, timeout, poll=0.1, timeout_error=lambda _w: LocalClusterError(
        "another operation holds %s (waited %ss)" % (what, timeout)))
