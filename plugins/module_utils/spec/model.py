# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ClusterModel: the fully defaulted, validated cluster. The only input of the renderers and the backends.

Build it with spec.build_model(); never by hand from user input.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, cast

if TYPE_CHECKING:   # not at run time: the local exporter's lib carries this file without spec/accounting.py
    from ansible_collections.soperator.slurm.plugins.module_utils.spec.accounting import AccountingPolicy

API_GROUP = "slurm.soperator.dev"
API_VERSION = API_GROUP + "/v1alpha1"
MANAGED_BY = "soperator.slurm"
# A node's name, <nodeset>-<ordinal>, as NodeSet.node_name makes it: groups (nodeset, ordinal).
NODE_NAME = re.compile(r"^(.+)-(0|[1-9][0-9]*)$")


@dataclass(frozen=True)
class Images:
    controller: str
    worker: str
    login: str
    populate_jail: str
    accounting: str
    mariadb: str
    remediation: str
    pull_policy: str
    worker_gpu: str                     # the default of NodeSets with GRES gpu
    pull_secrets: Tuple[str, ...]


@dataclass(frozen=True)
class Gres:
    name: str
    type: Optional[str]
    count: int

    def __str__(self):
        return ":".join([self.name] + ([self.type] if self.type else []) + [str(self.count)])


@dataclass(frozen=True)
class Toleration:
    key: Optional[str]
    operator: str
    value: Optional[str]
    effect: Optional[str]
    toleration_seconds: Optional[int]


@dataclass(frozen=True)
class Scheduling:
    """Where the pods of one component may run."""
    node_selector: Dict[str, str] = field(default_factory=dict)
    tolerations: Tuple[Toleration, ...] = ()
    affinity: Optional[dict] = None
    priority_class_name: Optional[str] = None
    runtime_class_name: Optional[str] = None


UPDATE_STRATEGIES = ("slurmAware", "scheduled", "onDelete")


@dataclass(frozen=True)
class UpdateStrategy:
    """How running workers move to a changed pod template (slurm/rollout.py; scheduled: slurm/maintenance.py)."""
    type: str = "slurmAware"            # UPDATE_STRATEGIES
    max_unavailable: int = 1
    window_start: Optional[int] = None  # scheduled: seconds since the epoch
    window_minutes: Optional[int] = None

    @property
    def slurm_aware(self) -> bool:
        """Rolled by us (slurmAware now, scheduled inside its window); onDelete is not."""
        return self.type in ("slurmAware", "scheduled")

    @property
    def scheduled(self) -> bool:
        return self.type == "scheduled"

    @property
    def window_end(self) -> Optional[int]:
        # validate.py gives a window's start and its length together
        return None if self.window_start is None else self.window_start + cast(int, self.window_minutes) * 60


@dataclass(frozen=True)
class Ephemeral:
    """spec.ephemeral of a NodeSet (spec/ephemeral.py): when enabled, Slurm powers its nodes above min_replicas up
    and down."""
    enabled: bool = False
    min_replicas: int = 0
    suspend_time: int = 300             # seconds idle before SuspendProgram
    resume_timeout: int = 300           # seconds from ResumeProgram to a registered slurmd
    suspend_timeout: int = 90


