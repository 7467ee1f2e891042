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

SENTINEL = ".soperator-jail.json"
SENTINEL_FORMAT = 1
STAGING_PREFIX = ".soperator-populate-"
TRASH_PREFIX = ".soperator-old-"
KEPT = frozenset(["lost+found"])    # a filesystem's own entry, never moved or replaced
OVERWRITE_MODES = ("never", "if_empty", "always")
OCI_REF_ANNOTATION = "org.opencontainers.image.ref.name"
PROGRAM = "soperator.slurm jail.py"

POPULATED = "populated"
REPLACED = "replaced"
UNCHANGED = "unchanged"
REFUSED = "refused"


class JailError(Exception):
    pass


# --- the jail as it is -----------------------------------------------------------------------------------------

def read_sentinel(jail):
    """The sentinel's record, or None when the jail has none."""
    path = os.path.join(jail, SENTINEL)
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise JailError("the jail's sentinel %s cannot be read (%s); remove it and populate with overwrite=always"
                        % (path, e))
    if not isinstance(record, dict):
        raise JailError("the jail's sentinel %s is not a JSON object" % path)
    return record


def _ours(name):
    return name == SENTINEL or name.startswith(STAGING_PREFIX) or name.startswith(TRASH_PREFIX)


def jail_entries(jail):
    """Names at the jail's root that are its contents: not lost+found, the sentinel, or our leftovers."""
    if not os.path.isdir(jail):
        return []
    return sorted(n for n in os.listdir(jail) if n not in KEPT and not _ours(n))


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

