# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm configuration files of a ClusterModel, for the Slurm of a target (render/target.py: 22.05 to 26.05).

`render_slurm_configs(model, target)` returns {file name: text}. It is a pure function: no I/O, and the same model
and target always give byte-identical text (user maps are written in sorted key order, never in insertion order).
The target (render/target.py) says where the daemons run: in pods (KUBERNETES, the default) or as local processes
(hosts, ports, paths, users and plugin choices); nothing rewrites these files after they are rendered.

Scaling needs no slurmctld restart: every NodeSet defines all of its possible nodes (up to max_replicas) on one
`State=FUTURE` line. A worker started as `slurmd -N <pod name>` registers and its node becomes usable; scale-down
puts the node back to FUTURE with scontrol. So the files depend on max_replicas, never on replicas, and their size
does not grow with the number of workers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import power_save
from ansible_collections.soperator.slurm.plugins.module_utils.render import size
from ansible_collections.soperator.slurm.plugins.module_utils.render import slurm_conf_parts as parts
from ansible_collections.soperator.slurm.plugins.module_utils.render.health_json import render_health_json
from ansible_collections.soperator.slurm.plugins.module_utils.render.target import AccountingStorage, KUBERNETES
from ansible_collections.soperator.slurm.plugins.module_utils.render.oci_conf import OCI_CONF, render_oci_conf
from ansible_collections.soperator.slurm.plugins.module_utils.render.rest import auth_alt_settings
from ansible_collections.soperator.slurm.plugins.module_utils.render.topology_conf import (
    render_topology_conf, render_topology_yaml, topology_plugin)
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys, hostlist
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.spec.controller import MESSAGE_TIMEOUT, slurmctld_timeout
from ansible_collections.soperator.slurm.plugins.module_utils.spec.model import NODE_NAME
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import (
    comment, plugstack_line, slurm_line, slurm_word)


def accounting_host(model):
    """The slurmdbd pod as slurmctld reaches it."""
    return names.statefulset_pod_host(model, names.accounting_name(model))


def controller_address(model):
    return names.statefulset_pod_host(model, names.controller_name(model))


# ---------------------------------------------------------------------------------------------------- slurm.conf

def _given(value, default):
    """The target's value, or the model's when the target leaves it (None)."""
    return default if value is None else value


# Slurm 24.11 resolves addresses on every connection and calls NoAddrCache "defunct" (an error line at start).
NO_ADDR_CACHE_DEFUNCT = (24, 11)


def _controller_hosts(model, target):
    """The SlurmctldHost lines, in order: the primary, then the backup (spec.controller.replicas)."""
    given = target.controller_hosts
    if given is None:
        given = tuple("%s(%s)" % (host, names.statefulset_pod_host(model, names.controller_name(model), i))
                      for i, host in enumerate(model.controller_hosts))
    if len(given) != model.controller.replicas:
        raise ValueError("the target has %d controller hosts for %d controllers"
                         % (len(given), model.controller.replicas))
    notes = ["The primary slurmctld."] + ["A backup slurmctld: takes control when the ones above are lost."] \
        * (len(given) - 1)
    return [("SlurmctldHost", host, note if len(given) > 1 else None) for host, note in zip(given, notes)]


def slurmctld_metrics(model, target=KUBERNETES):
    """slurmctld's own metrics endpoints: on with the exporter, where the target's Slurm has them."""
    return model.observability.exporter.enabled and tuple(target.slurm_version) >= c.SLURM_METRICS_SINCE