@dataclass(frozen=True)
class NodeSet:
    name: str
    replicas: int
    max_replicas: int
    resources: Dict[str, str]          # Kubernetes resource name -> quantity, as the user wrote it
    cpus: int
    real_memory_mib: int
    sockets: Optional[int]
    cores_per_socket: Optional[int]
    threads_per_core: Optional[int]
    weight: int
    gres: Tuple[Gres, ...]
    features: Tuple[str, ...]
    scheduling: Scheduling
    max_unavailable: int
    image: str
    shared_memory: Optional[str]
    update_strategy: UpdateStrategy = UpdateStrategy()     # spec.updateStrategy
    ephemeral: Ephemeral = Ephemeral()                     # spec.ephemeral

    @property
    def gpus(self) -> int:
        return sum(g.count for g in self.gres if g.name == "gpu")

    def node_name(self, ordinal: int) -> str:
        """Slurm node name == worker pod name: the pod's DNS name is what slurmctld dials."""
        return "%s-%d" % (self.name, ordinal)

    def range_of(self, first: int, end: int) -> Optional[str]:
        """Nodes first .. end-1 as one hostlist expression (None when empty)."""
        if end <= first:
            return None
        if end - first == 1:
            return self.node_name(first)
        return "%s-[%d-%d]" % (self.name, first, end - 1)

    @property
    def first_cloud_ordinal(self) -> int:
        """Where the nodes Slurm powers up and down begin: an ephemeral NodeSet's minReplicas; max_replicas (none)
        for a NodeSet of fixed size. Below it: the nodes the backends keep running."""
        return self.ephemeral.min_replicas if self.ephemeral.enabled else self.max_replicas

    @property
    def static_range(self) -> Optional[str]:
        """Nodes whose workers the backends keep running: all of them, or an ephemeral NodeSet's floor."""
        return self.range_of(0, self.first_cloud_ordinal)

    @property
    def cloud_range(self) -> Optional[str]:
        """Nodes Slurm powers up and down (State=CLOUD); None for a NodeSet of fixed size."""
        return self.range_of(self.first_cloud_ordinal, self.max_replicas)

    @property
    def cloud_nodes(self) -> List[str]:
        return [self.node_name(i) for i in range(self.first_cloud_ordinal, self.max_replicas)]

    @property
    def node_range(self) -> Optional[str]:
        """Every Slurm node this nodeset may ever have, as one hostlist expression."""
        return self.range_of(0, self.max_replicas)


@dataclass(frozen=True)
class Partition:
    name: str
    node_sets: Tuple[str, ...]
    default: bool
    config: Dict[str, str]


@dataclass(frozen=True)
class JailVolume:
    existing_claim: Optional[str]
    size: Optional[str]
    storage_class_name: Optional[str]
    access_modes: Tuple[str, ...]


@dataclass(frozen=True)
class Jail:
    volume: JailVolume
    populate_image: str
    overwrite: str                     # never | if_empty | always
    populate_backoff_limit: int


@dataclass(frozen=True)
class Controller:
    resources: Dict[str, str]
    spool_size: str
    spool_storage_class_name: Optional[str]
    port: int
    scheduling: Scheduling
    replicas: int = 1                           # spec.controller.replicas (spec/controller.py): 2 adds a backup
    spool_access_modes: Tuple[str, ...] = ("ReadWriteOnce",)


@dataclass(frozen=True)
class LoginService:
    type: str
    port: int
    node_port: Optional[int]
    source_ranges: Tuple[str, ...]
    annotations: Dict[str, str]


@dataclass(frozen=True)
class Login:
    replicas: int
    service: LoginService
    ssh_root_public_keys: Tuple[str, ...]
    resources: Dict[str, str]
    scheduling: Scheduling


@dataclass(frozen=True)
class PasswordSecretRef:
    name: str
    key: str


@dataclass(frozen=True)
class Ldap:
    """spec.identity.ldap (spec/identity.py): what render/sssd_conf.py writes sssd.conf from."""
    uri: str
    search_base: str
    user_search_base: Optional[str]
    group_search_base: Optional[str]
    bind_dn: Optional[str]
    bind_password_secret: Optional[PasswordSecretRef]
    ca_config_map: Optional[PasswordSecretRef]
    start_tls: bool
    access_filter: Optional[str]
    entry_cache_timeout: int


@dataclass(frozen=True)
class Identity:
    """spec.identity: SSSD from our sssd.conf (ldap) or from the user's (sssd_config_secret), never both."""
    ldap: Optional[Ldap] = None
    sssd_config_secret: Optional[PasswordSecretRef] = None


@dataclass(frozen=True)
class InClusterDatabase:
    storage: str
    storage_class_name: Optional[str]
    resources: Dict[str, str]


@dataclass(frozen=True)
class ExternalDatabase:
    host: str
    port: int
    user: str
    database: str
    password_secret: PasswordSecretRef


@dataclass(frozen=True)
class Accounting:
    enabled: bool
    port: int
    resources: Dict[str, str]
    in_cluster: Optional[InClusterDatabase]
    external: Optional[ExternalDatabase]
    policy: Optional["AccountingPolicy"] = None    # accounts, users, QOS, scheduling (spec/accounting.py)


