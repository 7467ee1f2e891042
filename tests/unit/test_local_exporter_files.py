"""The local exporter runs from the sources local/exporter.py writes under <state_dir>/lib, not from the collection:
those files alone must import (a module the exporter needs but the list leaves out fails only when the daemon starts)."""
import os
import subprocess
import sys

from ansible_collections.soperator.slurm.plugins.module_utils.local.exporter import exporter_files
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout


def test_the_written_sources_import_on_their_own(tmp_path):
    for path, text in exporter_files(Layout(str(tmp_path))).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    # Only the written lib (first: a regular package that shadows any other ansible_collections) and the directory
    # prometheus_client is installed in; the exporter's own interpreter has it (requirements.txt).
    import prometheus_client
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), os.path.dirname(os.path.dirname(
        prometheus_client.__file__))])}
    proc = subprocess.run([sys.executable, "-c", "import ansible_collections.soperator.slurm.plugins.module_utils."
                           "observe.exporter as e; print(e.__file__)"], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith(str(tmp_path / "lib")), proc.stdout
