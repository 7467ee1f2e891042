"""A bundle oci_bundle makes runs in a real OCI runtime: runc (Debian's, what oci.conf names) runs a command in it,
as root here (the rootless run through Slurm's oci.conf is the next slice of issue 29).

The image is built here from this machine's own /bin/sh, cat and their libraries (ldd), in two layers: the upper
one replaces /etc/os-release and whites out a file of the lower one."""
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import oci_bundle
from ci_skips import environmental
import oci_helpers

PROGRAMS = ("/bin/sh", "/bin/cat", "/bin/ls")


def _member(name, kind=tarfile.REGTYPE, mode=0o755, linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, 1600000000, linkname
    return info


def _host_files():
    """The programs and every library ldd names for them, as the names the loader uses: with merged /usr (/bin,
    /lib64: links into /usr) the name below /usr, a link there (/usr/bin/sh -> dash) kept as a link, and its
    target too."""
    out = subprocess.run(["ldd"] + list(PROGRAMS), capture_output=True, text=True, timeout=60, check=True).stdout
    todo = list(PROGRAMS) + [w for w in out.split() if w.startswith("/") and os.path.exists(w)]
    found = {}
    while todo:
        path = todo.pop()
        top = "/" + path.strip("/").split("/")[0]
        if os.path.islink(top):
            path = "/usr" + path
        if path in found:
            continue
        if os.path.islink(path):
            found[path] = os.readlink(path)
            todo.append(os.path.normpath(os.path.join(os.path.dirname(path), found[path])))
        else:
            found[path] = None
    return found


def _lower_layer():
    members, dirs = [], set()
    for path, link in sorted(_host_files().items()):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            name = "/".join(parts[:i])
            if name not in dirs:
                dirs.add(name)
                members.append((_member(name, tarfile.DIRTYPE), None))
        if link is not None:
            members.append((_member("/".join(parts), tarfile.SYMTYPE, 0o777, link), None))
        else:
            with open(path, "rb") as f:
                members.append((_member("/".join(parts)), f.read()))
    for link in ("bin", "lib", "lib64", "sbin"):        # merged /usr, as Debian's
        if os.path.islink("/" + link):
            members.append((_member(link, tarfile.SYMTYPE, 0o777, os.readlink("/" + link)), None))
    members.append((_member("etc", tarfile.DIRTYPE), None))
    members.append((_member("etc/os-release", mode=0o644), b"ID=lower\n"))
    members.append((_member("etc/gone", mode=0o644), b"whited out\n"))
    return members


def test_runc_runs_a_command_in_a_bundle_made_from_two_layers(tmp_path):
    if shutil.which("runc") is None and shutil.which("runc", path="/usr/sbin:/sbin") is None:
        pytest.skip(environmental("runc is not installed (Debian package runc; make deps installs it)"))
    if os.geteuid() != 0:
        pytest.skip(environmental("runc runs a bundle without a user namespace only as root"))
    runc = shutil.which("runc") or shutil.which("runc", path="/usr/sbin:/sbin")
    layout = str(tmp_path / "layout")
    upper = [(_member("etc/os-release", mode=0o644), b'PRETTY_NAME="soperator test image"\nID=upper\n'),
             (_member("etc/.wh.gone", mode=0o644), b"")]
    oci_helpers.make_layout(layout, [_lower_layer(), upper])
    made = oci_bundle.make_bundle(oci_helpers.make_archive(tmp_path / "image.tar", layout), str(tmp_path / "cache"))
    config_path = os.path.join(made["bundle"], "config.json")
    with open(config_path) as f:
        config = json.load(f)
    # what slurmstepd does for a step: the step's command in process.args
    config["process"]["args"] = ["/bin/sh", "-c", "cat /etc/os-release; ls /etc; echo pid=$$"]
    with open(config_path, "w") as f:
        json.dump(config, f)
    name = "soperator-test-%d" % os.getpid()
    try:
        proc = subprocess.run([runc, "run", "--bundle", made["bundle"], name], capture_output=True, text=True,
                              timeout=120, check=False, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([runc, "delete", "--force", name], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ['PRETTY_NAME="soperator', 'test', 'image"', "ID=upper", "os-release", "pid=1"]
