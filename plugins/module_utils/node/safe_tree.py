# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing a root filesystem (a tarball's members or a directory's entries) below a directory, never outside it.

The populate program (jail.py) checks a whole source with a counting Writer before its first write, then writes it
with a Writer on the staging directory's descriptor. Standard library only, like jail.py: the populate image copies
both files into one directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import os
import stat
import tarfile
import time
import zlib

try:
    import lzma
    _LZMA_ERRORS = (lzma.LZMAError,)
except ImportError:    # a Python built without lzma reads no .xz archive anyway
    _LZMA_ERRORS = ()


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


# what reading a damaged or truncated archive raises, besides OSError
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error) + _LZMA_ERRORS

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
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
        self.meta = None        # a directory member's (mode, uid, gid, mtime), applied by Writer.close()
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


EXTENDED_MAX = 1 << 20  # bytes of one PAX or GNU long-name header, read whole into memory: far beyond any name or
#                         attribute set
_EXTENDED_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                   tarfile.SOLARIS_XHDTYPE)
# what tarfile itself raises, besides ARCHIVE_ERRORS, on headers it cannot make sense of (a seek past what an offset
# holds, a short GNU sparse extension block, a sparse map that is not numbers)
_READ_ERRORS = ARCHIVE_ERRORS + (OSError, ValueError, IndexError, OverflowError)


class _BadHeader(Exception):
    """A header whose numbers cannot be right; _from_tar names the archive."""


def _header(name, what):
    return _BadHeader("member %r: %s" % (name, what))


class _CheckedTarInfo(tarfile.TarInfo):
    """Python's tarfile (before 3.12.11 and 3.13.4, gh-130577) moves its reader by a header's size as given: a
    negative size (base-256, or a PAX size) moves it back - reading the same headers forever - and one beyond the
    archive seeks where no file offset reaches. So each header's numbers are checked here, as tarfile reads them and
    before it moves by them (frombuf: the raw header; fromtarfile: what the PAX and GNU headers made of it)."""

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        info = super(_CheckedTarInfo, cls).frombuf(buf, encoding, errors)
        if info.size < 0:
            raise _header(info.name, "its header's size is negative (%d)" % info.size)
        if info.type in _EXTENDED_TYPES and info.size > EXTENDED_MAX:
            raise _header(info.name, "an extended header of %d bytes (at most %d are read)"
                          % (info.size, EXTENDED_MAX))
        sparse = getattr(info, "_sparse_structs", None)
        if sparse is not None:
            structs, unused_extended, origsize = sparse
            if origsize < 0 or any(n < 0 for pair in structs for n in pair):
                raise _header(info.name, "a negative number in its sparse map")
        return info

    @classmethod
    def fromtarfile(cls, tarfile):
        start = tarfile.fileobj.tell()
        info = super(_CheckedTarInfo, cls).fromtarfile(tarfile)
        tarfile.check_member(info, start)
        return info


class _GuardedFile(object):
    """The archive's stream (decompressed) as tarfile reads it: every read checks the deadline and the limit, so
    that tarfile's own loops - a GNU sparse 1.0 map read number by number, old GNU sparse extension blocks - stop at
    them too."""

    def __init__(self, inner, limit, deadline):
        self.inner = inner
        self.limit = limit
        self.deadline = deadline
        self.name = getattr(inner, "name", None)

    def read(self, size=-1):
        self.deadline.check()
        if self.limit is not None and self.inner.tell() > self.limit:
            raise _BadHeader("the archive holds more than the jail's filesystem has free (%d bytes)" % self.limit)
        return self.inner.read(size)

    def seek(self, *args):
        return self.inner.seek(*args)

    def tell(self):
        return self.inner.tell()

    def close(self):
        self.inner.close()