class _Writer(object):
    """Creates entries under `root` by their archive names. A name may not climb out (`..`), a leading `/` means
    the root filesystem's root (like GNU tar), and no entry is written through a symlink: every parent must be a
    real directory, and an existing entry at the target is removed first, not followed. Device nodes are skipped:
    the jail's /dev is bind-mounted from the host at run time, and a device node in a shared jail is a way out."""

    def __init__(self, root, preserve_owner):
        self.root = root
        self.preserve_owner = preserve_owner
        self.dirs = []
        self.skipped = []

    def _parts(self, name):
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise JailError("unsafe member %r: '..' in its path" % name)
        return parts

    def _walk(self, name, create):
        """Real path of `name`; its parents must be real directories (created when `create`). None for the root."""
        parts = self._parts(name)
        if not parts:
            return None
        current = self.root
        for part in parts[:-1]:
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                if not create:
                    raise JailError("member %r refers to %s, which the archive does not hold" % (name, current))
                os.mkdir(current, 0o755)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise JailError("unsafe member %r: %s is %s, not a directory" % (
                    name, os.path.relpath(current, self.root), "a symlink" if stat.S_ISLNK(st.st_mode) else "a file"))
        return os.path.join(current, parts[-1])

    def _clear(self, path, keep_dir=False):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            if not keep_dir:
                shutil.rmtree(path)
        else:
            os.unlink(path)

    def _owner(self, path, uid, gid):
        if self.preserve_owner:
            os.chown(path, uid, gid, follow_symlinks=False)

    def directory(self, name, mode, uid, gid, mtime):
        path = self._walk(name, True)
        if path is None:
            return      # the jail's root keeps its own owner and mode (often a volume's mount point)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                self._clear(path)
                os.mkdir(path, 0o700)
        except FileNotFoundError:
            os.mkdir(path, 0o700)
        # owner, mode and time last: writing into it changes its mtime, and a read-only mode would block that
        self.dirs.append((path, mode, uid, gid, mtime))

    def file(self, name, data, mode, uid, gid, mtime):
        path = self._walk(name, True)
        if path is None:
            raise JailError("unsafe member %r: a file as the jail's root" % name)
        self._clear(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            if data is not None:
                shutil.copyfileobj(data, out, 1 << 20)
        self._finish(path, mode, uid, gid, mtime)

    def symlink(self, name, target, uid, gid, mtime):
        # the target is not checked: it is resolved inside the jail once the jail is the root, and nothing here
        # writes through a symlink
        path = self._walk(name, True)
        if path is None:
            raise JailError("unsafe member %r: a symlink as the jail's root" % name)
        self._clear(path)
        os.symlink(target, path)
        self._owner(path, uid, gid)
        os.utime(path, (mtime, mtime), follow_symlinks=False)

    def hardlink(self, name, existing):
        source = self._walk(existing, False)
        if source is None or not os.path.lexists(source):
            raise JailError("member %r links to %r, which the archive does not hold before it" % (name, existing))
        if not stat.S_ISREG(os.lstat(source).st_mode):
            raise JailError("unsafe member %r: a hard link to %r, which is not a regular file" % (name, existing))
        path = self._walk(name, True)
        if path is None:
            raise JailError("unsafe member %r: a hard link as the jail's root" % name)
        self._clear(path)
        os.link(source, path, follow_symlinks=False)

    def fifo(self, name, mode, uid, gid, mtime):
        path = self._walk(name, True)
        if path is None:
            raise JailError("unsafe member %r: a fifo as the jail's root" % name)
        self._clear(path)
        os.mkfifo(path, 0o600)
        self._finish(path, mode, uid, gid, mtime)

    def skip(self, name, why):
        self.skipped.append("%s (%s)" % ("/".join(self._parts(name)), why))

    def _finish(self, path, mode, uid, gid, mtime):
        self._owner(path, uid, gid)
        os.chmod(path, mode)    # after chown, which clears setuid and setgid
        os.utime(path, (mtime, mtime))

    def close(self):
        # deepest first, so setting a parent's mtime is the last change under it
        for path, mode, uid, gid, mtime in sorted(self.dirs, key=lambda d: d[0].count(os.sep), reverse=True):
            self._finish(path, mode, uid, gid, mtime)


def _from_tar(writer, path):
    with tarfile.open(path, "r:*") as archive:
        for member in archive:
            mode = member.mode & 0o7777
            args = (mode, member.uid, member.gid, int(member.mtime))
            if member.isdir():
                writer.directory(member.name, *args)
            elif member.isreg():
                writer.file(member.name, archive.extractfile(member), *args)
            elif member.issym():
                writer.symlink(member.name, member.linkname, member.uid, member.gid, int(member.mtime))
            elif member.islnk():
                writer.hardlink(member.name, member.linkname)
            elif member.isfifo():
                writer.fifo(member.name, *args)
            elif member.ischr() or member.isblk():
                writer.skip(member.name, "device node")
            else:
                writer.skip(member.name, "unsupported member type %r" % member.type)


def _from_dir(writer, top):
    links = {}      # (device, inode) -> first name, for files with more than one link
    for current, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for entry in sorted(dirnames) + sorted(filenames):
            full = os.path.join(current, entry)
            name = os.path.relpath(full, top)
            st = os.lstat(full)
            args = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime))
            if stat.S_ISDIR(st.st_mode):
                writer.directory(name, *args)
            elif stat.S_ISLNK(st.st_mode):
                writer.symlink(name, os.readlink(full), st.st_uid, st.st_gid, int(st.st_mtime))
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in links:
                    writer.hardlink(name, links[key])
                    continue
                links[key] = name
                with open(full, "rb") as data:
                    writer.file(name, data, *args)
            elif stat.S_ISFIFO(st.st_mode):
                writer.fifo(name, *args)
            else:
                writer.skip(name, "device node" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                            else "socket")


def scan_tar(path):
    """Check a tarball's member names without writing (check mode): the first unsafe one raises JailError."""
    with tarfile.open(path, "r:*") as archive:
        for member in archive:
            if ".." in member.name.split("/"):
                raise JailError("unsafe member %r: '..' in its path" % member.name)
            if member.islnk() and ".." in member.linkname.split("/"):
                raise JailError("unsafe member %r: a hard link to %r" % (member.name, member.linkname))


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


