# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status records of the health checks: the last result of every check, written by health_check.py (passive)
and active_check.py (active), read by the Prometheus exporter (observe/status.py).

health.json's "statusDir" (the jail's /var/lib/soperator/status, under the jail's mount, in the pods;
<state_dir>/status locally) holds one JSON file per writer, each replaced by a rename (a reader sees the old or the
new file, never half):
  passive/<node>.json   {"version": 1, "kind": "passive", "node": NODE, "time": UNIX_SECONDS,
                         "checks": {CHECK: {"result": "pass" | "fail", "detail": TEXT}}}   health_check.py, each run
  active/<check>.json   {"version": 1, "kind": "active", "check": CHECK,
                         "nodes": {NODE: {"result": "pass" | "fail", "time": UNIX_SECONDS, "detail": TEXT,
                                          "job": JOB_ID}}}                                  active_check.py
Directories are walked from / without following a link, except one placed by root or us in a directory nobody
else can write; every directory on the way belongs to root or to us and is writable by nobody else (or sticky, like
/tmp), and the last one is ours: no other user can swap a file or a link in.

Standard library only, like health_check.py and active_check.py: the images and the local backend copy them into
one directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import stat
import time

STATUS_VERSION = 1
PASSIVE, ACTIVE = "passive", "active"
STATUS_NAME = re.compile(r"^[A-Za-z0-9_][-A-Za-z0-9_.]{0,62}$")   # node and check names: file names
STATUS_MAX_BYTES = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 16


class StatusError(Exception):
    """A status record cannot be written safely (or at all); the checks' verdict stands regardless."""


def _trusted(st, euid, sticky_ok=True):
    """A directory only root, we (and, sticky, owners of their own entries) can change."""
    if st.st_uid not in (0, euid):
        return False
    return not st.st_mode & 0o022 or (sticky_ok and bool(st.st_mode & stat.S_ISVTX))


def open_status_dir(path, create=True):
    """A descriptor of the directory `path`, reached one component at a time (see above); missing directories are
    created 0755 when `create`. Raises StatusError (or OSError)."""
    if not path.startswith("/"):
        raise StatusError("%s is not an absolute path" % path)
    euid = os.geteuid()
    todo, done, links = path.split("/")[::-1], [], 0
    fd = os.open("/", _DIR_FLAGS)
    try:
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                done = done[:-1]
                os.close(fd)
                fd = os.open("/", _DIR_FLAGS)
                todo.extend(done[::-1])
                done = []
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            where = "/" + "/".join(done + [name])
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_LINKS or st.st_uid not in (0, euid) or not _trusted(os.fstat(fd), euid, False):
                    raise StatusError("%s is a symlink that root or uid %d did not place in a directory only they "
                                      "can write: not followed" % (where, euid))
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    done = []
                todo.extend(target.split("/")[::-1])
                continue
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)      # a link swapped in since the stat fails here
            os.close(fd)
            fd = child
            done.append(name)
            if not _trusted(os.fstat(fd), euid):
                raise StatusError("%s belongs to another user or others can write it" % where)
        last = os.fstat(fd)
        if last.st_uid != euid or last.st_mode & 0o022:
            raise StatusError("%s is not a directory of uid %d that only it can write" % (path, euid))
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_status(directory, kind, name):
    """The record <directory>/<kind>/<name>.json, or None when it is missing, not a regular file or not JSON."""
    try:
        dfd = open_status_dir(os.path.join(directory, kind), create=False)
    except (OSError, StatusError):
        return None
    try:
        fd = os.open(name + ".json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > STATUS_MAX_BYTES:
            return None
        record = json.loads(os.read(fd, STATUS_MAX_BYTES + 1).decode("utf-8", "replace"))
        return record if isinstance(record, dict) else None
    except ValueError:
        return None
    finally:
        os.close(fd)


def write_status(directory, kind, name, record):
    """Replace <directory>/<kind>/<name>.json by `record`: a new temporary file (O_EXCL|O_NOFOLLOW) renamed over it
    in a directory opened as open_status_dir does."""
    if not STATUS_NAME.match(name or ""):
        raise StatusError("%r cannot name a status file" % name)
    data = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    dfd = open_status_dir(os.path.join(directory, kind))
    try:
        tmp = ".%s.%d.tmp" % (name, os.getpid())
        try:
            os.unlink(tmp, dir_fd=dfd)            # a killed run's leftover; unlink never follows a link
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fchmod(fd, 0o644)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dfd)
            raise
        os.close(fd)
        os.replace(tmp, name + ".json", src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def passive_record(node, failed, passed, now=None):
    checks = dict((name, {"result": "pass"}) for name in passed)
    for failure in failed:
        checks[failure["check"]] = {"result": "fail", "detail": failure["detail"]}
    return {"version": STATUS_VERSION, "kind": PASSIVE, "node": node,
            "time": round(time.time() if now is None else now, 3), "checks": checks}
