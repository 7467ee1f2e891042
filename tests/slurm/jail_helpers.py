"""A small jail built from the host's binaries, and the chroot SPANK plugin built from images/spank_chroot.

Shared by the tests that run jobs (test_spank_chroot) and logins (test_login) in a jail. The jail holds a shell and a
few tools, the Slurm clients with their plugins and libraries (srun/sbatch inside the jail), the plugin itself at its
path (Slurm clients in the jail load plugstack.conf too), passwd/group, and a marker file only the jail has.
"""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN_DIR = os.path.join(ROOT, "images", "spank_chroot")
MARKER = "soperator jail marker\n"
# Programs the test jail holds (with their libraries), besides the Slurm plugin directory. bash: root's login shell.
JAIL_PROGRAMS = ("sh", "bash", "cat", "ls", "hostname", "sleep", "touch", "srun", "sbatch", "squeue", "scontrol")
JAIL_ETC = ("passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache")


def require_build_tools():
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("building the SPANK plugin needs gcc and make (Debian: gcc, make)")
    if not os.path.exists("/usr/include/slurm/spank.h"):
        pytest.skip("building the SPANK plugin needs <slurm/spank.h> (Debian: libslurm-dev)")


def build_plugin(build_dir):
    """Build the plugin with its Makefile (-Wall -Wextra -Werror) into `build_dir`; its path."""
    require_build_tools()
    proc = subprocess.run(["make", "-C", PLUGIN_DIR, "BUILD_DIR=%s" % build_dir], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stdout
    path = os.path.join(str(build_dir), "spank_chroot.so")
    assert os.path.isfile(path)
    return path


def ldd(path):
    """Absolute paths of the shared libraries `path` loads (those ldd resolves)."""
    proc = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                          check=False)
    libs = []
    for line in proc.stdout.splitlines():
        m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if m:
            libs.append(m.group(1))
    return libs


def _install(jail, path):
    """Copy the host's `path` into the jail at the same path; symlinks stay symlinks (their targets are copied)."""
    seen = set()
    while path not in seen:
        seen.add(path)
        real_parent = os.path.realpath(os.path.dirname(path))
        host = os.path.join(real_parent, os.path.basename(path))
        dest = jail + host
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.islink(host):
            target = os.readlink(host)
            if not os.path.lexists(dest):
                os.symlink(target, dest)
            path = os.path.normpath(os.path.join(real_parent, target))
            continue
        if not os.path.exists(dest):
            shutil.copy2(host, dest)
        return


def make_jail(jail, plugin_path):
    """A minimal root filesystem at `jail` (see the module docstring)."""
    os.makedirs(jail)
    for name in ("bin", "sbin", "lib", "lib64"):          # Debian's merged /usr: keep the same symlinks
        if os.path.islink("/" + name):
            os.symlink(os.readlink("/" + name), os.path.join(jail, name))
    files = set()
    for prog in JAIL_PROGRAMS:
        path = shutil.which(prog)
        if path is None:
            pytest.skip("the test jail needs %s on the host" % prog)
        files.add(path)
        files.update(ldd(path))
    # srun loads Slurm's plugins (auth/munge, ...) from its PluginDir: the directory of libslurmfull.so on Debian.
    slurm_dirs = set(os.path.dirname(os.path.realpath(p)) for p in ldd(shutil.which("srun")) if "libslurm" in p)
    for d in slurm_dirs:
        for name in os.listdir(d):
            if name.endswith(".so"):
                files.add(os.path.join(d, name))
                files.update(ldd(os.path.join(d, name)))
    files.add(plugin_path)
    for path in sorted(files):
        _install(jail, path)
    os.makedirs(os.path.join(jail, "etc"), exist_ok=True)
    for name in JAIL_ETC:
        if os.path.exists("/etc/" + name):
            shutil.copy2("/etc/" + name, os.path.join(jail, "etc", name))
    with open(os.path.join(jail, "etc", "jail-marker"), "w") as f:
        f.write(MARKER)
    for d in ("home/shared", "tmp", "root"):
        os.makedirs(os.path.join(jail, d), exist_ok=True)
    os.chmod(os.path.join(jail, "tmp"), 0o1777)
    os.chmod(os.path.join(jail, "root"), 0o700)


def mounts_under(path):
    """Mount points in this process' mount namespace at or below `path` (the host's view)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point == path or point.startswith(path + "/"):
                found.append(point)
    return found
