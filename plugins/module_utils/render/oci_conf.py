# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""oci.conf (Slurm's native container support, `srun --container`) from spec.containers: the commands slurmstepd
runs for a step's container, for the runtime the spec names, as Slurm's containers.html gives them ("using run").
Pure: no I/O."""

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


def oci_settings(containers, slurm_version):
    """[(key, value)] of oci.conf for spec.containers' model, only keys the release's parser reads (all four are
    read since 22.05; a key it did not read would make slurmstepd refuse the file)."""
    runtime = "%s --rootless=true --root=%s" % (containers.runtime, containers.state_dir)
    settings = []
    for key, words in _COMMANDS[containers.runtime]:
        if not config_keys.read_by(OCI_CONF, key, slurm_version):
            raise ConfigSyntaxError("Slurm %d.%02d reads no %s in oci.conf" % (tuple(slurm_version) + (key,)))
        settings.append((key, "%s %s" % (runtime, words)))
    return settings


def render_oci_conf(model, target):
    """oci.conf's text, or None when spec.containers is off (no file: srun --container is refused by slurmstepd)."""
    if model.containers is None or not model.containers.enabled:
        return None
    lines = parts.header(model, OCI_CONF, target)
    lines.append(comment("spec.containers: %s, rootless, as the job's user; its state in %s."
                         % (model.containers.runtime, model.containers.state_dir)))
    lines += [slurm_word(OCI_CONF, key, value, spaces=True)
              for key, value in oci_settings(model.containers, target.slurm_version)]
    return parts.text(lines)
