"""nccl_probe.py: its version and bandwidth arithmetic, what it prints and exits with for each outcome (the CUDA and
NCCL calls behind a stand-in Stack: CI has no GPU; tests/images runs the real one, in the GPU image, without a GPU),
and how the ncclAllReduce active check judges its output."""
import io
import os
import shutil
import subprocess

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import active_check as ac
from ansible_collections.soperator.slurm.plugins.module_utils.node import nccl_probe as probe

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "health")
VERSIONS = [("nccl", "2.22.3"), ("cuda-runtime", "12.4"), ("cuda-driver", "12.8")]


def test_versions_as_cuda_and_nccl_encode_them():
    assert probe.version_text(12040) == "12.4"
    assert probe.version_text(12080) == "12.8"
    assert probe.version_text(0) == "none"                      # cudaDriverGetVersion without a driver
    assert probe.version_text(22203, nccl=True) == "2.22.3"
    assert probe.version_text(2708, nccl=True) == "2.7.8"       # the encoding before NCCL 2.9


def test_bus_bandwidth_is_nccl_tests_factor():
    assert probe.bus_bandwidth(100.0, 8) == pytest.approx(175.0)
    assert probe.bus_bandwidth(100.0, 2) == pytest.approx(100.0)
    assert probe.bus_bandwidth(100.0, 1) == 0.0


class Stand(object):
    """A Stack whose answers a test sets."""

    def __init__(self, devices=8, why=None, seconds=0.004, wrong=0, fail=None):
        self.devices, self.why, self.seconds, self.wrong, self.fail = devices, why, seconds, wrong, fail
        self.reduced = None

    def versions(self):
        return VERSIONS

    def device_count(self):
        if self.fail:
            raise probe.ProbeError(self.fail)
        return self.devices, self.why

    def all_reduce(self, gpus, nbytes, iterations):
        self.reduced = (gpus, nbytes, iterations)
        return self.seconds, self.wrong


def run(argv, stand):
    out = io.StringIO()
    rc = probe.main(argv, stack_factory=lambda: stand, out=out)
    return rc, out.getvalue()


def test_all_reduce_over_every_visible_gpu_and_its_line_parses_back():
    stand = Stand(devices=8)
    rc, text = run(["--bytes", "400000000"], stand)
    assert rc == probe.OK and stand.reduced == (8, 400000000, 20)
    result = probe.parse(text)
    assert result["nccl"] == "2.22.3" and result["gpus"] == 8
    assert result["all-reduce"] == {"bytes": 400000000, "gpus": 8, "time_ms": 4.0, "algbw": 100.0, "busbw": 175.0,
                                    "wrong": 0}
    assert ac.evaluate_output({"type": "ncclAllReduce", "minBusBandwidthGBs": 150}, text) is None
    assert ac.evaluate_output({"type": "ncclAllReduce", "minBusBandwidthGBs": 200}, text) == \
        "bus bandwidth 175.0 GB/s below 200 GB/s"


def test_gpus_option_takes_at_most_the_visible_ones():
    stand = Stand(devices=2)
    assert run(["--gpus", "4"], stand)[0] == probe.OK and stand.reduced[0] == 2


def test_one_gpu_proves_correctness_only():
    rc, text = run([], Stand(devices=1))
    assert rc == probe.OK and probe.parse(text)["all-reduce"]["busbw"] == 0.0
    assert ac.evaluate_output({"type": "ncclAllReduce", "minBusBandwidthGBs": 100}, text) is None


def test_wrong_values_fail_the_probe_and_the_check():
    rc, text = run([], Stand(devices=4, wrong=12))
    assert rc == probe.WRONG
    assert ac.evaluate_output({"type": "ncclAllReduce"}, text) == "all-reduce over 4 GPUs returned 12 wrong values"


def test_a_failed_call_is_exit_2_and_named():
    rc, text = run([], Stand(fail="cudaGetDeviceCount failed: unknown error (999)"))
    assert rc == probe.FAILED
    assert ac.evaluate_output({"type": "ncclAllReduce"}, text) == \
        "error: cudaGetDeviceCount failed: unknown error (999)"


def test_versions_only_stops_before_the_devices():
    stand = Stand(fail="must not be asked")
    rc, text = run(["--versions"], stand)
    assert rc == probe.OK and text == "nccl: 2.22.3\ncuda-runtime: 12.4\ncuda-driver: 12.8\n"


def test_no_gpu_as_recorded_in_the_gpu_image():
    with open(os.path.join(FIXTURES, "nccl_probe_no_gpu.txt")) as f:
        recorded = f.read()
    rc, text = run([], Stand(devices=0, why="cudaErrorInsufficientDriver: CUDA driver version is insufficient for "
                                            "CUDA runtime version"))
    assert rc == probe.NO_GPU
    assert probe.parse(text)["no-gpu"] == probe.parse(recorded)["no-gpu"]
    assert ac.evaluate_output({"type": "ncclAllReduce"}, recorded) == (
        "no GPU: cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version")


def test_all_reduce_perf_output_is_still_judged_as_nccl_tests():
    with open(os.path.join(FIXTURES, "all_reduce_perf_slow.txt")) as f:
        text = f.read()
    assert ac.evaluate_output({"type": "ncclAllReduce", "minBusBandwidthGBs": 400}, text).startswith("busbw 92.0")


def test_the_job_script_runs_nccl_tests_where_present_else_the_probe(tmp_path):
    script = ac.job_script({"name": "n", "type": "ncclAllReduce", "timeoutSeconds": 600}, 8, "/tmp/out")
    assert "all_reduce_perf -b 512M -e 8G -f 2 -g 8" in script and "nccl-probe --gpus 8" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    # neither program on PATH: bash says so and the job fails (Slurm marks it FAILED: the node is judged failed)
    proc = subprocess.run([shutil.which("bash"), str(path)], env={"PATH": str(tmp_path)}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert proc.returncode == 127 and "nccl-probe" in proc.stderr


def test_a_library_that_cannot_load_is_a_probe_error(tmp_path):
    with pytest.raises(probe.ProbeError, match="cannot load the GPU libraries"):
        probe.Stack(cudart=str(tmp_path / "libcudart.so.12"), nccl=str(tmp_path / "libnccl.so.2"))
