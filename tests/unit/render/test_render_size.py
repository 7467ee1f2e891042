"""Size-aware slurm.conf settings (render/size.py, issue 32): from the nodes slurm.conf defines (maxReplicas), only
words the target's Slurm reads, a small cluster's file unchanged, spec.slurmConfig always wins."""
import dataclasses
import math

from ansible_collections.soperator.slurm.plugins.module_utils.render import size
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import KUBERNETES
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from specs import documents


def model(*max_replicas, **cluster_spec):
    return build_model(documents(*[("ns%d" % i, {"replicas": 1, "maxReplicas": n})
                                   for i, n in enumerate(max_replicas)], **cluster_spec))


def conf(m, version=None):
    target = KUBERNETES if version is None else dataclasses.replace(KUBERNETES, slurm_version=version)
    return render_slurm_configs(m, target)["slurm.conf"]


def values(text, key):
    return [line.split("=", 1)[1] for line in text.splitlines() if line.split("=", 1)[0] == key]


def without_size(monkeypatch, m, version=None):
    """What slurm.conf was before render/size.py: its sections unchanged."""
    with monkeypatch.context() as patch:
        patch.setattr(size, "with_size_settings", lambda sections, _model, _target: sections)
        return conf(m, version)


def test_up_to_256_nodes_the_file_is_what_it_was(monkeypatch):
    for counts in [(1,), (128, 128), (100, 100, 56)]:
        m = model(*counts)
        assert size.node_count(m) <= size.LARGE
        for version in (None, (22, 5)):
            assert conf(m, version) == without_size(monkeypatch, m, version)


def test_one_node_more_adds_the_words_the_release_reads(monkeypatch):
    m = model(200, 57)
    assert size.node_count(m) == 257
    new = conf(m)
    assert new != without_size(monkeypatch, m)
    assert values(new, "SchedulerParameters") == ["max_rpc_cnt=100"]
    # 2 x 257 = 514 connections, rounded up to a power of two, at least 1024
    assert values(new, "SlurmctldParameters") == ["conmgr_max_connections=1024,validate_nodeaddr_threads=2"]
    assert values(new, "TreeWidth") == ["128"]
    # 22.05 (the local daemons) reads only max_rpc_cnt; 23.02 adds validate_nodeaddr_threads; 24.11 conmgr
    assert values(conf(m, (22, 5)), "SchedulerParameters") == ["max_rpc_cnt=100"]
    assert values(conf(m, (22, 5)), "SlurmctldParameters") == []
    assert values(conf(m, (23, 2)), "SlurmctldParameters") == ["validate_nodeaddr_threads=2"]
    assert values(conf(m, (24, 11)), "SlurmctldParameters") == [
        "conmgr_max_connections=1024,validate_nodeaddr_threads=2"]


def test_the_values_follow_max_replicas_not_replicas():
    big = conf(model(5000, 5000))
    assert values(big, "SlurmctldParameters") == ["conmgr_max_connections=32768,validate_nodeaddr_threads=39"]
    one_running = build_model(documents(("ns0", {"replicas": 0, "maxReplicas": 5000}),
                                        ("ns1", {"replicas": 3, "maxReplicas": 5000})))
    assert conf(one_running) == big
    # past 64 threads slurmctld ignores the word: capped
    assert values(conf(model(*[65536] * 2)), "SlurmctldParameters")[0].endswith("validate_nodeaddr_threads=64")


def test_tree_width_keeps_every_node_within_two_hops():
    assert values(conf(model(16384)), "TreeWidth") == ["128"]
    width = int(values(conf(model(16385)), "TreeWidth")[0])
    assert width == 129 and width * width >= 16385 > (width - 1) ** 2
    assert size.tree_width(65536 * 65536) == size.MAX_TREE_WIDTH
    assert size.tree_width(40000) == math.ceil(math.sqrt(40000))


def test_an_explicit_slurm_config_key_wins():
    m = model(1000, slurmConfig={"SchedulerParameters": "bf_continue", "slurmctldparameters": "enable_configless",
                                 "TreeWidth": 16})
    text = conf(m)
    assert values(text, "SchedulerParameters") == ["bf_continue"]
    assert values(text, "slurmctldparameters") == ["enable_configless"]
    assert values(text, "SlurmctldParameters") == []
    assert values(text, "TreeWidth") == ["16"]
    assert values(conf(model(20000, slurmConfig={"TreeWidth": 50})), "TreeWidth") == ["50"]


def test_words_join_the_power_saving_line():
    m = build_model(documents(("eph", {"maxReplicas": 300, "ephemeral": {"enabled": True}})))
    text = conf(m)
    assert values(text, "SlurmctldParameters") == [
        "cloud_dns,idle_on_node_suspend,conmgr_max_connections=1024,validate_nodeaddr_threads=2"]
