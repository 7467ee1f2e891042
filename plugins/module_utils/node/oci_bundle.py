# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Making an OCI runtime bundle (rootfs/ + config.json) for `srun --container` from an OCI image.

The source is an OCI image layout (a directory: `skopeo copy ... oci:DIR`) or an OCI archive (a tarball of one:
`podman save --format oci-archive`, `skopeo copy ... oci-archive:FILE`). The bundle lands in a cache folder, named
by the image manifest's digest (CACHE/sha256-<hex>), and nothing is written outside that folder:

- every blob is copied into a private staging folder inside the cache and its digest and size checked before it is
  read (index.json, the one file without a digest, names the manifest; the manifest names the rest);
- each layer is unpacked by the jail's writer (safe_tree.Writer through tree_reader: no `..`, nothing written or
  removed through a link, no device nodes, every header checked), all layers through one Writer, whose record of
  what earlier layers wrote is what OCI whiteouts (`.wh.<name>`, `.wh..wh..opq`) may remove - a whiteout never
  reaches through a link or above the bundle's rootfs;
- setuid and setgid bits are dropped unless asked (--keep-setuid): the cache is inside the jail, which every user
  sees as /, and a setuid-root file from an image would be a way up there;
- the staging folder is renamed to its digest's name only when complete; a run that fails removes it.

Standard library only, like jail.py: run it on the login node (or anywhere the jail is mounted) as

    python3 oci_bundle.py --source IMAGE.tar --cache /home/USER/.cache/soperator-bundles [--ref NAME]

which prints one JSON line {"bundle": ..., "digest": ..., "changed": ...}; pass the bundle to
`srun --container=BUNDLE`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node import safe_tree, tree_reader
except ImportError:  # run as a program from an image: safe_tree.py and tree_reader.py lie beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import safe_tree
    import tree_reader


class BundleError(safe_tree.JailError):
    pass


REF_ANNOTATION = "org.opencontainers.image.ref.name"
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
# layers the standard library reads (tarfile: plain, gzip); zstd needs Python 3.14
LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
               "application/vnd.oci.image.layer.nondistributable.v1.tar",
               "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
               "application/vnd.docker.image.rootfs.diff.tar.gzip")
JSON_MAX = 4 << 20      # bytes of one index, manifest or image config: far beyond any real one
NESTING_MAX = 4         # indexes inside indexes
DIGEST = re.compile(r"^(sha256|sha512):([0-9a-f]+)$")
HEX_LENGTH = {"sha256": 64, "sha512": 128}
STAGING_PREFIX = ".staging-"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}
_COPY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


# --- digests and blobs ----------------------------------------------------------------------------------------------

def _parse_digest(descriptor, where):
    digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
    match = DIGEST.match(digest) if isinstance(digest, str) else None
    if match is None or len(match.group(2)) != HEX_LENGTH[match.group(1)]:
        raise BundleError("%s: digest %r is not a sha256 or sha512 digest" % (where, digest))
    size = descriptor.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BundleError("%s: size %r is not a byte count" % (where, size))
    return match.group(1), match.group(2), size


