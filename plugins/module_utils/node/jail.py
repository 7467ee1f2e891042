# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filling a jail directory from a root filesystem: a directory, a tarball or an OCI image layout.

Standard library only: the same file is the populate image's program (images/populate_jail), run by the
populate Job as

    python3 jail.py populate --source /jail-rootfs.tar --jail /mnt/jail --overwrite never

which prints one JSON line {"action": ..., "changed": ..., "sentinel": {...}} that the Kubernetes side reads from
the pod's log.

The sentinel (SENTINEL at the jail's root) records what populated the jail and when. It is written last: the new
root filesystem is unpacked into a staging directory inside the jail (same filesystem), the old entries are moved
aside, the new ones renamed in, and only then the sentinel is written. A populate cut short leaves a jail without
a sentinel, which is never taken for a populated one.

Overwrite modes:
- never: a jail with a sentinel is left alone; an empty jail is populated; a jail that is not empty and has no
  sentinel (filled by someone else, or a populate cut short) is refused - it is not ours to overwrite.
- if_empty: populate only an empty jail (nothing but lost+found and our own leftovers); anything else is left alone.
- always: replace the jail's contents on every run (lost+found stays).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import errno
import hashlib
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib

try:
    import lzma
    _LZMA_ERRORS = (lzma.LZMAError,)
except ImportError:    # a Python built without lzma reads no .xz archive anyway
    _LZMA_ERRORS = ()

SENTINEL = ".soperator-jail.json"
SENTINEL_TMP = SENTINEL + ".tmp"
SENTINEL_MAX = 1 << 20
SENTINEL_FORMAT = 1
STAGING_PREFIX = ".soperator-populate-"
TRASH_PREFIX = ".soperator-old-"
KEPT = frozenset(["lost+found"])    # a filesystem's own entry, never moved or replaced
OVERWRITE_MODES = ("never", "if_empty", "always")
OCI_REF_ANNOTATION = "org.opencontainers.image.ref.name"
PROGRAM = "soperator.slurm jail.py"
SPACE_MARGIN = 16 << 20

POPULATED = "populated"
REPLACED = "replaced"
UNCHANGED = "unchanged"
REFUSED = "refused"


class JailError(Exception):
    pass


# what reading a damaged or truncated archive raises, besides OSError
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error) + _LZMA_ERRORS


# --- the jail as it is -----------------------------------------------------------------------------------------