def _slurm_sections(model, target):
    passive = model.health_checks.passive
    daemons = [
        ("ClusterName", model.name, None),
    ] + _controller_hosts(model, target) + [
        ("SlurmctldPort", _given(target.controller_port, model.controller.port), None),
        ("SlurmdPort", c.SLURMD_PORT, None),
        ("SlurmUser", target.slurm_user, None),
    ]
    if target.slurmd_user:
        daemons.append(("SlurmdUser", target.slurmd_user, None))
    daemons += [("AuthType", "auth/munge", None), ("CredType", "cred/munge", None)]
    if target.munge_socket:
        daemons.append(("AuthInfo", "socket=%s" % target.munge_socket, None))
    daemons += [(k, v, None) for k, v in auth_alt_settings(model, target)]     # spec.rest
    if tuple(target.slurm_version) < NO_ADDR_CACHE_DEFUNCT:
        daemons.append(("CommunicationParameters", "NoAddrCache",
                        "Pod IPs change when a pod is recreated: resolve node names on every connection."))
    elif target.extra_communication_parameters:
        daemons.append(("CommunicationParameters", ",".join(target.extra_communication_parameters), None))
    daemons.append(("MailProg", "/bin/true",
                    "No mail client is assumed (the images carry none): job mail goes nowhere unless slurmConfig "
                    "sets MailProg."))
    daemons += [
        ("TreeWidth", 128,
         "slurmctld reaches up to 128 nodes directly, 16384 in two hops through slurmd."),
    ]
    if target.slurmd_parameters:
        daemons.append(("SlurmdParameters", ",".join(target.slurmd_parameters), None))
    sections = [
        ("Cluster and daemons", daemons),
        ("State, spool, pid and log files", [
            ("StateSaveLocation", target.state_save_location, None),
            ("SlurmdSpoolDir", target.slurmd_spool_dir, None),
            ("SlurmctldPidFile", target.slurmctld_pid_file, None),
            ("SlurmdPidFile", target.slurmd_pid_file, None),
            ("SlurmctldLogFile", target.slurmctld_log_file, None),
            ("SlurmdLogFile", target.slurmd_log_file, None),
        ]),
        ("Processes, containment and the jail", [
            ("ProctrackType", "proctrack/cgroup", None),
            ("TaskPlugin", "task/cgroup,task/affinity", None),
            ("PrologFlags", "Contain",
             "An extern step per job on every node: ssh sessions to a node land in the job's cgroup."),
            ("PropagateResourceLimitsExcept", "MEMLOCK",
             "Jobs keep the worker's memlock limit (RDMA needs it), not the login pod's."),
            ("PlugStackConfig", target.plugstack_config, None),
            ("MpiDefault", model.mpi.default, None),
        ]),
        ("Scheduling", [
            ("SchedulerType", "sched/backfill", None),
            ("SelectType", "select/cons_tres", None),
            ("SelectTypeParameters", "CR_Core_Memory", "Cores and memory are the consumable resources."),
        ] + ([("GresTypes", ",".join(parts.gres_types(model)), None)] if parts.gres_types(model) else [])),
        ("Timers", [
            ("SlurmctldTimeout", slurmctld_timeout(model.controller.replicas),
             "Seconds without an answer of the primary slurmctld before the backup takes control "
             "(spec/controller.py says why this value)." if model.controller.replicas > 1 else
             "Seconds without slurmctld before clients give up on it."),
            ("MessageTimeout", MESSAGE_TIMEOUT, "Seconds a Slurm message may take (Slurm's default; a third of "
             "SlurmctldTimeout with a backup, so one slow answer is not taken for a lost controller)."),
            ("SlurmdTimeout", 300, "Seconds without a worker's answer before its node is set DOWN."),
            ("InactiveLimit", 0, "srun/salloc clients may be unresponsive as long as the job runs."),
            ("KillWait", 30, "Seconds between SIGTERM and SIGKILL at a job's end or time limit."),
            ("MinJobAge", 300, "Seconds a finished job stays visible in squeue."),
            ("Waittime", 0, "A step's other tasks are not killed when the first one exits."),
            ("ReturnToService", 2,
             "A DOWN node returns to service when its slurmd registers with a valid configuration "
             "(a recreated worker pod)."),
        ]),
    ]
    health = []
    if passive.enabled and passive.interval > 0:
        states = _health_check_states(passive)
        health = [
            ("HealthCheckProgram", target.health_check_program, None),
            ("HealthCheckInterval", passive.interval, None),
            ("HealthCheckNodeState", ",".join(states), None),
        ]
    sections.append(("Passive health checks", health))
    sections.append(("Power saving (ephemeral NodeSets)", power_save.power_save_settings(model, target)))
    if topology_plugin(model):
        sections.append(("Network topology (topology.conf)", [("TopologyPlugin", topology_plugin(model), None)]))
    if slurmctld_metrics(model, target):
        sections.append(("Metrics", [("MetricsType", "metrics/openmetrics",
                                      "slurmctld serves %s on its port (spec.observability)."
                                      % ", ".join(c.SLURMCTLD_METRICS_PATHS))]))
    if model.accounting.enabled:
        accounting = [
            ("AccountingStorageType", "accounting_storage/slurmdbd", None),
            ("AccountingStorageHost", _given(target.accounting_host, accounting_host(model)), None),
            ("AccountingStoragePort", _given(target.accounting_port, model.accounting.port), None),
        ]
        if target.munge_socket:
            accounting.append(("AccountingStoragePass", target.munge_socket,
                               "slurmctld <-> slurmdbd authenticate through this munge socket (AuthInfo is not used "
                               "for that connection)."))
        accounting.append(("JobAcctGatherType", "jobacct_gather/cgroup", None))
        if parts.has_gpus(model):
            accounting.append(("AccountingStorageTRES", "gres/gpu", "Account GPU use per job."))
        sections.append(("Accounting (slurmdbd)", accounting))
    policy = model.accounting.policy.scheduling.settings if model.accounting.policy else ()
    if policy:
        sections.append(("Scheduling policy (spec.accounting.policy)", [(k, v, None) for k, v in policy]))
    return size.with_size_settings(sections, model, target)


