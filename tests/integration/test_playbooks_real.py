"""playbooks/scale.yml and teardown.yml through ansible-playbook against the real API server (site.yml's own runs -
create, a no-op re-run, check mode, --diff, a teardown that keeps the volumes - are test_site_real's).

scale.yml grows a NodeSet through the StatefulSet controller and kwok's nodes and waits for its new pods; beyond the
NodeSet's maxReplicas it is refused before any write; teardown.yml with purge_volumes=true removes the claims too and
keeps the CRDs. Scaling down needs Slurm (drain, FUTURE): test_nodeset_scale_real, with real slurmd nodes.
"""
import yaml

import ansible_run
from slurm_kube import BOUND
from slurm_specs import actions, admin_user
from slurm_specs import SMALL_CLAIMS as CLAIMS

pytest_plugins = ("slurm_kube_fixtures",)     # its fixtures: namespaced, api

APPLY = "soperator.slurm.cluster : Converge the Slurm cluster on Kubernetes"
SCALE = "soperator.slurm.nodeset : Converge the NodeSet"


def test_site_scale_teardown(namespaced, api, volumes, audit, real_cluster, tmp_path):
    ns, kc = namespaced.name, "kubeconfig=%s" % namespaced.kubeconfig
    volumes(ns, CLAIMS)
    spec = tmp_path / "small.yml"
    spec.write_text(yaml.safe_dump_all(namespaced.applied(namespaced.docs())))
    user = admin_user(namespaced.kubeconfig)

    site = ansible_run.playbook("site.yml", "-e", "spec_file=%s" % spec, "-e", kc, "-e", "wait_timeout=%d" % BOUND)
    applied = site.tasks()[APPLY]
    assert applied["changed"] and applied["status"]["phase"] == "Ready", applied.get("status")
    assert api.statefulset("cpu", ns).spec.replicas == 2

    # Scale up: the StatefulSet grows, its controller and kwok bring the new pods up, the play waits for them.
    # Nothing to drain; slurm.conf is unchanged (every node up to maxReplicas is defined, FUTURE until it registers).
    scale = ["-e", "nodeset=cpu", "-e", "cluster=small", "-e", "slurm_namespace=%s" % ns, "-e", kc]
    result = ansible_run.playbook("scale.yml", "-e", "replicas=4", *scale).tasks()[SCALE]
    assert result["changed"] and result["actions"] == []
    assert ("ConfigMap", "small-slurm-configs", "unchanged") in actions(result)
    assert api.statefulset("cpu", ns).spec.replicas == 4
    assert api.nodeset("cpu", ns)["spec"]["replicas"] == 4
    status = api.nodeset("cpu", ns)["status"]
    assert (status["phase"], status["replicas"], status["readyReplicas"]) == ("Ready", 4, 4), status
    ready = [name for name, pod in api.pods(ns, "app.kubernetes.io/component=worker").items()
             if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])]
    assert sorted(ready) == ["cpu-0", "cpu-1", "cpu-2", "cpu-3"], ready

    # Beyond maxReplicas: refused with the field, nothing written.
    mark = audit.mark()
    refused = ansible_run.playbook("scale.yml", "-e", "replicas=9", *scale, expect_rc=2).tasks()[SCALE]
    assert "NodeSet/cpu spec" in refused["msg"], refused["msg"]
    assert [r for r in audit.requests(mark, user=user) if r.write] == []
    assert api.statefulset("cpu", ns).spec.replicas == 4

    # Teardown, asked to purge the volumes: nothing of the cluster is left but the CRDs (cluster-wide, never ours
    # to delete). The controller's spool claim came from its StatefulSet's claim template: purged as well.
    done = ansible_run.playbook("teardown.yml", "-e", "spec_file=%s" % spec, "-e", kc, "-e", "purge_volumes=true")
    torn = done.tasks()[APPLY]
    assert torn["changed"]
    assert {("PersistentVolumeClaim", "small-jail", "pruned"),
            ("PersistentVolumeClaim", "spool-small-controller-0", "pruned")} <= set(actions(torn)), actions(torn)
    assert api.apps.list_namespaced_stateful_set(ns).items == []
    claims = [c.metadata.name for c in api.core.list_namespaced_persistent_volume_claim(ns).items
              if c.metadata.deletion_timestamp is None]
    assert claims == [], claims
    assert api.slurm_cluster("small", ns) is None
    real_cluster.kubectl("get", "crd", "slurmclusters.slurm.soperator.dev", "nodesets.slurm.soperator.dev")