def read_sentinel(jail):
    """The sentinel's record, or None when the jail has none. Anything in the jail may have been put there by its
    users: the sentinel is opened without following a symlink or waiting on a fifo, and read only if a regular file."""
    path = os.path.join(jail, SENTINEL)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JailError("the jail's sentinel %s cannot be read (%s); remove it and populate with overwrite=always"
                        % (path, "it is a symlink" if e.errno == errno.ELOOP else e))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JailError("the jail's sentinel %s is not a regular file; remove it and populate with overwrite=always"
                        % path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(SENTINEL_MAX + 1)
    try:
        if len(data) > SENTINEL_MAX:
            raise ValueError("larger than %d bytes" % SENTINEL_MAX)
        record = json.loads(data.decode("utf-8"))
    except ValueError as e:     # UnicodeDecodeError is one
        raise JailError("the jail's sentinel %s cannot be read (%s); remove it and populate with overwrite=always"
                        % (path, e))
    if not isinstance(record, dict):
        raise JailError("the jail's sentinel %s is not a JSON object" % path)
    return record


def _leftover(name):
    return name == SENTINEL_TMP or name.startswith(STAGING_PREFIX) or name.startswith(TRASH_PREFIX)


def _ours(name):
    return name == SENTINEL or _leftover(name)


def _contents(names):
    return sorted(n for n in names if n not in KEPT and not _ours(n))


def jail_entries(jail):
    """Names at the jail's root that are its contents: not lost+found, the sentinel, or our leftovers."""
    if not os.path.isdir(jail):
        return []
    return _contents(os.listdir(jail))


# --- the source --------------------------------------------------------------------------------------------------

class Source(object):
    def __init__(self, path, kind, digest=None, tag=None, label=None):
        self.path = path
        self.kind = kind            # dir | tar | oci
        self.digest = digest
        self.tag = tag
        self.label = label or path

    def describe(self):
        return "%s %s%s" % (self.kind, self.label, ":%s" % self.tag if self.tag else "")


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _oci_manifest(layout, tag):
    """(tag, digest) of the manifest `tag` names in an OCI image layout's index.json (the only one when no tag)."""
    try:
        with open(os.path.join(layout, "index.json")) as f:
            index = json.load(f)
    except (OSError, ValueError) as e:
        raise JailError("%s is not a readable OCI image layout: index.json: %s" % (layout, e))
    manifests = index.get("manifests") or []
    tagged = dict(((m.get("annotations") or {}).get(OCI_REF_ANNOTATION), m) for m in manifests)
    tags = sorted(t for t in tagged if t)
    if tag is None:
        if len(tags) != 1:
            raise JailError("OCI image layout %s has %s; choose one with the tag (oci_tag)"
                            % (layout, "the tags %s" % ", ".join(tags) if tags else "no tagged image"))
        tag = tags[0]
    if tag not in tagged:
        raise JailError("OCI image layout %s has no image tagged %r (it has: %s)"
                        % (layout, tag, ", ".join(tags) or "none"))
    return tag, tagged[tag].get("digest")


def inspect_source(path, tag=None, label=None):
    """What `path` is: an OCI image layout (a directory with an oci-layout file), a root filesystem directory, or
    a tarball (compressed or not)."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "oci-layout")):
            tag, digest = _oci_manifest(path, tag)
            return Source(path, "oci", digest, tag, label)
        if tag is not None:
            raise JailError("oci_tag was given, but %s is not an OCI image layout (no oci-layout file)" % path)
        return Source(path, "dir", None, None, label)
    if os.path.isfile(path):
        if not tarfile.is_tarfile(path):
            raise JailError("source %s is neither a directory nor a tar archive" % path)
        return Source(path, "tar", _sha256(path), None, label)
    raise JailError("source %s does not exist" % path)


# --- deciding --------------------------------------------------------------------------------------------------

def plan(jail, overwrite, previous):
    """(action, message) for a jail as it is now."""
    if overwrite not in OVERWRITE_MODES:
        raise JailError("overwrite must be one of %s, got %r" % (", ".join(OVERWRITE_MODES), overwrite))
    entries = jail_entries(jail)
    if overwrite == "always":
        return (REPLACED if previous is not None or entries else POPULATED), "overwrite=always"
    if previous is not None:
        return UNCHANGED, "the jail was populated at %s from %s" % (
            previous.get("populated_at"), previous.get("source"))
    if not entries:
        return POPULATED, "the jail is empty"
    if overwrite == "if_empty":
        return UNCHANGED, "the jail is not empty (%s%s); overwrite=if_empty leaves it" % (
            ", ".join(entries[:5]), ", ..." if len(entries) > 5 else "")
    return REFUSED, ("the jail %s is not empty (%s%s) and has no %s, so it was not populated by us (or a populate "
                     "was cut short); overwrite=never does not touch it. Use overwrite=if_empty to keep it as it is, "
                     "or overwrite=always to replace it" % (jail, ", ".join(entries[:5]),
                                                            ", ..." if len(entries) > 5 else "", SENTINEL))


# --- writing a root filesystem into a directory, never outside it ----------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DEPTH = 256         # far deeper than any root filesystem; bounds every walk, removal and descriptor count
NAME_MAX = 255          # bytes in one path component (Linux)
PATH_MAX = 4096         # bytes in a symlink's target (Linux)
ID_MAX = 2 ** 32 - 2    # (uid_t)-1 means "leave unchanged" to chown
TIME_LIMIT = 2 ** 33    # seconds either side of 1970: what time_t and every filesystem can hold

DIRECTORY, FILE, SYMLINK, FIFO = "a directory", "a file", "a symlink", "a fifo"


class _Node(object):
    """What the archive has put at one name so far. Every check is made against this record of the archive's own
    writes, not against the disk, so a check-only scan refuses exactly the members the real run refuses."""
    __slots__ = ("kind", "children", "meta", "ident")

    def __init__(self, kind):
        self.kind = kind
        self.children = {} if kind == DIRECTORY else None
        self.meta = None        # a directory member's (mode, uid, gid, mtime), applied by _Writer.close()
        self.ident = None       # (st_dev, st_ino) of the directory created for it


def _ident(st):
    return (st.st_dev, st.st_ino)


def open_dirs(dir_fd, parts, create=False):
    """A descriptor of the directory parts[0]/parts[1]/... below dir_fd, opened one component at a time with
    O_NOFOLLOW: a symlink on the way fails (ELOOP or ENOTDIR) instead of being followed. Missing directories are
    made (inside the one just opened) when `create`."""
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_at(dir_fd, name):
    """Remove `name` in dir_fd and, for a directory, everything below it. Directories are entered only through
    O_NOFOLLOW descriptors checked against what lstat saw, so a symlink is removed, never followed. Recursive: used
    only inside the staging directory, whose depth the writer bounds (MAX_DEPTH)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        if _ident(os.fstat(fd)) != _ident(st):
            raise JailError("%s was replaced while being removed" % name)
        for entry in os.listdir(fd):
            _remove_at(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


class _Writer(object):
    """Creates the entries of a root filesystem below a directory (the descriptor root_fd) by their archive names;
    with no root_fd it only checks and counts them (a scan: check mode, and the real run's look before writing).

    A name may not climb out (`..`), a leading `/` means the root filesystem's root (like GNU tar), and nothing is
    written through a symlink: every parent must be a directory the archive made (or implied), and an entry already
    at the target is removed first, not followed. On disk every call is relative to a directory descriptor opened
    with O_NOFOLLOW, files are created with O_EXCL|O_NOFOLLOW, and owner, mode and times are set on descriptors
    (or with AT_SYMLINK_NOFOLLOW on the link itself), so even a link the checks missed is never followed. Device
    nodes are skipped: the jail's /dev is bind-mounted from the host at run time, and a device node in a shared jail
    is a way out."""

    def __init__(self, root_fd=None, preserve_owner=False):
        self.root_fd = root_fd
        self.preserve_owner = preserve_owner
        self.tree = _Node(DIRECTORY)
        self.skipped = []
        self.bytes = 0          # regular files' sizes: what writing them takes (a sparse member in full)
        self.entries = 0
        self.largest = (0, None)

    # -- checks, against the record of what the archive wrote ----------------------------------------------------

    @staticmethod
    def _parts(member, name, what="its path"):
        if "\x00" in name:
            raise JailError("unsafe member %r: a NUL byte in %s" % (member, what))
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise JailError("unsafe member %r: '..' in %s" % (member, what))
        if len(parts) > MAX_DEPTH:
            raise JailError("unsafe member %r: %s is deeper than %d directories" % (member, what, MAX_DEPTH))
        for part in parts:
            try:
                size = len(os.fsencode(part))
            except UnicodeError:
                raise JailError("unsafe member %r: %s cannot be a file name here" % (member, what))
            if size > NAME_MAX:
                raise JailError("unsafe member %r: a name longer than %d bytes in %s" % (member, NAME_MAX, what))
        return parts

    def _leaf(self, member, kind):
        parts = self._parts(member, member)
        if not parts:
            raise JailError("unsafe member %r: %s as the jail's root" % (member, kind))
        return parts

    def _tree_parent(self, member, parts, create):
        node = self.tree
        for i, part in enumerate(parts[:-1]):
            child = node.children.get(part)
            if child is None:
                if not create:
                    raise JailError("member %r refers to %s, which the archive does not hold before it"
                                    % (member, "/".join(parts[:i + 1])))
                child = node.children[part] = _Node(DIRECTORY)
            elif child.kind != DIRECTORY:
                raise JailError("unsafe member %r: %s is %s, not a directory" % (member, "/".join(parts[:i + 1]),
                                                                                 child.kind))
            node = child
        return node

    def _count(self, member, size):
        self.entries += 1
        self.bytes += size
        if size > self.largest[0]:
            self.largest = (size, member)

    # -- on disk --------------------------------------------------------------------------------------------------

    def _parent_fd(self, parts, create):
        """Descriptor of the directory holding parts[-1]; missing parents are made when `create` (the checks have
        already said they may be)."""
        return open_dirs(self.root_fd, parts[:-1], create)

    @staticmethod
    def _clear(dir_fd, name):
        try:
            _remove_at(dir_fd, name)
        except FileNotFoundError:
            pass

    def _finish(self, fd, meta):
        mode, uid, gid, mtime = meta
        if self.preserve_owner:
            os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)     # after chown, which clears setuid and setgid
        os.utime(fd, (mtime, mtime))

    # -- members ----------------------------------------------------------------------------------------------------

    def directory(self, member, meta):
        parts = self._parts(member, member)
        self._count(member, 0)
        if not parts:
            return      # the jail's root keeps its own owner and mode (often a volume's mount point)
        parent = self._tree_parent(member, parts, True)
        node = parent.children.get(parts[-1])
        fresh = node is None or node.kind != DIRECTORY
        if fresh:
            node = parent.children[parts[-1]] = _Node(DIRECTORY)   # what was there, and all below it, is gone
        # owner, mode and time last (close()): writing into it changes its mtime, and a read-only mode would block it
        node.meta = meta
        if self.root_fd is None:
            return
        fd = self._parent_fd(parts, True)
        try:
            if fresh:
                self._clear(fd, parts[-1])
                os.mkdir(parts[-1], 0o700, dir_fd=fd)
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
        if not stat.S_ISDIR(st.st_mode) or node.ident not in (None, _ident(st)):
            raise JailError("member %r: the directory was replaced while being populated" % member)
        node.ident = _ident(st)

    def file(self, member, opener, size, meta):
        """opener(): the member's data as a file object, called only when writing."""
        parts = self._leaf(member, FILE)
        self._tree_parent(member, parts, True).children[parts[-1]] = _Node(FILE)
        self._count(member, size)
        if self.root_fd is None:
            return
        fd = self._parent_fd(parts, True)
        try:
            self._clear(fd, parts[-1])
            out = os.fdopen(os.open(parts[-1], _NEW_FILE_FLAGS, 0o600, dir_fd=fd), "wb")
        finally:
            os.close(fd)
        with out:
            data = opener()
            try:
                shutil.copyfileobj(data, out, 1 << 20)
            finally:
                data.close()
            out.flush()
            self._finish(out.fileno(), meta)

    def symlink(self, member, target, meta):
        # the target is not checked further: it is resolved inside the jail once the jail is the root, and nothing
        # here follows a symlink
        try:
            size = len(os.fsencode(target))
        except UnicodeError:
            size = PATH_MAX
        if not target or "\x00" in target or size >= PATH_MAX:
            raise JailError("unsafe member %r: a symlink to %r, which is not a path" % (member, target[:100]))
        parts = self._leaf(member, SYMLINK)
        self._tree_parent(member, parts, True).children[parts[-1]] = _Node(SYMLINK)
        self._count(member, 0)
        if self.root_fd is None:
            return
        unused_mode, uid, gid, mtime = meta
        fd = self._parent_fd(parts, True)
        try:
            self._clear(fd, parts[-1])
            os.symlink(target, parts[-1], dir_fd=fd)
            # AT_SYMLINK_NOFOLLOW: the link itself, never what it names
            if self.preserve_owner:
                os.chown(parts[-1], uid, gid, dir_fd=fd, follow_symlinks=False)
            os.utime(parts[-1], (mtime, mtime), dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)

    def hardlink(self, member, existing):
        source_parts = self._parts(member, existing, "its link target %r" % existing)
        if not source_parts:
            raise JailError("unsafe member %r: a hard link to the jail's root" % member)
        source = self._tree_parent(member, source_parts, False).children.get(source_parts[-1])
        if source is None:
            raise JailError("member %r links to %r, which the archive does not hold before it" % (member, existing))
        if source.kind != FILE:
            raise JailError("unsafe member %r: a hard link to %r, which is %s, not a regular file"
                            % (member, existing, source.kind))
        parts = self._leaf(member, "a hard link")
        if len(source_parts) > len(parts) and source_parts[:len(parts)] == parts:
            raise JailError("unsafe member %r: a hard link that would replace the directory holding its target %r"
                            % (member, existing))
        parent = self._tree_parent(member, parts, True)
        self._count(member, 0)
        if parent.children.get(parts[-1]) is source:
            return      # already that file
        parent.children[parts[-1]] = source
        if self.root_fd is None:
            return
        source_fd = self._parent_fd(source_parts, False)
        try:
            st = os.stat(source_parts[-1], dir_fd=source_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise JailError("member %r: its link target %r was replaced while being populated" % (member, existing))
            fd = self._parent_fd(parts, True)
            try:
                self._clear(fd, parts[-1])
                # follow_symlinks=False: linkat without AT_SYMLINK_FOLLOW
                os.link(source_parts[-1], parts[-1], src_dir_fd=source_fd, dst_dir_fd=fd, follow_symlinks=False)
                linked = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(fd)
        finally:
            os.close(source_fd)
        if _ident(linked) != _ident(st):
            raise JailError("member %r: its link target %r was replaced while being populated" % (member, existing))

    def fifo(self, member, meta):
        parts = self._leaf(member, FIFO)
        self._tree_parent(member, parts, True).children[parts[-1]] = _Node(FIFO)
        self._count(member, 0)
        if self.root_fd is None:
            return
        fd = self._parent_fd(parts, True)
        try:
            self._clear(fd, parts[-1])
            os.mkfifo(parts[-1], 0o600, dir_fd=fd)
            # O_NONBLOCK: opening a fifo for reading does not wait for a writer
            made = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            if not stat.S_ISFIFO(os.fstat(made).st_mode):
                raise JailError("member %r: the fifo was replaced while being populated" % member)
            self._finish(made, meta)
        finally:
            os.close(made)

    def skip(self, member, why):
        self.skipped.append("%s (%s)" % ("/".join(self._parts(member, member)), why))

    def close(self):
        """Owner, mode and times of the directory members, deepest first so that setting a parent's mtime is the
        last change under it. Each is applied to the directory that was created for it (device and inode checked on
        the open descriptor), never to whatever is at its name now."""
        if self.root_fd is None:
            return
        todo = []
        stack = [((), self.tree)]
        while stack:
            parts, node = stack.pop()
            for name, child in node.children.items():
                if child.kind == DIRECTORY:
                    stack.append((parts + (name,), child))
                    if child.meta is not None:
                        todo.append((parts + (name,), child))
        for parts, node in sorted(todo, key=lambda item: len(item[0]), reverse=True):
            name = "/".join(parts)
            try:
                parent = self._parent_fd(parts, False)
                try:
                    fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
                finally:
                    os.close(parent)
            except OSError as e:
                raise JailError("directory %r was replaced while being populated (%s)" % (name, e))
            try:
                if _ident(os.fstat(fd)) != node.ident:
                    raise JailError("directory %r was replaced while being populated" % name)
                self._finish(fd, node.meta)
            finally:
                os.close(fd)


def _tar_meta(member):
    """(mode, uid, gid, mtime) of a member, or JailError for values no filesystem call takes."""
    for what, value in (("uid", member.uid), ("gid", member.gid)):
        if not isinstance(value, int) or not 0 <= value <= ID_MAX:
            raise JailError("unsafe member %r: %s %r is out of range" % (member.name, what, value))
    try:
        mtime = int(member.mtime)
    except (TypeError, ValueError, OverflowError):
        mtime = None
    if mtime is None or not -TIME_LIMIT < mtime < TIME_LIMIT:
        raise JailError("unsafe member %r: mtime %r is out of range" % (member.name, member.mtime))
    return member.mode & 0o7777, member.uid, member.gid, mtime


def _tar_member(writer, archive, member):
    name = member.name
    if member.isdir():
        writer.directory(name, _tar_meta(member))
    elif member.isreg():
        writer.file(name, lambda: archive.extractfile(member), member.size, _tar_meta(member))
    elif member.issym():
        writer.symlink(name, member.linkname, _tar_meta(member))
    elif member.islnk():
        writer.hardlink(name, member.linkname)
    elif member.isfifo():
        writer.fifo(name, _tar_meta(member))
    elif member.ischr() or member.isblk():
        writer.skip(name, "device node")
    else:
        writer.skip(name, "unsupported member type %r" % member.type)


def _from_tar(writer, path):
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                try:
                    _tar_member(writer, archive, member)
                except OSError as e:
                    raise JailError("member %r: %s" % (member.name, e))
    except _ARCHIVE_ERRORS as e:
        raise JailError("the archive %s cannot be read: %s" % (path, e or type(e).__name__))


def _raise(error):
    raise error


def _from_dir(writer, top):
    links = {}      # (device, inode) -> first name, for files with more than one link
    for current, dirnames, filenames in os.walk(top, onerror=_raise):
        dirnames.sort()
        for entry in sorted(dirnames) + sorted(filenames):
            full = os.path.join(current, entry)
            name = os.path.relpath(full, top)
            try:
                _dir_entry(writer, full, name, links)
            except OSError as e:
                raise JailError("source entry %s: %s" % (full, e))


def _source_opener(full, st):
    def opener():
        # the source file itself: a symlink swapped in since it was listed is not followed
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        if _ident(os.fstat(fd)) != _ident(st):
            os.close(fd)
            raise JailError("source entry %s changed while being copied" % full)
        return os.fdopen(fd, "rb")
    return opener


def _dir_entry(writer, full, name, links):
    st = os.lstat(full)
    meta = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime))
    if stat.S_ISDIR(st.st_mode):
        writer.directory(name, meta)
    elif stat.S_ISLNK(st.st_mode):
        writer.symlink(name, os.readlink(full), meta)
    elif stat.S_ISREG(st.st_mode):
        key = _ident(st)
        if st.st_nlink > 1 and key in links:
            writer.hardlink(name, links[key])
            return
        links[key] = name
        writer.file(name, _source_opener(full, st), st.st_size, meta)
    elif stat.S_ISFIFO(st.st_mode):
        writer.fifo(name, meta)
    else:
        writer.skip(name, "device node" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "socket")


