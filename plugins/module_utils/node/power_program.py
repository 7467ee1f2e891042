# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Slurm's power saving programs share, on Kubernetes (node/power_kube.py) and on a local cluster
(node/power_local.py): slurmctld runs them with an action and a hostlist; each node is handled on its own (one failing
does not stop the others), and a failed resume ends with the node DOWN with our reason.

Standard library only: these programs run outside Ansible (the controller image, a local cluster's lib/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import time

# slurm/nodes.py RESUME_FAILED_REASON: the reason (after the prefix) of a node whose worker did not come up
RESUME_FAILED = "resume-failed"


class PowerError(Exception):
    pass


class PowerProgram(object):
    """One run of a power program: resume(node), suspend(node) and remove(node) are the backend's."""

    def __init__(self, scontrol="scontrol", out=None):
        self.scontrol = scontrol
        self.out = out

    def say(self, text):
        if self.out is not None:
            self.out.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), text))
            self.out.flush()

    def _scontrol(self, argv, what):
        result = subprocess.run([self.scontrol] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=60, check=False)
        if result.returncode != 0:
            raise PowerError("scontrol %s: %s" % (what, result.stderr.strip()))
        return result.stdout

    def nodes(self, hostlist):
        """Slurm's hostlist, expanded by Slurm (scontrol show hostnames)."""
        return self._scontrol(["show", "hostnames", hostlist], "show hostnames %s" % hostlist).split()

    def resume_failed(self, node, prefix):
        """Remove what was started, and set the node DOWN with our reason (Slurm requeues its jobs)."""
        self.suspend(node)
        reason = "%s %s: not registered within ResumeTimeout" % (prefix, RESUME_FAILED)
        self._scontrol(["update", "NodeName=%s" % node, "State=DOWN", "Reason=%s" % reason], "update %s" % node)
        self.say("resume-fail %s: DOWN, %r" % (node, reason))

    def resume(self, node):
        raise NotImplementedError

    def suspend(self, node):
        raise NotImplementedError

    def prefix(self, node):
        """The drain reason prefix of the node's cluster."""
        raise NotImplementedError

    def act(self, action, hostlist):
        """Every node of the hostlist; the errors."""
        names = self.nodes(hostlist)
        errors = []
        for node in names:
            try:
                if action == "resume":
                    self.resume(node)
                elif action == "suspend":
                    self.suspend(node)
                else:
                    self.resume_failed(node, self.prefix(node))
            except (PowerError, OSError, ValueError, KeyError) as e:
                errors.append("%s %s: %s" % (action, node, e))
                self.say(errors[-1])
        return errors
