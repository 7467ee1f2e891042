# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Slurm configs of a local cluster: the rendered configs adapted to run as local processes under one state
directory (hosts, ports, paths, users and the plugins that cannot work here). local_slurm_configs() is the one
entry point the local backend calls.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import config_syntax as cs
from ansible_collections.soperator.slurm.plugins.module_utils.slurm import hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    CTLD_OFFSET, DBD_OFFSET, DB_NAME, DB_OFFSET, DB_USER, LOCAL_HOST, LOCAL_JOBACCT, LOCAL_PROCTRACK, LOCAL_TASK_PLUGIN, LOOPBACK,
    Layout, LocalClusterError, check_path, node_ports, _current_user)

def _split_words(line):
    """Whitespace-separated words, keeping double-quoted values (Reason="a b") in one word."""
    return re.findall(r'(?:[^\s"]+|"[^"]*")+', line)



def _kv(word):
    key, sep, value = word.partition("=")
    return key, (value if sep else None)



def _set_words(file_name, words, updates):
    """Replace `Key=` words (case-insensitive) by updates {Key: value or None (remove)}; append the missing ones.
    The words we write go through the one writer of config words (config_syntax), like the rendered ones."""
    lower = dict((k.lower(), (k, v)) for k, v in updates.items())
    out, done = [], set()
    for word in words:
        key, _value = _kv(word)
        hit = lower.get(key.lower())
        if hit is None:
            out.append(word)
            continue
        done.add(key.lower())
        if hit[1] is not None:
            out.append(cs.slurm_word(file_name, key, hit[1]))
    for low, (key, value) in lower.items():
        if low not in done and value is not None:
            out.append(cs.slurm_word(file_name, key, value))
    return out



def _merge_list(value, wanted):
    items = [v for v in (value or "").split(",") if v]
    for w in wanted:
        if w.lower() not in [i.lower() for i in items]:
            items.append(w)
    return ",".join(items)



def _port_expr(ports):
    if len(ports) == 1:
        return str(ports[0])
    text = hostlist.compress([str(p) for p in ports])
    return text if text.startswith("[") else "[%s]" % text



def pmix_available():
    """Whether the PMIx library Slurm's mpi/pmix plugin loads is installed (Debian: libpmix2)."""
    import ctypes.util
    return ctypes.util.find_library("pmix") is not None



