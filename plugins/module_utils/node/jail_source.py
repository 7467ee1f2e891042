# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The source of a jail's root filesystem, before anything is written: what it is (a directory, a tarball or an
OCI image layout), a check of its every entry, and whether it fits in the jail's filesystem.

Standard library only, like jail.py (the populate program) that uses it: the images copy both files, with
tree_reader.py and safe_tree.py, into one directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import sys

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node import safe_tree, tree_reader
except ImportError:  # run as a program from an image: safe_tree.py and tree_reader.py lie beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import safe_tree
    import tree_reader

JailError = safe_tree.JailError   # the one error of the populate program and its helpers
OCI_REF_ANNOTATION = "org.opencontainers.image.ref.name"
SPACE_MARGIN = 16 << 20


class Source(object):
    def __init__(self, path, kind, digest=None, tag=None, label=None):
        self.path = path
        self.kind = kind            # dir | tar | oci
        self.digest = digest
        self.tag = tag
        self.label = label or path

    def describe(self):
        return "%s %s%s" % (self.kind, self.label, ":%s" % self.tag if self.tag else "")


def _sha256(path, deadline=safe_tree.NO_DEADLINE):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            deadline.check()
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


def inspect_source(path, tag=None, label=None, deadline=safe_tree.NO_DEADLINE):
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
        if not tree_reader.is_tar(path):
            raise JailError("source %s is neither a directory nor a tar archive" % path)
        return Source(path, "tar", _sha256(path, deadline), None, label)
    raise JailError("source %s does not exist" % path)


def scan(source, limit=None, deadline=safe_tree.NO_DEADLINE):
    """Check every entry of a tarball or directory source without writing (check mode, and the real run before
    its first write): the first unsafe one raises JailError naming it. `limit`: the free bytes of the jail's
    filesystem (no more is read from an archive). -> the counting writer (bytes, entries, largest, skipped), or
    None for an OCI layout (umoci unpacks it)."""
    if source.kind == "oci":
        return None
    writer = safe_tree.Writer(deadline=deadline)
    tree_reader.read_into(writer, source.kind, source.path, limit)
    return writer


def scan_tar(path, limit=None):
    """scan() of a tarball."""
    return scan(Source(path, "tar"), limit)


def _human(size):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (size, unit)
        size /= 1024.0
    return None


def _filesystem(jail):
    """(the jail or its nearest existing parent, its statvfs, its block size)."""
    path = jail
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    vfs = os.statvfs(path)
    return path, vfs, vfs.f_frsize or vfs.f_bsize or 4096


def free_bytes(jail):
    unused_path, vfs, block = _filesystem(jail)
    return vfs.f_bavail * block


def check_space(jail, summary):
    """Refuse, before anything is written, a root filesystem that does not fit in the jail's filesystem (with a
    margin: a block per entry, 1% and SPACE_MARGIN). Sparse members count in full, as they are written in full.
    The real run checks after removing our leftovers of an interrupted run; check mode counts them as used."""
    path, vfs, block = _filesystem(jail)
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
