"""spec.controller.replicas (spec/controller.py): its schema, the shared spool rule with its field path, and the
SlurmctldHost lines and failover timers rendered from it."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec import crds
from ansible_collections.soperator.slurm.plugins.module_utils.spec.controller import CEL_RULES
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from specs import documents

RWX = {"size": "1Gi", "accessModes": ["ReadWriteMany"]}


def issues(controller, **cluster):
    with pytest.raises(SpecError) as e:
        build_model(documents(("cpu", {}), controller=controller, **cluster))
    return dict((i.path, i.message) for i in e.value.issues)


def lines(text, key):
    """The values of every `key=` line, in order (read back from the rendered text)."""
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


def test_one_controller_by_default():
    model = build_model(documents(("cpu", {})))
    assert model.controller.replicas == 1
    assert model.controller.spool_access_modes == ("ReadWriteOnce",)
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines(conf, "SlurmctldHost") == ["c-controller-0(c-controller-0.c-controller.slurm.svc.cluster.local)"]
    assert lines(conf, "SlurmctldTimeout") == ["120"]
    assert lines(conf, "MessageTimeout") == ["10"]


def test_two_controllers_primary_then_backup():
    model = build_model(documents(("cpu", {}), controller={"replicas": 2, "spool": RWX}))
    assert model.controller_hosts == ("c-controller-0", "c-controller-1")
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines(conf, "SlurmctldHost") == [
        "c-controller-0(c-controller-0.c-controller.slurm.svc.cluster.local)",
        "c-controller-1(c-controller-1.c-controller.slurm.svc.cluster.local)"]
    assert lines(conf, "SlurmctldTimeout") == ["30"]
    assert lines(conf, "MessageTimeout") == ["10"]


def test_user_timers_replace_ours():
    model = build_model(documents(("cpu", {}), controller={"replicas": 2, "spool": RWX},
                                  slurmConfig={"SlurmctldTimeout": 15, "MessageTimeout": 5}))
    conf = render_slurm_configs(model)["slurm.conf"]
    assert lines(conf, "SlurmctldTimeout") == ["15"] and lines(conf, "MessageTimeout") == ["5"]


@pytest.mark.parametrize("spool", [{"size": "1Gi"}, {"size": "1Gi", "accessModes": ["ReadWriteOnce"]},
                                   {"size": "1Gi", "accessModes": ["ReadWriteOncePod", "ReadOnlyMany"]}])
def test_backup_needs_a_shared_spool(spool):
    found = issues({"replicas": 2, "spool": spool})
    assert list(found) == ["SlurmCluster/c spec.controller.spool.accessModes"]
    assert "cannot be shared" in found["SlurmCluster/c spec.controller.spool.accessModes"]


@pytest.mark.parametrize("replicas", [0, 3, "2"])
def test_replicas_bounds(replicas):
    found = issues({"replicas": replicas, "spool": RWX})
    assert "SlurmCluster/c spec.controller.replicas" in found


def test_crd_carries_the_rule():
    spec = crds.slurm_cluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    controller = spec["properties"]["controller"]
    assert controller["properties"]["replicas"]["maximum"] == 2
    assert [v["rule"] for v in controller["x-kubernetes-validations"]] == [r[0] for r in CEL_RULES]
    assert controller["x-kubernetes-validations"][0]["fieldPath"] == ".spool.accessModes"


def test_local_target_one_controller_line():
    model = build_model(documents(("cpu", {"maxReplicas": 1})))
    conf = local_slurm_configs(model, "/tmp/st", 20000, user="root", have_pmix=False)["slurm.conf"]
    assert lines(conf, "SlurmctldHost") == ["localhost(127.0.0.1)"]


def test_local_cluster_needs_root_for_a_backup(tmp_path, monkeypatch):
    from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb
    from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError
    cluster = lb.LocalCluster(str(tmp_path / "state"))
    cluster.model = build_model(documents(("cpu", {"maxReplicas": 1}), controller={"replicas": 2, "spool": RWX}))
    monkeypatch.setattr(lb.os, "geteuid", lambda: 1000)
    with pytest.raises(LocalClusterError, match="replicas 2 needs root locally"):
        cluster.check_inputs()
    cluster.model = build_model(documents(("cpu", {"maxReplicas": 1})))
    cluster.check_inputs()
    monkeypatch.setattr(lb.os, "geteuid", lambda: 0)
    cluster.model = build_model(documents(("cpu", {"maxReplicas": 1}), controller={"replicas": 2, "spool": RWX}))
    cluster.check_inputs()


def test_local_target_two_controllers():
    model = build_model(documents(("cpu", {"maxReplicas": 1}), controller={"replicas": 2, "spool": RWX}))
    conf = local_slurm_configs(model, "/tmp/st", 20000, user="root", have_pmix=False)["slurm.conf"]
    assert lines(conf, "SlurmctldHost") == ["c-controller-0(127.0.0.1)", "c-controller-1(127.0.0.2)"]
    assert lines(conf, "SlurmctldPidFile") == ["/tmp/st/run/ctld/slurmctld.pid"]


def test_ping_states():
    from ansible_collections.soperator.slurm.plugins.module_utils.local.controllers import ping_states
    text = "Slurmctld(primary) at c-controller-0 is DOWN\nSlurmctld(backup) at c-controller-1 is UP\n"
    assert ping_states(text) == {"c-controller-0": "DOWN", "c-controller-1": "UP"}
