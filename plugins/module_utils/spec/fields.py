# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every field of the SlurmCluster and NodeSet specs: type, default, bounds and the check of its value (schema.py's
vocabulary). crds.py writes the CRDs from these; validate.py applies them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.soperator.slurm.plugins.module_utils.constants import CHECKS_PARTITION
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax import config_keys
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import (
    CONFIG_KEY_PATTERN,
    SLURM_VALUE_PATTERN,
    value_problem)
from ansible_collections.soperator.slurm.plugins.module_utils.spec import image
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.accounting import accounting_fields
from ansible_collections.soperator.slurm.plugins.module_utils.spec import controller as ha
from ansible_collections.soperator.slurm.plugins.module_utils.spec.cron import SCHEDULE_PATTERN, schedule_problem
from ansible_collections.soperator.slurm.plugins.module_utils.spec.ephemeral import CEL_RULES as EPHEMERAL_CEL
from ansible_collections.soperator.slurm.plugins.module_utils.spec.ephemeral import ephemeral_schema
from ansible_collections.soperator.slurm.plugins.module_utils.spec import topology as node_topology
from ansible_collections.soperator.slurm.plugins.module_utils.spec.containers import containers_schema
from ansible_collections.soperator.slurm.plugins.module_utils.spec.identity import identity_schema
from ansible_collections.soperator.slurm.plugins.module_utils.spec.rest import rest_schema
from ansible_collections.soperator.slurm.plugins.module_utils.spec.workers import workers_schema
from ansible_collections.soperator.slurm.plugins.module_utils.spec.quantity import (
    QUANTITY_PATTERN,
    QuantityError,
    is_quantity,
    parse_quantity)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import (
    AnyObj,
    Arr,
    Bool,
    Int,
    IntOrStr,
    Map,
    Num,
    Obj,
    Str,
    compile_pattern)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.window import START_HELP, START_PATTERN, start_problem


DEFAULT_REGISTRY = "ghcr.io/soperator-slurm"
DEFAULT_TAG = "26.05.5-0.1.0"   # images/build.py: <the images' Slurm>-<collection version>
DEFAULT_MARIADB_IMAGE = "docker.io/library/mariadb:10.11"
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_HELP = "must be a lowercase DNS label: letters, digits and '-', starting with a letter"
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
K8S_NAME_HELP = "must be a lowercase DNS subdomain name"
SLURM_WORD = r"^[A-Za-z0-9_][-A-Za-z0-9_.]*$"
SLURM_WORD_HELP = "may hold only letters, digits, '_', '-' and '.'"
# At most 18 digits: a count is an int64 in Slurm, and int() of thousands of digits is an error in Python.
GRES_PATTERN = r"^[a-z][a-z0-9_]*(:[A-Za-z0-9_.-]+)?:[0-9]{1,18}$"
# A Kubernetes label value (also a nodeSelector value and a toleration value).
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_HELP = "is not a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending " \
                   "with a letter or digit)"


# Qualified names (label, annotation, resource and toleration keys): [DNS subdomain prefix/]name.
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


QUALIFIED_NAME_HELP = "is not a qualified name ([prefix/]name: a DNS subdomain prefix, a name of at most 63 " \
                      "letters, digits, '-', '_' or '.')"


