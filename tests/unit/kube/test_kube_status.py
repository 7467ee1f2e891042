"""kube/status.py cluster_status: the SlurmCluster's endpoints (the controllers' in SlurmctldHost order)."""
from ansible_collections.soperator.slurm.plugins.module_utils.kube.status import cluster_status
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from specs import documents


def endpoint(**controller):
    model = build_model(documents(("cpu", {}), controller=controller))
    return model, cluster_status(model, {}, 1, None)["controllerEndpoint"]


def test_one_controller_endpoint():
    model, found = endpoint()
    assert found == "%s-controller-0.%s-controller.%s.svc.cluster.local:6817" % (
        model.name, model.name, model.namespace)


def test_primary_then_backup_endpoints():
    model, found = endpoint(replicas=2, spool={"size": "1Gi", "accessModes": ["ReadWriteMany"]})
    assert found.split(",") == ["%s-controller-%d.%s-controller.%s.svc.cluster.local:6817" % (
        model.name, i, model.name, model.namespace) for i in (0, 1)]
