"""The container images (images/): build.py's pure helpers always; the built images themselves when `make images`
ran on this machine (otherwise those tests skip, environmentally: building takes minutes and root)."""
import ast
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time

import pytest

from ci_skips import environmental

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = os.path.join(ROOT, "images")
sys.path.insert(0, IMAGES)

import build  # noqa: E402  (images/build.py)

from ansible_collections.soperator.slurm.plugins.module_utils.constants import OCI_RUN_PROGRAM  # noqa: E402

REGISTRY = os.environ.get("REGISTRY") or build.DEFAULT_REGISTRY
ENV = dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF") or os.path.join(IMAGES, "containers.conf"))


# --- build.py, pure -----------------------------------------------------------------------------------------------

def test_upstream_version_drops_epoch_and_debian_revision():
    assert build.upstream("26.05.5-1") == "26.05.5"
    assert build.upstream("1:24.11.5-2+b1") == "24.11.5"
    assert build.upstream("22.05.8-4+deb12u3") == "22.05.8"


def _rootfs_with_status(tmp_path, status):
    path = str(tmp_path / "rootfs.tar")
    with tarfile.open(path, "w") as tar:
        data = status.encode("utf-8")
        info = tarfile.TarInfo("./var/lib/dpkg/status")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_dpkg_versions_reads_installed_packages_only(tmp_path):
    path = _rootfs_with_status(tmp_path, (
        "Package: slurmctld\nStatus: install ok installed\nVersion: 26.05.5-1\n\n"
        "Package: slurmd\nStatus: deinstall ok config-files\nVersion: 24.11.5-1\n\n"
        "Package: munge\nStatus: install ok installed\nVersion: 0.5.16-1\n"))
    assert build.dpkg_versions(path, {"slurmctld", "slurmd"}) == {"slurmctld": "26.05.5-1"}


def test_keys_change_with_any_input_and_only_then():
    a = build.key_of({"packages": ["slurmctld"], "suite": "forky"})
    assert a == build.key_of({"suite": "forky", "packages": ["slurmctld"]})
    assert a != build.key_of({"packages": ["slurmctld"], "suite": "trixie"})


def test_every_component_has_a_recipe_and_a_containerfile():
    for component in build.COMPONENTS:
        if component == "ansible-runner":
            directory = "remediation"
        else:
            directory, rootfs = build.IMAGE_RECIPES[component][:2]
            assert rootfs in build.ROOTFS
        assert os.path.isfile(os.path.join(IMAGES, directory, "Containerfile"))


NODE_DIR = os.path.join(ROOT, "plugins", "module_utils", "node")


def _node_imports(name):
    """The node/ files that node/`name` imports, either way it can (the collection's path, or a file beside it)."""
    with open(os.path.join(NODE_DIR, name)) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ansible_collections.soperator.slurm.plugins." \
                "module_utils.node":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names
                         if os.path.isfile(os.path.join(NODE_DIR, alias.name + ".py")))
    return set(name + ".py" for name in found)


@pytest.mark.parametrize("component", ["worker", "login", "jail", "worker-gpu", "jail-gpu"])
def test_an_image_copies_every_node_file_its_programs_import_and_they_run_from_that_copy(component, tmp_path):
    """The node programs run in the images as plain files in one directory: each COPY of node files carries what its
    programs import, build.py puts those files into the build context, and each program starts from such a copy
    alone (python3 -I: neither the collection nor the script's directory on sys.path but what it adds itself)."""
    directory, unused_rootfs, context = build.IMAGE_RECIPES[component]
    with open(os.path.join(IMAGES, directory, "Containerfile")) as f:
        copies = re.findall(r"^COPY ((?:\S+\.py )+)(\S+)/$", f.read(), re.M)
    together = {}
    for names, dest in copies:
        together.setdefault(dest, set()).update(names.split())
    assert together
    for dest, names in sorted(together.items()):
        for name in sorted(names):
            assert context[name] == os.path.join(build.NODE, name)
            assert _node_imports(name) <= names, (dest, name)
        copy = tmp_path / dest.strip("/").replace("/", "-")
        copy.mkdir()
        for name in names:
            shutil.copy(os.path.join(NODE_DIR, name), str(copy))
        for name in sorted(names):
            with open(os.path.join(NODE_DIR, name)) as f:
                if "\nif __name__ == \"__main__\":" not in f.read():
                    continue
            proc = subprocess.run([sys.executable, "-I", str(copy / name), "--help"], cwd=str(tmp_path),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=60, check=False)
            assert proc.returncode == 0 and "usage" in proc.stdout, (dest, name, proc.stderr)


