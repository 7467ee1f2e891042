# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Making an OCI runtime bundle (rootfs/ + config.json) for `srun --container` from an OCI image.

The source is a registry image (docker://HOST/NAME:TAG, or NAME@sha256:HEX: pulled with skopeo), an OCI image
layout (a directory: `skopeo copy ... oci:DIR`) or an OCI archive (a tarball of one: `podman save --format
oci-archive`). The bundle lands in a cache folder, named by the image manifest's digest (CACHE/sha256-<hex>), and
nothing is written outside that folder:

- the digest is resolved first, nothing written (`skopeo inspect --raw`, an index followed to this machine's
  architecture; a layout's or archive's index.json): a bundle of that name is the image's, and a second run finds
  it; a registry image is then pulled by that digest (a tag that moves meanwhile changes nothing) into a private
  staging folder inside the cache, with skopeo reaching it through a descriptor (no path of ours it could follow);
- every blob is copied into the staging folder and its digest and size checked before it is read (index.json, the
  one file without a digest, names the manifest; the manifest names the rest), a pulled image's too;
- each layer is unpacked by the jail's writer (safe_tree.Writer through tree_reader: no `..`, nothing written or
  removed through a link, no device nodes, every header checked), all layers through one Writer, whose record of
  what earlier layers wrote is what OCI whiteouts (`.wh.<name>`, `.wh..wh..opq`) may remove - a whiteout never
  reaches through a link or above the bundle's rootfs; zstd layers are refused (Python's tarfile reads plain and
  gzip);
- setuid and setgid bits are dropped unless asked (--keep-setuid): the cache is inside the jail, which every user
  sees as /, and a setuid-root file from an image would be a way up there;
- the staging folder is renamed to its digest's name only when complete, with our marker (.soperator-bundle.json)
  inside: removing (--remove, state=absent) touches only a bundle that has it; a run that fails leaves nothing.

Standard library only, like jail.py (skopeo for registries): in the jail it is /usr/local/bin/soperator-bundle, run
on the login node as

    soperator-bundle docker://registry.example.com/team/image:v1     # or an OCI archive, or a layout directory

which prints the bundle's path (--json: a JSON line {"bundle", "digest", "changed", "commands"}); pass it to
`srun --container=BUNDLE`. The cache defaults to ~/.cache/soperator-bundles (--cache).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import base64
import hashlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import stat
import subprocess
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


class ArchiveBlobs(Blobs):
    """The blobs of an OCI archive read in place (a scan of the archive per file, nothing written): what a plan
    (check mode) needs to name the image - index.json and, rarely, an index inside - before any copy."""

    def __init__(self, path):
        super(ArchiveBlobs, self).__init__(None, path)

    def _open(self, parts):
        wanted, found = "/".join(parts), None
        for archive, member in tree_reader.each_member(self.label):
            if "/".join(p for p in member.name.split("/") if p not in ("", ".")) == wanted and member.isreg():
                if member.size > JSON_MAX:
                    raise BundleError("%s: %s: more than %d bytes" % (self.label, wanted, JSON_MAX))
                found = archive.extractfile(member).read()     # the last one of a name, as tar extracts
        if found is None:
            raise FileNotFoundError(2, "not in the archive", wanted)
        return io.BytesIO(found)


# --- registry sources: skopeo ---------------------------------------------------------------------------------------

DOCKER = "docker://"
PULLED_TAG = "image"
# what skopeo accepts after docker:// (it checks the rest): no option-like start, no spaces or control characters
REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
PINNED = re.compile(r"@(sha256|sha512):[0-9a-f]+$")


def registry_reference(source):
    """The image reference of a registry source - docker://HOST/NAME[:TAG|@DIGEST], or NAME@sha256:HEX that is no
    path here - else None (a layout or archive path)."""
    if source.startswith(DOCKER):
        ref = source[len(DOCKER):]
    elif PINNED.search(source) and not os.path.lexists(source):
        ref = source
    else:
        return None
    if not REFERENCE.fullmatch(ref):
        raise BundleError("%r is not an image reference (docker://HOST/NAME:TAG or HOST/NAME@sha256:HEX)" % source)
    return ref


def repository(ref):
    """HOST/NAME of a reference, its tag or digest cut off (a ':' before the last '/' is a port)."""
    name = ref.split("@", 1)[0]
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