def adapt_configs(configs, model, state_dir, base_port, user=None, db_password=None,
                  have_pmix=None, jail_dir=None, spank_chroot=None):
    """The rendered configs {file: text} adapted to run as local processes under `state_dir`. Pure text in/out.

    What changes, and only this (every other line of every file is kept byte for byte):
    slurm.conf
      * SlurmctldHost=localhost(127.0.0.1), SlurmctldPort=base_port; each NodeName line gets its own slurmd ports
        (Port=[..]), NodeAddr=127.0.0.1 and NodeHostname=localhost, since all nodes share one host.
      * CommunicationParameters += NoInAddrAny,NoCtldInAddrAny: slurmctld and slurmd bind 127.0.0.1 only.
      * StateSaveLocation, SlurmdSpoolDir (spool/%n), pid and log files (%n per slurmd), PlugStackConfig: under
        state_dir; AuthInfo=socket=<our munged socket>.
      * SlurmUser (and SlurmdUser when not root) = the current user: no `slurm` account needed.
      * SlurmdParameters += config_overrides: the nodes are emulated, so a NodeSet may declare more CPUs/memory than
        this machine has.
      * proctrack/cgroup -> proctrack/linuxproc, task/cgroup(+affinity) -> task/none, jobacct_gather/cgroup ->
        jobacct_gather/linux: several slurmds share one host and this Debian build has no multiple-slurmd support,
        so their cgroup trees would collide; cgroup/v2 also needs systemd, which the local backend does not assume.
        (task/affinity is left out as well: an emulated node may have more CPUs than exist to bind to.)
      * PrologFlags: Contain is removed (it needs a cgroup proctrack to hold the extern step).
      * MpiDefault=pmix* becomes none when the PMIx library is not installed (Debian: libpmix2): otherwise every
        srun fails with "Invalid MPI type".
      * HealthCheckProgram=<state_dir>/bin/health-check: the program the images install, copied there by
        LocalCluster (install_health_programs).
      * AccountingStorageHost=localhost, AccountingStoragePort=<local slurmdbd port> and AccountingStoragePass=<our
        munge socket> (the socket slurmctld authenticates to slurmdbd with) when accounting is on.
    gres.conf: `File=` (GPU device files; there are none) becomes `Count=<number of files>`; AutoDetect=off.
    plugstack.conf: without `jail_dir` the chroot SPANK plugin line is commented out and jobs run in the host's root
      filesystem. With `jail_dir` (a local directory holding the jail's root filesystem) the line is kept, with the
      local plugin (`spank_chroot`, default the installed SPANK_CHROOT_PLUGIN) and `jail=<jail_dir>`; `nodefaults`
      replaces the images' default binds (/etc/slurm, /run/munge, /var/spool/slurmd do not belong to this cluster)
      by binds of /tmp and of state_dir's etc/ (SLURM_CONF), run/ (munge socket) and spool/ (batch scripts,
      slurmstepd sockets) at their host paths, so slurmstepd and the Slurm clients in the jail work.
    slurmdbd.conf: DbdHost/DbdAddr/DbdPort on loopback, SlurmUser, AuthInfo, LogFile/PidFile under state_dir, and
      the private MariaDB: StorageHost=127.0.0.1, StoragePort, StorageUser, StorageLoc, StoragePass (the rendered
      file has no password; in Kubernetes the entrypoint appends it from the Secret).
    health.json: the munge socket is ours; the jail path of the disk check is `jail_dir`, or left out without one.
    cgroup.conf, mpi.conf, topology.conf: unchanged.
    """
    user = user or _current_user()
    if have_pmix is None:
        have_pmix = pmix_available()
    check_path("state_dir", state_dir)
    lay = Layout(state_dir)
    ports = node_ports(model, base_port)
    out = dict(configs)
    if "slurm.conf" in configs:
        out["slurm.conf"] = _adapt_slurm_conf(configs["slurm.conf"], model, lay, base_port, ports, user, have_pmix)
    if "gres.conf" in configs:
        out["gres.conf"] = _adapt_gres_conf(configs["gres.conf"])
    if "plugstack.conf" in configs:
        out["plugstack.conf"] = _adapt_plugstack_conf(configs["plugstack.conf"], lay, jail_dir, spank_chroot)
    if c.HEALTH_CONFIG_FILE in configs:
        out[c.HEALTH_CONFIG_FILE] = _adapt_health_json(configs[c.HEALTH_CONFIG_FILE], lay, jail_dir)
    if c.SLURMDBD_CONF in configs:
        out[c.SLURMDBD_CONF] = _adapt_slurmdbd_conf(configs[c.SLURMDBD_CONF], lay, base_port, user, db_password)
    return out



_LOCAL_NOTE = "# local backend: "



