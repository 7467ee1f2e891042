# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""oci.conf (Slurm's native container support, `srun --container`) from spec.containers: the commands slurmstepd
runs for a step's container, for the runtime the spec names, as Slurm's containers.html gives them ("using run").
RunTimeRun goes through node/oci_run.py (the target's oci_run_program), which gives the container the job's
working directory (and, with GPUs, the step's device nodes) before it execs the runtime. Pure: no I/O."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import (
    ConfigSyntaxError, comment, slurm_word)

OCI_CONF = "oci.conf"
# one container per task: node, user, job, step, task (oci.conf(5)'s patterns)
CONTAINER = "%n.%u.%j.%s.%t"
# the runtime's own words for each command; %b: the bundle's path
_COMMANDS = {
    "runc": (("RunTimeQuery", "state " + CONTAINER), ("RunTimeKill", "kill -a " + CONTAINER),
             ("RunTimeDelete", "delete --force " + CONTAINER), ("RunTimeRun", "run %s -b %%b" % CONTAINER)),
    "crun": (("RunTimeQuery", "state " + CONTAINER), ("RunTimeKill", "kill -a " + CONTAINER),
             ("RunTimeDelete", "delete --force " + CONTAINER), ("RunTimeRun", "run --bundle %%b %s" % CONTAINER)),
}
RUN = "RunTimeRun"
# %Z (the job's working directory) is a pattern slurmstepd knows since 26.05 (container.c); an older one stops the
# step on a pattern it does not know ("unexpected replacement character"), so older releases get none: the wrapper
# takes the step's PWD there (22.05 drops --chdir before it writes the bundle's copy).
WORKDIR_PATTERN_SINCE = (26, 5)
# slurmstepd runs the value with `/bin/sh -c` after replacing the patterns; %Z is the user's directory, which may
# hold spaces or $: single quotes keep it one word (a directory with a ' in its name still breaks the line; Slurm
# quotes nothing but %@). Slurm's parser reads single quotes back as written (config_syntax).
WORKDIR_ARG = "--workdir '%Z'"


def run_wrapper(target, gpus):
    """The words before the runtime's own in RunTimeRun: node/oci_run.py with the bundle's copy, the working
    directory where the release has a pattern for it, and --gpus when workers have GRES gpu."""
    words = [target.oci_run_python, target.oci_run_program, "--bundle", "%b"]
    if tuple(target.slurm_version) >= WORKDIR_PATTERN_SINCE:
        words.append(WORKDIR_ARG)
    if gpus:
        words.append("--gpus")
    return " ".join(words + ["--"])


def oci_settings(containers, slurm_version, wrapper=None):
    """[(key, value)] of oci.conf for spec.containers' model, only keys the release's parser reads (all four are
    read since 22.05; a key it did not read would make slurmstepd refuse the file). `wrapper`: what RunTimeRun runs
    the runtime through (run_wrapper), or None for the runtime alone."""
    runtime = "%s --rootless=true --root=%s" % (containers.runtime, containers.state_dir)
    settings = []
    for key, words in _COMMANDS[containers.runtime]:
        if not config_keys.read_by(OCI_CONF, key, slurm_version):
            raise ConfigSyntaxError("Slurm %d.%02d reads no %s in oci.conf" % (tuple(slurm_version) + (key,)))
        command = "%s %s" % (runtime, words)
        settings.append((key, "%s %s" % (wrapper, command) if key == RUN and wrapper else command))
    return settings


def render_oci_conf(model, target):
    """oci.conf's text, or None when spec.containers is off (no file: srun --container is refused by slurmstepd)."""
    if model.containers is None or not model.containers.enabled:
        return None
    lines = parts.header(model, OCI_CONF, target)
    # the step's GPU device nodes where gres.conf lists them as /dev/nvidia[0-N] (oci_run.py takes an index as the
    # minor number); nodes without GPUs get none (the step has no SLURM_STEP_GPUS)
    gpus = parts.has_gpus(model) and target.gres_device_files
    lines.append(comment("spec.containers: %s, rootless, as the job's user; its state in %s."
                         % (model.containers.runtime, model.containers.state_dir)))
    lines.append(comment("RunTimeRun: %s sets the container's working directory%s, then runs %s."
                         % (target.oci_run_program, " and binds the step's GPUs" if gpus else "",
                            model.containers.runtime)))
    lines += [slurm_word(OCI_CONF, key, value, spaces=True)
              for key, value in oci_settings(model.containers, target.slurm_version, run_wrapper(target, gpus))]
    return parts.text(lines)
