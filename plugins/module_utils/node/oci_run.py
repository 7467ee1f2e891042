# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What oci.conf's RunTimeRun runs before the OCI runtime: it gives the step's container the job's working directory
and, when asked, the step's GPU device nodes, then execs the runtime.

    oci_run.py --bundle %b [--workdir %Z] [--gpus] -- runc --rootless=true --root=/tmp run NAME -b %b

Why a wrapper: Slurm copies the bundle's config.json for each step and sets only the command, environment,
terminal and rootfs path; never process.cwd, and it adds no devices. What slurmstepd gives RunTimeRun (22.05, seen
on real daemons; 26.05 from its source): %b is that copy's folder in slurmd's spool (oci-jobNNNNN-NNNNN/), owned by
the job's user, mode 0750, and RunTimeRun runs there as the job's user, so config.json (root's, group-readable) can
be replaced by renaming a new file over it. 22.05 has no pattern for the job's working directory (slurmstepd drops
it before writing the copy, so `srun --chdir` is lost): without --workdir the directory srun ran in is used, the
step's PWD (SLURM_SUBMIT_DIR when PWD is unset). 26.05 gives it as %Z.

The working directory becomes process.cwd only when the container sees it at the same path: at or under a bind
mount whose source and destination are that path (the jail's /home); otherwise the image's own stays.
GPUs (--gpus): /dev/nvidia<N> for each index in the step's SLURM_STEP_GPUS (in config.json's environment), and
/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools when the node has them, bind-mounted at the same paths
(a rootless runtime can only bind device nodes, not create them); an index is taken as the device's minor number,
as where gres.conf lists /dev/nvidia[0-N] in order.

Standard library only, like oci_bundle.py; it imports nothing of ours.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import stat
import sys

CONFIG = "config.json"
GPU_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class OciRunError(Exception):
    """A refusal the job's stderr shows as one line."""


def _environment(config):
    """config.json's process.env as a dict (the last of a repeated name wins, as execve's reader would see it)."""
    env = {}
    for entry in (config.get("process") or {}).get("env") or []:
        name, sep, value = entry.partition("=")
        if sep:
            env[name] = value
    return env


def _bind_sources(config):
    """Destinations of bind mounts that show the host's path at the same path in the container."""
    same = []
    for mount in config.get("mounts") or []:
        options = mount.get("options") or []
        if (mount.get("type") == "bind" or "bind" in options or "rbind" in options) \
                and mount.get("source") == mount.get("destination"):
            same.append(os.path.normpath(mount["destination"]))
    return same


def visible_workdir(config, workdir):
    """workdir when the container sees the host's folder at that path (under a same-path bind mount), else None."""
    if not workdir or not os.path.isabs(workdir):
        return None
    workdir = os.path.normpath(workdir)
    for top in _bind_sources(config):
        if workdir == top or workdir.startswith(top.rstrip("/") + "/"):
            return workdir
    return None


def step_workdir(config, given=None):
    """The job's working directory: given (26.05's %Z), else the step's PWD, else SLURM_SUBMIT_DIR (22.05)."""
    if given:
        return given
    env = _environment(config)
    return env.get("PWD") or env.get("SLURM_SUBMIT_DIR")


def gpu_devices(config, exists=os.path.exists):
    """The step's GPU device nodes: /dev/nvidia<N> for SLURM_STEP_GPUS' indices, then the node's shared ones."""
    listed = _environment(config).get("SLURM_STEP_GPUS", "")
    devices = []
    for index in listed.split(","):
        index = index.strip()
        if not index:
            continue
        if not index.isdigit():
            raise OciRunError("SLURM_STEP_GPUS=%s is not a list of GPU indices" % listed)
        devices.append("/dev/nvidia%d" % int(index))
    if devices:
        devices += [path for path in GPU_SHARED_NODES if exists(path)]
    return devices


def edit_config(config, workdir=None, devices=()):
    """config.json with process.cwd set to workdir when the container sees it, and a bind mount per device node."""
    config = json.loads(json.dumps(config))
    seen = visible_workdir(config, workdir)
    if seen is not None:
        config.setdefault("process", {})["cwd"] = seen
    mounts = config.setdefault("mounts", [])
    present = {mount.get("destination") for mount in mounts}
    for device in devices:
        if device not in present:
            mounts.append({"destination": device, "source": device, "type": "bind",
                           "options": ["bind", "nosuid", "noexec"]})
    return config


def _read_config(dir_fd):
    try:
        fd = os.open(CONFIG, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        raise OciRunError("cannot read the step's %s: %s" % (CONFIG, e.strerror))
    with os.fdopen(fd, "rb") as f:
        try:
            return json.loads(f.read().decode("utf-8"))
        except ValueError as e:
            raise OciRunError("the step's %s is not JSON: %s" % (CONFIG, e))


def _replace_config(dir_fd, config):
    """Writes config.json anew beside the old one and renames it over: the folder is the user's, the file is not.
    Nothing else is left in the folder (slurmstepd removes config.json, then the folder)."""
    temp = ".%s.%d" % (CONFIG, os.getpid())
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(config, indent=2).encode("utf-8"))
        os.replace(temp, CONFIG, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def prepare(bundle, workdir=None, gpus=False):
    """Edits the step's bundle copy in place; returns the config written."""
    path = bundle.rstrip("/") or "/"
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise OciRunError("cannot open the step's bundle %s: %s" % (path, e.strerror))
    try:
        if not stat.S_ISDIR(os.fstat(dir_fd).st_mode):
            raise OciRunError("the step's bundle %s is not a folder" % path)
        config = _read_config(dir_fd)
        devices = gpu_devices(config) if gpus else []
        edited = edit_config(config, step_workdir(config, workdir), devices)
        if edited != config:
            _replace_config(dir_fd, edited)
        return edited
    finally:
        os.close(dir_fd)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="oci_run", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="the step's bundle copy (oci.conf's %%b)")
    parser.add_argument("--workdir", help="the job's working directory (26.05's %%Z); default: the step's PWD")
    parser.add_argument("--gpus", action="store_true", help="bind the step's GPU device nodes")
    parser.add_argument("runtime", nargs=argparse.REMAINDER, help="-- the runtime's command")
    args = parser.parse_args(argv)
    runtime = args.runtime[1:] if args.runtime[:1] == ["--"] else args.runtime
    if not runtime:
        parser.error("the runtime's command follows --")
    try:
        prepare(args.bundle, args.workdir, args.gpus)
    except (OciRunError, OSError) as e:
        sys.stderr.write("soperator oci_run: %s\n" % e)
        return 1
    try:
        os.execvp(runtime[0], runtime)
    except OSError as e:
        sys.stderr.write("soperator oci_run: cannot run the OCI runtime %s: %s\n" % (runtime[0], e.strerror))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
