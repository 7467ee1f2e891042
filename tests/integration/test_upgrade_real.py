"""Slurm version upgrades (kube/upgrade.py) on the real kube-apiserver, its controllers and kwok nodes, KubeCluster
in-process; the order of the writes is the API server's audit log.

kwok runs every pod (Ready) and completes Job pods (exit 0): the dump and state Jobs complete as a real one that
succeeded would, and the real StatefulSet controller rolls slurmdbd and slurmctld onto their new templates. What a
dump holds is not judged here (kwok runs no container): the Job's command, database, credentials and claim are.

The small example with accounting in the cluster and workers on onDelete (their Slurm-aware roll needs real slurmd:
test_rollout_real.py), starting at Slurm 24.05:
- 26.05 (beyond 24.05's successors' window) and 23.11 (a downgrade) are refused, in check mode too, with no write
  at all - not even a dry run;
- check mode of 24.11 lists the phases and the dump it would take, writing nothing for real;
- 24.11: the backup claim and the dump Job first, the Job complete before slurmdbd's StatefulSet is written, then
  slurmctld stopped, its state saved by a second Job, slurmctld applied, then login and workers;
- a re-run writes nothing and takes no new dump; a teardown with purge_volumes leaves the backups.
"""
import datetime

import pytest
import yaml

from slurm_kube import until
from slurm_specs import SMALL_CLAIMS, admin_user

from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.kube.backend import KubeCluster, KubeOptions
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeClient, api_client_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents

pytest_plugins = ("slurm_kube_fixtures",)     # its fixture: api

BACKUP_SELECTOR = "app.kubernetes.io/component=backup,app.kubernetes.io/instance=small"


def cluster(docs, kubeconfig, check_mode=False, **kw):
    client = KubeClient(api_client_from_params({"kubeconfig": kubeconfig}), "soperator.slurm", timeout=10)
    return KubeCluster(client, build_model(load_documents(yaml.safe_dump_all(docs))),
                       KubeOptions(wait=True, poll=0.5, wait_timeout=120, check_mode=check_mode, **kw))


def at(docs, tag):
    docs[0]["spec"]["images"] = {"tag": tag}
    return docs


def writes(audit, mark, user, dry_run=None):
    """(resource, name, subresource, stageTimestamp) of each successful write since `mark`, in order."""
    return [(r.resource, r.name, r.subresource or "", r.event.get("stageTimestamp"))
            for r in audit.requests(mark, user=user)
            if r.write and r.code in (200, 201) and (dry_run is None or r.dry_run == dry_run)]


def first(items, resource, name_start):
    return next(i for i, w in enumerate(items) if w[0] == resource and w[1].startswith(name_start))


def last(items, resource, name_start):
    return max(i for i, w in enumerate(items) if w[0] == resource and w[1].startswith(name_start))


def timestamp(text):
    return datetime.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")


@pytest.fixture
def small_with_accounting(namespaced_spec, volumes):
    docs = namespaced_spec()
    namespace = docs[0]["metadata"]["namespace"]
    docs[0]["spec"]["accounting"] = {"enabled": True, "database": {"inCluster": {"storage": "1Gi"}}}
    docs[1]["spec"]["updateStrategy"] = {"type": "onDelete"}
    volumes(namespace, SMALL_CLAIMS + ("data-small-accounting-db-0", "small-backups"))
    return at(docs, "24.05.1-0.1.0"), namespace


