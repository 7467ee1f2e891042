"""Where the daemons of a local cluster log, and slurm_cluster's result naming it (local/operations.run, what the
module returns): every daemon writes <state_dir>/log/<daemon>.log - the Slurm daemons through SlurmctldLogFile and
SlurmdLogFile, munged through its standard error - and the result's `logs` names exactly those files after a run,
in check mode (the daemons that would run) and when a run fails (the daemon that failed among them).
"""
import os
import tempfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.local import operations

from local_helpers import TIMEOUT, load_model
from requires import SLURM, skip_without

SMALL = "examples/small-cpu.yml"
DAEMONS = ["munged", "slurmctld", "slurmd-cpu-0", "slurmd-cpu-1"]


@pytest.fixture
def state_dir():
    skip_without(SLURM)
    state = tempfile.mkdtemp(prefix="sop-logs-", dir="/tmp")   # short: slurmstepd's sockets live below it
    os.chmod(state, 0o755)
    yield state
    lb.LocalCluster(state).stop(purge=True)              # the state directory goes with it


def params(state):
    return {"state": "present", "state_dir": state, "wait_timeout": TIMEOUT, "jail_dir": None, "spank_chroot": None,
            "login": True, "login_authorized_keys": [], "purge": False}


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def test_each_daemon_logs_under_the_state_dir_and_the_result_names_the_files(state_dir):
    model = load_model(SMALL)
    log = os.path.join(state_dir, "log")
    expected = dict((name, os.path.join(log, name + ".log")) for name in DAEMONS)

    planned = operations.run(model, params(state_dir), check_mode=True)
    assert planned["logs"] == expected
    assert not os.path.exists(log)

    result = operations.run(model, params(state_dir))
    assert result["logs"] == expected
    assert "slurmctld version" in read(expected["slurmctld"])
    for node in ("cpu-0", "cpu-1"):
        assert "slurmd version" in read(expected["slurmd-" + node])
    assert "Starting munge" in read(expected["munged"])
    # munged logs to its standard error in the foreground: that file is its log, there is no other
    assert not os.path.exists(os.path.join(log, "munged.out"))
    # the configs point the Slurm daemons at the same files
    with open(os.path.join(state_dir, "etc", "slurm.conf")) as f:
        conf = f.read()
    assert "SlurmctldLogFile=%s\n" % expected["slurmctld"] in conf
    assert "SlurmdLogFile=%s\n" % os.path.join(log, "slurmd-%n.log") in conf

    again = operations.run(model, params(state_dir))
    assert again["changed"] is False and again["logs"] == expected


def test_a_failed_run_names_the_log_of_the_daemon_that_failed(state_dir):
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           SMALL)) as f:
        text = f.read()
    # a scheduler plugin that does not exist: slurmctld 22.05 exits at start, naming it in its log
    model = load_model(text.replace("SlurmdTimeout: 120", "SlurmdTimeout: 120\n    SchedulerType: sched/nonexistent"))
    with pytest.raises(operations.LocalOperationError) as info:
        operations.run(model, params(state_dir))
    logs = info.value.result["logs"]
    assert logs["slurmctld"] == os.path.join(state_dir, "log", "slurmctld.log")
    assert "sched/nonexistent" in read(logs["slurmctld"])
    assert "munged" in logs