_SKOPEO_FATAL = re.compile(r'level=fatal msg="((?:[^"\\]|\\.)*)"')
_SKOPEO_REASONS = (
    (("manifest unknown", "name unknown", "repository name not known", "not found"),
     "image %s was not found in its registry (check the name and the tag)"),
    (("unauthorized", "authentication required", "denied", "incorrect username or password"),
     "the registry refused access to %s: give credentials for it in an auth file (--auth-file; made by "
     "`skopeo login --authfile FILE HOST`)"),
    (("server gave HTTP response to HTTPS client",),
     "the registry of %s speaks plain HTTP: only for a registry you trust, pass --no-tls-verify"),
    (("x509:", "certificate"), "the registry of %s has a TLS certificate this machine does not trust"),
    (("connection refused", "no such host", "i/o timeout", "network is unreachable", "dial tcp"),
     "cannot reach the registry of %s"),
)


def explain_skopeo(ref, stderr):
    """A message a user understands from skopeo's failure: what went wrong with `ref`, then skopeo's own words."""
    found = _SKOPEO_FATAL.search(stderr)
    said = found.group(1).replace('\\"', '"') if found else (stderr.strip().splitlines() or ["no message"])[-1]
    for needles, message in _SKOPEO_REASONS:
        if any(n in said for n in needles):
            return "%s (skopeo: %s)" % (message % ref, said)
    return "skopeo failed for %s: %s" % (ref, said)


class Registry(object):
    """skopeo, the way this program runs it: the auth file (a path; the credentials in it are never read here nor
    logged), TLS verification, and the commands run, in order."""

    def __init__(self, auth_file=None, tls_verify=True, program="skopeo", timeout=1800):
        self.auth_file = auth_file
        self.tls_verify = tls_verify
        self.program = program
        self.timeout = timeout
        self.commands = []

    def _options(self, prefix):
        found = ["--authfile", self.auth_file] if self.auth_file else []
        return found + ([] if self.tls_verify else ["--%stls-verify=false" % prefix])

    def _run(self, argv, ref, pass_fds=()):
        self.commands.append(" ".join(shlex.quote(a) for a in argv))
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.timeout,
                                  check=False, pass_fds=pass_fds)
        except FileNotFoundError:
            raise BundleError("%s is not installed (Debian package skopeo): it pulls images from registries"
                              % self.program)
        except subprocess.TimeoutExpired:
            raise BundleError("skopeo did not finish within %ds for %s" % (self.timeout, ref))
        if proc.returncode != 0:
            raise BundleError(explain_skopeo(ref, proc.stderr.decode("utf-8", "replace")))
        return proc.stdout

    def manifest(self, ref):
        """The raw manifest (or index) `ref` names, as the registry serves it, and its digest."""
        raw = self._run([self.program, "inspect", "--raw"] + self._options("") + [DOCKER + ref], ref)
        if len(raw) > JSON_MAX:
            raise BundleError("%s: the manifest is more than %d bytes" % (ref, JSON_MAX))
        return _json(raw, "the manifest of %s" % ref), "sha256:" + hashlib.sha256(raw).hexdigest()

    def resolve(self, ref, arch=None):
        """The digest of the image manifest `ref` names for linux/`arch` (an index followed to it), as the registry
        holds it: what the bundle is named by, and what is pulled (so a tag that moves meanwhile changes nothing)."""
        arch = arch or ARCHES.get(platform.machine(), platform.machine())
        pinned = PINNED.search(ref)
        manifest, digest = self.manifest(ref)
        if pinned and pinned.group(1) == "sha256" and digest != ref[pinned.start() + 1:]:
            raise BundleError("%s: the registry sent a manifest of digest %s" % (ref, digest))
        for unused_depth in range(NESTING_MAX):
            manifests = manifest.get("manifests")
            if not isinstance(manifests, list):
                return digest
            fitting = [m for m in manifests if isinstance(m, dict) and _platform_fits(m, arch)]
            if len(fitting) != 1:
                raise BundleError("%s lists %d images for linux/%s" % (ref, len(fitting), arch))
            _parse_digest(fitting[0], "%s: the linux/%s image" % (ref, arch))
            digest = fitting[0]["digest"]
            manifest, got = self.manifest(repository(ref) + "@" + digest)
            if got != digest:
                raise BundleError("%s: the registry sent a manifest of digest %s for %s" % (ref, got, digest))
        raise BundleError("%s: indexes nested deeper than %d" % (ref, NESTING_MAX))

    def pull(self, ref, digest, staging_fd, name):
        """The image `digest` of ref's repository into the OCI layout `name` (tag PULLED_TAG) inside the staging
        folder, reached through its descriptor: skopeo follows no link of ours to get there."""
        pinned = repository(ref) + "@" + digest
        dest = "oci:/proc/self/fd/%d/%s:%s" % (staging_fd, name, PULLED_TAG)
        self._run([self.program, "copy", "--quiet"] + self._options("src-") + [DOCKER + pinned, dest], ref,
                  pass_fds=(staging_fd,))


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

