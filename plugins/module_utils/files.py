# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading and replacing the controller side's own files without following a link (the rule of the collection).

The node-side programs (module_utils/node/) carry their own copies: they run alone inside the images, stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError


class UnsafeFile(SoperatorError):
    """The path holds something we do not read or replace: a symlink, not a regular file, not ours, too large."""


def read_regular(path, limit=None, owner=None):
    """Bytes of the regular file at `path`, or None when nothing is there. Never follows a link and never blocks
    on a fifo; UnsafeFile when it is a link or not a regular file, not owned by uid `owner` (when given) or larger
    than `limit` bytes (when given)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        if os.path.islink(path):
            raise UnsafeFile("%s is a symlink" % path)
        raise UnsafeFile("%s cannot be read: %s" % (path, e.strerror or e))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile("%s is not a regular file" % path)
        if owner is not None and st.st_uid != owner:
            raise UnsafeFile("%s is owned by uid %d, not %d" % (path, st.st_uid, owner))
        if limit is not None and st.st_size > limit:
            raise UnsafeFile("%s is larger than %d bytes" % (path, limit))
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_text(path, limit=None, owner=None):
    """read_regular() decoded as UTF-8 (invalid bytes replaced), or None when nothing is there."""
    data = read_regular(path, limit, owner)
    return None if data is None else data.decode("utf-8", "replace")


def _write_temp(path, data, mode):
    """The temporary file beside `path` holding `data` (created new: O_EXCL|O_NOFOLLOW, `mode`). An OSError names
    `path` (a full filesystem fails in os.write, whose error names no file); nothing is left behind then."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        try:
            os.unlink(tmp)             # a leftover of a killed run of this pid; unlink never follows a link
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        raise OSError(e.errno, e.strerror, path)
    try:
        data = data if isinstance(data, bytes) else data.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        os.fchmod(fd, mode)
    except BaseException as e:
        os.close(fd)
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise OSError(e.errno, e.strerror, path)
        raise
    os.close(fd)
    return tmp


def replace_all(items):
    """Replace each `path` of `items` ([(path, data, mode)]) as atomic_write does, all or none: every temporary file
    is written before the first rename, so a full filesystem (ENOSPC) leaves every file as it was."""
    written = []
    try:
        for path, data, mode in items:
            written.append((_write_temp(path, data, mode), path))
    except BaseException:
        for tmp, _path in written:
            os.unlink(tmp)
        raise
    for tmp, path in written:
        os.replace(tmp, path)


def atomic_write(path, data, mode=0o644):
    """Replace `path` by a rename: the temporary file beside it is created new (O_EXCL|O_NOFOLLOW) with `mode`, so
    a symlink at `path` is replaced, never written through, and a reader sees the old or the new bytes. An OSError
    (a full filesystem) names `path` and leaves it as it was."""
    replace_all([(path, data, mode)])
