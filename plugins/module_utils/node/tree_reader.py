# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a root filesystem's source (a tarball, plain or compressed, or a directory) into a safe_tree.Writer.

Every tar header is checked before tarfile acts on it (lengths, sparse maps, extended headers), a compressed archive
is read no further than the jail's free space, and a directory's files are opened without following a link swapped
in since they were listed. Standard library only, like safe_tree.py and jail.py: the images copy them side by side.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import os
import stat
import sys
import tarfile
import zlib

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node import safe_tree
except ImportError:  # run as a program from an image: safe_tree.py lies beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import safe_tree

try:
    import lzma
    _LZMA_ERRORS = (lzma.LZMAError,)
except ImportError:    # a Python built without lzma reads no .xz archive anyway
    _LZMA_ERRORS = ()

# what reading a damaged or truncated archive raises, besides OSError
JailError = safe_tree.JailError   # the one error of the populate program and its helpers
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error) + _LZMA_ERRORS
ID_MAX = 2 ** 32 - 2    # (uid_t)-1 means "leave unchanged" to chown
TIME_LIMIT = 2 ** 33    # seconds either side of 1970: what time_t and every filesystem can hold


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
    deadline = safe_tree.NO_DEADLINE

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
        with _checked_tarfile(None, safe_tree.NO_DEADLINE).open(path, "r:*"):
            return True
    except tarfile.ReadError:
        return False
    except (_BadHeader,) + _READ_ERRORS as e:
        raise archive_error(path, e)


def _from_tar(writer, path, limit=None, deadline=safe_tree.NO_DEADLINE):
    for archive, member in _members(path, limit, deadline):
        try:
            _tar_member(writer, archive, member)
        except ARCHIVE_ERRORS as e:     # reading its data
            raise archive_error(path, e, " in member %r" % member.name)
        except OSError as e:
            raise JailError("member %r: %s" % (member.name, e))


def each_member(path, deadline=safe_tree.NO_DEADLINE):
    """(archive, member) for each member of the tar archive at `path` (plain or compressed), every header checked
    as read_into checks them: for a reader that picks members by name (an OCI archive's blobs) without writing any."""
    return _members(path, None, deadline)


def _members(path, limit, deadline):
    """(archive, member) for each member, its header checked (_checked_tarfile); every read error names the archive
    and the member it was at."""
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
            yield archive, member
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
        if safe_tree.file_identity(os.fstat(fd)) != safe_tree.file_identity(st):
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
        key = safe_tree.file_identity(st)
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