def _not_read(target):
    """Why a key the spec takes is left out for `target`: its Slurm release does not read it (a fatal parse
    error in slurm.conf and cgroup.conf)."""
    return target.note + "Slurm %s does not read this key" % config_keys.version_text(target.slurm_version)


def _known_to(line_type, target):
    """for_target of _merge for files we change nothing else in: keys `target`'s release does not read are left
    out."""
    def adjust(key, value):
        if config_keys.read_by(line_type, key, target.slurm_version):
            return value, None
        return None, _not_read(target)
    return adjust


def _slurm_setting_for(target):
    """What `target` makes of a slurm.conf setting, the default or the user's (spec.slurmConfig): (value, why);
    value None leaves the setting out. The pods' target keeps every value."""
    why = target.note

    def adjust(key, value):
        low, text = key.lower(), str(value)
        if not config_keys.read_by("slurm.conf", key, target.slurm_version):
            return None, _not_read(target)
        if low == "communicationparameters" and target.extra_communication_parameters:
            return parts.merged_words(text, target.extra_communication_parameters), None
        if low == "slurmdparameters" and target.slurmd_parameters:
            return parts.merged_words(text, target.slurmd_parameters), None
        if low in ("controladdr", "backupcontroller", "backupaddr") and target.single_controller:
            return None, why + "one slurmctld, no backup"
        if low == "proctracktype" and target.proctrack and "cgroup" in text:
            return target.proctrack, None
        if low == "taskplugin" and target.task_plugin:
            return target.task_plugin, None
        if low == "jobacctgathertype" and target.jobacct_gather and "cgroup" in text:
            return target.jobacct_gather, None
        if low == "prologflags" and not target.prolog_contain:
            flags = ",".join(f for f in text.split(",") if f.lower() != "contain")
            return (flags, None) if flags else (None, why + "not supported here (no cgroup proctrack)")
        if low == "mpidefault" and not target.pmix and text.lower().startswith("pmix"):
            return "none", why + "the PMIx library is not installed (Debian: libpmix2): %s=%s" % (key, text)
        if low == "accountingstoragepass" and target.munge_socket:
            return target.munge_socket, None
        return value, None
    return adjust


def _health_check_states(passive):
    """HealthCheckNodeState words (the spec only allows those slurmctld 22.05 knows)."""
    states = []
    for state in passive.node_states:
        if state not in states:
            states.append(state)
    return states + (["CYCLE"] if passive.cycle else [])


