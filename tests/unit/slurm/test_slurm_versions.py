"""slurm/versions.py: the Slurm version an image tag says, Slurm's compatibility window (two prior major releases,
three since 24.11: https://slurm.schedmd.com/upgrades.html), and which version changes a run refuses."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import versions as sv

REG = "registry.example/soperator"


def img(component, tag):
    return "%s/%s:%s" % (REG, component, tag)


def comp(name, applied, desired, running=(), obj=None, field=None):
    return sv.Component(name, obj or name, field or "SlurmCluster/demo spec.images.tag", desired, applied,
                        tuple(running))


def cluster(before, after, **kw):
    """The four components of a cluster moving from tag `before` to `after` (kw: per-component overrides)."""
    out = []
    for name, c in ((sv.ACCOUNTING, "accounting"), (sv.CONTROLLER, "controller"), (sv.WORKER, "worker"),
                    (sv.LOGIN, "login")):
        b, a = kw.get(name, (before, after))
        out.append(comp(name, img(c, b), img(c, a), running=[img(c, b)]))
    return out


@pytest.mark.parametrize("image,version", [
    (img("controller", "26.05.5-0.1.0"), "26.05.5"),
    (img("controller", "22.05.8-0.1.0"), "22.05.8"),
    ("controller:24.11.1", "24.11.1"),
    ("host:5000/a/b/worker:25.11.2-rc", "25.11.2"),
    ("worker:24.11.1@sha256:" + "a" * 64, "24.11.1"),
])
def test_versions_from_tags(image, version):
    assert str(sv.parse_image(image)) == version


@pytest.mark.parametrize("image", [
    "registry.example/controller:latest", "registry.example/controller", "host:5000/controller",
    "controller@sha256:" + "a" * 64, "controller:26.5.5", "controller:23.05.1-0.1.0",   # no 23.05 release
    "controller:2605", "controller:v26.05.5",
])
def test_tags_that_say_no_version(image):
    assert sv.parse_image(image) is None


def test_compatibility_window_changed_with_24_11():
    # the guide's table, and 26.05 by the rule it states (three prior releases since 24.11)
    assert sv.accepted_releases((23, 2)) == [(22, 5), (21, 8)]
    assert sv.accepted_releases((23, 11)) == [(23, 2), (22, 5)]
    assert sv.accepted_releases((24, 5)) == [(23, 11), (23, 2)]
    assert sv.accepted_releases((24, 11)) == [(24, 5), (23, 11), (23, 2)]
    assert sv.accepted_releases((25, 5)) == [(24, 11), (24, 5), (23, 11)]
    assert sv.accepted_releases((25, 11)) == [(25, 5), (24, 11), (24, 5)]
    assert sv.accepted_releases((26, 5)) == [(25, 11), (25, 5), (24, 11)]


def test_upgrade_path_in_steps():
    assert sv.upgrade_path((22, 5), (26, 5)) == "22.05 -> 23.02 -> 24.11 -> 26.05"
    assert sv.upgrade_path((24, 5), (26, 5)) == "24.05 -> 24.11 -> 26.05"
    assert sv.upgrade_path((25, 5), (26, 5)) == "25.05 -> 26.05"


def test_no_version_change_is_no_plan():
    # the same image, a new collection version only, a component that does not exist yet: nothing moves
    same = cluster("26.05.5-0.1.0", "26.05.5-0.1.0")
    suffix = cluster("26.05.5-0.1.0", "26.05.5-0.2.0")
    new = [comp(sv.CONTROLLER, None, img("controller", "26.05.5-0.1.0"))]
    for components in (same, suffix, new):
        assert sv.plan(components).moving == ()


def test_supported_upgrades_move_in_slurms_order():
    plan = sv.plan(list(reversed(cluster("24.11.3-0.1.0", "26.05.5-0.1.0"))))
    assert [c.name for c in plan.moving] == [sv.ACCOUNTING, sv.CONTROLLER, sv.WORKER, sv.LOGIN]
    assert plan.versions["slurmdbd/slurmdbd"] == "24.11.3 -> 26.05.5"
    assert not plan.unverified
    # a maintenance release is a version change too (the guide: the same procedure)
    assert len(sv.plan(cluster("26.05.4-0.1.0", "26.05.5-0.1.0")).moving) == 4
    # before 24.11, two prior releases: 22.05 -> 23.11 is supported
    assert len(sv.plan(cluster("22.05.8-0.1.0", "23.11.1-0.1.0")).moving) == 4


@pytest.mark.parametrize("before,after,accepted,path", [
    ("22.05.8-0.1.0", "24.05.1-0.1.0", "23.11, 23.02", "22.05 -> 23.02 -> 24.05"),
    ("24.05.1-0.1.0", "26.05.5-0.1.0", "25.11, 25.05, 24.11", "24.05 -> 24.11 -> 26.05"),
    ("22.05.8-0.1.0", "26.05.5-0.1.0", "25.11, 25.05, 24.11", "22.05 -> 23.02 -> 24.11 -> 26.05"),
])
def test_a_jump_beyond_the_window_is_refused(before, after, accepted, path):
    with pytest.raises(sv.VersionError) as e:
        sv.plan(cluster(before, after))
    msg = str(e.value)
    assert msg.startswith("refused Slurm version change, nothing was changed: SlurmCluster/demo spec.images.tag: "), msg
    assert "accepts only %s" % accepted in msg, msg
    assert "Upgrade in steps, each finished on every component: %s" % path in msg, msg
    assert "but slurmdbd slurmdbd runs %s, slurmctld slurmctld runs" % before.split("-")[0] in msg, msg
    assert msg.count("accepts only") == 1, msg      # one message for the one target release


def test_an_old_pod_still_running_counts():
    # the StatefulSet says 25.05 already, but a worker pod still runs 24.05: 26.05 does not accept it
    components = cluster("25.05.1-0.1.0", "26.05.5-0.1.0")
    worker = components[2]
    components[2] = comp(sv.WORKER, worker.applied, worker.desired,
                         running=[worker.applied, img("worker", "24.05.1-0.1.0")])
    with pytest.raises(sv.VersionError) as e:
        sv.plan(components)
    assert "slurmd slurmd runs 24.05.1" in str(e.value)


def test_downgrades_are_refused_maintenance_ones_too():
    for before, after in (("26.05.5-0.1.0", "25.11.2-0.1.0"), ("26.05.5-0.1.0", "26.05.4-0.1.0")):
        with pytest.raises(sv.VersionError) as e:
            sv.plan(cluster(before, after))
        assert "would go from Slurm %s down to %s" % (before[:7], after[:7]) in str(e.value), str(e.value)
        assert "does not support a downgrade" in str(e.value)


def test_order_of_versions_across_components():
    # slurmctld newer than slurmdbd, or slurmd newer than slurmctld, is refused
    with pytest.raises(sv.VersionError) as e:
        sv.plan(cluster("25.11.2-0.1.0", "26.05.5-0.1.0", **{sv.ACCOUNTING: ("25.11.2-0.1.0", "25.11.2-0.1.0")}))
    assert "slurmctld slurmctld would run Slurm 26.05.5, newer than slurmdbd slurmdbd (25.11.2)" in str(e.value)
    with pytest.raises(sv.VersionError) as e:
        sv.plan(cluster("25.11.2-0.1.0", "25.11.2-0.1.0", **{sv.WORKER: ("25.11.2-0.1.0", "26.05.5-0.1.0")}))
    assert "slurmd slurmd would run Slurm 26.05.5, newer than slurmctld" in str(e.value)
    # slurmdbd first, alone: allowed (it may be newer)
    plan = sv.plan(cluster("25.11.2-0.1.0", "25.11.2-0.1.0", **{sv.ACCOUNTING: ("25.11.2-0.1.0", "26.05.5-0.1.0")}))
    assert [c.name for c in plan.moving] == [sv.ACCOUNTING]


def test_an_unversioned_tag_fails_closed_unless_allowed():
    field = "SlurmCluster/demo spec.images.accounting"
    components = [comp(sv.ACCOUNTING, img("accounting", "26.05.5-0.1.0"), img("accounting", "latest"),
                       field=field)]
    with pytest.raises(sv.VersionError) as e:
        sv.plan(components)
    msg = str(e.value)
    assert field + ": the Slurm version of slurmdbd slurmdbd cannot be told from its image" in msg, msg
    assert "allow_unversioned_images=true" in msg
    plan = sv.plan(components, allow_unversioned=True)
    assert plan.unverified and [c.name for c in plan.moving] == [sv.ACCOUNTING]
    assert plan.versions["slurmdbd/slurmdbd"] == "26.05.5 -> %s (no version in its tag)" % img("accounting", "latest")
    # an unversioned image that does not change is no change
    same = [comp(sv.ACCOUNTING, img("accounting", "latest"), img("accounting", "latest"))]
    assert sv.plan(same).moving == ()
    # slurmd and login convert no database or state: an unversioned image of theirs is a plain image change
    for name, component in ((sv.WORKER, "worker"), (sv.LOGIN, "login")):
        assert sv.plan([comp(name, img(component, "26.05.5-0.1.0"), img(component, "cuda-custom"))]).moving == ()