@dataclass(frozen=True)
class Switch:
    name: str
    node_sets: Tuple[str, ...]
    switches: Tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """Where a worker's pod runs, as the backend read it (spec/topology.py builds the tree from these): its
    Kubernetes node (None: no pod, or not scheduled yet) and that node's labels among the tiers."""
    host: Optional[str]
    labels: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeLabels:
    """spec.topology.nodeLabels (spec/topology.py): Slurm's topology from the labels of the Kubernetes nodes the
    workers of `node_sets` run on. `placement` (Slurm node -> Placement) is filled by the backend that read it; None:
    not read (a render without a cluster), every node unplaced."""
    plugin: str
    tiers: Tuple[str, ...]
    node_sets: Tuple[str, ...]
    placement: Optional[Dict[str, Placement]] = None


@dataclass(frozen=True)
class Topology:
    enabled: bool
    switches: Tuple[Switch, ...]
    node_labels: Optional[NodeLabels] = None        # spec.topology.nodeLabels


@dataclass(frozen=True)
class Mpi:
    default: str
    config: Dict[str, str]


@dataclass(frozen=True)
class CustomCheck:
    name: str
    command: str
    timeout_seconds: int


@dataclass(frozen=True)
class PassiveChecks:
    enabled: bool
    interval: int
    node_states: Tuple[str, ...]
    cycle: bool
    gpu: bool
    memory: bool
    munge: bool
    min_free_disk_percent: int
    custom: Tuple[CustomCheck, ...]


@dataclass(frozen=True)
class ActiveCheck:
    name: str
    type: str                          # gpuBurn | ncclAllReduce | storage | sbatch
    schedule: str
    node_sets: Tuple[str, ...]
    script: Optional[str]
    timeout_seconds: int
    min_bus_bandwidth_gbs: Optional[float]
    min_write_mbs: Optional[float]
    min_read_mbs: Optional[float]
    drain_on_failure: bool


@dataclass(frozen=True)
class HealthChecks:
    passive: PassiveChecks
    active: Tuple[ActiveCheck, ...]


@dataclass(frozen=True)
class Remediation:
    enabled: bool
    schedule: str
    drain_reason_prefix: str
    replace_drained_nodes: bool
    cordon_kubernetes_node: bool
    successful_jobs_history_limit: int
    failed_jobs_history_limit: int


@dataclass(frozen=True)
class Exporter:
    enabled: bool
    port: int
    scrape_timeout: str                 # spec.observability.exporter.scrapeTimeout: see scrape_timeout_seconds


def duration_seconds(text: str) -> int:
    """A spec duration ('30s', '2m': fields.py's pattern) in seconds."""
    return int(text[:-1]) * (60 if text.endswith("m") else 1)


@dataclass(frozen=True)
class Labelled:
    """An optional object with extra labels (the PrometheusRule, the dashboards ConfigMap)."""
    enabled: bool
    labels: Dict[str, str]


@dataclass(frozen=True)
class ServiceMonitor(Labelled):
    interval: str


@dataclass(frozen=True)
class Observability:
    exporter: Exporter
    service_monitor: ServiceMonitor
    prometheus_rule: Labelled
    dashboards: Labelled

    @property
    def scrape_timeout_seconds(self) -> int:
        """The one scrape timeout: the ServiceMonitor's, and the exporter's bound on a scrape. exporter.scrapeTimeout,
        or the interval when it is shorter (Prometheus refuses a timeout longer than the interval)."""
        return min(duration_seconds(self.exporter.scrape_timeout), duration_seconds(self.service_monitor.interval))


@dataclass(frozen=True)
class Containers:
    """spec.containers (spec/containers.py): oci.conf for `srun --container` (render/oci_conf.py) when enabled."""
    enabled: bool
    runtime: str        # runc | crun
    state_dir: str      # the runtime's --root on the node


@dataclass(frozen=True)
class Rest:
    """spec.rest (spec/rest.py): slurmrestd with JSON Web Tokens, when enabled."""
    enabled: bool
    replicas: int
    port: int
    max_token_lifespan: int     # seconds (AuthAltParameters max_token_lifespan; slurm_token's bound)