def fill(staging, source, run=_run_subprocess):
    """Write the root filesystem of `source` under `staging`; -> (directory holding it, skipped entries)."""
    if source.kind == "oci":
        rootfs = os.path.join(staging, "rootfs")
        _from_oci(source, rootfs, run)
        return rootfs, []
    writer = _Writer(staging, preserve_owner=os.geteuid() == 0)
    if source.kind == "tar":
        _from_tar(writer, source.path)
    else:
        _from_dir(writer, source.path)
    writer.close()
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


def _write_sentinel(jail, record):
    tmp = os.path.join(jail, SENTINEL + ".tmp")
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(jail, SENTINEL))


def _remove_leftovers(jail):
    """Staging and old-content directories of an earlier run that was cut short."""
    for name in os.listdir(jail):
        if name.startswith(STAGING_PREFIX) or name.startswith(TRASH_PREFIX):
            shutil.rmtree(os.path.join(jail, name), ignore_errors=True)


def _swap(jail, rootfs):
    """Move the jail's entries aside and the new ones in (renames on one filesystem), then drop the old ones."""
    try:
        os.unlink(os.path.join(jail, SENTINEL))     # from here on the jail does not count as populated
    except FileNotFoundError:
        pass
    trash = tempfile.mkdtemp(prefix=TRASH_PREFIX, dir=jail)
    for name in jail_entries(jail):
        os.rename(os.path.join(jail, name), os.path.join(trash, name))
    for name in sorted(os.listdir(rootfs)):
        if name in KEPT or _ours(name):
            continue    # a root filesystem taken from another jail may hold a sentinel: ours is written below
        os.rename(os.path.join(rootfs, name), os.path.join(jail, name))
    shutil.rmtree(trash)


def populate(jail, source_path, overwrite="never", check_mode=False, run=_run_subprocess, label=None,
             oci_tag=None):
    """Populate `jail` from `source_path` under the overwrite rule. -> dict(action, changed, message, sentinel,
    previous, skipped). Refusing is an action, not an exception; bad input and I/O failures raise JailError."""
    jail = os.path.abspath(jail)
    if os.path.lexists(jail) and not os.path.isdir(jail):
        raise JailError("jail %s exists and is not a directory" % jail)
    previous = read_sentinel(jail) if os.path.isdir(jail) else None
    action, message = plan(jail, overwrite, previous)
    result = {"action": action, "changed": action in (POPULATED, REPLACED), "message": message,
              "previous": previous, "sentinel": previous, "skipped": [], "jail": jail}
    if action in (UNCHANGED, REFUSED):
        return result
    source = inspect_source(source_path, oci_tag, label)
    if check_mode:
        if source.kind == "tar":
            scan_tar(source.path)
        result["sentinel"] = new_sentinel(source, overwrite)
        return result
    if not os.path.isdir(jail):
        os.makedirs(jail, 0o755)
    _remove_leftovers(jail)
    staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=jail)
    try:
        rootfs, result["skipped"] = fill(staging, source, run)
        _swap(jail, rootfs)
        record = new_sentinel(source, overwrite, utc_now())
        _write_sentinel(jail, record)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result["sentinel"] = record
    return result


# --- the populate image's program --------------------------------------------------------------------------------

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
        sys.stderr.write("jail populate failed: %s\n" % e)
        return 1
    for entry in result["skipped"]:
        sys.stderr.write("skipped %s\n" % entry)
    sys.stderr.write("%s: %s\n" % (result["action"], result["message"]))
    sys.stdout.write(json.dumps(dict((k, result[k]) for k in ("action", "changed", "sentinel")),
                                sort_keys=True) + "\n")
    return 2 if result["action"] == REFUSED else 0


if __name__ == "__main__":
    raise SystemExit(main())