def _adapt_slurm_conf(text, model, lay, base_port, ports, user, have_pmix):
    replace = {
        "slurmctldhost": "%s(%s)" % (LOCAL_HOST, LOOPBACK),
        "slurmctldport": str(base_port + CTLD_OFFSET),
        "slurmuser": user,
        "statesavelocation": lay.ctld_state,
        "slurmdspooldir": os.path.join(lay.spool, "%n"),
        "slurmctldpidfile": os.path.join(lay.run, "slurmctld.pid"),
        "slurmdpidfile": os.path.join(lay.run, "slurmd-%n.pid"),
        "slurmctldlogfile": os.path.join(lay.log, "slurmctld.log"),
        "slurmdlogfile": os.path.join(lay.log, "slurmd-%n.log"),
        "plugstackconfig": os.path.join(lay.etc, "plugstack.conf"),
        "healthcheckprogram": lay.health_check,
        "authinfo": "socket=%s" % lay.munge_socket,
        "accountingstoragehost": LOCAL_HOST,
        "accountingstorageport": str(base_port + DBD_OFFSET),
        # With slurmdbd, AccountingStoragePass names the munge socket of slurmctld <-> slurmdbd (AuthInfo is not
        # used for that connection): without it slurmctld dials the system munged.
        "accountingstoragepass": lay.munge_socket,
    }
    if user != "root":
        replace["slurmduser"] = user
    merge = {
        "communicationparameters": ["NoInAddrAny", "NoCtldInAddrAny"],
        "slurmdparameters": ["config_overrides"],
    }
    plugins = {
        "proctracktype": lambda v: LOCAL_PROCTRACK if "cgroup" in v else v,
        "taskplugin": lambda v: LOCAL_TASK_PLUGIN,
        "jobacctgathertype": lambda v: LOCAL_JOBACCT if "cgroup" in v else v,
        "prologflags": lambda v: ",".join(f for f in v.split(",") if f.lower() != "contain"),
    }
    # Keys that must exist even when the rendered file relies on a default.
    required = ["SlurmctldHost", "SlurmctldPort", "SlurmUser", "StateSaveLocation", "SlurmdSpoolDir",
                "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile", "AuthInfo",
                "CommunicationParameters", "SlurmdParameters"] + (["SlurmdUser"] if user != "root" else [])
    if model.accounting.enabled:
        required.append("AccountingStoragePass")
    seen = set()
    lines = []
    ctld_host_done = False
    first_node_line = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            lines.append(line)
            continue
        words = _split_words(stripped)
        key, value = _kv(words[0])
        low = key.lower()
        if low in ("nodename", "nodeset", "partitionname") and first_node_line is None:
            first_node_line = len(lines)
        if low == "nodename" and value and value.upper() != "DEFAULT":
            names = hostlist.expand(value)
            missing = [n for n in names if n not in ports]
            if missing:
                raise LocalClusterError("slurm.conf defines nodes no NodeSet has: %s" % hostlist.compress(missing))
            lines.append(" ".join(_set_words("slurm.conf", words, {
                "Port": _port_expr([ports[n] for n in names]), "NodeAddr": LOOPBACK, "NodeHostname": LOCAL_HOST})))
            continue
        if len(words) != 1 or value is None:
            lines.append(line)
            continue
        seen.add(low)
        if low in ("slurmctldhost", "controlmachine"):
            if ctld_host_done:          # a backup controller: there is one slurmctld locally
                lines.append(_LOCAL_NOTE + "one local slurmctld, no backup: " + stripped)
                continue
            ctld_host_done = True
            seen.add("slurmctldhost")
            lines.append(cs.slurm_word("slurm.conf", "SlurmctldHost", replace["slurmctldhost"]))
        elif low in ("controladdr", "backupcontroller", "backupaddr"):
            lines.append(_LOCAL_NOTE + "one local slurmctld: " + stripped)
        elif low in replace:
            lines.append(cs.slurm_word("slurm.conf", key, replace[low]))
        elif low in merge:
            lines.append(cs.slurm_word("slurm.conf", key, _merge_list(value, merge[low])))
        elif low in plugins:
            new = plugins[low](value)
            lines.append(cs.slurm_word("slurm.conf", key, new) if new else
                         _LOCAL_NOTE + "not supported here: " + stripped)
        elif low == "mpidefault" and value.lower().startswith("pmix") and not have_pmix:
            lines.append(_LOCAL_NOTE + "the PMIx library is not installed (Debian: libpmix2): " + stripped)
            lines.append(cs.slurm_word("slurm.conf", key, "none"))
        else:
            lines.append(line)
    added = []
    for key in required:
        if key.lower() not in seen:
            low = key.lower()
            value = replace.get(low) or ",".join(merge.get(low, []))
            added.append(cs.slurm_word("slurm.conf", key, value))
    if added:
        block = ["", "# --- local backend: settings the rendered file leaves to defaults"] + added + [""]
        at = first_node_line if first_node_line is not None else len(lines)
        while at > 0 and lines[at - 1].strip().startswith("#"):
            at -= 1        # before the comments that introduce the node lines
        if at > 0 and not lines[at - 1].strip():
            block = block[1:]
        if at == len(lines):
            block = block[:-1]
        lines[at:at] = block
    return "\n".join(lines) + "\n"



def _adapt_health_json(text, lay, jail_dir):
    config = json.loads(text)
    passive = config.get("passive") or {}
    if isinstance(passive.get("munge"), dict):
        passive["munge"]["socket"] = lay.munge_socket
    disk = passive.get("disk") or {}
    if disk.get("paths"):
        disk["paths"] = [jail_dir if p == c.JAIL_MOUNT else p for p in disk["paths"] if p != c.JAIL_MOUNT or jail_dir]
    active = config.get("active")
    if active:
        # Check jobs see the jail (or, without one, the host) as /; outputRoot is where this host finds that root.
        active["outputRoot"] = jail_dir or ""
        if not jail_dir:
            active["outputDir"] = os.path.join(lay.state_dir, "checks")
    return json.dumps(config, indent=2, sort_keys=True) + "\n"