class Blobs(object):
    """The blobs of an image layout, read from the directory descriptor `layout_fd` without following a link."""

    def __init__(self, layout_fd, label):
        self.layout_fd = layout_fd
        self.label = label

    def _open(self, parts):
        parent = safe_tree.open_dirs(self.layout_fd, parts[:-1])
        try:
            fd = os.open(parts[-1], _COPY_FLAGS, dir_fd=parent)
        finally:
            os.close(parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise BundleError("%s: %s is not a regular file" % (self.label, "/".join(parts)))
        return os.fdopen(fd, "rb")

    def index(self):
        try:
            with self._open(["index.json"]) as f:
                return _json(f.read(JSON_MAX + 1), "%s: index.json" % self.label)
        except OSError as e:
            raise BundleError("%s is not an OCI image layout: index.json: %s" % (self.label, e))

    def copy(self, descriptor, where, out=None, limit=None):
        """The blob a descriptor names, its size and digest checked: into the open file `out`, or returned as bytes
        (at most `limit` of them)."""
        algorithm, hexdigest, size = _parse_digest(descriptor, where)
        if out is None and size > limit:
            raise BundleError("%s: %d bytes, more than the %d read for one" % (where, size, limit))
        digest = hashlib.new(algorithm)
        kept = []
        try:
            source = self._open(["blobs", algorithm, hexdigest])
        except OSError as e:
            raise BundleError("%s: blob %s:%s is missing from %s (%s)" % (where, algorithm, hexdigest, self.label, e))
        with source:
            left = size + 1     # one byte more than the descriptor says: a longer blob is found, not cut
            while left > 0:
                block = source.read(min(left, 1 << 20))
                if not block:
                    break
                left -= len(block)
                digest.update(block)
                if out is None:
                    kept.append(block)
                else:
                    out.write(block)
        got = size + 1 - left
        if got != size:
            raise BundleError("%s: blob %s:%s holds %s bytes, its descriptor says %d"
                              % (where, algorithm, hexdigest, "more than %d" % size if got > size else got, size))
        if digest.hexdigest() != hexdigest:
            raise BundleError("%s: blob %s:%s does not match its digest (it is %s:%s)"
                              % (where, algorithm, hexdigest, algorithm, digest.hexdigest()))
        return b"".join(kept) if out is None else None

    def json(self, descriptor, where):
        return _json(self.copy(descriptor, where, limit=JSON_MAX), where)


def _json(data, where):
    if len(data) > JSON_MAX:
        raise BundleError("%s: more than %d bytes" % (where, JSON_MAX))
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeError, ValueError) as e:
        raise BundleError("%s is not JSON: %s" % (where, e))
    if not isinstance(value, dict):
        raise BundleError("%s is not a JSON object" % where)
    return value


def _unpack_archive(path, dest_fd):
    """The layout files of an OCI archive (oci-layout, index.json, blobs/ALG/HEX: regular members only, nothing
    else) into the directory dest_fd, so that Blobs reads them like a layout's."""
    found = False
    for archive, member in tree_reader.each_member(path):
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        wanted = (parts in (["oci-layout"], ["index.json"]) or
                  (len(parts) == 3 and parts[0] == "blobs" and parts[1] in HEX_LENGTH and
                   re.match(r"^[0-9a-f]+$", parts[2]) is not None))
        if not wanted or not member.isreg():
            continue
        found = found or parts == ["index.json"]
        parent = safe_tree.open_dirs(dest_fd, parts[:-1], create=True)
        try:
            try:
                os.unlink(parts[-1], dir_fd=parent)     # a name held twice: the last one, as tar extracts
            except FileNotFoundError:
                pass
            out = os.fdopen(os.open(parts[-1], safe_tree.NEW_FILE_FLAGS, 0o600, dir_fd=parent), "wb")
        finally:
            os.close(parent)
        with out:
            data = archive.extractfile(member)
            try:
                while True:
                    block = data.read(1 << 20)
                    if not block:
                        break
                    out.write(block)
            finally:
                data.close()
    if not found:
        raise BundleError("%s is not an OCI archive: it holds no index.json" % path)


# --- choosing the image -------------------------------------------------------------------------------------------

def _platform_fits(descriptor, arch):
    wanted = descriptor.get("platform")
    if not isinstance(wanted, dict):
        return True
    return wanted.get("os") in (None, "linux") and wanted.get("architecture") in (None, arch)