def _node_set_refs(model):
    """{NodeSet name: how partitions name it}. Normally its `NodeSet=` name; its node range when that name cannot
    be a Slurm NodeSet: a name that is also a node name of another NodeSet (gpu-1 when NodeSet gpu has gpu-1).
    (`all`, which Slurm reads as every node, is refused by the spec.)"""
    defined = dict((ns.name, ns) for ns in parts.defined_node_sets(model))
    refs = {}
    for name, ns in defined.items():
        match = NODE_NAME.match(name)
        clash = bool(
            match and match.group(1) in defined and int(match.group(2)) < defined[match.group(1)].max_replicas)
        refs[name] = ns.node_range if clash else name
    return refs


def _port_expr(ports):
    """Port= of a NodeName line: one port, or a bracketed range per node ([20010-20025])."""
    if len(ports) == 1:
        return str(ports[0])
    text = hostlist.compress([str(p) for p in ports])
    return text if text.startswith("[") else "[%s]" % text


def _node_lines(node_set, target=KUBERNETES):
    """A NodeSet's NodeName lines: its FUTURE nodes, and an ephemeral NodeSet's CLOUD nodes (render/power_save.py)."""
    return [_node_line(node_set, target, *r) for r in power_save.node_ranges(node_set)]


def _node_line(node_set, target, node_range, state, first, end):
    pairs = [("NodeName", node_range), ("State", state), ("CPUs", "%d" % node_set.cpus),
             ("RealMemory", "%d" % node_set.real_memory_mib)]
    for key, value in (("Sockets", node_set.sockets), ("CoresPerSocket", node_set.cores_per_socket),
                       ("ThreadsPerCore", node_set.threads_per_core)):
        if value:
            pairs.append((key, "%d" % value))
    gres = parts.active_gres(node_set)
    if gres:
        pairs.append(("Gres", ",".join(str(g) for g in gres)))
    if node_set.features:
        pairs.append(("Feature", ",".join(node_set.features)))
    pairs.append(("Weight", "%d" % node_set.weight))
    if target.node_ports is not None:
        names = [node_set.node_name(i) for i in range(first, end)]
        missing = [n for n in names if n not in target.node_ports]
        if missing:
            raise ValueError("the target has no slurmd port for %s" % hostlist.compress(missing))
        pairs.append(("Port", _port_expr([target.node_ports[n] for n in names])))
    if target.node_address:
        pairs.append(("NodeAddr", target.node_address))
    if target.node_hostname:
        pairs.append(("NodeHostname", target.node_hostname))
    return slurm_line("slurm.conf", pairs)


def node_definitions(model):
    """The NodeName lines of the pods' slurm.conf: what slurmctld 22.05 reads only when it starts."""
    return [line for ns in parts.defined_node_sets(model) for line in _node_lines(ns)]


def _partition_lines(partition, refs, target=KUBERNETES):
    """The partition's line, after a comment naming the keys of its config the target's release does not read."""
    node_sets = [refs[name] for name in partition.node_sets if name in refs]
    pairs = [("PartitionName", partition.name)]
    if node_sets:
        pairs.append(("Nodes", ",".join(node_sets)))
    pairs.append(("Default", "YES" if partition.default else "NO"))
    config = dict((k, v) for k, v in partition.config.items()
                  if config_keys.read_by("partition", k, target.slurm_version))
    left_out = [slurm_word("slurm.conf", k, partition.config[k], spaces=True)
                for k in sorted(partition.config) if k not in config]
    # A partition none of whose NodeSets defines a node has no Nodes= (slurmctld accepts an empty partition);
    # it is still UP so jobs can queue in it until a NodeSet gets a maxReplicas.
    extra, user = parts.pairs([("State", "UP")], config)
    return ([comment("%s: %s" % (_not_read(target), " ".join(left_out)))] if left_out else []) + \
        [slurm_line("slurm.conf", pairs + extra, spaces=user)]