def _adapt_gres_conf(text):
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            lines.append(line)
            continue
        words = _split_words(stripped)
        updates = {}
        for word in words:
            key, value = _kv(word)
            if key.lower() == "file" and value:
                updates = {"File": None, "Count": str(len(hostlist.expand(value)))}
            elif key.lower() == "autodetect":
                updates["AutoDetect"] = "off"
        lines.append(" ".join(_set_words("gres.conf", words, updates)) if updates else line)
    return "\n".join(lines) + "\n"



def _plugstack_word(path, what):
    if not os.path.isabs(path) or re.search(r"\s", path):
        raise LocalClusterError("%s must be an absolute path without whitespace (plugstack.conf), got %r"
                                % (what, path))
    return os.path.normpath(check_path(what, path))



def _adapt_plugstack_conf(text, lay, jail_dir=None, spank_chroot=None):
    if jail_dir is None and spank_chroot is not None:
        raise LocalClusterError("spank_chroot needs jail_dir: the plugin runs job steps in a jail")
    if jail_dir is not None:
        jail = _plugstack_word(jail_dir, "jail_dir")
        plugin = _plugstack_word(spank_chroot or c.SPANK_CHROOT_PLUGIN, "spank_chroot")
        binds = ["nodefaults", "bind=/tmp"] + ["bind=%s" % d for d in (lay.etc, lay.run, lay.spool)]
    lines = []
    for line in text.splitlines():
        if not line.strip().startswith("#") and c.SPANK_CHROOT_PLUGIN in line:
            if jail_dir is not None:
                words = [plugin if w == c.SPANK_CHROOT_PLUGIN else "jail=%s" % jail if w.startswith("jail=") else w
                         for w in line.split()]
                lines.append(_LOCAL_NOTE + "the local jail; node paths of this cluster bound into it at the same "
                             "paths:")
                lines.append(" ".join(words + [b for b in binds if b not in words]))
                continue
            lines.append(_LOCAL_NOTE + "the chroot SPANK plugin is left out: no jail directory given "
                         "(LocalCluster jail_dir); jobs run in the host's root filesystem:")
            lines.append("# " + line)
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"



def _adapt_slurmdbd_conf(text, lay, base_port, user, db_password):
    replace = {
        "dbdhost": LOCAL_HOST,
        "dbdaddr": LOOPBACK,
        "dbdport": str(base_port + DBD_OFFSET),
        "slurmuser": user,
        "authinfo": "socket=%s" % lay.munge_socket,
        "storagehost": LOOPBACK,
        "storageport": str(base_port + DB_OFFSET),
        "storageuser": DB_USER,
        "storageloc": DB_NAME,
        "logfile": os.path.join(lay.log, "slurmdbd.log"),
        "pidfile": os.path.join(lay.run, "slurmdbd.pid"),
    }
    if db_password is not None:
        replace["storagepass"] = db_password
    order = ["DbdHost", "DbdAddr", "DbdPort", "SlurmUser", "AuthInfo", "StorageHost", "StoragePort", "StorageUser",
             "StorageLoc", "StoragePass", "LogFile", "PidFile"]
    seen = set()
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        key, value = _kv(stripped)
        if stripped and not stripped.startswith("#") and value is not None and key.lower() in replace:
            seen.add(key.lower())
            lines.append(cs.slurm_word("slurmdbd.conf", key, replace[key.lower()]))
        else:
            lines.append(line)
    added = [cs.slurm_word("slurmdbd.conf", k, replace[k.lower()])
             for k in order if k.lower() in replace and k.lower() not in seen]
    if added:
        lines += ["", "# --- local backend: the local slurmdbd and its private MariaDB"] + added
    return "\n".join(lines) + "\n"


def local_slurm_configs(model, state_dir, base_port, user=None, db_password=None, have_pmix=None, jail_dir=None,
                        spank_chroot=None, renderer=None):
    """{file name: text} of the Slurm configs the local cluster of `model` runs under `state_dir`."""
    if renderer is None:
        from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
        renderer = render_slurm_configs
    return adapt_configs(renderer(model), model, state_dir, base_port, user=user, db_password=db_password,
                         have_pmix=have_pmix, jail_dir=jail_dir, spank_chroot=spank_chroot)
