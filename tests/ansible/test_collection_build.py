"""`ansible-galaxy collection build` gives a tarball that installs into an ansible_collections/ path and works there."""
import json
import os
import shutil
import subprocess
import tarfile

import pytest

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(shutil.which("ansible-galaxy") is None, reason="ansible-galaxy is not installed")


def run(argv, cwd, env=None):
    """An Ansible CLI; env None: this process's environment as it is."""
    return ansible_run.run(argv, env=dict(os.environ) if env is None else env, cwd=cwd, timeout=300,
                           expect_rc=0).stdout


def test_build_install_and_use(tmp_path):
    # Build from a clean copy of the tracked files, as a release would.
    src = tmp_path / "src"
    subprocess.run(["git", "clone", "-q", ROOT, str(src)], cwd=str(tmp_path), check=True, timeout=300)
    run(["ansible-galaxy", "collection", "build", "--output-path", str(tmp_path)], cwd=str(src))
    tarball = tmp_path / "soperator-slurm-0.1.0.tar.gz"
    names = tarfile.open(str(tarball)).getnames()
    assert "plugins/modules/slurm_cluster.py" in names and "crds/nodesets.slurm.soperator.dev.yaml" in names
    assert not any(n.startswith(("collections/", "build/", ".ci/")) for n in names)

    installed = tmp_path / "installed"
    run(["ansible-galaxy", "collection", "install", "--offline", "--no-deps", "-p", str(installed), str(tarball)],
        cwd=str(tmp_path))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # not the checkout's, which points at collections/
    env = ansible_run.ansible_env(config=str(tmp_path / "ansible.cfg"), json_output=False,
                                  ANSIBLE_COLLECTIONS_PATH=str(installed))
    for name in ("slurm_cluster", "slurm_drain", "slurm_node_info"):
        doc = json.loads(run(["ansible-doc", "--json", "soperator.slurm." + name], cwd=str(tmp_path), env=env))
        assert doc["soperator.slurm." + name]["doc"]["attributes"]["check_mode"]["support"] in ("full", "partial")
    out = run(["ansible", "localhost", "-m", "soperator.slurm.slurm_cluster", "-a",
               "state=rendered src=%s dest=%s" % (os.path.join(ROOT, "examples", "small-cpu.yml"), tmp_path / "out")],
              cwd=str(tmp_path), env=env)
    assert "CHANGED" in out
    assert (tmp_path / "out" / "slurm" / "slurm.conf").read_text().count("NodeName=") == 1
    expanded = run(["ansible", "localhost", "-m", "ansible.builtin.debug", "-a",
                    "msg={{ 'gpu-[0-2]' | soperator.slurm.hostlist_expand | join(',') }}"], cwd=str(tmp_path), env=env)
    assert "gpu-0,gpu-1,gpu-2" in expanded
