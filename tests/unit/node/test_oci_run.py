"""node/oci_run.py: the edit of the step's config.json copy (the job's working directory, GPU device nodes) and its
replacement in a folder like slurmstepd's (no GPU on this machine: the device part is checked on the file only)."""
import json
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_run

HOME_BIND = {"destination": "/home", "source": "/home", "type": "none", "options": ["rbind", "nosuid", "nodev"]}


def _config(env=(), mounts=(HOME_BIND,)):
    return {"process": {"args": ["pwd"], "cwd": "/", "env": list(env)},
            "mounts": [{"destination": "/proc", "source": "proc", "type": "proc"}] + list(mounts)}


def test_the_workdir_becomes_the_cwd_only_where_the_container_sees_the_same_path():
    config = _config()
    assert oci_run.edit_config(config, "/home/alice/run")["process"]["cwd"] == "/home/alice/run"
    assert oci_run.edit_config(config, "/home")["process"]["cwd"] == "/home"
    # not under a same-path bind mount (or not absolute): the image's own cwd stays
    for outside in ("/homework", "/tmp/x", "/proc", "relative/dir", None, ""):
        assert oci_run.edit_config(config, outside)["process"]["cwd"] == "/", outside
    moved = _config(mounts=[{"destination": "/data", "source": "/home", "type": "bind", "options": ["bind"]}])
    assert oci_run.edit_config(moved, "/home/alice")["process"]["cwd"] == "/"
    assert config["process"]["cwd"] == "/"    # the input is left as it was


def test_the_workdir_is_given_or_the_steps_pwd_or_the_submit_dir():
    assert oci_run.step_workdir(_config(["PWD=/home/a", "SLURM_SUBMIT_DIR=/home/b"]), "/home/z") == "/home/z"
    assert oci_run.step_workdir(_config(["PWD=/home/a", "SLURM_SUBMIT_DIR=/home/b"])) == "/home/a"
    assert oci_run.step_workdir(_config(["SLURM_SUBMIT_DIR=/home/b"])) == "/home/b"
    assert oci_run.step_workdir(_config()) is None


def test_the_steps_gpus_are_bound_with_the_nodes_shared_nodes():
    config = _config(["SLURM_STEP_GPUS=1,3"])
    present = {"/dev/nvidiactl", "/dev/nvidia-uvm"}
    devices = oci_run.gpu_devices(config, exists=present.__contains__)
    assert devices == ["/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    edited = oci_run.edit_config(config, None, devices)
    added = edited["mounts"][len(config["mounts"]):]
    assert added == [{"destination": d, "source": d, "type": "bind", "options": ["bind", "nosuid", "noexec"]}
                     for d in devices]
    # no GPUs in the step: nothing, not even the shared nodes
    assert oci_run.gpu_devices(_config(), exists=present.__contains__) == []
    with pytest.raises(oci_run.OciRunError, match="not a list of GPU indices"):
        oci_run.gpu_devices(_config(["SLURM_STEP_GPUS=/dev/nvidia0"]))


def test_prepare_replaces_the_copy_and_leaves_nothing_else(tmp_path):
    bundle = tmp_path / "oci-job00001-00000"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(_config(["PWD=/home/alice"])))
    os.chmod(str(bundle / "config.json"), 0o440)     # slurmstepd's copy is not the user's to write
    oci_run.prepare(str(bundle) + "/")
    assert os.listdir(str(bundle)) == ["config.json"]
    assert json.loads((bundle / "config.json").read_text())["process"]["cwd"] == "/home/alice"


def test_a_bundle_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text(json.dumps(_config(["PWD=/home/alice"])))
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(oci_run.OciRunError, match="cannot open the step's bundle"):
        oci_run.prepare(str(tmp_path / "link") + "/")
    assert json.loads((real / "config.json").read_text())["process"]["cwd"] == "/"


def test_main_reports_a_missing_config_on_stderr(tmp_path, capsys):
    assert oci_run.main(["--bundle", str(tmp_path), "--", "true"]) == 1
    assert "soperator oci_run: cannot read the step's config.json" in capsys.readouterr().err


def test_main_reports_a_runtime_it_cannot_run_in_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(_config(["PWD=/"])))
    missing = str(tmp_path / "no-such-runc")
    assert oci_run.main(["--bundle", str(tmp_path), "--", missing, "run", "x"]) == 1
    assert capsys.readouterr().err == (
        "soperator oci_run: cannot run the OCI runtime %s: No such file or directory\n" % missing)
