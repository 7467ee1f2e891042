# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing a root filesystem (a tarball's members or a directory's entries) below a directory, never outside it.

The populate program (jail.py) checks a whole source with a counting Writer before its first write, then writes it
with a Writer on the staging directory's descriptor; tree_reader.py feeds either Writer a source's entries. Standard
library only, like jail.py: the images copy these files into one directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import time


class JailError(Exception):
    pass


class TimedOut(JailError):
    """The populate ran past its time bound (jail_populate's timeout, the program's --timeout)."""


class Deadline(object):
    """The time bound of one populate, checked in every loop that reads or writes (members, blocks of a file, the
    wait for the jail's lock): a populate past it stops between two steps, before it touches the jail's contents."""

    def __init__(self, seconds=None, clock=time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.end = clock() + seconds if seconds else None

    def left(self):
        """Seconds left, or None without a bound."""
        return None if self.end is None else max(0.0, self.end - self.clock())

    def check(self):
        if self.end is not None and self.clock() >= self.end:
            raise TimedOut("the populate did not finish within its timeout of %gs" % self.seconds)


NO_DEADLINE = Deadline()


def link_refusal(option, path):
    """One rule for a directory a user names by an option (jail_populate's jail_dir, slurm_cluster's state_dir and
    jail_dir): a symlink there is refused, never followed - acting on its target (chown, replace, purge) would act on
    a directory the option does not name. -> the message, or None when `path` is not a symlink (or is absent)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "%s %s is a symbolic link: pass the directory it points to" % (option, path)
    return None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DEPTH = 256         # far deeper than any root filesystem; bounds every walk, removal and descriptor count
NAME_MAX = 255          # bytes in one path component (Linux)
PATH_MAX = 4096         # bytes in a symlink's target (Linux)

DIRECTORY, FILE, SYMLINK, FIFO = "a directory", "a file", "a symlink", "a fifo"


class _Node(object):
    """What the archive has put at one name so far. Every check is made against this record of the archive's own
    writes, not against the disk, so a check-only scan refuses exactly the members the real run refuses."""
    __slots__ = ("kind", "children", "meta", "ident")

    def __init__(self, kind):
        self.kind = kind
        self.children = {} if kind == DIRECTORY else None
        self.meta = None        # a directory member's (mode, uid, gid, mtime), applied by Writer.close()
        self.ident = None       # (st_dev, st_ino) of the directory created for it


def file_identity(st):
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
        if file_identity(os.fstat(fd)) != file_identity(st):
            raise JailError("%s was replaced while being removed" % name)
        for entry in os.listdir(fd):
            _remove_at(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


class Writer(object):
    """Creates the entries of a root filesystem below a directory (the descriptor root_fd) by their archive names;
    with no root_fd it only checks and counts them (a scan: check mode, and the real run's look before writing).

    A name may not climb out (`..`), a leading `/` means the root filesystem's root (like GNU tar), and nothing is
    written through a symlink: every parent must be a directory the archive made (or implied), and an entry already
    at the target is removed first, not followed. On disk every call is relative to a directory descriptor opened
    with O_NOFOLLOW, files are created with O_EXCL|O_NOFOLLOW, and owner, mode and times are set on descriptors
    (or with AT_SYMLINK_NOFOLLOW on the link itself), so even a link the checks missed is never followed. Device
    nodes are skipped: the jail's /dev is bind-mounted from the host at run time, and a device node in a shared jail
    is a way out."""

    def __init__(self, root_fd=None, preserve_owner=False, deadline=NO_DEADLINE):
        self.root_fd = root_fd
        self.preserve_owner = preserve_owner
        self.deadline = deadline
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
        if not isinstance(size, int) or size < 0:    # never subtracts from what the free-space check counts
            raise JailError("unsafe member %r: size %r is not a byte count" % (member, size))
        self.deadline.check()
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
        if not stat.S_ISDIR(st.st_mode) or node.ident not in (None, file_identity(st)):
            raise JailError("member %r: the directory was replaced while being populated" % member)
        node.ident = file_identity(st)

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
            out = os.fdopen(os.open(parts[-1], NEW_FILE_FLAGS, 0o600, dir_fd=fd), "wb")
        finally:
            os.close(fd)
        with out:
            data = opener()
            try:
                self._copy(member, data, out, size)
            finally:
                data.close()
            out.flush()
            self._finish(out.fileno(), meta)

    def _copy(self, member, data, out, size):
        """Exactly `size` bytes (what the scan counted against the free space), a block at a time under the
        deadline; a source that ends early fails instead of leaving a short file."""
        left = size
        while left > 0:
            self.deadline.check()
            block = data.read(min(left, 1 << 20))
            if not block:
                raise JailError("member %r: its data ends %d bytes before its size (%d)" % (member, left, size))
            out.write(block)
            left -= len(block)

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
        if file_identity(linked) != file_identity(st):
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

    # -- OCI whiteouts: removing what an earlier layer wrote ------------------------------------------------------

    def _existing(self, member, parts):
        """The record at parts, None when the archive holds nothing there; a parent that is not a directory (a
        symlink above the name) is refused, so a removal never reaches through a link."""
        node = self.tree
        for i, part in enumerate(parts):
            if node.kind != DIRECTORY:
                raise JailError("unsafe member %r: %s is %s, not a directory"
                                % (member, "/".join(parts[:i]), node.kind))
            node = node.children.get(part)
            if node is None:
                return None
        return node

    def remove(self, member, name):
        """Remove `name` and everything below it (an OCI whiteout `member`): only what the archive wrote before, in
        the record and on disk, never following a link; a name the archive does not hold is nothing to do."""
        parts = self._parts(member, name, "the name it removes")
        if not parts:
            raise JailError("unsafe member %r: it removes the root" % member)
        parent = self._existing(member, parts[:-1])
        if parent is not None and parent.kind != DIRECTORY:
            raise JailError("unsafe member %r: %s is %s, not a directory" % (member, "/".join(parts[:-1]),
                                                                             parent.kind))
        if parent is None or parts[-1] not in parent.children:
            return
        self._count(member, 0)
        del parent.children[parts[-1]]
        if self.root_fd is None:
            return
        fd = self._parent_fd(parts, False)
        try:
            self._clear(fd, parts[-1])
        finally:
            os.close(fd)

    def empty(self, member, name):
        """Remove everything below the directory `name` (an OCI opaque whiteout `member`), keeping the directory."""
        parts = self._parts(member, name, "the directory it empties")
        node = self._existing(member, parts)
        if node is None:
            return
        if node.kind != DIRECTORY:
            raise JailError("unsafe member %r: %s is %s, not a directory" % (member, "/".join(parts), node.kind))
        for child in sorted(node.children):
            self.remove(member, "/".join(parts + [child]))

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
                if file_identity(os.fstat(fd)) != node.ident:
                    raise JailError("directory %r was replaced while being populated" % name)
                self._finish(fd, node.meta)
            finally:
                os.close(fd)