# A host name or an IPv4/IPv6 address (StorageHost of slurmdbd.conf).
HOST = r"^[A-Za-z0-9:]([-A-Za-z0-9_.:]*[A-Za-z0-9_.])?$"
HOST_HELP = "is not a host name or an IP address"
# Commands and scripts reach exec/sh through JSON: a NUL byte is refused by exec (and by the programs we run).
NO_NUL = "^[^\\x00]*$"
INT32_MAX = 2 ** 31 - 1
INT64_MAX = 2 ** 63 - 1
UINT16_MAX = 2 ** 16 - 1
UINT32_MAX = 2 ** 32 - 1
# The most nodes one NodeName hostlist range holds: Slurm's hostlist refuses gpu-[0-65536] ("Invalid hostlist").
MAX_NODE_RANGE = 65536
# Kubernetes: all annotations of one object together (keys and values) hold at most 256 KiB.
MAX_ANNOTATIONS_BYTES = 256 * 1024
# Kubernetes: a CronJob's name leaves 11 characters for the names of its Jobs.
MAX_CRONJOB_NAME = 52
MAX_DNS_NAME = 253
# slurm.conf keys we own: letting `slurmConfig` set them would break the cluster's wiring.
MANAGED_SLURM_KEYS = {
    "clustername": "metadata.name",
    "slurmctldhost": "the rendered controller",
    "controlmachine": "the rendered controller",
    "backupcontroller": "the rendered controller",
    "slurmctldport": "spec.controller.port",
    "slurmdport": "the rendered workers",
    "nodename": "NodeSet resources",
    "nodeset": "NodeSet resources",
    "partitionname": "spec.partitions",
    "statesavelocation": "the controller spool volume",
    "slurmdspooldir": "the rendered workers",
    "authtype": "munge (always on)",
    "authinfo": "munge (the backends set its socket)",
    "authalttypes": "spec.rest (auth/jwt)",
    "authaltparameters": "spec.rest (its key and maxTokenLifespan)",
    "credtype": "munge (always on: cred/none would let anyone forge job credentials)",
    "slurmuser": "the images (slurmctld and slurmdbd run as the slurm user)",
    "slurmduser": "the images (slurmd runs as root to start jobs as their users)",
    "slurmctldaddr": "the rendered controller",
    "slurmctldpidfile": "the backends (they find slurmctld by it)",
    "slurmdpidfile": "the backends (they find slurmd by it)",
    "slurmctldlogfile": "the backends (they read and collect it)",
    "slurmdlogfile": "the backends (they read and collect it)",
    "downnodes": "scontrol (slurm_drain) at run time",
    "frontendname": "NodeSet resources (front end nodes are not used)",
    "include": "spec.slurmConfig itself (files of its own are not shipped)",
    "gpusandtypes": "NodeSet gres",
    "grestypes": "NodeSet gres",
    "accountingstoragetype": "spec.accounting.enabled",
    "accountingstoragehost": "spec.accounting",
    "accountingstorageport": "spec.accounting.port",
    "healthcheckprogram": "spec.healthChecks.passive",
    "healthcheckinterval": "spec.healthChecks.passive.interval",
    "healthchecknodestate": "spec.healthChecks.passive.nodeStates",
    "topologyplugin": "spec.topology.enabled",
    "mpidefault": "spec.mpi.default",
    "plugstackconfig": "the jail",
}
MANAGED_PARTITION_KEYS = {"partitionname": "spec.partitions[].name", "nodes": "spec.partitions[].nodeSets",
                          "default": "spec.partitions[].default"}


# HealthCheckNodeState values slurmctld 22.05 accepts (it rejects NONDRAINED_IDLE, added in a later release).
NODE_STATES = ["ANY", "ALLOC", "IDLE", "MIXED"]


def _quantity_check(minimum):
    """The value of a quantity within bounds: `minimum` "positive" (sizes: Kubernetes refuses zero) or 0."""
    def check(value):
        if isinstance(value, str) and not compile_pattern(QUANTITY_PATTERN).search(value):
            return None                 # the pattern reports it
        try:
            amount = parse_quantity(value)
        except QuantityError as e:
            return str(e)
        if minimum == "positive" and amount <= 0:
            return "must be more than 0, got %s" % (value,)
        if amount < 0:
            return "must not be negative, got %s" % (value,)
        return None
    return check


def _quantity(description, minimum=0, **kw):
    return IntOrStr(description, pattern=QUANTITY_PATTERN,
                    pattern_help="is not a quantity (a number with an optional suffix like Mi, Gi, m, k)",
                    checks=[_quantity_check(minimum)], **kw)


STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def _resource_name_problem(name):
    """Kubernetes takes cpu, memory, ephemeral-storage, hugepages-<size> and extended resources (domain/name)."""
    if name in STANDARD_RESOURCES or (name.startswith("hugepages-") and is_quantity(name[len("hugepages-"):])):
        return None
    if "/" in name and compile_pattern(QUALIFIED_NAME).search(name) and _qualified_name_problem(name) is None:
        return None
    return "%r is not a Kubernetes resource name (cpu, memory, ephemeral-storage, hugepages-<size> or " \
           "domain/name, like nvidia.com/gpu)" % (name,)


def _extended_resources_are_whole(resources):
    for name, value in resources.items():
        if "/" in name and is_quantity(value) and parse_quantity(value) != parse_quantity(value).to_integral_value():
            return "%s: Kubernetes takes only whole numbers of an extended resource, got %s" % (name, value)
    return None


def _resources(description):
    return Map(_quantity("Amount of this resource."), description,
               keys=Str(checks=[_resource_name_problem]), checks=[_extended_resources_are_whole])


def _qualified_name_problem(key):
    """Kubernetes' rule for label and annotation keys: [prefix/]name, prefix <= 253, name <= 63 characters."""
    if not isinstance(key, str):
        return None
    if not compile_pattern(QUALIFIED_NAME).search(key):
        return "%r %s" % (key, QUALIFIED_NAME_HELP)
    prefix, _sep, name = key.rpartition("/")
    if len(prefix) > MAX_DNS_NAME or len(name) > 63:
        return "%r is too long (prefix at most %d, name at most 63 characters)" % (key, MAX_DNS_NAME)
    return None


