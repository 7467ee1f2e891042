"""OCI image layouts and archives for the bundle tests, built here from tar members (tar_helpers)."""
import gzip
import hashlib
import io
import json
import os
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
