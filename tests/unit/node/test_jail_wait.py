"""The populate race of slurm_cluster wait=false on Kubernetes, and its fix.

With wait=false the login and worker StatefulSets are applied right after the populate Job, so their pods could
start first. The login container's mounts below the jail (etc/slurm, run/munge, and the jail's etc as a subPath)
make the container runtime create those directories in the empty jail volume, and the populate Job then refused
the jail (not empty, no sentinel, overwrite=never). The fix: every pod whose mounts create entries in the jail
waits in an init container (jail.py wait) that mounts only the jail's root, until the jail is settled - populated,
or holding someone else's root filesystem - and never while a populate is under way.
"""
import os
import threading

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail as j
from ansible_collections.soperator.slurm.plugins.module_utils.render.cluster import render_cluster
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents
from tar_helpers import make_tar
from test_jail import rootfs_members
from repo_root import ROOT

EXAMPLES = ("examples/small-cpu.yml", "examples/gpu-accounting.yml")


def _model(example):
    with open(os.path.join(ROOT, example)) as f:
        return build_model(load_documents(f.read()))


def _pod_templates(manifests):
    for obj in manifests:
        spec = obj.get("spec") or {}
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            yield "%s/%s" % (obj["kind"], obj["metadata"]["name"]), spec["template"]["spec"]


def _writes_into_the_jail(pod):
    """Paths (relative to the jail volume) that a container runtime creates in the jail volume for this pod: mount
    points below a mount of the jail, and subPaths of the jail volume."""
    jail_volumes = set(v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v and
                       v["persistentVolumeClaim"]["claimName"].endswith("-jail"))
    made = []
    for ctr in pod["containers"]:
        mounts = ctr.get("volumeMounts", [])
        roots = [m["mountPath"] for m in mounts if m["name"] in jail_volumes and not m.get("subPath")]
        for m in mounts:
            if m["name"] in jail_volumes and m.get("subPath"):
                made.append(m["subPath"])
            for root in roots:
                if m["mountPath"].startswith(root.rstrip("/") + "/"):
                    made.append(os.path.relpath(m["mountPath"], root))
    return made


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_pod_that_writes_into_the_jail_waits_for_it_first(example):
    model = _model(example)
    manifests = render_cluster(model).manifests
    pods = dict(_pod_templates(manifests))
    writers = [name for name, pod in pods.items() if _writes_into_the_jail(pod)]
    assert any(name.startswith("StatefulSet/") and "login" in name for name in writers), writers
    for name, pod in pods.items():
        inits = pod.get("initContainers") or []
        if name in writers or (name.startswith("StatefulSet/") and any(
                m["mountPath"] == c.JAIL_MOUNT for ctr in pod["containers"] for m in ctr.get("volumeMounts", []))):
            assert [i["name"] for i in inits][:1] == ["wait-for-jail"], name
            wait = inits[0]
            assert wait["command"] + wait["args"] == ["python3", c.NODE_JAIL_PROGRAM, "wait", "--jail", c.JAIL_MOUNT]
            assert wait["image"] == pod["containers"][0]["image"], name          # the pod's own image: no pull
            # it makes nothing in the volume itself: the jail's root only, read-only, no subPath
            assert [(m["name"], m["mountPath"], m.get("readOnly"), m.get("subPath")) for m in wait["volumeMounts"]] \
                == [("jail", c.JAIL_MOUNT, True, None)], name
            # a worker stays Guaranteed: requests equal limits in every container, the init container too
            main = pod["containers"][0].get("resources") or {}
            if main.get("requests") and main.get("requests") == main.get("limits"):
                assert wait["resources"]["requests"] == wait["resources"]["limits"], name
                assert set(wait["resources"]["limits"]) == {"cpu", "memory"}, name
        else:
            assert not inits, name


def test_what_the_login_pod_makes_in_an_empty_jail_made_the_populate_refuse_it(tmp_path):
    """The race, reproduced with the rendered login pod's own mounts: made before the populate, they make it
    refuse the jail; the wait for a settled jail comes first in the pod and never passes on those alone."""
    model = _model(EXAMPLES[0])
    login = [pod for name, pod in _pod_templates(render_cluster(model).manifests) if name.endswith("-login")][0]
    made = _writes_into_the_jail(login)
    assert made, "the login pod mounts nothing below the jail"
    jail = tmp_path / "jail"
    jail.mkdir()
    assert j.settled(str(jail)) == (False, "the jail is empty")
    for path in made:
        os.makedirs(str(jail / path), exist_ok=True)
    rootfs = make_tar(tmp_path / "rootfs.tar", rootfs_members())
    assert j.populate(str(jail), rootfs, "never")["action"] == j.REFUSED


def test_settled_says_no_while_empty_or_under_way_and_yes_when_populated_or_foreign(tmp_path):
    jail = tmp_path / "jail"
    assert j.settled(str(jail))[0] is False                                 # not there yet
    jail.mkdir()
    (jail / "lost+found").mkdir()
    assert j.settled(str(jail)) == (False, "the jail is empty")
    (jail / (j.STAGING_PREFIX + "x")).mkdir()
    (jail / "usr").mkdir()                                                 # moved in by the swap
    ok, why = j.settled(str(jail))
    assert not ok and "under way" in why and j.STAGING_PREFIX in why
    (jail / j.SENTINEL).write_text("{}")
    assert j.settled(str(jail)) == (True, "the jail is populated")         # a replace (always) may be filling it
    other = tmp_path / "other"
    (other / "etc").mkdir(parents=True)
    assert j.settled(str(other)) == (True, "the jail holds a root filesystem that was not populated by us")


def test_a_populate_is_never_settled_before_its_sentinel(tmp_path, monkeypatch):
    jail = str(tmp_path / "jail")
    seen = []
    for name in ("fill", "_swap", "_write_sentinel"):
        original = getattr(j, name)

        def spy(*args, original=original, name=name):
            seen.append((name, "before", j.settled(jail)[0]))
            result = original(*args)
            seen.append((name, "after", j.settled(jail)[0]))
            return result
        monkeypatch.setattr(j, name, spy)
    rootfs = make_tar(tmp_path / "rootfs.tar", rootfs_members())
    assert j.populate(jail, rootfs, "never")["action"] == j.POPULATED
    assert [s[:2] for s in seen] == [("fill", "before"), ("fill", "after"), ("_swap", "before"), ("_swap", "after"),
                                     ("_write_sentinel", "before"), ("_write_sentinel", "after")]
    assert [s[2] for s in seen] == [False] * 5 + [True]
    assert j.settled(jail) == (True, "the jail is populated")


def test_the_wait_program_returns_once_the_jail_is_populated(tmp_path, capsys):
    jail = tmp_path / "jail"
    jail.mkdir()
    assert j.main(["wait", "--jail", str(jail), "--timeout", "0.2", "--interval", "0.05"]) == 1
    assert "the jail is empty" in capsys.readouterr().err

    result = {}

    def wait():
        result["rc"] = j.main(["wait", "--jail", str(jail), "--interval", "0.05"])
    waiter = threading.Thread(target=wait)
    waiter.start()
    rootfs = make_tar(tmp_path / "rootfs.tar", rootfs_members())
    assert j.populate(str(jail), rootfs, "never")["action"] == j.POPULATED
    waiter.join(60)
    assert not waiter.is_alive() and result == {"rc": 0}
    assert "the jail is populated" in capsys.readouterr().err
