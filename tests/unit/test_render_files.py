"""render.py's on-disk conventions: which manifest files hold Secrets."""
import yaml

from ansible_collections.soperator.slurm.plugins.module_utils import render


def test_secret_files_are_told_by_kind_prefix_not_by_substring():
    assert render._is_secret_file("05-secret-demo-munge.yaml")
    assert not render._is_secret_file("10-statefulset-my-secret-x.yaml")
    assert not render._is_secret_file("05-secret-demo-munge.yaml.orig")


def test_read_secret_material_reads_only_our_secrets(tmp_path):
    folder = tmp_path / render.MANIFESTS_DIR
    folder.mkdir()
    ours = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-munge", "labels": {
        "app.kubernetes.io/managed-by": "soperator.slurm"}}, "data": {"munge.key": "a2V5"}}
    foreign = dict(ours, metadata={"name": "other", "labels": {}})
    (folder / "05-secret-demo-munge.yaml").write_text(yaml.safe_dump(ours))
    (folder / "05-secret-other.yaml").write_text(yaml.safe_dump(foreign))
    (folder / "10-statefulset-my-secret-x.yaml").write_text("kind: [not, read]\n")
    assert render.read_secret_material(str(tmp_path)) == {"demo-munge": {"munge.key": b"key"}}
