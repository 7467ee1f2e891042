# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Slurm's power saving programs share, on Kubernetes (node/power_kube.py) and on a local cluster
(node/power_local.py): slurmctld runs them with an action and a hostlist; each node is handled on its own (one failing
does not stop the others), and a failed resume ends with the node DOWN with our reason. A resume leaves its request
time in each node's Comment (Slurm shows no such time; the exporter's resume latency reads it), and a suspend or
failed resume clears it.

Standard library only: these programs run outside Ansible (the controller image, a local cluster's lib/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import subprocess
import time

# slurm/nodes.py RESUME_FAILED_REASON: the reason (after the prefix) of a node whose worker did not come up
RESUME_FAILED = "resume-failed"
# slurm/nodes.py RESUME_REQUESTED: the node Comment "<prefix> resume-requested <UNIX time>" a resume leaves, for the
# exporter's resume latency (the time Slurm asked for the node, which Slurm itself does not show)
RESUME_REQUESTED = "resume-requested"


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

    def _comments(self, names, prefix):
        """{node: True when its Comment is one of our request times, False when it has none}; a node with another
        comment (an admin's) is not in it."""
        shown = self._scontrol(["--oneliner", "show", "node", ",".join(names)], "show node")
        ours = re.compile(r" Comment=%s %s \d+(?: Extra=.*)?$" % (re.escape(prefix), RESUME_REQUESTED))
        out = {}
        for line in shown.splitlines():
            name = line.split(" ", 1)[0][len("NodeName="):] if line.startswith("NodeName=") else None
            if name in names and (" Comment=" not in line or ours.search(line)):
                out[name] = " Comment=" in line
        return out

    def record_requests(self, action, names, prefix, when):
        """resume: leave `when` (this request's time) in each node's Comment, for the exporter's resume latency;
        suspend and resume-fail: clear it, so that no later registration is measured from a request of an earlier
        power cycle. Only a node without a comment or with ours: an admin's comment is left as it is (that node then
        has no resume latency). A failure is logged, never in the power program's way."""
        done = []
        try:
            comments = self._comments(names, prefix)
        except (PowerError, OSError, subprocess.SubprocessError) as e:
            self.say("%s: request times not recorded: %s" % (action, e))
            return done
        for name, has_ours in sorted(comments.items()):
            if action != "resume" and not has_ours:
                continue
            text = "%s %s %d" % (prefix, RESUME_REQUESTED, int(when)) if action == "resume" else ""
            try:
                self._scontrol(["update", "NodeName=%s" % name, "Comment=%s" % text], "update %s" % name)
                done.append(name)
            except (PowerError, OSError, subprocess.SubprocessError) as e:
                self.say("%s %s: request time not recorded: %s" % (action, name, e))
        return done

    def resume(self, node):
        raise NotImplementedError

    def suspend(self, node):
        raise NotImplementedError

    def prefix(self, node):
        """The drain reason prefix of the node's cluster."""
        raise NotImplementedError

    def act(self, action, hostlist, requested=None):
        """Every node of the hostlist; the errors. `requested`: when slurmctld ran us (default: now)."""
        requested = time.time() if requested is None else requested
        names = self.nodes(hostlist)
        errors, done = [], []
        for node in names:
            try:
                if action == "resume":
                    self.resume(node)
                elif action == "suspend":
                    self.suspend(node)
                else:
                    self.resume_failed(node, self.prefix(node))
                done.append(node)
            except (PowerError, OSError, ValueError, KeyError) as e:
                errors.append("%s %s: %s" % (action, node, e))
                self.say(errors[-1])
        if done:
            # after the workers are on their way: the bookkeeping never delays them
            try:
                self.record_requests(action, done, self.prefix(done[0]), requested)
            except (PowerError, OSError, ValueError, KeyError) as e:
                self.say("%s: request times not recorded: %s" % (action, e))
        return errors