def choose_manifest(blobs, ref=None, arch=None):
    """The descriptor of the image manifest: the one `ref` names (the ref.name annotation), or the only one; an
    index inside is followed to the manifest for this machine's architecture."""
    arch = arch or ARCHES.get(platform.machine(), platform.machine())
    manifests = blobs.index().get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise BundleError("%s: index.json lists no manifests" % blobs.label)
    if ref is not None:
        named = [m for m in manifests
                 if isinstance(m, dict) and (m.get("annotations") or {}).get(REF_ANNOTATION) == ref]
        if not named:
            refs = sorted(str((m.get("annotations") or {}).get(REF_ANNOTATION)) for m in manifests
                          if isinstance(m, dict))
            raise BundleError("%s holds no image named %r (it has: %s)" % (blobs.label, ref, ", ".join(refs)))
        manifests = named
    where = "index.json"
    for unused_depth in range(NESTING_MAX):
        fitting = [m for m in manifests if isinstance(m, dict) and _platform_fits(m, arch)]
        if len(fitting) != 1:
            raise BundleError("%s: %s lists %d images for linux/%s; name one with --ref"
                              % (blobs.label, where, len(fitting), arch))
        descriptor = fitting[0]
        if descriptor.get("mediaType") not in INDEX_TYPES:
            return descriptor
        where = "the index %s" % descriptor.get("digest")
        manifests = blobs.json(descriptor, where).get("manifests")
        if not isinstance(manifests, list):
            raise BundleError("%s: %s lists no manifests" % (blobs.label, where))
    raise BundleError("%s: indexes nested deeper than %d" % (blobs.label, NESTING_MAX))


# --- layers -------------------------------------------------------------------------------------------------------

def _whiteout(member):
    """("remove", name) or ("empty", directory) for an OCI whiteout member, else None."""
    parts = [p for p in member.split("/") if p not in ("", ".")]
    if not parts or not parts[-1].startswith(WHITEOUT):
        return None
    if parts[-1] == OPAQUE:
        return ("empty", "/".join(parts[:-1]))
    name = parts[-1][len(WHITEOUT):]
    if name in ("", ".", "..") or name.startswith(WHITEOUT):
        raise BundleError("unsafe member %r: a whiteout of %r" % (member, name))
    return ("remove", "/".join(parts[:-1] + [name]))


class _Whiteouts(object):
    """The first pass over a layer: its whiteouts, collected (a Writer's interface, writing nothing). They apply
    to what lower layers wrote, so they are applied before the layer's own entries, wherever the tar holds them."""

    def __init__(self, deadline):
        self.deadline = deadline
        self.found = []

    def _note(self, member, *unused):
        found = _whiteout(member)
        if found is not None:
            self.found.append((member,) + found)

    directory = file = symlink = hardlink = fifo = skip = _note


class _LayerEntries(object):
    """The second pass: a layer's entries but its whiteouts into the Writer, setuid and setgid dropped unless
    kept."""

    def __init__(self, writer, keep_setuid):
        self.writer = writer
        self.deadline = writer.deadline
        self.mask = 0o7777 if keep_setuid else 0o1777

    def _meta(self, meta):
        mode, uid, gid, mtime = meta
        return (mode & self.mask, uid, gid, mtime)

    def directory(self, member, meta):
        if _whiteout(member) is None:
            self.writer.directory(member, self._meta(meta))

    def file(self, member, opener, size, meta):
        if _whiteout(member) is None:
            self.writer.file(member, opener, size, self._meta(meta))

    def symlink(self, member, target, meta):
        if _whiteout(member) is None:
            self.writer.symlink(member, target, meta)

    def hardlink(self, member, existing):
        if _whiteout(member) is None:
            self.writer.hardlink(member, existing)

    def fifo(self, member, meta):
        if _whiteout(member) is None:
            self.writer.fifo(member, self._meta(meta))

    def skip(self, member, why):
        if _whiteout(member) is None:
            self.writer.skip(member, why)


def apply_layer(writer, path, keep_setuid=False):
    """One layer tarball at `path` onto what the Writer's earlier layers wrote: its whiteouts, then its entries."""
    whiteouts = _Whiteouts(writer.deadline)
    tree_reader.read_into(whiteouts, "tar", path)
    for member, action, name in whiteouts.found:
        if action == "empty":
            writer.empty(member, name)
        else:
            writer.remove(member, name)
    tree_reader.read_into(_LayerEntries(writer, keep_setuid), "tar", path)


# --- the runtime config -------------------------------------------------------------------------------------------

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _strings(config, key, where):
    value = config.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and "\x00" not in v for v in value):
        raise BundleError("%s: config.%s is not a list of strings" % (where, key))
    return value


