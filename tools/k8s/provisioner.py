"""A hostPath volume provisioner for the real node of tools/k8s/node.py (one node: every access mode, RWX
included, is one directory). Ours because no provisioner image can be pulled here; it runs on the host.

For each claim the PV controller hands to us (annotation volume.kubernetes.io/storage-provisioner = ours) and that
has no volume yet: a directory <root>/<namespace>_<claim>_<uid> and a PersistentVolume bound ahead to the claim. A
volume of ours that is Released with reclaim policy Delete: its directory and then the PV are removed.

    python3 provisioner.py --kubeconfig FILE --root DIR --provisioner NAME [--interval S]
"""
import argparse
import os
import shutil
import sys
import time

from kubernetes import client, config

PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
CLAIM_ANNOTATION = "volume.kubernetes.io/storage-provisioner"


def provision(core, claim, root, provisioner):
    meta = claim.metadata
    directory = os.path.join(root, "%s_%s_%s" % (meta.namespace, meta.name, meta.uid))
    os.makedirs(directory, exist_ok=True)
    # hostPath ignores fsGroup: like local-path-provisioner, any pod user may write the volume's top.
    os.chmod(directory, 0o777)
    storage_class = claim.spec.storage_class_name
    reclaim = "Delete"
    if storage_class:
        reclaim = client.StorageV1Api(core.api_client).read_storage_class(storage_class).reclaim_policy or "Delete"
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-" + meta.uid, "annotations": {PROVISIONED_BY: provisioner}},
        "spec": {"capacity": {"storage": claim.spec.resources.requests["storage"]},
                 "accessModes": claim.spec.access_modes, "persistentVolumeReclaimPolicy": reclaim,
                 "storageClassName": storage_class or "",
                 "hostPath": {"path": directory, "type": "Directory"},
                 "claimRef": {"namespace": meta.namespace, "name": meta.name, "uid": meta.uid}}})
    print("provisioned %s for %s/%s at %s" % ("pvc-" + meta.uid, meta.namespace, meta.name, directory), flush=True)


def reclaim(core, volume, root):
    path = volume.spec.host_path.path if volume.spec.host_path else ""
    if os.path.dirname(path) == root and os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    core.delete_persistent_volume(volume.metadata.name)
    print("deleted %s and %s" % (volume.metadata.name, path), flush=True)


def once(core, root, provisioner):
    existing = {v.metadata.name: v for v in core.list_persistent_volume().items}
    for claim in core.list_persistent_volume_claim_for_all_namespaces().items:
        ours = (claim.metadata.annotations or {}).get(CLAIM_ANNOTATION) == provisioner
        if ours and claim.status.phase == "Pending" and not claim.spec.volume_name \
                and "pvc-" + claim.metadata.uid not in existing:
            provision(core, claim, root, provisioner)
    for volume in existing.values():
        if (volume.metadata.annotations or {}).get(PROVISIONED_BY) == provisioner \
                and volume.status.phase == "Released" and volume.spec.persistent_volume_reclaim_policy == "Delete":
            reclaim(core, volume, root)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--provisioner", required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    root = os.path.realpath(args.root)
    core = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    while True:
        try:
            once(core, root, args.provisioner)
        except client.exceptions.ApiException as e:  # a conflict or a restart of the API server: next round
            print("provisioner: %s %s" % (e.status, e.reason), file=sys.stderr, flush=True)
        except OSError as e:
            print("provisioner: %s" % e, file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