DEFAULT_MAX_STARTING_PODS = 100     # spec/workers.py says why


@dataclass(frozen=True)
class Workers:
    """spec.workers (spec/workers.py): what holds for all NodeSets' workers together."""
    max_starting_pods: int = DEFAULT_MAX_STARTING_PODS  # pods asked for, not Ready at once (kube/stagger.py); 0: none


@dataclass(frozen=True)
class ClusterModel:
    name: str
    namespace: str
    cluster_domain: str
    images: Images
    jail: Jail
    controller: Controller
    login: Login
    accounting: Accounting
    node_sets: Tuple[NodeSet, ...]
    partitions: Tuple[Partition, ...]
    slurm_config: Dict[str, str]
    cgroup_config: Dict[str, str]
    mpi: Mpi
    topology: Topology
    health_checks: HealthChecks
    remediation: Remediation
    observability: Observability
    # The validated documents, defaults filled in: what we write back as the CRs.
    cluster_spec: dict = field(repr=False, compare=False, default_factory=dict)
    node_set_specs: Dict[str, dict] = field(repr=False, compare=False, default_factory=dict)
    identity: Optional[Identity] = None         # spec.identity (spec/identity.py); None: jail users only
    containers: Optional[Containers] = None     # spec.containers (spec/containers.py); None: as disabled
    rest: Optional[Rest] = None                 # spec.rest (spec/rest.py); None: as disabled
    workers: Workers = Workers()                # spec.workers (spec/workers.py)

    @property
    def rest_api(self) -> Optional[Rest]:
        """spec.rest when it is enabled (slurmrestd runs, the daemons take tokens), else None."""
        return self.rest if self.rest is not None and self.rest.enabled else None

    def summary(self) -> Dict[str, Any]:
        """What a module's result says of the cluster (its `cluster` key): NodeSets with their node ranges,
        partitions, whether accounting is on."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "node_sets": [{"name": n.name, "replicas": n.replicas, "max_replicas": n.max_replicas,
                           "nodes": n.node_range} for n in self.node_sets],
            "partitions": [{"name": p.name, "node_sets": list(p.node_sets), "default": p.default}
                           for p in self.partitions],
            "accounting": self.accounting.enabled,
        }

    def node_set(self, name: str) -> NodeSet:
        for ns in self.node_sets:
            if ns.name == name:
                return ns
        raise KeyError(name)

    @property
    def worker_service(self) -> str:
        """One headless Service governs every worker StatefulSet, so `gpu-3.<svc>` resolves for any nodeset."""
        return "%s-workers" % self.name

    @property
    def controller_host(self) -> str:
        return "%s-controller-0" % self.name

    @property
    def controller_hosts(self) -> Tuple[str, ...]:
        """The controller pods in SlurmctldHost order: the primary, then the backup (spec.controller.replicas)."""
        return tuple("%s-controller-%d" % (self.name, i) for i in range(self.controller.replicas))

    def dns_name(self, host: str, service: str) -> str:
        return "%s.%s.%s.svc.%s" % (host, service, self.namespace, self.cluster_domain)

    @property
    def cloud_nodes(self) -> List[str]:
        """Every node Slurm powers up and down (the ephemeral NodeSets' State=CLOUD nodes), in model order."""
        return [node for ns in self.node_sets for node in ns.cloud_nodes]

    @property
    def total_workers(self) -> int:
        return sum(ns.replicas for ns in self.node_sets)


def switch_cycles(children: Mapping[str, Sequence[str]]) -> List[List[str]]:
    """Every cycle of a switch tree {switch: [child switches]}, each as [a, b, ..., a], found once: a switch that is
    its own ancestor makes topology/tree loop (spec reports them with field paths; render refuses them)."""
    cycles: List[List[str]] = []
    done: Set[str] = set()
    reported: Set[str] = set()

    def visit(name, path):
        if name in path:
            cycle = path[path.index(name):] + [name]
            if not reported.intersection(cycle):
                reported.update(cycle)
                cycles.append(cycle)
            return
        if name in done or name not in children:
            return
        for child in children[name]:
            visit(child, path + [name])
        done.add(name)

    for name in sorted(children):
        visit(name, [])
    return cycles
