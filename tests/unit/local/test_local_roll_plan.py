"""The pure parts of the local slurmd roll (local/plan.py, local/rollout.py): which slurmds a configuration change
rolls, the digest they are compared by, what onDelete reports, and the timeout refused before any write."""
import os
from types import SimpleNamespace

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
from ansible_collections.soperator.slurm.plugins.module_utils.local import plan
from ansible_collections.soperator.slurm.plugins.module_utils.local import rollout as local_rollout
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import UpdateStrategy
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import rollout as slurm_rollout
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from repo_root import ROOT

CONFIGS = {"slurm.conf": "SlurmdTimeout=120\n", "cgroup.conf": "CgroupPlugin=autodetect\n",
           c.SLURMDBD_CONF: "DbdPort=1\n", c.HEALTH_CONFIG_FILE: "{}\n"}


def test_the_digest_is_of_the_configs_slurmctld_and_slurmd_read():
    digest = plan.slurm_digest(CONFIGS)
    # slurmdbd.conf is slurmdbd's; health.json is read at each check run: neither restarts a slurmd
    assert plan.slurm_digest(dict(CONFIGS, **{c.SLURMDBD_CONF: "DbdPort=2\n"})) == digest
    assert plan.slurm_digest(dict(CONFIGS, **{c.HEALTH_CONFIG_FILE: "{\"a\": 1}\n"})) == digest
    assert plan.slurm_digest(dict(CONFIGS, **{"slurm.conf": "SlurmdTimeout=121\n"})) != digest
    assert plan.slurm_digest(dict(CONFIGS, **{"gres.conf": ""})) != digest          # a new file counts
    assert plan.slurm_digest(dict((k, v) for k, v in CONFIGS.items() if k != "cgroup.conf")) != digest


def test_outdated_are_the_running_slurmds_on_another_digest():
    running = {"slurmd-cpu-0": {"digest": "old"}, "slurmd-cpu-1": {"digest": "new"}, "slurmd-cpu-3": {"digest": "old"},
               "slurmctld": {"digest": "old"}}
    # cpu-2 has no running slurmd (it just starts), cpu-3 is not wanted (scale-down's), slurmctld is no node
    assert plan.outdated_nodes(["cpu-0", "cpu-1", "cpu-2"], running, "new") == ["cpu-0"]
    assert plan.outdated_nodes(["cpu-0", "cpu-1"], running, "old") == ["cpu-1"]
    assert plan.outdated_nodes([], running, "new") == []


def test_on_delete_reports_each_outdated_node_and_restarts_none():
    node_set = SimpleNamespace(name="cpu", update_strategy=UpdateStrategy(type="onDelete"))
    entries = local_rollout.not_rolled(node_set, ["cpu-0", "cpu-1", "cpu-2"],
                                       {"cpu-0": "a", "cpu-1": "b", "cpu-2": None}, "b")
    assert [(e["node"], e["batch"], e["step"]) for e in entries] == [("cpu-0", 0, slurm_rollout.SKIP)]
    assert "updateStrategy onDelete: not restarted" in entries[0]["reason"]
    assert not slurm_rollout.acted(entries[0]) and not slurm_rollout.acted(entries[0], check_mode=True)


def test_change_lines_name_the_node_its_batch_and_step():
    entry = {"node": "cpu-1", "node_set": "cpu", "batch": 2, "step": "resumed", "reason": "checks pass",
             "steps": ["drained", "replaced", "rechecked", "resumed"]}
    assert local_rollout.change_line(entry) == \
        "rolled slurmd-cpu-1: batch 2, resumed [drained, replaced, rechecked, resumed] (checks pass)"
    planned = {"node": "cpu-0", "batch": 3, "step": "drain", "reason": "busy"}
    assert local_rollout.change_line(planned, check_mode=True) == "would roll slurmd-cpu-0: batch 3, drain (busy)"


def test_a_negative_rollout_timeout_is_refused_before_any_write(tmp_path):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        model = validate.build_model(load_documents(f.read()))
    state = tmp_path / "state"
    with pytest.raises(LocalClusterError, match="rollout_timeout must be >= 0"):
        lb.LocalCluster(str(state), model, rollout_timeout=-1).ensure_started()
    assert not state.exists()