# the jail's home directories: bind-mounted into every container, so a step reads and writes the user's files
DEFAULT_MOUNTS = ("/home",)
# what the runtime itself mounts; a bind over them is refused
RUNTIME_PATHS = ("/proc", "/dev", "/sys")


def check_mounts(mounts):
    """The bind mounts' paths, each absolute, normalized and not one the runtime owns."""
    for path in mounts:
        if (not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path or
                path == "/" or "\x00" in path or
                any(path == p or path.startswith(p + "/") for p in RUNTIME_PATHS)):
            raise BundleError("mount %r is not an absolute, normalized path other than / and outside %s"
                              % (path, " ".join(RUNTIME_PATHS)))
    if len(set(mounts)) != len(mounts):
        raise BundleError("mounts %s name a path twice" % ", ".join(mounts))
    return list(mounts)


def runtime_config(image_config, where="the image config", user=(0, 0), mounts=DEFAULT_MOUNTS):
    """The bundle's config.json (OCI runtime spec) from the image's config: its command, environment and working
    directory; host network (jobs talk to each other), its own pid, ipc, uts and mount namespaces; no new
    privileges.

    Rootless, for one user: slurmstepd runs the runtime as the job's user and copies this config.json for each task,
    replacing only the process's args and environment, the terminal and root.path (Slurm 22.05 to 26.05). It never
    sets process.user or the id mappings, so the bundle is made for its user (`user`: uid, gid): a user namespace
    that maps the container's 0 to that uid and gid, the only ids an unprivileged runtime may map (runc requires a
    mapping of 0: runc 1.1.5 and forky's 1.3.6 refuse a namespace that maps the uid to itself). Inside, the process
    is root of that namespace only - /proc/self/uid_map reads `0 <uid> 1` - and everything it does to files outside
    (a bind-mounted path) it does as the user. `mounts`: the jail's paths bind-mounted at the same path (the jail is
    what the step sees as / when the runtime starts)."""
    config = image_config.get("config") or {}
    if not isinstance(config, dict):
        raise BundleError("%s: config is not an object" % where)
    args = _strings(config, "Entrypoint", where) + _strings(config, "Cmd", where)
    env = _strings(config, "Env", where)
    cwd = config.get("WorkingDir") or "/"
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise BundleError("%s: config.WorkingDir %r is not an absolute path" % (where, cwd))
    uid, gid = user
    nosuid = ["nosuid", "noexec", "nodev"]
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": args or ["/bin/sh"],
                    "env": env or [DEFAULT_PATH], "cwd": cwd, "noNewPrivileges": True,
                    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]},
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "container",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": nosuid + ["mode=1777"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": nosuid},
            {"destination": "/sys", "type": "none", "source": "/sys",
             "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]},
        ] + [{"destination": path, "type": "none", "source": path, "options": ["rbind", "nosuid", "nodev"]}
             for path in check_mounts(mounts)],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "user"}],
            "uidMappings": [{"containerID": 0, "hostID": uid, "size": 1}],
            "gidMappings": [{"containerID": 0, "hostID": gid, "size": 1}],
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
                            "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def config_bytes(config):
    return json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"


# --- the bundle ---------------------------------------------------------------------------------------------------

def _write_new(dir_fd, name, data):
    with os.fdopen(os.open(name, safe_tree.NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd), "wb") as out:
        out.write(data)


def _open_cache(cache):
    refusal = safe_tree.link_refusal("--cache", cache)
    if refusal:
        raise BundleError(refusal)
    try:
        os.mkdir(cache, 0o755)
    except FileExistsError:
        pass
    return os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def bundle_name(descriptor):
    algorithm, hexdigest, unused_size = _parse_digest(descriptor, "the manifest")
    return "%s-%s" % (algorithm, hexdigest)