MARKER = ".soperator-bundle.json"     # in every bundle made here: what state=absent may remove
PROGRAM = "soperator-bundle"


def _write_new(dir_fd, name, data):
    with os.fdopen(os.open(name, safe_tree.NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd), "wb") as out:
        out.write(data)


def _refuse_linked_cache(cache):
    refusal = safe_tree.link_refusal("--cache", cache)
    if refusal:
        raise BundleError(refusal)


def _open_cache(cache):
    _refuse_linked_cache(cache)
    os.makedirs(cache, 0o755, exist_ok=True)
    return os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def bundle_name(digest):
    algorithm, hexdigest, unused_size = _parse_digest({"digest": digest, "size": 0}, "the manifest")
    return "%s-%s" % (algorithm, hexdigest)


def resolve(source, ref=None, arch=None, registry=None):
    """The manifest digest the bundle of `source` is named by, nothing written: a registry's (skopeo inspect), a
    layout's or an archive's (its index.json)."""
    pulled = registry_reference(source)
    if pulled is not None:
        if ref is not None:
            raise BundleError("--ref names an image inside a layout or archive; %s names its own" % source)
        return (registry or Registry()).resolve(pulled, arch)
    st = os.lstat(source)
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return choose_manifest(Blobs(fd, source), ref, arch)["digest"]
        finally:
            os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise BundleError("%s is neither an OCI image layout (a directory) nor an OCI archive" % source)
    return choose_manifest(ArchiveBlobs(source), ref, arch)["digest"]


