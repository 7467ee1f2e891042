"""OCI image layouts and archives for the bundle tests, built here from tar members (tar_helpers)."""
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile


LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"


def _blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def descriptor(layout, data, media_type, **extra):
    digest, size = _blob(layout, data)
    found = {"mediaType": media_type, "digest": digest, "size": size}
    found.update(extra)
    return found


def layer_bytes(members, fmt=tarfile.GNU_FORMAT, compress=True):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


def make_layout(layout, layers, config=None, ref="latest", fmt=tarfile.GNU_FORMAT, compress=True):
    """An OCI image layout at `layout` holding one image of `layers` (each a list of (TarInfo, bytes or None)).
    -> the manifest's descriptor."""
    os.makedirs(layout, exist_ok=True)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    layer_descs = [descriptor(layout, layer_bytes(m, fmt, compress), LAYER_GZIP if compress else LAYER_TAR)
                   for m in layers]
    image_config = {"architecture": "amd64", "os": "linux",
                    "config": config if config is not None else {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
                    "rootfs": {"type": "layers", "diff_ids": []}}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": descriptor(layout, json.dumps(image_config).encode(), CONFIG), "layers": layer_descs}
    desc = descriptor(layout, json.dumps(manifest).encode(), MANIFEST,
                      annotations={"org.opencontainers.image.ref.name": ref})
    index_path = os.path.join(layout, "index.json")
    index = {"schemaVersion": 2, "manifests": []}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    index["manifests"].append(desc)
    with open(index_path, "w") as f:
        json.dump(index, f)
    return desc


def make_archive(path, layout):
    """The layout as an OCI archive (what podman save --format oci-archive writes)."""
    with tarfile.open(str(path), "w") as tar:
        for name in sorted(os.listdir(layout)):
            tar.add(os.path.join(layout, name), arcname=name)
    return str(path)


PROGRAMS = ("/bin/sh", "/bin/cat", "/bin/ls")


def member(name, kind=tarfile.REGTYPE, mode=0o755, linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, 1600000000, linkname
    return info


def host_files():
    """The programs and every library ldd names for them, as the names the loader uses: with merged /usr (/bin,
    /lib64: links into /usr) the name below /usr, a link there (/usr/bin/sh -> dash) kept as a link, and its
    target too."""
    out = subprocess.run(["ldd"] + list(PROGRAMS), capture_output=True, text=True, timeout=60, check=True).stdout
    todo = list(PROGRAMS) + [w for w in out.split() if w.startswith("/") and os.path.exists(w)]
    found = {}
    while todo:
        path = todo.pop()
        top = "/" + path.strip("/").split("/")[0]
        if os.path.islink(top):
            path = "/usr" + path
        if path in found:
            continue
        if os.path.islink(path):
            found[path] = os.readlink(path)
            todo.append(os.path.normpath(os.path.join(os.path.dirname(path), found[path])))
        else:
            found[path] = None
    return found


def host_layer():
    """A layer of this machine's /bin/sh, cat, ls and their libraries (merged /usr as Debian's), /etc/os-release
    saying ID=lower and /etc/gone."""
    members, dirs = [], set()
    for path, link in sorted(host_files().items()):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            name = "/".join(parts[:i])
            if name not in dirs:
                dirs.add(name)
                members.append((member(name, tarfile.DIRTYPE), None))
        if link is not None:
            members.append((member("/".join(parts), tarfile.SYMTYPE, 0o777, link), None))
        else:
            with open(path, "rb") as f:
                members.append((member("/".join(parts)), f.read()))
    for link in ("bin", "lib", "lib64", "sbin"):        # merged /usr, as Debian's
        if os.path.islink("/" + link):
            members.append((member(link, tarfile.SYMTYPE, 0o777, os.readlink("/" + link)), None))
    members.append((member("etc", tarfile.DIRTYPE), None))
    members.append((member("etc/os-release", mode=0o644), b"ID=lower\n"))
    members.append((member("etc/gone", mode=0o644), b"whited out\n"))
    return members