def _render_slurm_conf(model, target):
    lines = parts.header(model, "slurm.conf", target)
    lines += parts.merge("slurm.conf", _slurm_sections(model, target),
                         power_save.merged_overrides(model, model.slurm_config), "From spec.slurmConfig",
                         _slurm_setting_for(target))
    defined = parts.defined_node_sets(model)
    lines += ["", comment("--- Nodes: each NodeSet defines all of its possible nodes (maxReplicas) as FUTURE nodes."),
              comment("A worker pod runs `slurmd -N <pod name>`; its node leaves FUTURE when it registers.")]
    skipped = [ns.name for ns in model.node_sets if not ns.node_range]
    if skipped:
        lines.append(comment("NodeSets with maxReplicas 0 define no node: %s" % ", ".join(skipped)))
    lines += [line for ns in defined for line in _node_lines(ns, target)]
    refs = _node_set_refs(model)
    if defined:
        lines.append("")
        unsafe = [ns.name for ns in defined if refs[ns.name] != ns.name]
        if unsafe:
            lines.append(comment("Not Slurm NodeSets (partitions list their nodes instead): %s" % ", ".join(unsafe)))
        lines += [slurm_line("slurm.conf", [("NodeSet", ns.name), ("Nodes", ns.node_range)])
                  for ns in defined if refs[ns.name] == ns.name]
    lines += ["", comment("--- Partitions")]
    lines += [line for p in model.partitions for line in _partition_lines(p, refs, target)]
    if model.health_checks.active:
        lines += [comment("Active health checks submit their jobs here (root only, never a default, hidden from "
                          "sinfo).")]
        lines.append(_checks_partition_line(defined))
    return parts.text(lines)


def _checks_partition_line(defined):
    pairs = [("PartitionName", c.CHECKS_PARTITION)]
    if defined:
        pairs.append(("Nodes", "ALL"))
    pairs += [("Default", "NO"), ("Hidden", "YES"), ("AllowGroups", "root"), ("OverSubscribe", "EXCLUSIVE"),
              ("State", "UP")]
    return slurm_line("slurm.conf", pairs)


# --------------------------------------------------------------------------------------------------- cgroup.conf

def _render_cgroup_conf(model, target):
    sections = [("Containment of jobs", [
        ("CgroupPlugin", "autodetect", None),
        ("IgnoreSystemd", "yes", "No systemd in the worker containers: slurmd builds the cgroup tree itself."),
        ("ConstrainCores", "yes", None),
        ("ConstrainRAMSpace", "yes", None),
        ("ConstrainDevices", "yes", "Jobs see only the GPUs they were allocated."),
    ])]
    lines = parts.header(model, "cgroup.conf", target)
    lines += parts.merge("cgroup.conf", sections, model.cgroup_config, "From spec.cgroupConfig",
                         _known_to("cgroup.conf", target))
    return parts.text(lines)


# ----------------------------------------------------------------------------------------------------- gres.conf

def _render_gres_conf(model, target):
    lines = parts.header(model, "gres.conf", target)
    body = []
    for ns in parts.defined_node_sets(model):
        for g in parts.active_gres(ns):
            pairs = [("NodeName", ns.node_range), ("Name", g.name)]
            if g.type:
                pairs.append(("Type", g.type))
            if g.name == "gpu" and target.gres_device_files:
                pairs.append(("File", parts.range_expr("/dev/nvidia", g.count)))
            else:
                pairs.append(("Count", "%d" % g.count))
            body.append(slurm_line("gres.conf", pairs))
    if body:
        lines += [""] + body
    else:
        lines.append(comment("No NodeSet declares a GRES."))
    return parts.text(lines)


# ------------------------------------------------------------------------------------------------ plugstack.conf

def _render_plugstack_conf(model, target):
    lines = parts.header(model, "plugstack.conf", target)
    lines += ["", comment("Runs every job step chrooted into the jail, the root filesystem shared by login and "
                          "workers.")]
    if target.jail is None:
        lines += [comment(target.note + "the chroot SPANK plugin is left out: no jail directory given; jobs run in "
                          "the host's root filesystem:"),
                  comment(plugstack_line("required", c.SPANK_CHROOT_PLUGIN, ["jail=%s" % c.JAIL_MOUNT]))]
        return parts.text(lines)
    args = ["jail=%s" % target.jail]
    if target.jail_binds is not None:
        # nodefaults: the plugin binds only these, not the images' paths (/etc/slurm, /run/munge, ...).
        lines.append(comment(target.note + "the jail; these paths of the node are bound into it at the same paths:"))
        args += ["nodefaults"] + ["bind=%s" % path for path in target.jail_binds]
    lines.append(plugstack_line("required", target.spank_chroot, args))
    return parts.text(lines)