def make_bundle(source, cache, ref=None, keep_setuid=False, preserve_owner=None, arch=None,
                deadline=safe_tree.NO_DEADLINE, user=None, mounts=DEFAULT_MOUNTS):
    """The bundle of the image at `source` (an OCI layout directory or archive) in `cache`, made unless already
    there, for `user` ((uid, gid); default: who runs this) with the jail paths `mounts` bound inside.
    -> {"bundle": path, "digest": manifest digest, "changed": bool}"""
    if preserve_owner is None:
        preserve_owner = os.geteuid() == 0
    if user is None:
        user = (os.getuid(), os.getgid())
    runtime = {"user": tuple(user), "mounts": check_mounts(list(mounts))}
    cache = os.path.abspath(cache)
    cache_fd = _open_cache(cache)
    try:
        return _make(source, cache, cache_fd, ref, keep_setuid, preserve_owner, arch, deadline, runtime)
    finally:
        os.close(cache_fd)


def _make(source, cache, cache_fd, ref, keep_setuid, preserve_owner, arch, deadline, runtime):
    staging = STAGING_PREFIX + "%d-%s" % (os.getpid(), os.urandom(6).hex())
    os.mkdir(staging, 0o700, dir_fd=cache_fd)
    try:
        staging_fd = safe_tree.open_dirs(cache_fd, [staging])
        try:
            result = _make_in(source, cache, cache_fd, staging, staging_fd, ref, keep_setuid, preserve_owner,
                              arch, deadline, runtime)
        finally:
            os.close(staging_fd)
    finally:
        shutil.rmtree(staging, dir_fd=cache_fd)     # fd-based: follows no link (rmtree.avoids_symlink_attacks)
    return result