def test_a_slurmdbd_version_change_dumps_the_database_before_anything_moves(
        small_with_accounting, kubeconfig, audit, api):
    docs, namespace = small_with_accounting
    user = admin_user(kubeconfig)
    created = cluster(docs, kubeconfig).present()
    assert created["status"]["phase"] == "Ready", created["status"]
    assert created["upgrade"] is None

    # Refused before any write: a jump beyond 26.05's window, and a downgrade - check mode too
    for tag, words in (("26.05.5-0.1.0", ["Slurm 26.05 accepts only 25.11, 25.05, 24.11",
                                          "slurmdbd small-accounting runs 24.05.1",
                                          "Upgrade in steps, each finished on every component: "
                                          "24.05 -> 24.11 -> 26.05"]),
                       ("23.11.1-0.1.0", ["slurmdbd small-accounting would go from Slurm 24.05.1 down to 23.11.1"])):
        for check_mode in (True, False):
            mark = audit.mark()
            with pytest.raises(BackendError) as e:
                cluster(at(docs, tag), kubeconfig, check_mode=check_mode).present()
            message = str(e.value)
            assert message.startswith("refused Slurm version change, nothing was changed: "
                                      "SlurmCluster/small spec.images.tag: "), message
            assert all(w in message for w in words), message
            assert writes(audit, mark, user) == [], writes(audit, mark, user)
    assert api.statefulset("small-accounting", namespace).spec.template.spec.containers[0].image.endswith(
        ":24.05.1-0.1.0")

    # Check mode: the phases and the dump it would take; nothing written for real, no Job
    at(docs, "24.11.3-0.1.0")
    mark = audit.mark()
    plan = cluster(docs, kubeconfig, check_mode=True).present()["upgrade"]
    assert writes(audit, mark, user, dry_run=False) == []
    assert api.batch.list_namespaced_job(namespace, label_selector=BACKUP_SELECTOR).items == []
    assert [(p["phase"], p["status"]) for p in plan["phases"]] == [
        ("backup-database", "planned"), ("slurmdbd", "planned"), ("save-slurmctld-state", "planned"),
        ("slurmctld", "planned"), ("slurmd and login", "planned")]
    assert plan["versions"]["slurmdbd/small-accounting"] == "24.05.1 -> 24.11.3"
    assert plan["backup"]["claim"] == "small-backups"
    assert plan["backup"]["dump"].startswith("accounting/dbdump-24.05.1-to-24.11.3-")

    # The upgrade
    mark = audit.mark()
    result = cluster(docs, kubeconfig).present()
    upgrade = result["upgrade"]
    assert [(p["phase"], p["status"]) for p in upgrade["phases"]] == [
        ("backup-database", "done"), ("slurmdbd", "ready"), ("save-slurmctld-state", "done"),
        ("slurmctld", "ready"), ("slurmd and login", "applied")]
    assert upgrade["backup"] == plan["backup"] | {"state": upgrade["backup"]["state"]}, (upgrade, plan)
    done = writes(audit, mark, user, dry_run=False)
    # nothing before the backup claim and the dump Job
    assert [w[:2] for w in done[:2]] == [("persistentvolumeclaims", "small-backups"),
                                         ("jobs", upgrade["backup"]["dump_job"])], done
    dump_job = api.job(upgrade["backup"]["dump_job"], namespace)
    accounting_write = first(done, "statefulsets", "small-accounting")
    stop = first(done, "statefulsets", "small-controller")
    state_job = first(done, "jobs", upgrade["backup"]["state_job"])
    assert accounting_write < stop < state_job < last(done, "statefulsets", "small-controller") < \
        first(done, "statefulsets", "small-login"), done
    assert last(done, "statefulsets", "small-accounting") < stop, done
    # the dump had completed when slurmdbd's StatefulSet was written
    assert dump_job.status.completion_time is not None
    assert dump_job.status.completion_time.replace(tzinfo=None) <= timestamp(done[accounting_write][3]), done
    # what the dump Job runs: mariadb-dump of the in-cluster database, as its user, onto our claim
    container = dump_job.spec.template.spec.containers[0]
    env = dict((e.name, e.value if e.value_from is None else e.value_from.secret_key_ref.name + "/" +
                e.value_from.secret_key_ref.key) for e in container.env)
    assert "mariadb-dump --single-transaction" in container.command[-1], container.command
    assert env["DB_HOST"] == "small-accounting-db.%s.svc.cluster.local" % namespace, env
    assert (env["DB_USER"], env["DB_NAME"], env["MYSQL_PWD"]) == ("slurm", "slurm_acct_db",
                                                                  "small-accounting-db/password"), env
    assert env["DUMP"] == "/backup/" + upgrade["backup"]["dump"]
    assert dump_job.spec.template.spec.volumes[0].persistent_volume_claim.claim_name == "small-backups"
    # ours by name/instance/component, never pruned: no managed-by label
    for obj in (dump_job, api.pvc("small-backups", namespace)):
        assert "app.kubernetes.io/managed-by" not in obj.metadata.labels, obj.metadata.labels
    state = api.job(upgrade["backup"]["state_job"], namespace)
    assert [v.persistent_volume_claim.claim_name for v in state.spec.template.spec.volumes] == [
        "small-backups", "spool-small-controller-0"]
    for name in ("small-accounting", "small-controller", "small-login"):
        sts = api.statefulset(name, namespace)
        assert sts.spec.template.spec.containers[0].image.endswith(":24.11.3-0.1.0"), name
        assert sts.spec.replicas == 1
    until("the controller pod on 24.11.3", lambda: [p for p in api.pods(
        namespace, "app.kubernetes.io/component=controller").values()
        if p.spec.containers[0].image.endswith(":24.11.3-0.1.0")])

    # A re-run: no version change, nothing written, no new dump
    mark = audit.mark()
    again = cluster(docs, kubeconfig).present()
    assert again["upgrade"] is None and not again["changed"], again
    assert writes(audit, mark, user) == []
    assert len(api.batch.list_namespaced_job(namespace, label_selector=BACKUP_SELECTOR).items) == 2

    # A teardown, volumes purged: the backups stay
    cluster(docs, kubeconfig, purge_volumes=True).absent()
    assert api.pvc("small-backups", namespace) is not None
    assert api.pvc("data-small-accounting-db-0", namespace) is None or \
        api.pvc("data-small-accounting-db-0", namespace).metadata.deletion_timestamp is not None
    assert len(api.batch.list_namespaced_job(namespace, label_selector=BACKUP_SELECTOR).items) == 2