def scan(source):
    """Check every entry of a tarball or directory source without writing (check mode, and the real run before
    its first write): the first unsafe one raises JailError naming it. -> the counting writer (bytes, entries,
    largest, skipped), or None for an OCI layout (umoci unpacks it)."""
    if source.kind == "oci":
        return None
    writer = _Writer()
    if source.kind == "tar":
        _from_tar(writer, source.path)
    else:
        _from_dir(writer, source.path)
    return writer


def scan_tar(path):
    """scan() of a tarball."""
    return scan(Source(path, "tar"))


def _human(size):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (size, unit)
        size /= 1024.0
    return None


def check_space(jail, summary):
    """Refuse, before anything is written, a root filesystem that does not fit in the jail's filesystem (with a
    margin: a block per entry, 1% and SPACE_MARGIN). Sparse members count in full, as they are written in full.
    The real run checks after removing our leftovers of an interrupted run; check mode counts them as used."""
    path = jail
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    vfs = os.statvfs(path)
    block = vfs.f_frsize or vfs.f_bsize or 4096
    need = summary.bytes + summary.entries * block
    need += need // 100 + SPACE_MARGIN
    free = vfs.f_bavail * block
    if need > free:
        largest, name = summary.largest
        raise JailError("the root filesystem needs %s (%d entries, %s of file data%s, with a margin) but the jail's "
                        "filesystem (%s) has %s free; nothing was written"
                        % (_human(need), summary.entries, _human(summary.bytes),
                           ("; the largest is %r, %s" % (name, _human(largest))) if name else "", path, _human(free)))
    if vfs.f_files and summary.entries + summary.entries // 100 + 64 > vfs.f_favail:
        raise JailError("the root filesystem has %d entries but the jail's filesystem (%s) has only %d free inodes; "
                        "nothing was written" % (summary.entries, path, vfs.f_favail))