def test_the_jail_carries_soperator_bundle_with_what_it_imports(tmp_path):
    """soperator-bundle in the jail is node/oci_bundle.py with the node files it imports, uploaded into one folder
    by the jail's hooks; it starts from such a copy alone (python3 -I) and its wrapper passes the arguments on.
    oci_run.py (oci.conf's RunTimeRun wrapper) lies there too, at the path render/oci_conf.py names."""
    files = set(name + ".py" for name in build.JAIL_LIB)
    assert _node_imports("oci_bundle.py") <= files and _node_imports("oci_run.py") <= files
    assert "/usr/local/lib/soperator/oci_run.py" == OCI_RUN_PROGRAM
    hooks = build.ROOTFS["jail-rootfs"]["hooks"]
    assert all(h in build.ROOTFS["jail-rootfs-gpu"]["hooks"] for h in hooks)
    assert "skopeo" in build.ROOTFS["jail-rootfs"]["packages"]
    inputs, subs = build.jail_substitutions("/plugin", "plugin-key")
    assert set(inputs) == {"plugin"} | set(build.JAIL_LIB)
    lib = tmp_path / "usr" / "local" / "lib" / "soperator"
    (tmp_path / "usr" / "local" / "bin").mkdir(parents=True)
    for hook in hooks[hooks.index('install -d "$1"/usr/local/lib/soperator'):]:
        hook = hook.format(**subs)
        if hook.startswith("upload "):
            unused, source, dest = hook.split()
            shutil.copy(source, str(tmp_path) + dest)
        else:
            subprocess.run(["sh", "-c", hook, "hook", str(tmp_path)], check=True, timeout=60)
    assert sorted(os.listdir(str(lib))) == sorted(files)
    wrapper = (tmp_path / "usr" / "local" / "bin" / "soperator-bundle").read_text()
    assert wrapper == '#!/bin/sh\nexec python3 /usr/local/lib/soperator/oci_bundle.py "$@"\n'
    proc = subprocess.run([sys.executable, "-I", str(lib / "oci_bundle.py"), "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False, cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.startswith("usage: soperator-bundle"), proc.stderr
    proc = subprocess.run([sys.executable, "-I", str(lib / "oci_run.py"), "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False, cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.startswith("usage: oci_run"), proc.stderr


# --- the built images ---------------------------------------------------------------------------------------------

def _podman(*args, **kw):
    return subprocess.run(["podman"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=ENV, timeout=kw.pop("timeout", 120), check=False, **kw)


def _built_tag():
    if not shutil.which("podman"):
        pytest.skip(environmental("podman is not installed (make images-deps)"))
    if os.geteuid() != 0:
        pytest.skip(environmental("the images are built and run as root"))
    proc = _podman("images", "--format", "{{.Tag}}", "--filter", "label=dev.soperator.slurm-version",
                   "--filter", "reference=%s/controller" % REGISTRY)
    tags = sorted(t for t in proc.stdout.split() if t != "<none>")
    wanted = os.environ.get("TAG")
    if wanted:
        tags = [t for t in tags if t == wanted]
    for tag in reversed(tags):
        if all(_podman("image", "exists", "%s/%s:%s" % (REGISTRY, c, tag)).returncode == 0
               for c in ("controller", "worker", "login", "jail", "accounting", "mariadb")):
            return tag
    pytest.skip(environmental("the images are not built on this machine (make images)"))


@pytest.fixture(scope="module")
def tag():
    return _built_tag()


def _label(ref, name):
    return _podman("image", "inspect", "--format", '{{index .Labels "%s"}}' % name, ref).stdout.strip()


def test_controller_runs_the_slurm_its_label_and_tag_name(tag):
    ref = "%s/controller:%s" % (REGISTRY, tag)
    version = _label(ref, build.LABEL_SLURM)
    out = _podman("run", "--rm", "--network", "none", ref, "slurmctld", "-V").stdout.strip()
    assert re.match(r"slurm(-wlm)? %s$" % re.escape(version), out), out
    assert tag.startswith(version + "-") or os.environ.get("TAG")
    if _label(ref, build.LABEL_SUITE) == "forky":
        assert version.startswith("26.05.")


def test_entrypoint_refuses_a_daemon_without_the_munge_key(tag):
    proc = _podman("run", "--rm", "--network", "none", "%s/controller:%s" % (REGISTRY, tag), "slurmctld", "-D")
    assert proc.returncode == 1
    assert "no munge key at /etc/munge/munge.key" in proc.stderr


def test_munged_runs_as_munge_with_a_root_owned_key(tag, tmp_path):
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)   # as the Secret is mounted: root's, mode 0400
    script = ('for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = munged ] && stat -c %U $p; done; '
              'echo hello | munge | unmunge >/dev/null && echo credential-ok')
    proc = _podman("run", "--rm", "--network", "none", "-v", "%s:/etc/munge:ro" % tmp_path,
                   "%s/controller:%s" % (REGISTRY, tag), "sh", "-c", script)
    assert proc.stdout.split() == ["munge", "credential-ok"], proc.stdout + proc.stderr


def test_the_jail_image_holds_the_plugin_built_for_its_slurm(tag, tmp_path):
    """The jail tarball carries the SPANK plugin at the path plugstack.conf names, the marker file the smoke test
    looks for, and Slurm clients of the images' version."""
    ref = "%s/jail:%s" % (REGISTRY, tag)
    script = ("tar -tf /opt/soperator/jail-rootfs.tar ./usr/lib/slurm/spank_chroot.so ./etc/soperator-jail-release "
              "./usr/bin/srun ./usr/bin/skopeo ./usr/local/bin/soperator-bundle && tar -xOf /opt/soperator/jail-rootfs.tar ./var/lib/dpkg/status "
              "| grep -A8 '^Package: slurm-client$' | grep '^Version:'")
    proc = _podman("run", "--rm", "--network", "none", "--entrypoint", "sh", ref, "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert "Version: %s-" % _label("%s/controller:%s" % (REGISTRY, tag), build.LABEL_SLURM) in proc.stdout


def _smoke(tag, *options):
    """images/smoke.py with these options; asserts it passed and returns its last line (the results)."""
    proc = subprocess.run([sys.executable, os.path.join(IMAGES, "smoke.py")] + list(options) + [
        "--tag", tag, "--registry", REGISTRY], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True, env=ENV, timeout=900, check=False)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0 and last.startswith("images-smoke: OK"), proc.stdout[-4000:]
    return last


def test_the_images_run_as_a_slurm_cluster(tag):
    """images/smoke.py: the rendered small-cpu example with accounting as podman containers; srun, the jail, ssh,
    sbatch, sacct, health checks (about a minute)."""
    last = _smoke(tag, "--accounting")
    assert "srun -N2 hostname=cpu-0,cpu-1" in last and "jail=yes" in last and "sacct=" in last


def test_pods_started_before_the_populate_job_wait_for_the_jail(tag):
    """site.yml -e wait=false applies the login and worker StatefulSets right after the populate Job, so a kubelet
    may start their pods first: smoke.py --pods-first starts every pod before the Job (init containers first, each
    to its end, as a kubelet runs them). Their init container waits until the jail is populated; without it the
    login container's mounts below the jail made the empty volume non-empty and the Job refused it (the smoke
    failed with "populate Job exited 2").

    The same run is the GPU images' smoke (tests/specs/gpu-smoke.yml: a CPU and a GPU NodeSet; the jail from
    jail-gpu): /dev/null stands in for the device plugin's /dev/nvidia0-1 (no GPU here); slurmd 26.05 takes the
    rendered gres.conf and registers gpu:2, `srun --gres=gpu:2` gets CUDA_VISIBLE_DEVICES=0,1, and nccl-probe runs
    in a step in the jail: NCCL and the CUDA runtime load, and it answers "no GPU" (exit 3)."""
    last = _smoke(tag, "--pods-first", "--spec", "tests/specs/gpu-smoke.yml", "--fake-gpu-devices")
    assert "pods-first=ok" in last and "jail=yes" in last and "ssh=jail" in last
    assert "srun -N2 hostname=cpu-0,gpu-0" in last and "gpu=gpu-0:gres-gpu:2,nccl-probe:no-gpu" in last


def test_the_gpu_worker_image_without_a_gpu(tag):
    """worker-gpu on this machine (no GPU, no driver): the CUDA runtime and NCCL are in the linker cache, nccl-probe
    prints their versions and the documented no-GPU answer (exit 3), /opt/soperator/versions lists the stack and the
    driver floor, and the passive gpu check gives its documented no-GPU reason."""
    ref = "%s/worker-gpu:%s" % (REGISTRY, tag)
    script = ("ldconfig -p | grep -E 'libnccl.so.2 |libcudart.so.12 ' | wc -l; /opt/soperator/bin/nccl-probe; "
              "echo exit=$?; cat /opt/soperator/versions; python3 -c 'import sys; "
              "sys.path.insert(0, \"/opt/soperator/lib\"); import health_check as hc; print(hc.check_gpu_count(8, 10))'")
    proc = _podman("run", "--rm", "--network", "none", "--entrypoint", "sh", ref, "-c", script)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "2", proc.stdout
    assert re.search(r"^nccl: 2\.[0-9]+\.[0-9]+$", proc.stdout, re.M) and "\ncuda-runtime: 12." in proc.stdout
    assert "\ncuda-driver: none\ngpus: 0\nno-gpu: " in proc.stdout and "\nexit=3\n" in proc.stdout
    assert re.search(r"^libnccl2\t2\.", proc.stdout, re.M) and re.search(r"^libcudart12\t12\.", proc.stdout, re.M)
    assert re.search(r"^nvidia-driver\t>= %s " % re.escape(build.GPU_DRIVER_FLOOR), proc.stdout, re.M)
    assert lines[-1].startswith("no GPU: nvidia-smi is not in the container")


def test_slurmctld_of_the_images_serves_its_own_metrics(tag, tmp_path):
    """With spec.observability.exporter on, the rendered slurm.conf turns on slurmctld's metrics (Slurm >= 25.11):
    the images' slurmctld, started as smoke.py starts it, answers /metrics/nodes and /metrics/scheduler on its port
    in the Prometheus text format (what the second ServiceMonitor scrapes)."""
    import argparse
    import yaml
    import smoke
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    docs[0]["spec"]["observability"] = {"exporter": {"enabled": True}}
    spec = os.path.join(ROOT, "build", "images", "metrics-spec-%d.yml" % os.getpid())
    os.makedirs(os.path.dirname(spec), exist_ok=True)
    with open(spec, "w") as f:
        yaml.safe_dump_all(docs, f)
    os.environ.setdefault("CONTAINERS_CONF", ENV["CONTAINERS_CONF"])
    cluster = smoke.Cluster(argparse.Namespace(spec=os.path.relpath(spec, ROOT), registry=REGISTRY,
                                               accounting=False), tag)
    try:
        cluster.render()
        conf = [o for o in cluster.get("ConfigMap") if "slurm.conf" in o.get("data", {})][0]["data"]["slurm.conf"]
        assert "\nMetricsType=metrics/openmetrics\n" in conf
        cluster.start(components={"controller"})
        pod = cluster.containers[-1][0]

        def get(path):
            return cluster.exec(pod, ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/6817 && printf 'GET %s HTTP/1.0\\r\\n"
                                                    "\\r\\n' >&3 && timeout 5 cat <&3" % path], check=False)
        smoke.wait_for("slurmctld's /metrics/nodes", lambda: get("/metrics/nodes").startswith("HTTP/1.0 200"), 60, 1)
        nodes = get("/metrics/nodes")
        assert "# TYPE slurm_nodes gauge" in nodes and 'slurm_node_cpus{node="cpu-0"}' in nodes, nodes[:2000]
        assert "# TYPE slurm_server_thread_cnt gauge" in get("/metrics/scheduler")
    finally:
        cluster.cleanup()
        os.unlink(spec)


def test_slurmrestd_of_the_images_takes_a_token_and_refuses_a_forged_one(tag):
    """spec.rest: the controller pod (started as smoke.py starts it: the jwt-key Secret mounted, the entrypoint's
    SlurmUser copy) signs a token with `scontrol token`; the rendered slurmrestd Deployment's pod (the controller
    image, uid 65534, read-only root filesystem) answers /diag of the newest data parser with it over its Service's
    name and refuses a forged token and none (render/rest_kube.py)."""
    import argparse
    import json
    import yaml
    import smoke
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    docs[0]["spec"]["rest"] = {"enabled": True}
    spec = os.path.join(ROOT, "build", "images", "rest-spec-%d.yml" % os.getpid())
    os.makedirs(os.path.dirname(spec), exist_ok=True)
    with open(spec, "w") as f:
        yaml.safe_dump_all(docs, f)
    os.environ.setdefault("CONTAINERS_CONF", ENV["CONTAINERS_CONF"])
    cluster = smoke.Cluster(argparse.Namespace(spec=os.path.relpath(spec, ROOT), registry=REGISTRY,
                                               accounting=False), tag)
    try:
        cluster.render()
        cluster.start(components={"controller"})
        controller = cluster.containers[-1][0]

        def key_mode():
            return cluster.exec(controller, ["stat", "-c", "%U %a", "/run/slurm-jwt/jwt_hs256.key"],
                                check=False).strip()
        smoke.wait_for("the entrypoint's copy of the JWT key", key_mode, 60, 1)
        assert key_mode() == "slurm 600", smoke.sh(["podman", "logs", cluster.names[controller]], check=False)
        rest = cluster.get("Deployment", "small-rest")[0]
        cluster.podman_run("small-rest-0", rest["spec"]["template"])
        # the newest data parser the images' slurmrestd has (its plugins: data_parser_v0_0_44.so, ...)
        plugins = cluster.exec("small-rest-0", ["sh", "-c", "ls /usr/lib/*/slurm-wlm/"])
        versions = sorted(tuple(int(n) for n in v) for v in re.findall(r"data_parser_v(\d+)_(\d+)_(\d+)\.so", plugins))
        assert versions, plugins
        path = "/slurm/v%d.%d.%d/diag" % versions[-1]

        def token_of():
            out = cluster.exec(controller, ["scontrol", "token", "username=root", "lifespan=300"], check=False)
            return out.strip().split("=", 1)[1] if out.startswith("SLURM_JWT=") else None
        token = smoke.wait_for("a token from slurmctld", token_of, 60, 1)
        fetch = ("import sys, urllib.request, urllib.error\n"
                 "h = {'X-SLURM-USER-NAME': 'root', 'X-SLURM-USER-TOKEN': sys.argv[2]} if sys.argv[2] else {}\n"
                 "try:\n"
                 "    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1], headers=h), timeout=30)\n"
                 "    print(r.status, r.read().decode())\n"
                 "except urllib.error.HTTPError as e:\n"
                 "    print(e.code, e.read().decode())\n")
        url = "http://small-rest:6820" + path

        def get(token_text):
            out = cluster.exec(controller, ["python3", "-c", fetch, url, token_text]).strip()
            status, _sep, body = out.partition(" ")
            return int(status), body
        smoke.wait_for("slurmrestd answering", lambda: get(token)[0] == 200, 60, 1)
        status, body = get(token)
        assert status == 200 and "statistics" in json.loads(body), body[:2000]
        head, payload, signature = token.split(".")
        forged = ".".join([head, payload, ("A" if signature[0] != "A" else "B") + signature[1:]])
        # slurmctld refuses the forged token: 26.05's slurmrestd answers 511 with Slurm's error (22.05's: 500)
        refused = {"forged": get(forged), "none": get("")}
        assert refused["forged"][0] >= 400 and json.loads(refused["forged"][1])["errors"], refused
        assert refused["none"][0] == 401, refused
        user = cluster.exec("small-rest-0", ["id", "-u"]).strip()
        assert user == "65534", user
    finally:
        cluster.cleanup()
        os.unlink(spec)


@pytest.mark.skipif(not os.path.exists("/usr/sbin/slapd"), reason="needs slapd (make deps)")
def test_the_login_images_sssd_serves_a_directory_user_and_its_key_command_gates_on_the_directory(tag, tmp_path):
    """What the login pod's `sssd` sidecar runs (render/identity_kube.py: sssd_config.py write, then sssd -i), in the
    login image, against a real slapd on loopback (the host's network): alice resolves with her directory groups,
    /opt/soperator/bin/authorized-keys prints her key as nobody once the bind watcher (the login sidecar runs it) has
    seen SSSD's bind succeed; with slapd stopped it prints none and says why."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "slurm"))
    from ldap_server import SSSD_DN, SUFFIX, Slapd    # pylint: disable=import-outside-toplevel
    from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import render_sssd_conf
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import Ldap

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(tmp_path / "alice")],
                   check=True, timeout=60)
    alice_key = (tmp_path / "alice.pub").read_text().strip()
    slapd = Slapd(str(tmp_path / "slapd"), {"alice": alice_key, "bob": alice_key}).start()
    try:
        conf = tmp_path / "conf"
        conf.mkdir()
        (conf / "sssd.conf").write_text(render_sssd_conf(Ldap(
            uri=slapd.uri, search_base=SUFFIX, user_search_base=None, group_search_base=None, bind_dn=SSSD_DN,
            bind_password_secret=None, ca_config_map=None, start_tls=False, access_filter=None,
            entry_cache_timeout=5)))
        (conf / "password").write_text(slapd.sssd_password)
        # the pod mounts an nsswitch.conf with sss (the login image's own has files extrausers)
        script = ("printf 'passwd: files sss\\ngroup: files sss\\n' > /etc/nsswitch.conf && "
                  "python3 /opt/soperator/lib/sssd_config.py write --template /t/sssd.conf --password-file "
                  "/t/password --out /etc/sssd/sssd.conf --directory-out /var/lib/sss/pipes/soperator-directory.json"
                  " && (/usr/sbin/sssd -i --logger=stderr 2>/tmp/sssd.log &) && for i in $(seq 60); do "
                  "test -S /var/lib/sss/pipes/nss && break; sleep 0.5; done; "
                  # the login sidecar's bind watcher: with a bind DN the key command wants its recent success
                  "{ /opt/soperator/bin/authorized-keys --watch-bind /etc/sssd/sssd.conf 2>/tmp/watch.log & } ; "
                  "for i in $(seq 60); do test -f /var/lib/sss/pipes/soperator-bind.json && break; sleep 0.5; done; "
                  "sleep 1; echo WATCH $(cat /tmp/watch.log); "
                  "echo ID $(id alice); "
                  "echo KEY $(setpriv --reuid=nobody --regid=nogroup --clear-groups "
                  "/opt/soperator/bin/authorized-keys /nonexistent alice); "
                  "echo STOP; read line; "
                  "echo KEY2 $(setpriv --reuid=nobody --regid=nogroup --clear-groups "
                  "/opt/soperator/bin/authorized-keys /nonexistent alice 2>&1); echo END; cat /tmp/sssd.log")
        proc = subprocess.Popen(["podman", "run", "--rm", "-i", "--network", "host", "-v", "%s:/t:ro" % conf,
                                 "--entrypoint", "sh", "%s/login:%s" % (REGISTRY, tag), "-c", script],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, env=ENV)
        out = []
        for line in proc.stdout:
            out.append(line)
            if line.startswith("STOP"):
                slapd.stop()
                proc.stdin.write("go\n")
                proc.stdin.flush()
        proc.wait(timeout=120)
        text = "".join(out)
        assert "ID uid=47101(alice) gid=47001(hpc) groups=47001(hpc),47002(gpu)" in text, text
        assert "WATCH sssd-bind-check: bind as %s accepted" % SSSD_DN in text, text
        assert "KEY %s" % alice_key in text, text
        key2 = [line for line in out if line.startswith("KEY2")]
        assert key2 and alice_key not in key2[0] and "does not answer" in key2[0], text
    finally:
        slapd.stop()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_login_images_sshd_keeps_one_sources_failures_from_locking_out_the_next_user(tag, tmp_path):
    """The login pods' sshd_config (render/kube_objects.py login_sshd_config: PerSourcePenalties no) read by the
    login image's OpenSSH (10.x, where per-source penalties are on by default): `sshd -T` prints it back. Then sshd
    runs it on loopback (the host's network, a free port): after six clients from 127.0.0.1 failed with a wrong key
    (behind a NodePort or LoadBalancer Service every user arrives from the node's address), the next client's right
    key is accepted. With the same file less that line (sshd's default), the right key is refused: the lockout the
    line prevents."""
    from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
    from ansible_collections.soperator.slurm.plugins.module_utils.render import kube_objects as rk
    from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
    from ansible_collections.soperator.slurm.plugins.module_utils.render.sshd import render_sshd_config

    keys, authorized, jail = tmp_path / "host-keys", tmp_path / "authorized-keys", tmp_path / "jail"
    for folder in (keys, authorized, jail):
        folder.mkdir()
        os.chmod(str(folder), 0o755)        # the key command runs as nobody; sshd's chroot wants root's 0755
    for key_type in s.SSH_HOST_KEY_TYPES:
        subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-f", str(keys / s.ssh_host_key_file(key_type))],
                       check=True, timeout=60)
    for name in ("right", "wrong"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True,
                       timeout=60)
    (authorized / "root").write_text((tmp_path / "right.pub").read_text())
    os.chmod(str(authorized / "root"), 0o644)
    assert "PerSourcePenalties no" in rk.login_sshd_config().splitlines()
    port = _free_port()
    rendered = render_sshd_config(c.JAIL_MOUNT, c.SSH_HOST_KEY_DIR, rk.SSH_AUTHORIZED_KEYS_DIR, port=port,
                                  listen_address="127.0.0.1", keys_by_command=True, shared_source=True)
    configs = {"rendered": rendered, "default": rendered.replace("PerSourcePenalties no\n", "")}
    assert configs["default"] != rendered

    ssh = ["ssh", "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o",
           "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "IdentitiesOnly=yes"]
    seen = {}
    for mode, text in sorted(configs.items()):
        (tmp_path / "sshd_config").write_text(text)
        name = "soperator-sshd-test-%d" % os.getpid()
        volumes = ["-v", "%s:%s:ro" % (keys, c.SSH_HOST_KEY_DIR), "-v", "%s:%s:ro" % (authorized,
                   rk.SSH_AUTHORIZED_KEYS_DIR), "-v", "%s:%s:ro" % (jail, c.JAIL_MOUNT),
                   "-v", "%s:/t/sshd_config:ro" % (tmp_path / "sshd_config")]
        shown = _podman("run", "--rm", "--network", "none", *volumes, "--entrypoint", "sh", "%s/login:%s" % (
            REGISTRY, tag), "-c", "mkdir -p /run/sshd && /usr/sbin/sshd -T -f /t/sshd_config")
        assert shown.returncode == 0, shown.stderr
        penalties = [line for line in shown.stdout.splitlines() if line.lower().startswith("persourcepenalties ")]
        server = subprocess.Popen(["podman", "run", "--rm", "--name", name, "--network", "host"] + volumes + [
            "--entrypoint", "sh", "%s/login:%s" % (REGISTRY, tag), "-c",
            "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f /t/sshd_config"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=ENV)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline and server.poll() is None, "sshd did not listen"
                    time.sleep(0.5)
            time.sleep(1)     # the probe above is a connection without authentication, as a kubelet's would be
            # At once, not one after another: each failure adds 5 s to the source's penalty, which runs out in real
            # time, and it must reach 15 s to refuse anyone; on a loaded machine (a cold CI run) four clients in a
            # row took 5 s or more each, so the penalty never did and the right key got in with penalties on.
            clients = [subprocess.Popen(ssh + ["-i", str(tmp_path / "wrong"), "root@127.0.0.1", "true"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _client in range(6)]
            failed = [client.wait(timeout=60) for client in clients]
            assert failed == [255] * 6, failed
            right = subprocess.run(ssh + ["-v", "-i", str(tmp_path / "right"), "root@127.0.0.1", "true"],
                                   capture_output=True, text=True, timeout=60, check=False)
            seen[mode] = (penalties, "Authenticated to 127.0.0.1" in right.stderr, right.stderr[-1500:])
        finally:
            _podman("stop", "-t", "5", name)
            try:
                out = server.communicate(timeout=60)[0]
            except subprocess.TimeoutExpired:
                server.kill()
                out = server.communicate()[0]
        seen[mode] += (out[-1500:],)
    assert seen["rendered"][0] == ["PerSourcePenalties no"] and seen["rendered"][1], seen["rendered"]
    assert seen["default"][0][0].split()[1].startswith("crash:") and not seen["default"][1], seen["default"]
