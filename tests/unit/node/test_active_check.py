"""active_check.py: all_reduce_perf / dd / gpu_burn output evaluation against spec thresholds (transcribed
fixtures), job scripts, job state parsing and which nodes are targets."""
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import active_check as ac

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "health")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_all_reduce_perf_healthy():
    result = ac.parse_all_reduce_perf(fixture("all_reduce_perf_healthy.txt"))
    assert result["avg_busbw"] == pytest.approx(472.16)
    assert [s[0] for s in result["sizes"]] == [2 ** n for n in range(29, 34)]
    assert result["sizes"][-1] == (8589934592, 482.31, 483.27)
    assert result["wrong"] == 0 and result["out_of_bounds"] == 0
    assert ac.evaluate_all_reduce(fixture("all_reduce_perf_healthy.txt"), 400) is None


def test_all_reduce_perf_slow():
    problem = ac.evaluate_all_reduce(fixture("all_reduce_perf_slow.txt"), 400)
    assert problem == "busbw 92.0 GB/s at 8589934592 B below 400 GB/s (avg 89.1)"
    assert ac.evaluate_all_reduce(fixture("all_reduce_perf_slow.txt"), 90) is None      # threshold from the spec


def test_all_reduce_perf_wrong_values_without_root_column():
    result = ac.parse_all_reduce_perf(fixture("all_reduce_perf_wrong.txt"))
    assert len(result["sizes"]) == 5 and result["wrong"] == 512
    assert ac.evaluate_all_reduce(fixture("all_reduce_perf_wrong.txt"), 1) == "512 wrong values"
    assert ac.evaluate_all_reduce("# nThread 1 nGpus 8\n", 1) == "no all_reduce_perf results in the output"


DD = """write:
512+0 records in
512+0 records out
536870912 bytes (537 MB, 512 MiB) copied, 1.2456 s, 431 MB/s
read:
dd: failed to open '/tmp/soperator-checks/storage-12.bin': Invalid argument
512+0 records in
512+0 records out
536870912 bytes (537 MB, 512 MiB) copied, 0.21 s, 2.6 GB/s
"""


def test_storage_speeds():
    assert ac.parse_dd_speeds(DD) == {"write": 431.0, "read": pytest.approx(2600.0)}
    assert ac.evaluate_storage(DD, 400, 1000) is None
    assert ac.evaluate_storage(DD, 500, 3000) == "write 431.0 MB/s below 500 MB/s; read 2600.0 MB/s below 3000 MB/s"
    assert ac.evaluate_storage("write:\n", None, None) == "no write speed in the output; no read speed in the output"


def test_gpu_burn():
    healthy = "100.0%  proc'd: 2212 (6012 Gflop/s)\nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n"
    assert ac.evaluate_gpu_burn(healthy) is None
    assert ac.evaluate_gpu_burn("Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: FAULTY\n") == "GPU 1: FAULTY"
    assert ac.evaluate_gpu_burn("Couldn't init a GPU test\n") == "no GPU reported OK"


def test_job_scripts():
    check = {"name": "s", "type": "storage", "timeoutSeconds": 600}
    script = ac.job_script(check, 0, "/tmp/out")
    assert script.startswith("#!/bin/bash\n") and "of=\"$f\" bs=1M count=512 conv=fdatasync" in script
    assert "all_reduce_perf -b 512M -e 8G -f 2 -g 8" in ac.job_script(
        {"name": "n", "type": "ncclAllReduce", "timeoutSeconds": 600}, 8, "/tmp/out")
    assert "gpu_burn 300" in ac.job_script({"name": "g", "type": "gpuBurn", "timeoutSeconds": 3600}, 8, "/tmp")
    assert ac.job_script({"name": "x", "type": "sbatch", "script": "#!/bin/sh\ntrue\n", "timeoutSeconds": 5},
                         0, "/tmp") == "#!/bin/sh\ntrue\n"


def test_parse_job():
    line = ("JobId=42 JobName=soperator-check-probe UserId=root(0) GroupId=root(0) Priority=1 "
            "JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
            "ExitCode=1:0 RunTime=00:00:01 TimeLimit=00:01:00 Partition=soperator-checks NodeList=cpu-1")
    assert ac.parse_job(line) == {"state": "FAILED", "exit_code": 1, "signal": 0}
    assert ac.parse_job("slurm_load_jobs error: Invalid job id specified") is None


def node(state="IDLE", flags=(), reason="", not_responding=False):
    return {"state": state, "flags": list(flags), "reason": reason, "not_responding": not_responding}


@pytest.mark.parametrize("state,expected", [
    (node(), None),
    (node("ALLOCATED"), "busy (ALLOCATED)"),
    (node("MIXED"), "busy (MIXED)"),
    (node("IDLE", ["COMPLETING"]), "busy (IDLE)"),
    (node("IDLE", ["DRAIN"], "admin: fan"), "drained (admin: fan)"),
    (node("DOWN"), "not in service (DOWN)"),
    (node("IDLE", not_responding=True), "not in service (IDLE)"),
    (node("IDLE", ["CLOUD", "POWERED_DOWN"]), "power saving (POWERED_DOWN)"),
    (node("IDLE", ["CLOUD", "POWERING_UP"]), "power saving (POWERING_UP)"),
    (node("IDLE", ["CLOUD"]), None),
])
def test_skip_reason(state, expected):
    assert ac.skip_reason(state) == expected


def test_check_reason():
    assert ac.check_reason("soperator:", "nccl", "busbw 92.0 GB/s\nlow") == "soperator: check:nccl busbw 92.0 GB/s low"
    assert ac.check_reason("soperator:", "nccl", "a\x00b\x1bc") == "soperator: check:nccl a b c"