def _source_blobs(source, staging_fd):
    """Blobs of the source: a layout directory read in place, an archive's layout files copied into staging."""
    st = os.lstat(source)
    if stat.S_ISDIR(st.st_mode):
        return os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not stat.S_ISREG(st.st_mode):
        raise BundleError("%s is neither an OCI image layout (a directory) nor an OCI archive" % source)
    os.mkdir("source", 0o700, dir_fd=staging_fd)
    fd = safe_tree.open_dirs(staging_fd, ["source"])
    try:
        _unpack_archive(source, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _existing_config(cache_fd, name):
    """The config.json of the bundle `name` in the cache (None when there is no such bundle), read without
    following a link."""
    try:
        bundle_fd = safe_tree.open_dirs(cache_fd, [name])
    except FileNotFoundError:
        return None
    try:
        fd = os.open("config.json", _COPY_FLAGS, dir_fd=bundle_fd)
    except OSError:
        return b""
    finally:
        os.close(bundle_fd)
    with os.fdopen(fd, "rb") as f:
        return f.read(JSON_MAX + 1)


def _make_in(source, cache, cache_fd, staging, staging_fd, ref, keep_setuid, preserve_owner, arch, deadline,
             runtime):
    layout_fd = _source_blobs(source, staging_fd)
    try:
        blobs = Blobs(layout_fd, source)
        descriptor = choose_manifest(blobs, ref, arch)
        name = bundle_name(descriptor)
        result = {"bundle": os.path.join(cache, name), "digest": descriptor["digest"], "changed": False}
        if descriptor.get("mediaType") not in MANIFEST_TYPES + (None,):
            raise BundleError("%s: the image %s is a %r, not an image manifest"
                              % (source, descriptor["digest"], descriptor.get("mediaType")))
        manifest = blobs.json(descriptor, "the manifest %s" % descriptor["digest"])
        image_config = blobs.json(manifest.get("config"), "the image config")
        config = config_bytes(runtime_config(image_config, user=runtime["user"], mounts=runtime["mounts"]))
        existing = _existing_config(cache_fd, name)
        if existing is not None:
            # made before (a bundle is renamed in only when complete); its config.json is for one user and its mounts
            if existing != config:
                raise BundleError("%s was made with another config.json (another user or other mounts than uid %d, "
                                  "gid %d, %s): remove it, or use a cache of your own"
                                  % (result["bundle"], runtime["user"][0], runtime["user"][1],
                                     " ".join(runtime["mounts"]) or "no mounts"))
            return result
        layers = manifest.get("layers")
        if not isinstance(layers, list):
            raise BundleError("the manifest %s lists no layers" % descriptor["digest"])
        for i, layer in enumerate(layers):
            kind = layer.get("mediaType") if isinstance(layer, dict) else None
            if kind not in LAYER_TYPES:
                raise BundleError("layer %d of %s: media type %r is not read here (plain or gzip tar only)"
                                  % (i, descriptor["digest"], kind))
        os.mkdir("bundle", 0o755, dir_fd=staging_fd)
        bundle_fd = safe_tree.open_dirs(staging_fd, ["bundle"])
        try:
            _write_layers(blobs, layers, staging_fd, bundle_fd, keep_setuid, preserve_owner, deadline,
                          runtime["mounts"])
            _write_new(bundle_fd, "config.json", config)
        finally:
            os.close(bundle_fd)
    finally:
        os.close(layout_fd)
    try:
        os.rename("bundle", name, src_dir_fd=staging_fd, dst_dir_fd=cache_fd)
    except OSError:
        if not os.path.isdir(os.path.join(cache, name)):
            raise
        return result       # another run made it meanwhile
    result["changed"] = True
    return result


def _mount_points(rootfs_fd, mounts):
    """The directories the runtime mounts on, made where the image lacks them: a rootless runtime is root of its
    user namespace only and cannot make them in a rootfs it does not own. No link is followed."""
    for path in list(RUNTIME_PATHS) + list(mounts):
        try:
            os.close(safe_tree.open_dirs(rootfs_fd, [p for p in path.split("/") if p], create=True))
        except OSError as e:
            raise BundleError("the image's %s is not a directory (a link?), where the container mounts: %s"
                              % (path, e))


def _write_layers(blobs, layers, staging_fd, bundle_fd, keep_setuid, preserve_owner, deadline, mounts):
    os.mkdir("rootfs", 0o755, dir_fd=bundle_fd)
    rootfs_fd = safe_tree.open_dirs(bundle_fd, ["rootfs"])
    try:
        writer = safe_tree.Writer(rootfs_fd, preserve_owner=preserve_owner, deadline=deadline)
        for i, layer in enumerate(layers):
            with os.fdopen(os.open("layer", safe_tree.NEW_FILE_FLAGS, 0o600, dir_fd=staging_fd), "wb") as out:
                blobs.copy(layer, "layer %d" % i, out)
            # tree_reader opens a tarball by path: the staging folder's own, made by this run and mode 0700
            path = "/proc/self/fd/%d/layer" % staging_fd
            try:
                apply_layer(writer, path, keep_setuid)
            finally:
                os.unlink("layer", dir_fd=staging_fd)
        writer.close()
        _mount_points(rootfs_fd, mounts)
    finally:
        os.close(rootfs_fd)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="oci_bundle.py",
                                     description="Make an OCI runtime bundle for srun --container from an OCI image.")
    parser.add_argument("--source", required=True, help="an OCI image layout (directory) or OCI archive (tarball)")
    parser.add_argument("--cache", required=True, help="the folder of bundles, one per manifest digest")
    parser.add_argument("--ref", help="the image to use when the source holds several (its ref.name annotation)")
    parser.add_argument("--keep-setuid", action="store_true", help="keep setuid and setgid bits of the image")
    parser.add_argument("--user", metavar="UID:GID", help="whose steps run the bundle (default: yours): the "
                        "container's user namespace maps this uid and gid only")
    parser.add_argument("--mount", action="append", metavar="PATH", help="a path of the jail to bind-mount at the "
                        "same path inside (repeatable; default: /home)")
    args = parser.parse_args(argv)
    user = None
    if args.user is not None:
        match = re.match(r"^([0-9]+):([0-9]+)$", args.user)
        if match is None:
            parser.error("--user %r is not UID:GID" % args.user)
        user = (int(match.group(1)), int(match.group(2)))
    try:
        result = make_bundle(args.source, args.cache, args.ref, args.keep_setuid, user=user,
                             mounts=DEFAULT_MOUNTS if args.mount is None else args.mount)
    except (safe_tree.JailError, OSError) as e:
        sys.stderr.write("oci bundle failed: %s\n" % e)
        return 1
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