def _labels(description, **kw):
    return Map(Str(pattern=LABEL_VALUE, pattern_help=LABEL_VALUE_HELP, max_length=63), description,
               keys=Str(checks=[_qualified_name_problem]), **kw)


def _annotations_size(annotations):
    size = sum(len(k.encode("utf-8")) + len(v.encode("utf-8")) for k, v in annotations.items()
               if isinstance(k, str) and isinstance(v, str))
    if size > MAX_ANNOTATIONS_BYTES:
        return "the annotations hold %d bytes; Kubernetes takes at most %d (256 KiB) in all" \
               % (size, MAX_ANNOTATIONS_BYTES)
    return None


def _annotations(description, **kw):
    return Map(Str(), description, keys=Str(checks=[_qualified_name_problem]), checks=[_annotations_size], **kw)


def _slurm_value(value):
    """A free-form value of a Slurm config file: one the file's parser reads back as exactly this value."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        return "is too large for Slurm (at most 2^63-1)"
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value_problem(value, spaces=True)
    return None


def _slurm_config(line_type, description, owned=None, **kw):
    """spec.slurmConfig, partition config, cgroupConfig, mpi.config: keys are plain words; values are what
    config_syntax writes and the file reads back (the CRD says the same with SLURM_VALUE_PATTERN). The keys are
    those Slurm reads on `line_type` (config_keys), none of `owned`, none twice in another case, and values of
    typed keys parse as their type."""
    def entries(config):
        return config_keys.map_problems(line_type, config, owned)
    return Map(IntOrStr(checks=[_slurm_value], openapi_extra={"pattern": SLURM_VALUE_PATTERN}), description,
               keys=Str(pattern=CONFIG_KEY_PATTERN,
                        pattern_help="is not a configuration key (a letter, then letters, digits and '_')"),
               entry_checks=[entries], **kw)


MAX_WINDOW_MINUTES = 366 * 24 * 60     # a year: a longer window is a typo


WINDOW_RULE = "updateStrategy.window is required with type scheduled and refused with the other types"


def _window_problem(spec):
    """A NodeSet spec's check (where the CRD's CEL rule sits, so both name the same path): a window belongs to type
    scheduled, and that type needs one."""
    strategy = spec.get("updateStrategy")
    if not isinstance(strategy, dict):
        return None
    if (strategy.get("type") == "scheduled") != bool(strategy.get("window")):
        return "%s (type %s)" % (WINDOW_RULE, strategy.get("type"))
    return None


def _schedule(description, **kw):
    return Str(description, pattern=SCHEDULE_PATTERN, pattern_help="is not a cron schedule",
               checks=[schedule_problem], **kw)


def _cidr(value):
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return "%r is not a CIDR range (like 10.0.0.0/8)" % (value,)
    return None


TOPOLOGY_HELP = "Slurm's network topology: a static tree (enabled, switches) or one that follows the Kubernetes " \
                "nodes the workers run on (nodeLabels)."


def _scheduling_fields():
    return {
        "nodeSelector": _labels("Kubernetes node labels the pods must match.", default={}),
        "tolerations": Arr(Obj("A Kubernetes toleration.", {
            "key": Str("Taint key; empty with operator Exists matches every taint.", max_length=317,
                       checks=[lambda k: _qualified_name_problem(k) if k else None]),
            "operator": Str("How key and value are compared.", enum=["Exists", "Equal"], default="Equal"),
            "value": Str("Taint value (operator Equal).", pattern=LABEL_VALUE, pattern_help=LABEL_VALUE_HELP,
                         max_length=63),
            "effect": Str("Taint effect to tolerate; empty means all.",
                          enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            "tolerationSeconds": Int("How long a NoExecute taint is tolerated.", minimum=0, maximum=INT64_MAX),
        }), "Kubernetes tolerations of the pods.", default=[]),
        "affinity": AnyObj("A Kubernetes affinity, passed through to the pods.", optional=True),
        "priorityClassName": Str("Kubernetes PriorityClass of the pods.", pattern=K8S_NAME,
                                 pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME),
        "runtimeClassName": Str("Kubernetes RuntimeClass of the pods: e.g. nvidia for GPU NodeSets where the NVIDIA "
                                "container toolkit is not the nodes' default runtime.", pattern=K8S_NAME,
                                pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME),
    }


def _storage_class(description):
    return Str(description, pattern=K8S_NAME, pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME)


def _image_ref(description, **kw):
    return Str(description, pattern=image.IMAGE_PATTERN, pattern_help=image.IMAGE_HELP,
               max_length=image.MAX_REFERENCE, checks=[image.image_problem], **kw)


IMAGES = Obj("Container images. Each unset component image is <registry>/<component>:<tag>.", {
    "registry": Str("Registry and path prefix of the default images.", default=DEFAULT_REGISTRY,
                    pattern=image.REGISTRY_PATTERN, pattern_help=image.REGISTRY_HELP, max_length=image.MAX_NAME,
                    checks=[image.registry_problem]),
    "tag": Str("Tag of the default images.", default=DEFAULT_TAG, pattern=r"^[A-Za-z0-9_][-A-Za-z0-9_.]*$",
               pattern_help="is not an image tag (letters, digits, '_', '.' and '-')", max_length=128),
    "pullPolicy": Str("Image pull policy of every container.", enum=["Always", "IfNotPresent", "Never"],
                      default="IfNotPresent"),
    "pullSecrets": Arr(Str(pattern=K8S_NAME, pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME),
                       "Names of image pull Secrets.", default=[]),
    "controller": _image_ref("slurmctld image."),
    "worker": _image_ref("slurmd image (also the default of every NodeSet without GRES gpu)."),
    "workerGpu": _image_ref("slurmd image with the NVIDIA user space (CUDA runtime, NCCL): the default of every NodeSet "
                            "with GRES gpu (default <registry>/worker-gpu:<tag>)."),
    "login": _image_ref("Login (sshd) image."),
    "populateJail": _image_ref("Image whose root filesystem fills the jail (default <registry>/jail:<tag>, or "
                               "<registry>/jail-gpu:<tag>, whose jail also holds the CUDA runtime and NCCL, when a "
                               "NodeSet has GRES gpu)."),
    "accounting": _image_ref("slurmdbd image."),
    "mariadb": _image_ref("MariaDB image of the in-cluster accounting database.", default=DEFAULT_MARIADB_IMAGE),
    "remediation": _image_ref("Ansible runner image of the remediation CronJob."),
})
JAIL = Obj("The jail: one shared root filesystem that login and worker nodes present to users as /.", {
    "volume": Obj("Where the jail lives: an existing ReadWriteMany claim, or a new one of this size.", {
        "existingClaim": Str("Name of an existing PersistentVolumeClaim.", pattern=K8S_NAME,
                             pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME),
        "size": _quantity("Size of the PersistentVolumeClaim we create.", minimum="positive"),
        "storageClassName": _storage_class("StorageClass of the claim we create (must support ReadWriteMany)."),
        "accessModes": Arr(Str(enum=["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany"]),
                           "Access modes of the claim we create.", default=["ReadWriteMany"], min_items=1),
    }, checks=[lambda v: None if bool(v.get("existingClaim")) != bool(v.get("size"))
               else "set exactly one of existingClaim or size"],
        cel=[("has(self.existingClaim) != has(self.size)", "set exactly one of existingClaim or size")],
        required=()),
    "populate": Obj("How the jail is filled the first time.", {
        "image": _image_ref("Image whose root filesystem is copied into the jail (default: images.populateJail)."),
        "overwrite": Str("never: fill only a jail that was never populated; if_empty: fill an empty jail; "
                         "always: refill on every run.", enum=["never", "if_empty", "always"], default="never"),
        "backoffLimit": Int("Retries of the populate Job.", minimum=0, maximum=INT32_MAX, default=3),
    }),
})
CONTROLLER = Obj("slurmctld.", dict({
    "resources": _resources("Requests of the controller container (memory is also its limit)."),
    "spool": Obj("The controller's StateSaveLocation volume.", {
        "size": _quantity("Size.", default="10Gi", minimum="positive"),
        "storageClassName": _storage_class("StorageClass."),
        "accessModes": ha.spool_access_modes_schema(),
    }),
    "port": Int("SlurmctldPort.", minimum=1, maximum=65535, default=6817),
    "replicas": ha.replicas_schema(),
}, **_scheduling_fields()), cel=ha.CEL_RULES)
LOGIN = Obj("Login nodes: sshd in the jail.", dict({
    "replicas": Int("Number of login pods.", minimum=0, maximum=INT32_MAX, default=2),
    "service": Obj("The SSH Service.", {
        "type": Str("Service type.", enum=["LoadBalancer", "NodePort", "ClusterIP"], default="LoadBalancer"),
        "port": Int("SSH port of the Service.", minimum=1, maximum=65535, default=22),
        "nodePort": Int("Fixed node port (type NodePort or LoadBalancer).", minimum=30000, maximum=32767),
        "sourceRanges": Arr(Str(checks=[_cidr]), "CIDR ranges allowed to connect (LoadBalancer).", default=[]),
        "annotations": _annotations("Annotations of the Service (cloud load balancer settings).", default={}),
    }),
    "sshRootPublicKeys": Arr(Str(pattern=r"^(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/=]+( [ -~]*)?$",
                                 pattern_help="is not an OpenSSH public key line"),
                             "Public keys allowed to log in as root.", default=[]),
    "resources": _resources("Requests of the login container (memory is also its limit)."),
}, **_scheduling_fields()))
ACCOUNTING = Obj("slurmdbd and its database; the accounts, users, QOS and scheduling policy (spec/accounting.py).", dict({
    "enabled": Bool("Run slurmdbd and store accounting.", default=False),
    "port": Int("DbdPort.", minimum=1, maximum=65535, default=6819),
    "resources": _resources("Requests of the slurmdbd container."),
    "database": Obj("The MariaDB/MySQL database: in the cluster (default) or external.", {
        "inCluster": Obj("A MariaDB StatefulSet we run.", {
            "storage": _quantity("Size of its volume.", default="20Gi", minimum="positive"),
            "storageClassName": _storage_class("StorageClass of its volume."),
            "resources": _resources("Requests of the MariaDB container."),
        }, optional=True),
        "external": Obj("A database you run.", {
            "host": Str("Host name or address.", pattern=HOST, pattern_help=HOST_HELP, max_length=MAX_DNS_NAME),
            "port": Int("Port.", minimum=1, maximum=65535, default=3306),
            "user": Str("User.", pattern=r"^[A-Za-z0-9_][-A-Za-z0-9_.]*$", max_length=80,
                        pattern_help="may hold only letters, digits, '_', '-' and '.'"),
            "database": Str("Database name.", default="slurm_acct_db", pattern=r"^[A-Za-z0-9_]+$", max_length=64,
                            pattern_help="may hold only letters, digits and '_'"),
            "passwordSecret": Obj("Secret holding the password.", {
                "name": Str("Secret name.", pattern=K8S_NAME, pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME),
                "key": Str("Key in the Secret.", default="password", pattern=r"^[-._A-Za-z0-9]+$",
                           pattern_help="is not a Secret key (letters, digits, '-', '_' and '.')",
                           max_length=MAX_DNS_NAME),
            }, required=("name",)),
        }, optional=True, required=("host", "user", "passwordSecret")),
    }, checks=[lambda v: "set at most one of inCluster or external"
               if v.get("inCluster") is not None and v.get("external") is not None else None],
        cel=[("!(has(self.inCluster) && has(self.external))", "set at most one of inCluster or external")]),
}, **accounting_fields()))


def _partition_name_problem(name):
    # PartitionName=DEFAULT sets defaults of every partition instead of making one; the checks partition is ours.
    if isinstance(name, str) and name.lower() in ("default", CHECKS_PARTITION):
        return "%r is reserved (Slurm reads DEFAULT as defaults for every partition; %s is the active checks' " \
               "partition)" % (name, CHECKS_PARTITION)
    return None


PARTITION = Obj("A Slurm partition.", {
    "name": Str("PartitionName.", pattern=SLURM_WORD, pattern_help=SLURM_WORD_HELP, max_length=63,
                checks=[_partition_name_problem]),
    "nodeSets": Arr(Str(pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP), "NodeSets whose nodes it holds.",
                    min_items=1),
    "default": Bool("The default partition.", default=False),
    "config": _slurm_config("partition", "Extra partition keys (MaxTime, OverSubscribe, Hidden, ...).", default={},
                            owned=MANAGED_PARTITION_KEYS),
}, required=("name", "nodeSets"))
HEALTH_CHECKS = Obj("Passive (HealthCheckProgram) and active (scheduled job) checks.", {
    "passive": Obj("Slurm's HealthCheckProgram on every worker.", {
        "enabled": Bool("Run it.", default=True),
        "interval": Int("HealthCheckInterval in seconds (0 disables).", minimum=0, maximum=UINT16_MAX,
                        default=120),
        "nodeStates": Arr(Str(enum=NODE_STATES), "HealthCheckNodeState.", default=["ANY"], min_items=1),
        "cycle": Bool("Spread the checks over the interval (CYCLE).", default=False),
        "gpu": Bool("Check GPUs are visible and their count matches GRES.", default=True),
        "memory": Bool("Check free memory.", default=True),
        "munge": Bool("Check munged answers.", default=True),
        "minFreeDiskPercent": Int("Minimum free space of the jail and /tmp.", minimum=0, maximum=100,
                                  default=5),
        "custom": Arr(Obj("A custom check: a command that fails (non-zero) when the node is bad.", {
            "name": Str("Its name, used in the drain reason.", pattern=SLURM_WORD, pattern_help=SLURM_WORD_HELP),
            "command": Str("Shell command.", pattern=NO_NUL, pattern_help="holds a NUL byte"),
            "timeoutSeconds": Int("Time limit.", minimum=1, maximum=60, default=5),
        }, required=("name", "command")), "Custom checks.", default=[], unique_key="name"),
    }),
    "active": Arr(Obj("A check submitted as a Slurm job on a schedule.", {
        "name": Str("Its name, used in the drain reason.", pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP,
                    max_length=40),
        "type": Str("What it runs.", enum=["gpuBurn", "ncclAllReduce", "storage", "sbatch"]),
        "schedule": _schedule("Cron schedule."),
        "nodeSets": Arr(Str(pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP),
                        "NodeSets to check (default: all).", default=[]),
        "script": Str("sbatch script (type sbatch).", pattern=NO_NUL, pattern_help="holds a NUL byte"),
        "timeoutSeconds": Int("Time limit of the job.", minimum=1, maximum=INT32_MAX, default=600),
        "minBusBandwidthGBs": Num("ncclAllReduce: minimum bus bandwidth in GB/s.", minimum=0),
        "minWriteMBs": Num("storage: minimum write speed in MB/s.", minimum=0),
        "minReadMBs": Num("storage: minimum read speed in MB/s.", minimum=0),
        "drainOnFailure": Bool("Drain the node when the check fails.", default=True),
    }, required=("name", "type", "schedule"),
        checks=[lambda v: "type sbatch needs a script" if v.get("type") == "sbatch" and not v.get("script")
                else None]),
        "Active checks.", default=[], unique_key="name"),
})
REMEDIATION = Obj("The in-cluster remediation loop.", {
    "enabled": Bool("Render the remediation CronJob.", default=True),
    "schedule": _schedule("Cron schedule of the remediation playbook.", default="*/5 * * * *"),
    "drainReasonPrefix": Str("Prefix of every drain reason we set; drains without it are left alone.",
                             pattern=r"^[A-Za-z0-9_.:/\[\]-]+$",
                             pattern_help="may hold only letters, digits and _.:/[]-", default="soperator:"),
    "replaceDrainedNodes": Bool("Delete the pod of a node we drained so Kubernetes recreates it.", default=True),
    "cordonKubernetesNode": Bool("Also cordon the Kubernetes node that pod ran on.", default=False),
    "successfulJobsHistoryLimit": Int("CronJob history.", minimum=0, maximum=INT32_MAX, default=3),
    "failedJobsHistoryLimit": Int("CronJob history.", minimum=0, maximum=INT32_MAX, default=3),
})
OBSERVABILITY = Obj("Metrics, alert rules and dashboards of the cluster.", {
    "exporter": Obj("The Prometheus exporter: Slurm's nodes, drains, jobs and scheduler, read through the "
                    "collection's Slurm runner (on Kubernetes: a Deployment of the runner image that execs into "
                    "the controller pod).", {
                        "enabled": Bool("Run the exporter.", default=False),
                        "port": Int("Port it serves /metrics on (a local cluster: on 127.0.0.1).", minimum=1,
                                    maximum=65535, default=9341),
                        "scrapeTimeout": Str("Prometheus' scrape timeout for the exporter, at most "
                                             "serviceMonitor.interval (the shorter is used): the ServiceMonitor's "
                                             "scrapeTimeout, and the time a scrape answers within (with "
                                             "soperator_slurm_up 0 when Slurm has not answered by then). A local "
                                             "cluster's exporter too: give your Prometheus this scrape_timeout.",
                                             pattern=r"^[1-9][0-9]{0,4}(s|m)$", pattern_help="is like 10s or 1m",
                                             default="10s"),
                    }),
    "serviceMonitor": Obj("A prometheus-operator ServiceMonitor of the exporter (needs its CRDs).", {
        "enabled": Bool("Render it.", default=False),
        "interval": Str("Scrape interval.", pattern=r"^[1-9][0-9]{0,4}(s|m)$", pattern_help="is like 30s or 1m",
                        default="30s"),
        "labels": _labels("Extra labels (what your Prometheus selects ServiceMonitors by).", default={}),
    }),
    "prometheusRule": Obj("A prometheus-operator PrometheusRule holding the alert rule pack (needs its CRDs).", {
        "enabled": Bool("Render it.", default=False),
        "labels": _labels("Extra labels (what your Prometheus selects rules by).", default={}),
    }),
    "dashboards": Obj("Grafana dashboards as a ConfigMap (with the exporter).", {
        "enabled": Bool("Render them.", default=True),
        "labels": _labels("Labels of the ConfigMap: what Grafana's dashboard sidecar looks for.",
                          default={"grafana_dashboard": "1"}),
    }),
})
CLUSTER_SPEC = Obj("SlurmClusterSpec: the whole Slurm cluster but its NodeSets.", {
    "clusterDomain": Str("DNS domain of the Kubernetes cluster.", default="cluster.local", pattern=K8S_NAME,
                         pattern_help=K8S_NAME_HELP, max_length=MAX_DNS_NAME),
    "images": IMAGES,
    "jail": JAIL,
    "controller": CONTROLLER,
    "login": LOGIN,
    "accounting": ACCOUNTING,
    "partitions": Arr(PARTITION, "Partitions. Empty: one default partition 'main' holding every NodeSet.",
                      default=[], unique_key="name"),
    "slurmConfig": _slurm_config("slurm.conf", "Extra slurm.conf keys, merged over our defaults.", default={},
                                 owned=MANAGED_SLURM_KEYS),
    "cgroupConfig": _slurm_config("cgroup.conf", "Extra cgroup.conf keys, merged over our defaults.", default={}),
    "mpi": Obj("MPI.", {
        "default": Str("MpiDefault.", enum=["none", "pmix", "pmi2"], default="none"),
        "config": _slurm_config("mpi.conf", "mpi.conf keys.", default={}),
    }),
    "topology": Obj(TOPOLOGY_HELP, {
        "enabled": Bool("Use topology/tree. With no switches: one leaf switch per NodeSet under one root.",
                        default=False),
        "switches": Arr(Obj("A switch.", {
            "name": Str("SwitchName.", pattern=SLURM_WORD, pattern_help=SLURM_WORD_HELP, max_length=63),
            "nodeSets": Arr(Str(pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP), "NodeSets attached to it.",
                            default=[]),
            "switches": Arr(Str(pattern=SLURM_WORD, pattern_help=SLURM_WORD_HELP), "Child switches.",
                            default=[]),
        }, required=("name",)), "Switches.", default=[], unique_key="name"),
        "nodeLabels": node_topology.node_labels_schema(
            Str(max_length=317, checks=[_qualified_name_problem]), Str(pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP)),
    }, cel=node_topology.CEL_RULES),
    "healthChecks": HEALTH_CHECKS,
    "remediation": REMEDIATION,
    "observability": OBSERVABILITY,
    "identity": identity_schema(),
    "containers": containers_schema(),
    "rest": rest_schema(),
    "workers": workers_schema(),
})
NODESET_SPEC = Obj("NodeSetSpec: a group of identical Slurm worker nodes.", dict({
    "clusterName": Str("The SlurmCluster this NodeSet belongs to.", pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP),
    # No schema default: an ephemeral NodeSet must be able to leave it out (spec/ephemeral.py gives it).
    "replicas": Int("Number of running workers (default 1; an ephemeral NodeSet's: ephemeral.minReplicas).",
                    minimum=0, maximum=MAX_NODE_RANGE),
    "maxReplicas": Int("Nodes defined in slurm.conf (default: replicas). Scaling up to it needs no slurm.conf "
                       "change; beyond it, slurmctld must restart. At most 65536: one Slurm hostlist range.",
                       minimum=0, maximum=MAX_NODE_RANGE),
    "resources": _resources("Kubernetes resources of each worker (requests = limits). cpu and memory are required; "
                            "they also give Slurm's CPUs and RealMemory."),
    "slurmNode": Obj("Overrides of the Slurm node definition.", {
        "cpus": Int("CPUs (default: resources.cpu; Slurm holds it in 16 bits).", minimum=1, maximum=UINT16_MAX),
        "realMemory": Int("RealMemory in MiB (default: resources.memory).", minimum=1, maximum=INT64_MAX),
        "sockets": Int("Sockets.", minimum=1, maximum=UINT16_MAX),
        "coresPerSocket": Int("CoresPerSocket.", minimum=1, maximum=UINT16_MAX),
        "threadsPerCore": Int("ThreadsPerCore.", minimum=1, maximum=UINT16_MAX),
        "weight": Int("Weight (lower is scheduled first; 32 bits, 4294967295 is Slurm's INFINITE).", minimum=1,
                      maximum=UINT32_MAX - 1, default=1),
    }),
    "gres": Arr(Str(pattern=GRES_PATTERN, pattern_help="is not a GRES (name[:type]:count, like gpu:h100:8)"),
                "Generic resources of each node.", default=[]),
    "features": Arr(Str(pattern=r"^[A-Za-z0-9_.]+$", pattern_help="may hold only letters, digits, '_' and '.'"),
                    "Slurm node features.", default=[]),
    "maxUnavailable": Int("Workers Kubernetes may evict at once (PodDisruptionBudget).", minimum=1,
                          maximum=INT32_MAX, default=1),
    "image": _image_ref("Worker image (default: the cluster's images.worker)."),
    "updateStrategy": Obj("How running workers move to a changed pod template (image, resources, env, mounts).", {
        "type": Str("slurmAware: site.yml and the remediation pass replace outdated workers in batches of at most "
                    "maxUnavailable, idle nodes first; a busy node is drained with '<prefix> upgrade' and replaced "
                    "only once it runs no job, then re-checked and resumed. scheduled: the same, but only inside "
                    "the maintenance window (window); before it, a Slurm maintenance reservation on the outdated "
                    "workers keeps jobs that would still run at its start off them, and it is removed once every "
                    "worker is replaced. onDelete: a worker takes the new template only when something else "
                    "replaces its pod.", enum=list(m.UPDATE_STRATEGIES), default="slurmAware"),
        "maxUnavailable": Int("Workers of this NodeSet out of service at once during a roll, counting those already "
                              "down or drained.", minimum=1, maximum=INT32_MAX, default=1),
        "window": Obj("The maintenance window of type scheduled (required there, refused with the other types).", {
            "start": Str("When it opens: an RFC 3339 time with its offset (2026-11-28T02:00:00Z).",
                         pattern=START_PATTERN, pattern_help=START_HELP, checks=[start_problem]),
            "durationMinutes": Int("How long it stays open, in minutes (the reservation's Duration).", minimum=1,
                                   maximum=MAX_WINDOW_MINUTES),
        }, required=("start", "durationMinutes"), optional=True),
    }),
    "sharedMemory": _quantity("Size of /dev/shm (NCCL needs a large one).", minimum="positive"),
    "ephemeral": ephemeral_schema(MAX_NODE_RANGE),
}, **_scheduling_fields()), required=("clusterName", "resources"),
    checks=[lambda v: "maxReplicas (%s) must be >= replicas (%s)" % (v["maxReplicas"], v["replicas"])
            if isinstance(v.get("maxReplicas"), int) and isinstance(v.get("replicas"), int)
            and v["maxReplicas"] < v["replicas"] else None, _window_problem],
    cel=[("!has(self.maxReplicas) || !has(self.replicas) || self.maxReplicas >= self.replicas",
          "maxReplicas must be >= replicas")] + EPHEMERAL_CEL + [
        # on the spec, not on updateStrategy: a rule there would drop updateStrategy's {} default from the CRD
        ("!has(self.updateStrategy) || (has(self.updateStrategy.type) && self.updateStrategy.type == 'scheduled')"
         " == has(self.updateStrategy.window)", WINDOW_RULE)])


METADATA = Obj("Object metadata.", {
    "name": Str("Name.", pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP, max_length=63),
    "namespace": Str("Namespace.", pattern=DNS_LABEL, pattern_help=DNS_LABEL_HELP, default="default", max_length=63),
    "labels": _labels("Labels.", default={}),
    "annotations": _annotations("Annotations.", default={}),
    # Server-populated fields, allowed so a CR read back from the cluster validates as it is.
    "uid": Str(), "resourceVersion": Str(), "generation": Int(), "creationTimestamp": Str(),
    "managedFields": Arr(AnyObj()), "finalizers": Arr(Str()),
}, required=("name",))
# Name lengths: pod names and the controller-revision-hash label must stay within 63 characters.
MAX_CLUSTER_NAME = 30
MAX_NODESET_NAME = 40
# `all` means every node in a Slurm partition; `<cluster>-...` would collide with the cluster's own objects.
# `default` (NodeName=DEFAULT / NodeSet=DEFAULT) sets defaults instead of naming nodes.
RESERVED_NODESET_NAMES = ("all", "default")


def _document_schema(kind, spec_schema):
    return Obj(kind, {
        "apiVersion": Str("API version.", enum=[m.API_VERSION]),
        "kind": Str("Kind.", enum=[kind]),
        "metadata": METADATA,
        "spec": spec_schema,
        "status": AnyObj("Written by soperator.slurm."),
    }, required=("apiVersion", "kind", "metadata", "spec"))


CLUSTER_DOCUMENT = _document_schema("SlurmCluster", CLUSTER_SPEC)
NODESET_DOCUMENT = _document_schema("NodeSet", NODESET_SPEC)