def _read_marker(cache, name):
    """The marker of the bundle `name` in `cache` (a dict), None when it has none, or False when there is no
    bundle of that name. Read without following a link."""
    try:
        cache_fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            st = os.stat(name, dir_fd=cache_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return None
        bundle_fd = safe_tree.open_dirs(cache_fd, [name])
        try:
            fd = os.open(MARKER, _COPY_FLAGS, dir_fd=bundle_fd)
        except OSError:
            return None
        finally:
            os.close(bundle_fd)
        with os.fdopen(fd, "rb") as f:
            try:
                found = json.loads(f.read(JSON_MAX).decode("utf-8"))
            except (UnicodeError, ValueError):
                return None
        return found if isinstance(found, dict) and found.get("program") == PROGRAM else None
    finally:
        os.close(cache_fd)


def plan(source, cache, ref=None, arch=None, registry=None):
    """What a run would find, nothing written: {"bundle", "digest", "exists", "ours"} (ours: it carries our marker;
    only such a bundle is removed)."""
    _refuse_linked_cache(cache)
    cache = os.path.abspath(cache)
    digest = resolve(source, ref, arch, registry)
    name = bundle_name(digest)
    marker = _read_marker(cache, name)
    return {"bundle": os.path.join(cache, name), "digest": digest, "exists": marker is not False,
            "ours": bool(marker), "runtime": _marker_runtime(marker)}


def _marker_runtime(marker):
    """(user, mounts) a bundle of ours was made for, as its marker records them (None: not recorded)."""
    if not marker or not isinstance(marker.get("user"), list) or not isinstance(marker.get("mounts"), list):
        return None
    return {"user": tuple(marker["user"]), "mounts": marker["mounts"]}


def _runtime(user, mounts):
    """The bundle's user ((uid, gid); None: who runs this) and jail mounts, checked before anything is written."""
    if user is None:
        user = (os.getuid(), os.getgid())
    return {"user": tuple(user), "mounts": check_mounts(list(mounts))}


def _refuse_other_runtime(found, runtime):
    """A bundle's config.json is for one user and its mounts: the same image for another user or other mounts in
    the same cache is refused, the bundle untouched."""
    if found["exists"] and found["runtime"] is not None and found["runtime"] != runtime:
        raise BundleError("%s was made with another config.json (another user or other mounts than uid %d, gid %d, "
                          "%s): remove it, or use a cache of your own"
                          % (found["bundle"], runtime["user"][0], runtime["user"][1],
                             " ".join(runtime["mounts"]) or "no mounts"))


def make_bundle(source, cache, ref=None, keep_setuid=False, preserve_owner=None, arch=None,
                deadline=safe_tree.NO_DEADLINE, registry=None, found=None, user=None, mounts=DEFAULT_MOUNTS):
    """The bundle of the image at `source` (docker://REF, an OCI layout directory or archive) in `cache`, made
    unless already there (`found`: the plan, when made already), for `user` ((uid, gid); default: who runs this)
    with the jail paths `mounts` bound inside. -> {"bundle": path, "digest": manifest digest, "changed": bool}"""
    if preserve_owner is None:
        preserve_owner = os.geteuid() == 0
    runtime = _runtime(user, mounts)
    cache = os.path.abspath(cache)
    found = found or plan(source, cache, ref, arch, registry)
    result = {"bundle": found["bundle"], "digest": found["digest"], "changed": False}
    _refuse_other_runtime(found, runtime)
    if found["exists"]:
        return result       # made before: a bundle is renamed in only when complete
    cache_fd = _open_cache(cache)
    try:
        result["changed"] = _make(source, found["digest"], cache_fd, ref, keep_setuid, preserve_owner, arch,
                                  deadline, registry, runtime)
    finally:
        os.close(cache_fd)
    return result


def remove_bundle(source, cache, ref=None, arch=None, registry=None, found=None):
    """Remove the bundle of `source` from `cache` if this program made it (its marker). -> {"bundle", "digest",
    "changed"}; a bundle of that name without our marker is refused, never removed."""
    cache = os.path.abspath(cache)
    found = found or plan(source, cache, ref, arch, registry)
    result = {"bundle": found["bundle"], "digest": found["digest"], "changed": False}
    if not found["exists"]:
        return result
    if not found["ours"]:
        raise BundleError("%s was not made by %s (it has no %s): left alone" % (found["bundle"], PROGRAM, MARKER))
    cache_fd = _open_cache(cache)
    try:
        # out of its name first (a run that finds it gone makes it anew), then removed by descriptor
        doomed = STAGING_PREFIX + "removed-%d-%s" % (os.getpid(), os.urandom(6).hex())
        os.rename(bundle_name(found["digest"]), doomed, src_dir_fd=cache_fd, dst_dir_fd=cache_fd)
        shutil.rmtree(doomed, dir_fd=cache_fd)
    finally:
        os.close(cache_fd)
    result["changed"] = True
    return result


def ensure(source, cache, state="present", check=False, ref=None, keep_setuid=False, registry=None, arch=None,
           user=None, mounts=DEFAULT_MOUNTS):
    """The bundle of `source` present (made unless there) or absent (removed if ours), from one plan: check mode
    reports what the run would do from the same plan, writing nothing. -> {"changed", "bundle", "digest", "state",
    "commands", "diff"}"""
    registry = registry or Registry()
    runtime = _runtime(user, mounts)
    cache = os.path.abspath(cache)
    found = plan(source, cache, ref, arch, registry)
    if state == "present":
        _refuse_other_runtime(found, runtime)
    if state == "absent" and found["exists"] and not found["ours"]:
        raise BundleError("%s was not made by %s (it has no %s): left alone" % (found["bundle"], PROGRAM, MARKER))
    changed = found["exists"] != (state == "present")
    if changed and not check:
        if state == "present":
            changed = make_bundle(source, cache, ref, keep_setuid, registry=registry, arch=arch, found=found,
                                  user=runtime["user"], mounts=runtime["mounts"])["changed"]
        else:
            changed = remove_bundle(source, cache, ref, arch, registry, found=found)["changed"]
    before = "present" if found["exists"] else "absent"
    return {"changed": changed, "bundle": found["bundle"], "digest": found["digest"], "state": state,
            "commands": list(registry.commands),
            "diff": {"before": {"bundle": found["bundle"], "state": before},
                     "after": {"bundle": found["bundle"], "state": state if changed else before}}}


def container_path(path, jail_dir):
    """`path` (below `jail_dir` on this machine) as the jail's users see it; BundleError when it is not below."""
    inside = os.path.relpath(os.path.abspath(path), os.path.abspath(jail_dir))
    if inside == ".." or inside.startswith("../") or os.path.isabs(inside):
        raise BundleError("%s is not inside the jail %s" % (path, jail_dir))
    return "/" if inside == "." else "/" + inside


def registry_host(ref):
    """The registry host of a reference, as auth files name it (docker.io when the name has none)."""
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def write_auth_file(folder, ref, username, password):
    """An auth file (skopeo's --authfile format) for the registry of `ref`, made new (mode 0600) in `folder`, a
    private folder of the caller's. -> its path"""
    token = base64.b64encode(("%s:%s" % (username, password)).encode("utf-8")).decode("ascii")
    path = os.path.join(folder, "auth.json")
    with os.fdopen(os.open(path, safe_tree.NEW_FILE_FLAGS, 0o600), "w") as f:
        json.dump({"auths": {registry_host(ref): {"auth": token}}}, f)
    return path


def _make(source, digest, cache_fd, ref, keep_setuid, preserve_owner, arch, deadline, registry, runtime):
    staging = STAGING_PREFIX + "%d-%s" % (os.getpid(), os.urandom(6).hex())
    os.mkdir(staging, 0o700, dir_fd=cache_fd)
    try:
        staging_fd = safe_tree.open_dirs(cache_fd, [staging])
        try:
            made = _make_in(source, digest, cache_fd, staging_fd, ref, keep_setuid, preserve_owner, arch,
                            deadline, registry, runtime)
        finally:
            os.close(staging_fd)
    finally:
        shutil.rmtree(staging, dir_fd=cache_fd)     # fd-based: follows no link (rmtree.avoids_symlink_attacks)
    return made


def _source_blobs(source, staging_fd, registry, digest):
    """Blobs of the source and the ref of its image there: a layout directory read in place, an archive's layout
    files copied into staging, a registry image pulled (by its digest) into staging."""
    pulled = registry_reference(source)
    if pulled is not None:
        registry.pull(pulled, digest, staging_fd, "source")
        return safe_tree.open_dirs(staging_fd, ["source"]), PULLED_TAG
    st = os.lstat(source)
    if stat.S_ISDIR(st.st_mode):
        return os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC), None
    if not stat.S_ISREG(st.st_mode):
        raise BundleError("%s is neither an OCI image layout (a directory) nor an OCI archive" % source)
    os.mkdir("source", 0o700, dir_fd=staging_fd)
    fd = safe_tree.open_dirs(staging_fd, ["source"])
    try:
        _unpack_archive(source, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd, None


def _make_in(source, digest, cache_fd, staging_fd, ref, keep_setuid, preserve_owner, arch, deadline, registry,
             runtime):
    """Make the bundle named by `digest` (the plan's). A layout or archive that changed since the plan names its
    bundle anew; a registry image is pulled by the plan's digest."""
    pulled = registry_reference(source) is not None
    layout_fd, layout_ref = _source_blobs(source, staging_fd, registry or Registry(), digest)
    try:
        blobs = Blobs(layout_fd, source)
        descriptor = choose_manifest(blobs, layout_ref if pulled else ref, arch)
        if not pulled:
            digest = descriptor["digest"]
        name = bundle_name(digest)
        try:
            os.stat(name, dir_fd=cache_fd, follow_symlinks=False)
            return False        # made since the plan by another run
        except FileNotFoundError:
            pass
        if descriptor.get("mediaType") not in MANIFEST_TYPES + (None,):
            raise BundleError("%s: the image %s is a %r, not an image manifest"
                              % (source, descriptor["digest"], descriptor.get("mediaType")))
        manifest = blobs.json(descriptor, "the manifest %s" % descriptor["digest"])
        image_config = blobs.json(manifest.get("config"), "the image config")
        config = config_bytes(runtime_config(image_config, user=runtime["user"], mounts=runtime["mounts"]))
        layers = manifest.get("layers")
        if not isinstance(layers, list):
            raise BundleError("the manifest %s lists no layers" % descriptor["digest"])
        for i, layer in enumerate(layers):
            _check_layer_type(layer, i, source)
        os.mkdir("bundle", 0o755, dir_fd=staging_fd)
        bundle_fd = safe_tree.open_dirs(staging_fd, ["bundle"])
        try:
            _write_layers(blobs, layers, staging_fd, bundle_fd, keep_setuid, preserve_owner, deadline,
                          runtime["mounts"])
            _write_new(bundle_fd, "config.json", config)
            marker = {"program": PROGRAM, "digest": digest, "user": list(runtime["user"]), "mounts": runtime["mounts"]}
            _write_new(bundle_fd, MARKER, json.dumps(marker, sort_keys=True).encode() + b"\n")
        finally:
            os.close(bundle_fd)
    finally:
        os.close(layout_fd)
    try:
        os.rename("bundle", name, src_dir_fd=staging_fd, dst_dir_fd=cache_fd)
    except OSError:
        try:
            os.stat(name, dir_fd=cache_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise
        return False        # another run made it meanwhile
    return True


def _check_layer_type(layer, i, source):
    kind = layer.get("mediaType") if isinstance(layer, dict) else None
    if kind in LAYER_TYPES:
        return
    if isinstance(kind, str) and kind.endswith("+zstd"):
        raise BundleError("layer %d of %s is zstd-compressed (%s), which this Python cannot read (Python 3.14 can): "
                          "rebuild or push the image with gzip layers (e.g. `skopeo copy --dest-compress-format "
                          "gzip` from an uncompressed source, or `podman push --compression-format gzip`)"
                          % (i, source, kind))
    raise BundleError("layer %d of %s: media type %r is not read here (plain or gzip tar only)" % (i, source, kind))


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


def default_cache():
    return os.path.join(os.path.expanduser("~"), ".cache", "soperator-bundles")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description="Make an OCI runtime bundle for `srun --container=BUNDLE` from an OCI image: a "
        "registry image (docker://HOST/NAME:TAG, HOST/NAME@sha256:HEX; pulled with skopeo), an OCI image layout "
        "(directory) or an OCI archive (tarball). Prints the bundle's path.")
    parser.add_argument("image", nargs="?", help="the image: docker://REF, a layout directory or an OCI archive")
    parser.add_argument("--source", help="the image, as the positional argument")
    parser.add_argument("--cache", default=None, help="the folder of bundles, one per manifest digest "
                        "(default ~/.cache/soperator-bundles)")
    parser.add_argument("--ref", help="the image to use when a layout or archive holds several (its ref.name)")
    parser.add_argument("--keep-setuid", action="store_true", help="keep setuid and setgid bits of the image")
    parser.add_argument("--auth-file", help="registry credentials (skopeo's --authfile: `skopeo login --authfile "
                        "FILE HOST` writes one); default: skopeo's own")
    parser.add_argument("--no-tls-verify", action="store_true", help="reach the registry without verifying TLS "
                        "(plain HTTP allowed): only for a registry you trust")
    parser.add_argument("--remove", action="store_true", help="remove the image's bundle (only one made here)")
    parser.add_argument("--check", action="store_true", help="say whether the bundle exists; change nothing")
    parser.add_argument("--json", action="store_true", help="print a JSON line (bundle, digest, changed, commands)")
    parser.add_argument("--user", metavar="UID:GID", help="whose steps run the bundle (default: yours): the "
                        "container's user namespace maps this uid and gid only")
    parser.add_argument("--mount", action="append", metavar="PATH", help="a path of the jail to bind-mount at the "
                        "same path inside (repeatable; default: /home)")
    args = parser.parse_args(argv)
    source = args.source or args.image
    if not source or (args.source and args.image):
        parser.error("name the image once: IMAGE or --source IMAGE")
    user = None
    if args.user is not None:
        match = re.match(r"^([0-9]+):([0-9]+)$", args.user)
        if match is None:
            parser.error("--user %r is not UID:GID" % args.user)
        user = (int(match.group(1)), int(match.group(2)))
    mounts = DEFAULT_MOUNTS if args.mount is None else args.mount
    cache = args.cache or default_cache()
    registry = Registry(args.auth_file, not args.no_tls_verify)
    try:
        if args.check:
            found = plan(source, cache, args.ref, registry=registry)
            result = {"bundle": found["bundle"], "digest": found["digest"], "exists": found["exists"]}
        elif args.remove:
            result = remove_bundle(source, cache, args.ref, registry=registry)
        else:
            result = make_bundle(source, cache, args.ref, args.keep_setuid, registry=registry, user=user,
                                 mounts=mounts)
    except (safe_tree.JailError, OSError) as e:
        sys.stderr.write("%s: %s\n" % (PROGRAM, e))
        return 1
    result["commands"] = registry.commands
    if args.json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        sys.stdout.write(result["bundle"] + "\n")
        if not args.check and not args.remove:
            sys.stderr.write("%s: %s %s (%s); run it with srun --container=%s\n"
                             % (PROGRAM, "made" if result["changed"] else "found", result["bundle"],
                                result["digest"], result["bundle"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
