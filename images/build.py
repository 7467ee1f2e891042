# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the container images the rendered manifests name, here, from Debian packages.

    python3 images/build.py [--suite forky] [--registry R] [--tag T] [--only controller,worker] [--push]
                            [--save DIR]

No registry is pulled from and no Docker engine is needed: each image is FROM scratch with a Debian root filesystem
that mmdebstrap makes from Debian's own packages (the suite decides the Slurm version: forky 26.05, trixie 24.11),
then built by buildah from images/<component>/Containerfile. The chroot SPANK plugin is compiled in a build root
filesystem of the same suite (libslurm-dev, gcc), so it matches the Slurm it is loaded by.

Images: <registry>/<component>:<tag>, the spec's default (spec/validate.py): controller, worker, login,
accounting, jail (the populate Job's image: jail.py and the jail root filesystem as a tarball), ansible-runner
(the remediation CronJob's) and mariadb (the accounting database, for machines that cannot pull the public one).
The default tag is <Slurm version>-<collection version>, e.g. 26.05.5-0.1.0.

Cache by content: every root filesystem and image is keyed by a sha256 of its inputs (suite, packages, hooks, the
files copied in, this script's RECIPE_VERSION). A root filesystem tarball is kept in the cache directory
(${SOPERATOR_CACHE:-~/.cache/soperator}/images); an image whose label dev.soperator.inputs already carries its key
is not rebuilt. Downloaded .deb files are kept there too. The suite's package index is not part of a key: use
--refresh to make the root filesystems again from the mirror's current packages.
"""

from __future__ import print_function

import argparse
import functools
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(ROOT, "images")
NODE = os.path.join(ROOT, "plugins", "module_utils", "node")
# Bump to rebuild everything (a change in how this script builds, not in what it is given).
RECIPE_VERSION = "1"
LABEL_INPUTS = "dev.soperator.inputs"
LABEL_SLURM = "dev.soperator.slurm-version"
LABEL_SUITE = "dev.soperator.debian-suite"
DEFAULT_REGISTRY = "ghcr.io/soperator-slurm"
COMPONENTS = ("controller", "worker", "login", "accounting", "jail", "ansible-runner", "mariadb", "worker-gpu",
              "jail-gpu")
# The GPU images' NVIDIA user space: Debian's libcudart12 (non-free) and libnccl2 (contrib, built against it). Only
# trixie has them (forky's snapshot dropped both); they need nothing newer than the suite's libc and libstdc++, so the
# GPU root filesystems take the suite's main plus trixie's contrib and non-free. The driver (libcuda, nvidia-smi) is the
# node's, put in by the NVIDIA container toolkit: it must match the kernel module, so no image can carry it.
GPU_PACKAGES = ["libcudart12", "libnccl2"]
GPU_EXTRA_SUITE = "trixie"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# CUDA 12's minor version compatibility: a 12.x runtime runs on any driver from this one on (NVIDIA's CUDA release
# notes, "CUDA Toolkit and Minimum Required Driver Version").
GPU_DRIVER_FLOOR = "525.60.13"


def versions_hook(packages):
    """A customize hook writing /opt/soperator/versions: the GPU stack's Debian versions and the driver floor (the
    hook is a str.format template: {{ and }} are braces)."""
    return ('mkdir -p "$1"/opt/soperator && {{ echo "# the GPU stack of this image (the driver is the node\'s)"; '
            "chroot \"$1\" dpkg-query -W -f='${{Package}}\\t${{Version}}\\n' %s; "
            'printf "nvidia-driver\\t>= %s (CUDA 12 minor version compatibility)\\n"; }} > "$1"/opt/soperator/versions'
            % (" ".join(packages), GPU_DRIVER_FLOOR))


# Smaller images: no manuals, docs (but the copyright files) or translations.
DPKG_OPTS = ["path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*",
             "path-include=/usr/share/doc/*/copyright", "path-exclude=/usr/share/locale/*",
             "path-exclude=/usr/share/info/*"]
# DPKG_OPTS as dpkg's configuration, written by a setup hook, not given as mmdebstrap's --dpkgopt: with that,
# mmdebstrap also pipes each essential package through mmtarfilter (a Python program) as it first extracts it, a
# quarter of a small root filesystem's CPU here (42 -> 31 CPU s for python3 alone). What that first extraction puts
# in those paths the extract hook removes, before dpkg installs the essential packages: the same tree as --dpkgopt
# made (file lists compared, forky minbase + python3), and no alternative points at a removed manual.
NODOC_HOOKS = [
    "--setup-hook=mkdir -p \"$1\"/etc/dpkg/dpkg.cfg.d && printf '%%s\\n' %s > \"$1\"/etc/dpkg/dpkg.cfg.d/99soperator-nodoc"
    % " ".join(shlex.quote(o) for o in DPKG_OPTS),
    '--extract-hook=rm -rf "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/usr/share/info/*'
    ' && find "$1"/usr/share/doc -mindepth 1 ! -type d ! -path "$1/usr/share/doc/*/copyright" -delete'
    ' && find "$1"/usr/share/doc -mindepth 1 -depth -type d -empty -delete',
]

# spec.identity: SSSD in the controller, login and worker images (the pods' `sssd` sidecar runs it from the pod's own
# image: render/identity_kube.py). sssd-ldap brings sssd-common (with sss_ssh_authorizedkeys, the login's key
# command's); libnss-sss and libpam-sss the clients. forky's snapshot has no sssd (dropped from testing), and
# trixie's needs python3-sss built for python3 < 3.14 (forky's is 3.14): these root filesystems take unstable's main
# too, pinned below the suite, so it supplies sssd and only what the suite lacks.
SSSD_PACKAGES = ["sssd-ldap", "libnss-sss", "libpam-sss", "sssd-tools"]
SSSD_SUITE = "sid"
SSSD_SOURCES = ["%s main" % SSSD_SUITE]
GPU_SOURCES = SSSD_SOURCES + ["%s contrib non-free" % GPU_EXTRA_SUITE]

# soperator-bundle in the jail: node/oci_bundle.py and what it imports ({oci_bundle}... in the jail's hooks).
BUNDLE_TOOL = ("oci_bundle", "safe_tree", "tree_reader")
# The jail's /usr/local/lib/soperator: soperator-bundle's files and oci_run.py, which oci.conf's RunTimeRun runs
# (render/oci_conf.py, OCI_RUN_PROGRAM): the step runs it after it entered the jail (standard library only).
JAIL_LIB = BUNDLE_TOOL + ("oci_run",)


def jail_substitutions(plugin, plugin_key):
    """(inputs, substitutions) of the jail root filesystems' hooks: the SPANK plugin and JAIL_LIB's files."""
    files = {n: os.path.join(NODE, n + ".py") for n in JAIL_LIB}
    inputs = dict({"plugin": plugin_key}, **{n: file_digest(path) for n, path in files.items()})
    return inputs, dict(files, plugin=plugin)


# Root filesystems: packages and extra mmdebstrap customize hooks ({plugin} is the built SPANK plugin's path).
ROOTFS = {
    # Only to compile the SPANK plugin against this suite's <slurm/spank.h>.
    "build": {"packages": ["libslurm-dev", "gcc", "libc6-dev", "make"]},
    # python3: Slurm's power saving programs of ephemeral NodeSets (node/power_kube.py) run in this image.
    # slurmrestd and the JWT plugin: spec.rest (slurmrestd's pods run this image; slurmctld verifies the tokens).
    "controller": {"packages": ["slurmctld", "slurm-client", "munge", "util-linux", "python3", "tini", "slurmrestd",
                                "slurm-wlm-jwt-plugin"] + SSSD_PACKAGES, "sources": SSSD_SOURCES},
    # dmesg (util-linux) and scontrol for the health check; procps for ps/kill in jobs' epilogs. tini (every Slurm
    # image) is PID 1: it reaps the orphans the daemons leave (slurmstepd double-forks, munged daemonizes), which
    # slurmd as PID 1 leaves as zombies.
    # runc: spec.containers' runtime (oci.conf). The step runs it in the jail; slurmstepd's message thread, which
    # stays on the node's root, runs RunTimeKill/RunTimeQuery/RunTimeDelete here (scancel of a container step).
    # oci_run.py (RunTimeRun's wrapper) is in the image too, at the jail's path (the Containerfile): for steps that
    # stay on the node's root (spank_chroot's `disabled`).
    "worker": {"packages": ["slurmd", "slurm-client", "munge", "util-linux", "python3", "procps", "hostname",
                            "tini", "runc"] + SSSD_PACKAGES, "sources": SSSD_SOURCES},
    "login": {"packages": ["openssh-server", "slurm-client", "munge", "util-linux", "libnss-extrausers",
                           "python3", "tini"] + SSSD_PACKAGES, "sources": SSSD_SOURCES},
    "accounting": {"packages": ["slurmdbd", "munge", "util-linux", "tini", "slurm-wlm-jwt-plugin"]},
    # What users get as / on login and worker nodes: Slurm clients of the same version, munge, python3, ssh, the
    # plugin at the path plugstack.conf names (srun/sbatch in the jail load it), and localhost in /etc/hosts.
    # libnss-sss: sessions and job steps in the jail resolve directory users through the node's SSSD (spec.identity).
    # skopeo and soperator-bundle (node/oci_bundle.py): users make bundles for srun --container on the login node.
    "jail-rootfs": {
        # runc: `srun --container` steps run the runtime inside the jail (the step entered it before), rootless.
        "packages": ["slurm-client", "munge", "openssh-client", "python3", "hostname", "procps", "iproute2",
                     "less", "nano", "libnss-sss", "runc", "skopeo", "ca-certificates"],
        "sources": SSSD_SOURCES,
        "hooks": [
            'rm -f "$1"/etc/munge/munge.key "$1"/etc/resolv.conf "$1"/etc/hostname',
            'printf "127.0.0.1\\tlocalhost\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" > "$1"/etc/hosts',
            'install -d "$1"/usr/lib/slurm "$1"/etc/slurm "$1"/run/munge "$1"/var/spool/slurmd',
            'upload {plugin} /usr/lib/slurm/spank_chroot.so',
            'chmod 0755 "$1"/usr/lib/slurm/spank_chroot.so',
            # Lets anyone (and the smoke test) tell the jail from a node's own root filesystem.
            'printf "soperator.slurm jail root filesystem\\n" > "$1"/etc/soperator-jail-release',
            'install -d "$1"/usr/local/lib/soperator',
        ] + ['upload {%s} /usr/local/lib/soperator/%s.py' % (n, n) for n in JAIL_LIB] + [
            'chmod 0644 ' + " ".join('"$1"/usr/local/lib/soperator/%s.py' % n for n in JAIL_LIB),
            'printf "#!/bin/sh\\nexec python3 /usr/local/lib/soperator/oci_bundle.py \\"\\$@\\"\\n" '
            '> "$1"/usr/local/bin/soperator-bundle',
            'chmod 0755 "$1"/usr/local/bin/soperator-bundle',
        ]},
    "populate": {"packages": ["python3"]},
    # The accounting database for machines that cannot pull the public MariaDB image (images/mariadb).
    "mariadb": {"packages": ["mariadb-server", "util-linux"]},
    # An Ansible execution environment: ansible-core and the kubernetes client from PyPI in a venv (pinned: the
    # versions our tests run with), the collections added by the Containerfile. slurm-client (and the munge client
    # library it brings) of the suite's Slurm: with the local target or slurm_transport=local the collection's Slurm
    # commands and the health checks run in this image; no munge key in it.
    "runner": {
        "packages": ["python3", "python3-venv", "openssh-client", "ca-certificates", "git", "slurm-client"],
        "hooks": [
            'rm -f "$1"/etc/munge/munge.key',
            'chroot "$1" python3 -m venv /opt/ansible',
            # The build machine's CA bundle (it may sit behind a TLS-inspecting proxy), for pip only, removed after.
            'upload {ca} /tmp/build-ca.crt',
            'chroot "$1" env SSL_CERT_FILE=/tmp/build-ca.crt REQUESTS_CA_BUNDLE=/tmp/build-ca.crt '
            'PIP_CERT=/tmp/build-ca.crt PIP_FIND_LINKS= /opt/ansible/bin/pip install --no-cache-dir '
            '--disable-pip-version-check -q ansible-core==2.19.14 kubernetes==37.0.2 PyYAML==6.0.3 '
            # ansible-runner: AWX/AAP run an execution environment's jobs through `ansible-runner worker`.
            'ansible-runner==2.4.3 '
            'prometheus-client==0.26.0',   # the exporter Deployment (render/observe_objects.py) runs in this image
            'rm -f "$1"/tmp/build-ca.crt',
        ]},
}

# The GPU variants: the same root filesystems plus the NVIDIA user space (GPU_PACKAGES). The jail's also holds
# nccl-probe (node/nccl_probe.py), which the ncclAllReduce active check runs in a job where all_reduce_perf is missing.
ROOTFS["worker-gpu"] = {"packages": ROOTFS["worker"]["packages"] + GPU_PACKAGES, "sources": GPU_SOURCES,
                        "hooks": [versions_hook(GPU_PACKAGES + ["slurmd"])]}
ROOTFS["jail-rootfs-gpu"] = {
    "packages": ROOTFS["jail-rootfs"]["packages"] + GPU_PACKAGES, "sources": GPU_SOURCES,
    "hooks": ROOTFS["jail-rootfs"]["hooks"] + [
        'upload {probe} /usr/local/bin/nccl-probe',
        'sed -i "1i #!/usr/bin/python3" "$1"/usr/local/bin/nccl-probe',
        'chmod 0755 "$1"/usr/local/bin/nccl-probe',
        versions_hook(GPU_PACKAGES + ["slurm-client"])]}
NCCL_PROBE = os.path.join(NODE, "nccl_probe.py")
SSSD_CONFIG = os.path.join(NODE, "sssd_config.py")


def _node_files(*names):
    """Build-context entries of node/ programs: name -> its path under plugins/module_utils/node."""
    return {name: os.path.join(NODE, name) for name in names}


ENTRYPOINT = {"entrypoint.sh": os.path.join(IMAGES, "entrypoint.sh")}
# What the login and worker images share: the SPANK plugin, the health checks (and nccl_probe.py, whose output
# active_check parses), the jail programs (the wait-for-jail init container) and the SSSD sidecar's sssd_config.py.
NODE_IMAGE_FILES = dict(ENTRYPOINT, **{"spank_chroot.so": "{plugin}"}, **_node_files(
    "health_check.py", "health_status.py", "active_check.py", "nccl_probe.py", "jail.py", "jail_source.py",
    "tree_reader.py", "safe_tree.py", "sssd_config.py"))

# The populate program (node/jail.py and what it imports), in the jail images.
JAIL_PROGRAM = _node_files("jail.py", "jail_source.py", "tree_reader.py", "safe_tree.py")

# Image component -> (Containerfile dir, root filesystem, files for the build context: name -> source path).
IMAGE_RECIPES = {
    "controller": ("controller", "controller", dict(ENTRYPOINT, **_node_files(
        "power_kube.py", "power_program.py", "sssd_config.py"))),
    "worker": ("worker", "worker", dict(NODE_IMAGE_FILES, **_node_files("oci_run.py"))),
    "login": ("login", "login", dict(NODE_IMAGE_FILES, **_node_files("authorized_keys.py"))),
    "accounting": ("accounting", "accounting", dict(ENTRYPOINT)),
    "mariadb": ("mariadb", "mariadb", {"entrypoint.sh": os.path.join(IMAGES, "mariadb", "entrypoint.sh")}),
    "worker-gpu": ("worker-gpu", "worker-gpu", dict(NODE_IMAGE_FILES, **_node_files("oci_run.py"))),
    "jail-gpu": ("populate_jail", "populate", dict(JAIL_PROGRAM, **{"jail-rootfs.tar": "{jail_gpu_rootfs}"})),
    "jail": ("populate_jail", "populate", dict(JAIL_PROGRAM, **{"jail-rootfs.tar": "{jail_rootfs}"})),
}
# The root filesystems each image is made from (the jail image: the populate program's, and the jail's as a tarball).
ROOTFS_OF = {"controller": ("controller",), "worker": ("worker",), "login": ("login",),
             "accounting": ("accounting",), "jail": ("populate", "jail-rootfs"), "mariadb": ("mariadb",),
             "ansible-runner": ("runner",), "worker-gpu": ("worker-gpu",), "jail-gpu": ("populate", "jail-rootfs-gpu")}


def log(msg):
    print("images: %s" % msg, file=sys.stderr)
    sys.stderr.flush()


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def output(cmd):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def key_of(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode("utf-8")).hexdigest()


def link_or_copy(src, dst):
    if os.path.lexists(dst):
        os.unlink(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


class Builder(object):
    def __init__(self, args):
        self.args = args
        self.cache = os.path.join(os.environ.get("SOPERATOR_CACHE") or os.path.expanduser("~/.cache/soperator"),
                                  "images")
        self.debs = os.path.join(self.cache, "debs", args.suite)
        self.out = os.path.join(ROOT, "build", "images")
        for d in (self.cache, self.debs, self.out):
            os.makedirs(d, exist_ok=True)
        self.built = []

    # --- root filesystems ---------------------------------------------------------------------------------------

    def mmdebstrap(self, packages, target, hooks=(), sources=None):
        # Several run at once (root_filesystems). Each copies the shared .deb cache in and its own downloads out to a
        # folder of its own, renamed into the cache afterwards (a .deb is in the cache whole or not at all), with cp
        # in plain shell hooks, not mmdebstrap's sync-in/sync-out: those run tar, which fails ("file changed as we
        # read it") when another build renames a .deb in or links one while it reads.
        downloads = tempfile.mkdtemp(prefix=".downloads-", dir=self.cache)
        try:
            cmd = ["mmdebstrap", "--variant=minbase", "--aptopt=Acquire::Check-Valid-Until \"false\"",
                   "--include=" + ",".join(packages),
                   # Keep the downloaded .deb files between runs (mmdebstrap(1), "use a local package cache").
                   "--skip=essential/unlink",
                   "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
                   "--setup-hook=find %s -maxdepth 1 -name '*.deb' -exec cp -t \"$1\"/var/cache/apt/archives/ {} +"
                   % shlex.quote(self.debs),
                   "--customize-hook=find \"$1\"/var/cache/apt/archives -maxdepth 1 -name '*.deb' -exec cp -t %s {} +"
                   % shlex.quote(downloads)]
            cmd += NODOC_HOOKS
            cmd += ["--customize-hook=" + h for h in hooks]
            cmd += [self.args.suite, target]
            if sources:
                # the suite's main, and more suites ("<suite> <components>") for what the suite lacks; each pinned
                # below the suite (priority 100), so apt takes a package from them only where the suite has none
                mirror = self.args.mirror or DEFAULT_MIRROR
                extra = [x for x in sources if x.split()[0] != self.args.suite]
                pins = "".join("Package: *\\nPin: release n=%s\\nPin-Priority: 100\\n\\n" % x.split()[0]
                               for x in extra)
                cmd[1:1] = ["--setup-hook=mkdir -p \"$1\"/etc/apt/preferences.d && printf '%s' > "
                            "\"$1\"/etc/apt/preferences.d/soperator-extra-suites" % pins]
                cmd += ["deb %s %s main" % (mirror, self.args.suite)] + ["deb %s %s" % (mirror, x) for x in extra]
            elif self.args.mirror:
                cmd.append(self.args.mirror)
            run(cmd, stdout=subprocess.DEVNULL if not self.args.verbose else None,
                stderr=subprocess.PIPE if not self.args.verbose else None)
            for name in os.listdir(downloads):
                if name.endswith(".deb") and not os.path.exists(os.path.join(self.debs, name)):
                    os.replace(os.path.join(downloads, name), os.path.join(self.debs, name))
        finally:
            shutil.rmtree(downloads, ignore_errors=True)

    def rootfs(self, name, extra_inputs=None, substitutions=None):
        """A cached root filesystem tarball -> its path."""
        recipe = ROOTFS[name]
        hooks = [h.format(**(substitutions or {})) for h in recipe.get("hooks", [])]
        key = key_of({"recipe": RECIPE_VERSION, "suite": self.args.suite, "mirror": self.args.mirror,
                      "packages": recipe["packages"], "hooks": recipe.get("hooks", []), "dpkg": NODOC_HOOKS,
                      "sources": recipe.get("sources"),
                      "inputs": extra_inputs or {}})
        path = os.path.join(self.cache, "rootfs-%s-%s-%s.tar" % (name, self.args.suite, key[:16]))
        if os.path.exists(path) and not self.args.refresh:
            return path, key
        log("root filesystem %s (%s): mmdebstrap %s" % (name, self.args.suite, " ".join(recipe["packages"])))
        started = time.time()
        tmp = path + ".tmp.tar"
        try:
            self.mmdebstrap(recipe["packages"], tmp, hooks, recipe.get("sources"))
        except subprocess.CalledProcessError as e:
            sys.stderr.write(e.stderr.decode("utf-8", "replace") if e.stderr else "")
            raise SystemExit("images: mmdebstrap failed for %s" % name)
        os.replace(tmp, path)
        for old in os.listdir(self.cache):  # earlier keys of the same root filesystem
            if old.startswith("rootfs-%s-%s-" % (name, self.args.suite)) and old != os.path.basename(path):
                os.unlink(os.path.join(self.cache, old))
        log("root filesystem %s: %.0f s, %d MB" % (name, time.time() - started, os.path.getsize(path) >> 20))
        return path, key

    def spank_plugin(self):
        """spank_chroot.so compiled in a build root filesystem of the suite (its libslurm-dev's spank.h)."""
        src = os.path.join(IMAGES, "spank_chroot")
        inputs = {f: file_digest(os.path.join(src, f)) for f in ("spank_chroot.c", "Makefile")}
        key = key_of({"recipe": RECIPE_VERSION, "suite": self.args.suite, "mirror": self.args.mirror,
                      "packages": ROOTFS["build"]["packages"], "inputs": inputs})
        out_dir = os.path.join(self.cache, "spank-%s-%s" % (self.args.suite, key[:16]))
        plugin = os.path.join(out_dir, "spank_chroot.so")
        if os.path.exists(plugin) and not self.args.refresh:
            return plugin, key
        log("spank_chroot.so: compiling against %s's libslurm-dev" % self.args.suite)
        tmp = out_dir + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        hooks = ["copy-in %s /tmp" % src,
                 'chroot "$1" make -C /tmp/spank_chroot BUILD_DIR=/tmp/spank-out',
                 "copy-out /tmp/spank-out/spank_chroot.so %s" % tmp]
        try:
            self.mmdebstrap(ROOTFS["build"]["packages"], "/dev/null", hooks)
        except subprocess.CalledProcessError as e:
            sys.stderr.write(e.stderr.decode("utf-8", "replace") if e.stderr else "")
            raise SystemExit("images: building the SPANK plugin failed")
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
        return plugin, key

    # --- images ---------------------------------------------------------------------------------------------------

    def image_label(self, ref, label):
        proc = subprocess.run(["buildah", "inspect", "--type", "image", "--format",
                               '{{index .OCIv1.Config.Labels "%s"}}' % label, ref],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def image_id(self, ref):
        proc = subprocess.run(["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def build_image(self, component, containerfile_dir, rootfs_path, rootfs_key, files, slurm_version,
                    key_files=None):
        ref = "%s/%s:%s" % (self.args.registry, component, self.args.tag)
        containerfile = os.path.join(IMAGES, containerfile_dir, "Containerfile")
        key = key_of({"recipe": RECIPE_VERSION, "rootfs": rootfs_key, "containerfile": file_digest(containerfile),
                      "files": key_files or {n: file_digest(p) for n, p in sorted(files.items())},
                      "slurm": slurm_version})
        if self.image_label(ref, LABEL_INPUTS) == key and not self.args.refresh:
            log("%s: up to date" % ref)
            self.built.append((component, ref, False))
            return ref
        log("%s: building" % ref)
        started = time.time()
        # per suite: the 24.11 images build beside a run that may rebuild a 26.05 one (.ci/run's images lane)
        ctx = os.path.join(self.out, "context", "%s-%s" % (self.args.suite, component))
        shutil.rmtree(ctx, ignore_errors=True)
        os.makedirs(ctx)
        link_or_copy(rootfs_path, os.path.join(ctx, "rootfs.tar"))
        for name, src in files.items():
            link_or_copy(src, os.path.join(ctx, name))
        previous = self.image_id(ref)
        cmd = ["buildah", "build", "--quiet", "--layers=false", "-f", containerfile, "-t", ref,
               "--label", "%s=%s" % (LABEL_INPUTS, key), "--label", "%s=%s" % (LABEL_SUITE, self.args.suite),
               "--label", "org.opencontainers.image.title=soperator.slurm %s" % component,
               "--label", "org.opencontainers.image.version=%s" % self.args.tag]
        if slurm_version:
            cmd += ["--label", "%s=%s" % (LABEL_SLURM, slurm_version)]
        run(cmd + [ctx], stdout=subprocess.DEVNULL)
        shutil.rmtree(ctx, ignore_errors=True)
        if previous and previous != self.image_id(ref):
            # The image this tag named before, now untagged: ours (it carried the tag we build), so remove it.
            subprocess.run(["buildah", "rmi", previous], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False)
        log("%s: built in %.0f s" % (ref, time.time() - started))
        self.built.append((component, ref, True))
        return ref


def tree_digest(path):
    """sha256 over a directory's relative file names and contents (symbolic links by their target)."""
    h = hashlib.sha256()
    for top, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            full = os.path.join(top, name)
            h.update(os.path.relpath(full, path).encode("utf-8") + b"\0")
            h.update((os.readlink(full) if os.path.islink(full) else file_digest(full)).encode("utf-8") + b"\0")
    return h.hexdigest()


def one_slurm_version(component, rootfs_tar, slurm):
    """The one Slurm version of an image's root filesystem, which must be `slurm` (the tag's)."""
    versions = dpkg_versions(rootfs_tar, {"slurmctld", "slurmd", "slurmdbd", "slurm-client"})
    if len(set(map(upstream, versions.values()))) != 1:
        raise SystemExit("images: %s: expected one Slurm version, found %s" % (component, versions))
    version = upstream(sorted(versions.values())[0])
    if version != slurm:
        raise SystemExit("images: %s has Slurm %s, the controller %s" % (component, version, slurm))
    return version


def build_runner(b, runner_fs, slurm_version):
    """The ansible-runner image: this collection (ansible-galaxy collection build) and kubernetes.core (the copy
    installed here with the ansible package: Galaxy is not reachable from every build machine)."""
    work = os.path.join(b.out, "runner")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run(["ansible-galaxy", "collection", "build", "--force", "--output-path", work, ROOT], stdout=subprocess.DEVNULL)
    built = [f for f in os.listdir(work) if f.startswith("soperator-slurm-") and f.endswith(".tar.gz")]
    collection = os.path.join(work, "soperator-slurm.tar.gz")
    os.rename(os.path.join(work, built[0]), collection)
    # The tarball's bytes change with file times: its key is its members' names and contents.
    h = hashlib.sha256()
    with tarfile.open(collection) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            h.update(member.name.encode("utf-8") + b"\0")
            if member.isfile():
                h.update(hashlib.sha256(tar.extractfile(member).read()).hexdigest().encode("ascii"))
    core = output([sys.executable, "-c", "import ansible_collections.kubernetes.core as k; "
                                         "print(list(k.__path__)[0])"]).strip()
    core_tar = os.path.join(work, "kubernetes-core.tar")
    with tarfile.open(core_tar, "w") as tar:
        tar.add(core, arcname=".", filter=lambda ti: None if "__pycache__" in ti.name else ti)
    files = {"soperator-slurm.tar.gz": collection, "kubernetes-core.tar": core_tar}
    key_files = {"soperator-slurm.tar.gz": h.hexdigest(), "kubernetes-core.tar": tree_digest(core)}
    b.build_image("ansible-runner", "remediation", runner_fs[0], runner_fs[1], files, slurm_version,
                  key_files=key_files)
    shutil.rmtree(work, ignore_errors=True)


def dpkg_versions(rootfs_tar, packages):
    """package -> Debian version, read from the root filesystem's dpkg status."""
    with tarfile.open(rootfs_tar) as tar:
        status = tar.extractfile("./var/lib/dpkg/status").read().decode("utf-8", "replace")
    versions = {}
    for stanza in status.split("\n\n"):
        name = re.search(r"^Package: (\S+)$", stanza, re.M)
        version = re.search(r"^Version: (\S+)$", stanza, re.M)
        installed = re.search(r"^Status: .* installed$", stanza, re.M)
        if name and version and installed and name.group(1) in packages:
            versions[name.group(1)] = version.group(1)
    return versions


def upstream(debian_version):
    """26.05.5-1 -> 26.05.5 (no epoch, no Debian revision)."""
    return debian_version.split(":", 1)[-1].rsplit("-", 1)[0]


def collection_version():
    with open(os.path.join(ROOT, "galaxy.yml")) as f:
        return re.search(r"^version:\s*['\"]?([^'\"\s]+)", f.read(), re.M).group(1)


def image_size(ref):
    proc = subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", ref],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
    return int(proc.stdout.strip()) if proc.returncode == 0 else 0


# What a jail for this host's local cluster needs of the host itself: its name resolution (srun in a login session
# or a job opens a socket on the host's own name) and its users (logins are the host's users; srun looks its user
# up). Passwords (shadow) never go in: sshd on the host authenticates.
HOST_RESOLUTION = ("/etc/hosts", "/etc/resolv.conf")
FIRST_USER_ID, NOBODY_ID = 1000, 65534


def _merged_entries(jail_text, host_text, first_id=FIRST_USER_ID):
    """The jail's passwd/group lines, plus the host's regular users or groups (ids from first_id, not nobody)
    that the jail lacks by name."""
    names = set(line.split(":", 1)[0] for line in jail_text.splitlines() if line)
    lines = jail_text.rstrip("\n").split("\n") if jail_text.strip() else []
    for line in host_text.splitlines():
        fields = line.split(":")
        if len(fields) < 4 or fields[0] in names or not fields[2].isdigit():
            continue
        if first_id <= int(fields[2]) < NOBODY_ID:
            lines.append(line)
    return "\n".join(lines) + "\n"


def add_host_files(tar_path, host_root="/"):
    """Append to the jail tarball (uncompressed) this host's name resolution files and its regular users and
    groups merged into the jail's own: the local target's jail runs on this host only."""
    with tarfile.open(tar_path) as tar:
        jail = {}
        for name in ("etc/passwd", "etc/group"):
            member = next((m for m in tar.getmembers() if m.name.lstrip("./") == name and m.isfile()), None)
            jail[name] = tar.extractfile(member).read().decode("utf-8") if member else ""
    texts = {}
    for path in HOST_RESOLUTION:
        full = os.path.join(host_root, path.lstrip("/"))
        if os.path.isfile(full):
            with open(full) as f:
                texts[path.lstrip("/")] = f.read()
    for name in ("etc/passwd", "etc/group"):
        with open(os.path.join(host_root, name)) as f:
            texts[name] = _merged_entries(jail[name], f.read())
    with tarfile.open(tar_path, "a") as tar:
        for name, text in sorted(texts.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo("./" + name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))


def root_filesystems(b, only, fs, ca, jobs):
    """Make the root filesystems of the images in `only` that `fs` lacks, `jobs` at a time (mmdebstrap mostly waits
    on downloads and dpkg; the first one, made alone before this, brought the essential packages into the .deb
    cache). Fills `fs` (name -> (tarball, key)); returns the substitutions the recipes use ({plugin},
    {jail_rootfs})."""
    subs = {}
    names = []
    for component in only:
        names += [n for n in ROOTFS_OF.get(component, ()) if n not in fs and n not in names]

    def plugin_and_jail():   # the jail root filesystems hold the SPANK plugin: one after the other
        subs["plugin"], plugin_key = b.spank_plugin()
        inputs, jail_subs = jail_substitutions(subs["plugin"], plugin_key)
        if "jail-rootfs" in names:
            fs["jail-rootfs"] = b.rootfs("jail-rootfs", inputs, jail_subs)
        if "jail-rootfs-gpu" in names:
            fs["jail-rootfs-gpu"] = b.rootfs("jail-rootfs-gpu", dict(inputs, probe=file_digest(NCCL_PROBE)),
                                             dict(jail_subs, probe=NCCL_PROBE))

    def make(name):
        fs[name] = b.rootfs(name, substitutions={"ca": ca} if name == "runner" else None)

    tasks = [plugin_and_jail] if any(c in only for c in ("worker", "login", "jail", "worker-gpu", "jail-gpu")) else []
    tasks += [functools.partial(make, n) for n in names if n not in ("jail-rootfs", "jail-rootfs-gpu")]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for done in [pool.submit(task) for task in tasks]:
            done.result()   # the first failure (SystemExit included) ends the build
    if "jail-rootfs" in fs:
        subs["jail_rootfs"] = fs["jail-rootfs"][0]
    if "jail-rootfs-gpu" in fs:
        subs["jail_gpu_rootfs"] = fs["jail-rootfs-gpu"][0]
    return subs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--suite", default=os.environ.get("SUITE") or "forky",
                        help="Debian suite of every root filesystem (forky: Slurm 26.05, trixie: 24.11)")
    parser.add_argument("--mirror", default=os.environ.get("MIRROR") or "", help="Debian mirror (mmdebstrap's default)")
    parser.add_argument("--registry", default=os.environ.get("REGISTRY") or DEFAULT_REGISTRY)
    parser.add_argument("--tag", default=os.environ.get("TAG") or "",
                        help="image tag (default: <Slurm version>-<collection version>)")
    parser.add_argument("--only", default="", help="comma-separated components (default: all)")
    parser.add_argument("--refresh", action="store_true", help="rebuild root filesystems and images")
    parser.add_argument("--push", action="store_true", help="push every image to its registry")
    parser.add_argument("--save", default="", help="also write each image as an OCI archive into this directory")
    parser.add_argument("--print-tag", action="store_true", help="print the default tag and exit")
    parser.add_argument("--jail-tarball", default="",
                        help="only write the jail root filesystem (the jail image's recipe) as a tarball here, "
                             "e.g. for the local target with the host's suite")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("IMAGE_JOBS") or 3),
                        help="root filesystems made at once (default 3, env IMAGE_JOBS)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(IMAGES, "containers.conf"))
    only = [c for c in args.only.split(",") if c] or list(COMPONENTS)
    unknown = sorted(set(only) - set(COMPONENTS))
    if unknown:
        parser.error("unknown component(s) %s (known: %s)" % (", ".join(unknown), ", ".join(COMPONENTS)))

    started = time.time()
    b = Builder(args)
    if args.jail_tarball:
        plugin, plugin_key = b.spank_plugin()
        path = b.rootfs("jail-rootfs", *jail_substitutions(plugin, plugin_key))[0]
        target = os.path.abspath(args.jail_tarball)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(path, target + ".tmp")
        add_host_files(target + ".tmp")
        os.replace(target + ".tmp", target)
        versions = dpkg_versions(target, {"slurm-client"})
        print("images: jail root filesystem %s (%s, Slurm %s, %d MB)" % (
            os.path.relpath(target), args.suite, upstream(versions["slurm-client"]), os.path.getsize(target) >> 20))
        return 0
    # Root filesystems: only those of the images asked for (`--only ansible-runner` makes one).
    fs = {}
    ca = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    # The Slurm version decides the default tag: the controller's; with only the runner (`make runner-local`), the
    # runner's slurm-client (the same Slurm: one suite, one source package).
    if any(c != "ansible-runner" for c in only):
        fs["controller"] = b.rootfs("controller")
        slurm = upstream(dpkg_versions(fs["controller"][0], {"slurmctld"})["slurmctld"])
    else:
        fs["runner"] = b.rootfs("runner", substitutions={"ca": ca})
        slurm = upstream(dpkg_versions(fs["runner"][0], {"slurm-client"})["slurm-client"])
    if not args.tag:
        args.tag = "%s-%s" % (slurm, collection_version())
    if args.print_tag:
        print(args.tag)
        return 0
    subs = root_filesystems(b, only, fs, ca, args.jobs)

    for component in only:
        if component == "ansible-runner":
            continue   # below
        containerfile_dir, rootfs_name, files = IMAGE_RECIPES[component]
        files = {n: p.format(**subs) for n, p in files.items()}
        fs_path, fs_key = fs[rootfs_name]
        if component == "mariadb":
            b.build_image(component, containerfile_dir, fs_path, fs_key, files, "")
            continue
        version_source = {"jail": fs.get("jail-rootfs", ("",))[0],
                          "jail-gpu": fs.get("jail-rootfs-gpu", ("",))[0]}.get(component, fs_path)
        b.build_image(component, containerfile_dir, fs_path, fs_key, files,
                      one_slurm_version(component, version_source, slurm))

    if "ansible-runner" in only:
        build_runner(b, fs["runner"], one_slurm_version("ansible-runner", fs["runner"][0], slurm))

    rows = []
    for component, ref, rebuilt in b.built:
        if args.push:
            run(["buildah", "push", ref])
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            archive = os.path.join(os.path.abspath(args.save), "%s.oci.tar" % component)
            if os.path.exists(archive):
                os.unlink(archive)
            run(["buildah", "push", "--quiet", ref, "oci-archive:%s:%s" % (archive, ref)], stdout=subprocess.DEVNULL)
        rows.append((ref, "%d MB" % (image_size(ref) >> 20), b.image_label(ref, LABEL_SLURM) or "-",
                     "built" if rebuilt else "cached"))
    width = max(len(r[0]) for r in rows) if rows else 0
    print("%-*s  %8s  %-8s  %s" % (width, "IMAGE", "SIZE", "SLURM", "BUILD"))
    for ref, size, version, state in rows:
        print("%-*s  %8s  %-8s  %s" % (width, ref, size, version, state))
    print("images: %d image(s), %d rebuilt, suite %s, Slurm %s, %.0f s"
          % (len(rows), sum(1 for r in b.built if r[2]), args.suite, slurm, time.time() - started))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, IMAGES)
    sys.exit(main())