# ------------------------------------------------------------------------------------------------------ mpi.conf

def _render_mpi_conf(model, target):
    lines = parts.header(model, "mpi.conf", target)
    if model.mpi.config:
        lines.append("")
        for key in sorted(model.mpi.config):
            word = slurm_word("mpi.conf", key, model.mpi.config[key], spaces=True)
            # mpi.conf is read ignoring unknown keys: leaving one out says so instead of dropping it silently
            known = config_keys.read_by("mpi.conf", key, target.slurm_version)
            lines.append(word if known else comment("%s: %s" % (_not_read(target), word)))
    else:
        lines.append(comment("No MPI plugin options (spec.mpi.config is empty)."))
    return parts.text(lines)


# ------------------------------------------------------------------------------------------------- slurmdbd.conf

def accounting_storage(model):
    """The database of the model's slurmdbd: its external database, or the in-cluster MariaDB."""
    external = model.accounting.external
    if external is not None:
        return AccountingStorage(external.host, external.port, external.user, external.database)
    return AccountingStorage(names.accounting_db_name(model), c.MARIADB_PORT, c.ACCOUNTING_DB_USER,
                             c.ACCOUNTING_DB_NAME)


def _render_slurmdbd_conf(model, target):
    storage = target.storage or accounting_storage(model)
    lines = parts.header(model, c.SLURMDBD_CONF, target)
    lines += [
        comment("StoragePass is deliberately absent: the accounting container's entrypoint appends it from the"),
        comment("database password Secret when it starts, so the password never sits in a ConfigMap."),
        "",
    ]
    settings = [("DbdHost", _given(target.dbd_host, "%s-0" % names.accounting_name(model)))]
    if target.dbd_address:
        settings.append(("DbdAddr", target.dbd_address))
    settings += [
        ("DbdPort", "%d" % _given(target.accounting_port, model.accounting.port)),
        ("SlurmUser", target.slurm_user),
        ("AuthType", "auth/munge"),
    ]
    if target.munge_socket:
        settings.append(("AuthInfo", "socket=%s" % target.munge_socket))
    settings += auth_alt_settings(model, target)       # spec.rest
    settings += [
        ("StorageType", "accounting_storage/mysql"),
        ("StorageHost", storage.host),
        ("StoragePort", "%d" % storage.port),
        ("StorageUser", storage.user),
        ("StorageLoc", storage.database),
    ]
    if target.storage_password is not None:
        settings.append(("StoragePass", target.storage_password))
    settings += [("LogFile", target.slurmdbd_log_file), ("PidFile", target.slurmdbd_pid_file)]
    lines += [slurm_word(c.SLURMDBD_CONF, key, value) for key, value in settings]
    return parts.text(lines)


# -------------------------------------------------------------------------------------------------------- public

def render_slurm_configs(model, target=KUBERNETES):
    """{file name: text} of every Slurm config file of `model` for daemons running on `target` (render/target.py:
    pods by default); slurmdbd.conf only when accounting is enabled."""
    files = {
        "slurm.conf": _render_slurm_conf(model, target),
        "cgroup.conf": _render_cgroup_conf(model, target),
        "gres.conf": _render_gres_conf(model, target),
        "plugstack.conf": _render_plugstack_conf(model, target),
        "mpi.conf": _render_mpi_conf(model, target),
        "topology.conf": render_topology_conf(model, target),
        c.HEALTH_CONFIG_FILE: render_health_json(model, target),
    }
    if model.accounting.enabled:
        files[c.SLURMDBD_CONF] = _render_slurmdbd_conf(model, target)
    topology_yaml = render_topology_yaml(model, target)
    if topology_yaml is not None:
        files[c.TOPOLOGY_YAML] = topology_yaml
    oci_conf = render_oci_conf(model, target)
    if oci_conf is not None:
        files[OCI_CONF] = oci_conf
    return files
