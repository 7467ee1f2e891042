"""spec.containers (spec/containers.py) and the oci.conf it gives (render/oci_conf.py): what the spec accepts and
refuses with the field path, and the file read back the way slurmstepd's parser reads it. Against real Slurm:
tests/slurm/test_oci_bundle_runc.py (the bundle in runc)."""
import json
import shlex
import subprocess
import sys

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_run
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


WRAPPER = "/usr/bin/python3 /usr/local/lib/soperator/oci_run.py --bundle %b "   # the images' (constants.py)


def model_of(containers, *node_sets):
    return spec.build_model(documents(*(node_sets or (CPU,)), containers=containers))


def issues_of(containers):
    with pytest.raises(SpecError) as e:
        model_of(containers)
    return dict((i.path, i.message) for i in e.value.issues)


def oci_conf(containers, version=(26, 5), *node_sets, **target):
    return render_slurm_configs(model_of(containers, *node_sets),
                                SlurmTarget(slurm_version=version, **target)).get("oci.conf")


def test_off_by_default_and_when_disabled_no_oci_conf():
    assert spec.build_model(documents(CPU)).containers == m.Containers(False, "runc", "/tmp")
    assert model_of({"enabled": False, "runtime": "crun"}).containers == m.Containers(False, "crun", "/tmp")
    assert oci_conf({}) is None and oci_conf({"enabled": False}) is None


@pytest.mark.parametrize("version, workdir", [((22, 5), ""), ((25, 11), ""), ((26, 5), "--workdir '%Z' ")])
def test_runc_oci_conf_reads_back_as_containers_html_gives_it_run_through_oci_run(version, workdir):
    # RunTimeRun through node/oci_run.py; %Z (the job's working directory) only where slurmstepd knows it (26.05:
    # an older one stops the step on an unknown pattern)
    text = oci_conf({"enabled": True}, version)
    runc = "runc --rootless=true --root=/tmp "
    assert parse_slurm_file(text) == [
        [("RunTimeQuery", runc + "state " + NAME)], [("RunTimeKill", runc + "kill -a " + NAME)],
        [("RunTimeDelete", runc + "delete --force " + NAME)],
        [("RunTimeRun", WRAPPER + workdir + "-- " + runc + "run " + NAME + " -b %b")]]
    for line in parse_slurm_file(text):
        assert config_keys.read_by("oci.conf", line[0][0], version)


def test_crun_and_a_state_dir_per_user():
    text = oci_conf({"enabled": True, "runtime": "crun", "stateDir": "/run/user/%U/crun"}, (22, 5))
    crun = "crun --rootless=true --root=/run/user/%U/crun "
    assert dict(line[0] for line in parse_slurm_file(text)) == {
        "RunTimeQuery": crun + "state " + NAME, "RunTimeKill": crun + "kill -a " + NAME,
        "RunTimeDelete": crun + "delete --force " + NAME,
        "RunTimeRun": WRAPPER + "-- " + crun + "run --bundle %b " + NAME}


def _run_argv(text, workdir):
    """RunTimeRun as slurmstepd runs it (26.05, container.c): patterns replaced, then `/bin/sh -c`; the argv sh
    gives the wrapper (printed by a python3 standing in for it)."""
    value = dict(line[0] for line in parse_slurm_file(text))["RunTimeRun"]
    command = value.replace("%Z", workdir).replace("%b", "/var/spool/slurmd/oci-job1/step0/task0")
    for pattern, word in (("%n", "cpu-0"), ("%u", "alice"), ("%j", "1"), ("%s", "0"), ("%t", "0")):
        command = command.replace(pattern, word)
    argv = shlex.split(command)
    assert argv[:2] == ["/usr/bin/python3", "/usr/local/lib/soperator/oci_run.py"]
    shown = subprocess.run(["/bin/sh", "-c", command.replace(" ".join(argv[:2]), sys.executable + " -c "
                                                             "'import json, sys; print(json.dumps(sys.argv[1:]))'", 1)],
                           stdout=subprocess.PIPE, universal_newlines=True, timeout=30, check=True).stdout
    return json.loads(shown)


@pytest.mark.parametrize("workdir", ["/home/alice/run 1", "/home/alice/$HOME;x", "/home/alice/*"])
def test_the_working_directory_reaches_the_wrapper_as_one_word_through_the_shell(workdir, monkeypatch):
    argv = _run_argv(oci_conf({"enabled": True}, (26, 5)), workdir)
    assert argv[:4] == ["--bundle", "/var/spool/slurmd/oci-job1/step0/task0", "--workdir", workdir], argv
    assert argv[4:6] == ["--", "runc"], argv
    # and node/oci_run.py's parser reads it so (its bundle edit stubbed: only the arguments are looked at here)
    seen = []
    monkeypatch.setattr(oci_run, "prepare", lambda *args: seen.append(args) or {})
    monkeypatch.setattr(oci_run.os, "execvp", lambda program, args: seen.append(args))
    oci_run.main(argv)
    assert seen == [("/var/spool/slurmd/oci-job1/step0/task0", workdir, False), argv[5:]], seen


def test_gpus_are_bound_where_workers_have_gres_gpu_as_device_files():
    # --gpus only when a NodeSet has GRES gpu and gres.conf names them as /dev/nvidia[0-N] (the pods' target); the
    # local target counts GPUs without device files, and a cluster without GPUs gets no --gpus
    gpu = ("gpu", {"gres": ["gpu:h100:8"]})
    with_gpus = dict(line[0] for line in parse_slurm_file(oci_conf({"enabled": True}, (26, 5), CPU, gpu)))
    assert with_gpus["RunTimeRun"].startswith(WRAPPER + "--workdir '%Z' --gpus -- runc "), with_gpus
    assert "--gpus" in oci_conf({"enabled": True}, (22, 5), CPU, gpu)
    assert "--gpus" not in oci_conf({"enabled": True}, (26, 5))
    assert "--gpus" not in oci_conf({"enabled": True}, (26, 5), CPU, gpu, gres_device_files=False)


def test_the_wrapper_path_is_the_targets():
    text = oci_conf({"enabled": True}, (22, 5), oci_run_program="/srv/state/bin/oci_run.py",
                    oci_run_python="/opt/py/bin/python3")
    run = dict(line[0] for line in parse_slurm_file(text))["RunTimeRun"]
    assert run.startswith("/opt/py/bin/python3 /srv/state/bin/oci_run.py --bundle %b -- runc "), run


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