class _CheckedTarFile(tarfile.TarFile):
    """A TarFile that checks every member's numbers (_CheckedTarInfo) against the archive: its length (an
    uncompressed one's; a compressed one's is known only once read), `limit` (the free space of the jail's
    filesystem: no more of the stream is read - headers and data count, all of it is written or stands for entries
    that take a block each) and `deadline`. Both are set on a subclass per archive (_checked_tarfile):
    TarFile.__init__ already reads the first member."""
    tarinfo = _CheckedTarInfo
    limit = None
    deadline = NO_DEADLINE

    def __init__(self, name=None, mode="r", fileobj=None, **kwargs):
        self._own_file = None
        if fileobj is None:     # an uncompressed archive, opened by its name
            fileobj = self._own_file = open(name, "rb")
        try:
            super(_CheckedTarFile, self).__init__(name, mode, _GuardedFile(fileobj, self.limit, self.deadline),
                                                  **kwargs)
        except BaseException:
            if self._own_file is not None:
                self._own_file.close()
            raise

    def close(self):
        try:
            super(_CheckedTarFile, self).close()
        finally:
            if self._own_file is not None:
                self._own_file.close()

    def __exit__(self, *exc):
        try:
            return super(_CheckedTarFile, self).__exit__(*exc)
        finally:     # on an error TarFile closes only a file it opened itself; this one it was handed
            if self._own_file is not None:
                self._own_file.close()

    def check_member(self, info, start):
        self.deadline.check()
        name = info.name
        if not isinstance(info.size, int) or info.size < 0:
            raise _header(name, "its size is %r" % (info.size,))
        end = self.offset       # where the next header starts: after this member's data
        if end <= start:
            raise _header(name, "its size would move the reader back (to byte %d, from %d)" % (end, start))
        length = _plain_length(self.fileobj.inner)
        if length is not None and end > length:
            raise _header(name, "its data (%d bytes from byte %d) runs past the end of the archive (%d bytes): the "
                          "archive is truncated or the size is wrong"
                          % (end - info.offset_data, info.offset_data, length))
        if self.limit is not None and end > self.limit:
            raise _header(name, "the archive holds more than the jail's filesystem has free (%d bytes) by then"
                          % self.limit)
        if info.sparse is not None:
            _check_sparse(name, info.sparse, info.size, end - info.offset_data)


def _check_sparse(name, sparse, size, stored):
    """A sparse map's regions: in order, not overlapping, inside the file's size, no more data than is stored."""
    position = data = 0
    for region in sparse:
        offset, count = region
        if not (isinstance(offset, int) and isinstance(count, int)) or offset < 0 or count < 0:
            raise _header(name, "a negative number in its sparse map: %r" % (region,))
        if count == 0:      # an end marker, or an unused slot of the old GNU header: (0, 0)
            if offset > size:
                raise _header(name, "its sparse map reaches byte %d of a %d-byte file" % (offset, size))
            continue
        if offset < position:
            raise _header(name, "its sparse map's regions overlap or are out of order at %r" % (region,))
        position = offset + count
        data += count
    if position > size:
        raise _header(name, "its sparse map reaches byte %d of a %d-byte file" % (position, size))
    if data > stored:
        raise _header(name, "its sparse map holds %d bytes of data, the archive %d" % (data, stored))


def _plain_length(fileobj):
    """The length of an uncompressed archive (a plain file tarfile reads directly), else None."""
    if not isinstance(fileobj, (io.BufferedReader, io.FileIO)):
        return None
    return os.fstat(fileobj.fileno()).st_size


def _checked_tarfile(limit, deadline):
    return type("_CheckedTarFileOfOneArchive", (_CheckedTarFile,), {"limit": limit, "deadline": deadline})


def archive_error(path, error, where=""):
    """JailError for an archive that cannot be read, naming it and where: never a raw EOFError or ValueError."""
    if isinstance(error, JailError):
        return error
    return JailError("the archive %s cannot be read%s: %s" % (path, where, str(error) or type(error).__name__))


def is_tar(path):
    """Whether the file `path` is a tar archive (plain or compressed), its first header read with the checks above;
    one that is damaged (a truncated compressed stream, a header whose numbers cannot be right) raises JailError."""
    try:
        with _checked_tarfile(None, NO_DEADLINE).open(path, "r:*"):
            return True
    except tarfile.ReadError:
        return False
    except (_BadHeader,) + _READ_ERRORS as e:
        raise archive_error(path, e)


def _from_tar(writer, path, limit=None, deadline=NO_DEADLINE):
    last = None
    try:
        archive = _checked_tarfile(limit, deadline).open(path, "r:*")
    except (_BadHeader,) + _READ_ERRORS as e:
        raise archive_error(path, e)
    with archive:
        while True:
            try:
                member = archive.next()
            except _BadHeader as e:     # names the member
                raise archive_error(path, e)
            except _READ_ERRORS as e:
                raise archive_error(path, e, " after member %r" % last if last is not None else "")
            if member is None:
                return
            try:
                _tar_member(writer, archive, member)
            except ARCHIVE_ERRORS as e:     # reading its data
                raise archive_error(path, e, " in member %r" % member.name)
            except OSError as e:
                raise JailError("member %r: %s" % (member.name, e))
            last = member.name


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


def read_into(writer, kind, path, limit=None):
    """Every entry of the source at `path` ("tar": a tarball; "dir": a directory) through `writer`, under its
    deadline; `limit`: the free bytes of the jail's filesystem (no more is read from a compressed archive)."""
    if kind == "tar":
        _from_tar(writer, path, limit, writer.deadline)
    else:
        _from_dir(writer, path)
