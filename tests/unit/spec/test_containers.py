"""spec.containers (spec/containers.py) and the oci.conf it gives (render/oci_conf.py): what the spec accepts and
refuses with the field path, and the file read back the way slurmstepd's parser reads it. Against real Slurm:
tests/slurm/test_oci_bundle_runc.py (the bundle in runc)."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import SlurmTarget
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec import validate as spec
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError

from slurm_conf_reader import parse_slurm_file
from specs import documents

CPU = ("cpu", {"replicas": 1})
NAME = "%n.%u.%j.%s.%t"


def model_of(containers):
    return spec.build_model(documents(CPU, containers=containers))


def issues_of(containers):
    with pytest.raises(SpecError) as e:
        model_of(containers)
    return dict((i.path, i.message) for i in e.value.issues)


def oci_conf(containers, version=(26, 5)):
    return render_slurm_configs(model_of(containers), SlurmTarget(slurm_version=version)).get("oci.conf")


def test_off_by_default_and_when_disabled_no_oci_conf():
    assert spec.build_model(documents(CPU)).containers == m.Containers(False, "runc", "/tmp")
    assert model_of({"enabled": False, "runtime": "crun"}).containers == m.Containers(False, "crun", "/tmp")
    assert oci_conf({}) is None and oci_conf({"enabled": False}) is None


@pytest.mark.parametrize("version", [(22, 5), (26, 5)])
def test_runc_oci_conf_reads_back_as_containers_html_gives_it(version):
    text = oci_conf({"enabled": True}, version)
    runc = "runc --rootless=true --root=/tmp "
    assert parse_slurm_file(text) == [
        [("RunTimeQuery", runc + "state " + NAME)], [("RunTimeKill", runc + "kill -a " + NAME)],
        [("RunTimeDelete", runc + "delete --force " + NAME)], [("RunTimeRun", runc + "run " + NAME + " -b %b")]]
    for line in parse_slurm_file(text):
        assert config_keys.read_by("oci.conf", line[0][0], version)


def test_crun_and_a_state_dir_per_user():
    text = oci_conf({"enabled": True, "runtime": "crun", "stateDir": "/run/user/%U/crun"}, (22, 5))
    crun = "crun --rootless=true --root=/run/user/%U/crun "
    assert dict(line[0] for line in parse_slurm_file(text)) == {
        "RunTimeQuery": crun + "state " + NAME, "RunTimeKill": crun + "kill -a " + NAME,
        "RunTimeDelete": crun + "delete --force " + NAME, "RunTimeRun": crun + "run --bundle %b " + NAME}


@pytest.mark.parametrize("containers, path, fragment", [
    ({"enabled": True, "runtime": "docker"}, "runtime", "must be one of"),
    ({"enabled": True, "stateDir": "tmp"}, "stateDir", "an absolute path"),
    ({"enabled": True, "stateDir": "/tmp/a b"}, "stateDir", "an absolute path"),
    ({"enabled": True, "stateDir": "/tmp/#x"}, "stateDir", "an absolute path"),
    ({"enabled": True, "stateDir": '/tmp/"x'}, "stateDir", "an absolute path"),
    ({"enabled": "yes"}, "enabled", ""),
    ({"enabled": True, "image": "x"}, "image", ""),
])
def test_refused_with_the_field_path(containers, path, fragment):
    issues = issues_of(containers)
    key = "SlurmCluster/c spec.containers.%s" % path
    assert key in issues and fragment in issues[key], issues


def _worker_mounts(containers):
    model = model_of(containers)
    worker = rk._worker(model, model.node_sets[0])   # the worker StatefulSet render_manifests includes
    return dict((mt["mountPath"], mt) for mt in worker["spec"]["template"]["spec"]["containers"][0]["volumeMounts"])


def test_workers_see_the_jails_home_when_containers_are_on():
    # slurmstepd reads BUNDLE/config.json on the node's root before the step enters the jail: bundles in the jail's
    # /home must be at the same path there
    assert _worker_mounts({"enabled": True})["/home"] == {"name": "jail", "mountPath": "/home", "subPath": "home",
                                                          "readOnly": True}
    assert "/home" not in _worker_mounts({}) and "/home" not in _worker_mounts({"enabled": False})