def _run_subprocess(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _from_oci(source, dest, run):
    """umoci unpacks the image (layers, whiteouts, owners) into `dest`, which must not exist yet."""
    umoci = shutil.which("umoci")
    if umoci is None:
        raise JailError("umoci is needed to unpack an OCI image layout: install it (Debian package umoci)")
    argv = [umoci, "raw", "unpack", "--image", "%s:%s" % (source.path, source.tag), dest]
    if os.geteuid() != 0:
        argv.insert(3, "--rootless")
    rc, out, err = run(argv)
    if rc != 0:
        raise JailError("%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out).strip()[-2000:]))


def fill(jail, jail_fd, staging, source, run=_run_subprocess):
    """Write the root filesystem of `source` into the directory `staging` at the jail's root; -> (the path of the
    directory holding it, relative to the jail, skipped entries)."""
    if source.kind == "oci":
        _from_oci(source, os.path.join(jail, staging, "rootfs"), run)
        return staging + "/rootfs", []
    root_fd = open_dirs(jail_fd, [staging])
    try:
        writer = _Writer(root_fd, preserve_owner=os.geteuid() == 0)
        if source.kind == "tar":
            _from_tar(writer, source.path)
        else:
            _from_dir(writer, source.path)
        writer.close()
    finally:
        os.close(root_fd)
    return staging, writer.skipped


# --- populating ------------------------------------------------------------------------------------------------

def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _user():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def new_sentinel(source, overwrite, populated_at=None):
    record = {"format": SENTINEL_FORMAT, "source": source.label, "source_type": source.kind,
              "digest": source.digest, "overwrite": overwrite, "populated_at": populated_at,
              "populated_by": "%s@%s" % (_user(), socket.gethostname()), "program": PROGRAM}
    if source.tag:
        record["tag"] = source.tag
    return record


def _discard(jail, jail_fd, name, ignore_errors=False):
    """Remove the entry `name` at the jail's root: a symlink or file is unlinked, a directory removed with
    shutil.rmtree, which on Linux enters directories by descriptor and never follows a symlink below (populate checks
    rmtree.avoids_symlink_attacks) and, unlike _remove_at, is bounded by no depth - the jail's users made these."""
    try:
        st = os.stat(name, dir_fd=jail_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(os.path.join(jail, name), ignore_errors=ignore_errors)
        else:
            os.unlink(name, dir_fd=jail_fd)
    except FileNotFoundError:
        pass
    except (OSError, RecursionError) as e:
        if not ignore_errors:
            raise JailError("cannot remove %s: %s" % (os.path.join(jail, name), e))


def _write_sentinel(jail_fd, record):
    try:
        os.unlink(SENTINEL_TMP, dir_fd=jail_fd)
    except FileNotFoundError:
        pass
    # O_EXCL|O_NOFOLLOW: a name that reappeared is never written through
    fd = os.open(SENTINEL_TMP, _NEW_FILE_FLAGS, 0o644, dir_fd=jail_fd)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    os.replace(SENTINEL_TMP, SENTINEL, src_dir_fd=jail_fd, dst_dir_fd=jail_fd)


def _remove_leftovers(jail, jail_fd):
    """Staging and old-content directories (and a sentinel's temporary file) of an earlier run that was cut short."""
    for name in os.listdir(jail_fd):
        if _leftover(name):
            _discard(jail, jail_fd, name, ignore_errors=True)


def _swap(jail, jail_fd, rootfs):
    """Move the jail's entries aside and the new ones in (renames on one filesystem, which never follow a symlink),
    then drop the old ones."""
    _discard(jail, jail_fd, SENTINEL)   # from here on the jail does not count as populated
    trash = os.path.basename(tempfile.mkdtemp(prefix=TRASH_PREFIX, dir=jail))
    trash_fd = open_dirs(jail_fd, [trash])
    try:
        rootfs_fd = open_dirs(jail_fd, rootfs.split("/"))
        try:
            for name in _contents(os.listdir(jail_fd)):
                os.rename(name, name, src_dir_fd=jail_fd, dst_dir_fd=trash_fd)
            for name in sorted(os.listdir(rootfs_fd)):
                if name in KEPT or _ours(name):
                    continue    # a root filesystem taken from another jail may hold a sentinel: ours is written below
                os.rename(name, name, src_dir_fd=rootfs_fd, dst_dir_fd=jail_fd)
        finally:
            os.close(rootfs_fd)
    finally:
        os.close(trash_fd)
    _discard(jail, jail_fd, trash)


def populate(jail, source_path, overwrite="never", check_mode=False, run=_run_subprocess, label=None,
             oci_tag=None):
    """Populate `jail` from `source_path` under the overwrite rule. -> dict(action, changed, message, sentinel,
    previous, skipped_entries). Refusing is an action, not an exception; bad input and I/O failures raise JailError.
    A tarball or directory source is scanned in full first (every member checked, sizes against free space), so
    what it refuses, check mode refuses too, and nothing is written."""
    jail = os.path.abspath(jail)
    if os.path.lexists(jail) and not os.path.isdir(jail):
        raise JailError("jail %s exists and is not a directory" % jail)
    previous = read_sentinel(jail) if os.path.isdir(jail) else None
    action, message = plan(jail, overwrite, previous)
    result = {"action": action, "changed": action in (POPULATED, REPLACED), "message": message,
              "previous": previous, "sentinel": previous, "skipped_entries": [], "jail": jail}
    if action in (UNCHANGED, REFUSED):
        return result
    source = inspect_source(source_path, oci_tag, label)
    summary = scan(source)
    if summary is not None:
        result["skipped_entries"] = summary.skipped
    if check_mode:
        if summary is not None:
            check_space(jail, summary)
        result["sentinel"] = new_sentinel(source, overwrite)
        return result
    if not shutil.rmtree.avoids_symlink_attacks:
        raise JailError("this Python's shutil.rmtree may follow symlinks; a jail is populated only on Linux")
    if not os.path.isdir(jail):
        if summary is not None:
            check_space(jail, summary)      # no jail is made for a root filesystem that cannot fit
        os.makedirs(jail, 0o755)
    jail_fd = os.open(jail, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _remove_leftovers(jail, jail_fd)
        if summary is not None:
            check_space(jail, summary)
        staging = os.path.basename(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=jail))
        try:
            rootfs, result["skipped_entries"] = fill(jail, jail_fd, staging, source, run)
            _swap(jail, jail_fd, rootfs)
            record = new_sentinel(source, overwrite, utc_now())
            _write_sentinel(jail_fd, record)
        finally:
            _discard(jail, jail_fd, staging, ignore_errors=True)
    finally:
        os.close(jail_fd)
    result["sentinel"] = record
    return result


# --- the populate image's program --------------------------------------------------------------------------------

def _log_text(text):
    """One log line whatever the archive's member names hold: the Kubernetes side reads the pod's log for the last
    JSON line, and a name with a line break could otherwise print one of its own."""
    return json.dumps(str(text))[1:-1]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="jail.py", description="Populate a Slurm jail from a root filesystem.")
    sub = parser.add_subparsers(dest="command", required=True)
    pop = sub.add_parser("populate", help="fill the jail (prints one JSON line: action and sentinel)")
    pop.add_argument("--source", required=True, help="root filesystem: a directory, a tarball or an OCI layout")
    pop.add_argument("--jail", required=True, help="the jail directory")
    pop.add_argument("--overwrite", choices=OVERWRITE_MODES, default="never")
    pop.add_argument("--label", help="what to record as the source in the sentinel (e.g. the image)")
    pop.add_argument("--oci-tag", help="the image of an OCI layout to unpack")
    pop.add_argument("--check", action="store_true", help="say what would be done, change nothing")
    show = sub.add_parser("show", help="print the jail's sentinel as JSON")
    show.add_argument("--jail", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "show":
            sys.stdout.write(json.dumps({"sentinel": read_sentinel(args.jail)}, sort_keys=True) + "\n")
            return 0
        result = populate(args.jail, args.source, args.overwrite, check_mode=args.check, label=args.label,
                          oci_tag=args.oci_tag)
    except (JailError, OSError, tarfile.TarError) as e:
        sys.stderr.write("jail populate failed: %s\n" % _log_text(e))
        return 1
    for entry in result["skipped_entries"]:
        sys.stderr.write("skipped %s\n" % _log_text(entry))
    sys.stderr.write("%s: %s\n" % (result["action"], _log_text(result["message"])))
    sys.stdout.write(json.dumps(dict((k, result[k]) for k in ("action", "changed", "sentinel")),
                                sort_keys=True) + "\n")
    return 2 if result["action"] == REFUSED else 0


if __name__ == "__main__":
    raise SystemExit(main())
