# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""jail_populate with target=local: the jail's local users, and the rule for replacing the jail under them.

Who uses a jail: the running daemons of this user's local clusters (those with a port claim, local/ports.py) that
were started with it - slurmds (every job step enters the jail) and the login sshd (its sessions are chrooted into
it, its mount namespace has /dev, /proc and the cluster's directories mounted in it). Each is known by its record
(pid + start time, and the jail it was started with; for a record of an earlier version, the jail its cluster's
plugstack.conf names), never by a process name or an open file.

overwrite=always while the jail has users is refused, before anything is written and in check mode too, unless
force=true (node/jail.py in_use_refusal, the rule of the Kubernetes side). With force the jail is replaced, as on
Kubernetes, and then every login sshd that used it is restarted with the command it was started with, so its mounts
are made in the new jail (its sessions end). The slurmds keep running: each job step enters the jail anew.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.soperator.slurm.plugins.module_utils.local.backend import LocalCluster
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LOGIN_DAEMON
from ansible_collections.soperator.slurm.plugins.module_utils.local.ports import PortClaims
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import current_text
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail

_PLUGSTACK_JAIL = re.compile(r"(?m)^[ \t]*required[ \t]+\S+[ \t].*?\bjail=(\S+)")


def _configured_jail(layout):
    """The jail the cluster's plugstack.conf names, or ""."""
    match = _PLUGSTACK_JAIL.search(current_text(os.path.join(layout.etc, "plugstack.conf")) or "")
    return os.path.realpath(match.group(1)) if match else ""


def jail_users(jail_dir):
    """[{'state_dir', 'daemons': [{'name', 'pid'}]}]: the running daemons of local clusters that use `jail_dir`."""
    want = os.path.realpath(jail_dir)
    users = []
    for state_dir in sorted(PortClaims().read()):
        cluster = LocalCluster(state_dir)
        configured = None
        daemons = []
        for name, rec in sorted(cluster.daemons.running_records().items()):
            if not (name.startswith("slurmd-") or name == LOGIN_DAEMON):
                continue
            used = rec.get("jail")
            if used is None:
                if configured is None:
                    configured = _configured_jail(cluster.layout)
                used = configured
            if used == want:
                daemons.append({"name": name, "pid": rec["pid"]})
        if daemons:
            users.append({"state_dir": state_dir, "daemons": daemons})
    return users


def _describe(users):
    return "; ".join("the local cluster in %s (%s)" % (u["state_dir"], ", ".join(
        "%s pid %d" % (d["name"], d["pid"]) for d in u["daemons"])) for u in users)


def populate(jail_dir, source, overwrite="never", force=False, check_mode=False, run=None, label=None,
             oci_tag=None, timeout=jail.DEFAULT_TIMEOUT):
    """node/jail.populate under the rule above. -> its result, with 'in_use_by' (jail_users() when overwrite=always
    would write, else []) and 'restarted' (what was restarted, or in check mode would be); action REFUSED when the
    jail has users and not `force` (nothing written, nothing read from the source). The users are looked up each
    time the populate decides - first, and again under the jail's lock right before it replaces the contents."""
    found = {"users": []}

    def guard(unused_action):
        users = jail_users(jail_dir) if os.path.isdir(jail_dir) else []
        found["users"] = users
        if not users or force:
            return None
        return "jail %s: %s" % (jail_dir, jail.in_use_refusal(
            "it is used by %s" % _describe(users),
            "Stop the cluster first (slurm_cluster state=absent, playbooks/teardown.yml)")) + \
            " (the jail is replaced and each login sshd restarted in it; its sessions end)"

    kwargs = {"run": run} if run is not None else {}
    result = jail.populate(jail_dir, source, overwrite, check_mode=check_mode, label=label, oci_tag=oci_tag,
                           timeout=timeout, guard=guard, **kwargs)
    users = found["users"]
    result["in_use_by"] = users
    result["restarted"] = []
    if result["action"] not in (jail.POPULATED, jail.REPLACED):
        return result
    for user in users:
        if not any(d["name"] == LOGIN_DAEMON for d in user["daemons"]):
            continue
        what = "%s of the local cluster in %s" % (LOGIN_DAEMON, user["state_dir"])
        if check_mode:
            result["restarted"].append("would restart %s (the jail is replaced)" % what)
            continue
        done = LocalCluster(user["state_dir"]).restart_login()
        if done is not None:
            result["restarted"].append("restarted %s (pid %s -> %s): the jail was replaced"
                                       % (what, done["old_pid"], done["new_pid"]))
    return result
