# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster and NodeSet specs validated, defaulted and turned into the ClusterModel.

Every rule of a field lives in its schema node (fields.py); rules that span fields or documents live here, in
`_cross_checks`; documents.py reads the documents. `build_model` reports every issue of every document at once and builds nothing from an invalid spec.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names as n
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import doc_label
from ansible_collections.soperator.slurm.plugins.module_utils.spec.accounting import accounting_issues, policy_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.controller import controller_issues
from ansible_collections.soperator.slurm.plugins.module_utils.spec.ephemeral import (
    ephemeral_issues, ephemeral_model, replicas_of)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.topology import node_labels_model, topology_issues
from ansible_collections.soperator.slurm.plugins.module_utils.spec.identity import identity_issues, identity_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.containers import containers_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.rest import rest_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.workers import workers_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.fields import (
    CLUSTER_DOCUMENT,
    GRES_PATTERN,
    MAX_CLUSTER_NAME,
    MAX_CRONJOB_NAME,
    MAX_DNS_NAME,
    MAX_NODESET_NAME,
    MAX_NODE_RANGE,
    NODESET_DOCUMENT,
    RESERVED_NODESET_NAMES,
    UINT16_MAX)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.quantity import (
    QuantityError, is_quantity, to_cpus, to_mib)
from ansible_collections.soperator.slurm.plugins.module_utils.spec.window import parse_start
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import (
    SpecError, SpecIssue, child_path, compile_pattern)


def _prefixed(label, issues):
    return [SpecIssue("%s %s" % (label, i.path) if i.path else label, i.message) for i in issues]


def validate_documents(documents: Any) -> Tuple[Optional[Dict[str, Any]], List[Tuple[str, Dict[str, Any]]], List[SpecIssue]]:
    """Validate + default every document. Returns (cluster_doc, [nodeset_doc], issues)."""
    issues = []
    cluster, node_sets = None, []
    if not isinstance(documents, list):
        return None, [], [SpecIssue("", "the spec must be a list of documents (a SlurmCluster and its NodeSets)")]
    for index, doc in enumerate(documents):
        label = doc_label(doc, index)
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind == "SlurmCluster":
            doc_issues: List[SpecIssue] = []
            validated = CLUSTER_DOCUMENT.validate(doc, "", doc_issues)
            issues.extend(_prefixed(label, doc_issues))
            if cluster is not None:
                issues.append(SpecIssue(label, "a spec holds exactly one SlurmCluster (found a second one)"))
            else:
                cluster = validated
        elif kind == "NodeSet":
            doc_issues = []
            node_sets.append((label, NODESET_DOCUMENT.validate(doc, "", doc_issues)))
            issues.extend(_prefixed(label, doc_issues))
        else:
            issues.append(SpecIssue("%s kind" % label if isinstance(doc, dict) else label,
                                    "must be SlurmCluster or NodeSet, got %r" % (kind,)))
    if cluster is None:
        issues.append(SpecIssue("", "the spec has no SlurmCluster document"))
    return cluster, node_sets, issues


def _get(value, *keys, default=None):
    """Nested lookup that tolerates parts already reported invalid (validation leaves None there)."""
    for key in keys:
        if not isinstance(value, dict) or value.get(key) is None:
            return default
        value = value[key]
    return value


def _cross_checks(cluster, node_sets):
    """Rules spanning fields and documents. Runs on validated documents; skips parts already invalid."""
    issues = []
    name = _get(cluster, "metadata", "name")
    namespace = _get(cluster, "metadata", "namespace")
    if isinstance(name, str) and len(name) > MAX_CLUSTER_NAME:
        issues.append(SpecIssue("SlurmCluster/%s metadata.name" % name,
                                "must be at most %d characters long" % MAX_CLUSTER_NAME))
    seen = {}
    for label, doc in node_sets:
        ns_name = _get(doc, "metadata", "name")
        if isinstance(ns_name, str):
            if len(ns_name) > MAX_NODESET_NAME:
                issues.append(SpecIssue("%s metadata.name" % label,
                                        "must be at most %d characters long" % MAX_NODESET_NAME))
            if ns_name in seen:
                issues.append(SpecIssue("%s metadata.name" % label, "duplicate NodeSet name %r" % ns_name))
            if ns_name in RESERVED_NODESET_NAMES or (isinstance(name, str) and ns_name.startswith(name + "-")):
                issues.append(SpecIssue("%s metadata.name" % label,
                                        "%r is reserved (Slurm's 'all', or the cluster's own %r-... names)"
                                        % (ns_name, name)))
            seen[ns_name] = doc
        cluster_ref = _get(doc, "spec", "clusterName")
        if name and cluster_ref and cluster_ref != name:
            issues.append(SpecIssue("%s spec.clusterName" % label,
                                    "%r does not match the SlurmCluster %r" % (cluster_ref, name)))
        ns_namespace = _get(doc, "metadata", "namespace")
        if namespace and ns_namespace and ns_namespace != namespace:
            issues.append(SpecIssue("%s metadata.namespace" % label,
                                    "%r differs from the SlurmCluster's namespace %r" % (ns_namespace, namespace)))
        issues.extend(_nodeset_resource_checks(label, _get(doc, "spec", default={})))
    spec, label = _get(cluster, "spec"), "SlurmCluster/%s" % name
    issues.extend(ephemeral_issues(label, _get(spec, "slurmConfig"), node_sets))
    issues.extend(topology_issues(label, _get(spec, "topology"), node_sets))
    issues.extend(identity_issues(label, _get(spec, "identity")))
    issues.extend(accounting_issues(label, spec))
    issues.extend(controller_issues(label, _get(spec, "controller")))
    if spec is None:
        return issues

    def unknown_refs(refs, path, what, known):
        for j, ref in enumerate(refs or []):
            if ref is not None and ref not in known:
                issues.append(SpecIssue("%s %s[%d]" % (label, path, j), "unknown %s %r (known: %s)"
                                        % (what, ref, ", ".join(sorted(known)) or "none")))

    partitions = [p for p in _get(spec, "partitions", default=[]) if isinstance(p, dict)]
    defaults = [p.get("name") for p in partitions if p.get("default")]
    if len(defaults) > 1:
        issues.append(SpecIssue("%s spec.partitions" % label,
                                "at most one partition may be the default, got %s" % ", ".join(map(str, defaults))))
    in_partition = set()
    for i, part in enumerate(_get(spec, "partitions", default=[])):
        in_partition.update(_get(part, "nodeSets", default=[]))
        unknown_refs(_get(part, "nodeSets"), "spec.partitions[%d].nodeSets" % i, "NodeSet", seen)
    if partitions:
        for ns_label, doc in node_sets:
            ns_name = _get(doc, "metadata", "name")
            if ns_name and ns_name not in in_partition:
                issues.append(SpecIssue("%s metadata.name" % ns_label,
                                        "NodeSet %r is in no partition (add it to a spec.partitions[].nodeSets of "
                                        "%s)" % (ns_name, label)))
    for i, check in enumerate(_get(spec, "healthChecks", "active", default=[])):
        unknown_refs(_get(check, "nodeSets"), "spec.healthChecks.active[%d].nodeSets" % i, "NodeSet", seen)
    switches = _get(spec, "topology", "switches", default=[])
    switch_names = set(_get(sw, "name") for sw in switches) - {None}
    for i, switch in enumerate(switches):
        unknown_refs(_get(switch, "nodeSets"), "spec.topology.switches[%d].nodeSets" % i, "NodeSet", seen)
        unknown_refs(_get(switch, "switches"), "spec.topology.switches[%d].switches" % i, "switch", switch_names)
    issues.extend(_switch_cycles(label, switches))
    if isinstance(name, str):
        issues.extend(_object_name_checks(label, name, namespace, spec))
    if _get(spec, "login", "service", "nodePort") is not None \
            and _get(spec, "login", "service", "type") == "ClusterIP":
        issues.append(SpecIssue("%s spec.login.service.nodePort" % label,
                                "needs service type NodePort or LoadBalancer, not ClusterIP"))
    return issues


def _switch_cycles(label, switches):
    """A switch that is its own ancestor makes topology/tree loop; reported at the first switch of each cycle."""
    children = dict((sw.get("name"), [c for c in sw.get("switches") or [] if isinstance(c, str)])
                    for sw in switches if isinstance(sw, dict) and isinstance(sw.get("name"), str))
    index = dict((sw.get("name"), i) for i, sw in enumerate(switches) if isinstance(sw, dict))
    issues = []
    for cycle in m.switch_cycles(children):
        first = min(cycle[:-1], key=lambda s: index[s])
        issues.append(SpecIssue("%s spec.topology.switches[%d].switches" % (label, index[first]),
                                "switches form a cycle: %s" % " -> ".join(cycle)))
    return issues


def _object_name_checks(label, name, namespace, spec):
    """Names of objects we create that Kubernetes would refuse: CronJob names over 52 characters, and pod DNS
    names over 253 (slurm.conf names hosts by them)."""
    issues = []
    cluster = SimpleNamespace(name=name, namespace=namespace or "default",
                              cluster_domain=_get(spec, "clusterDomain", default="cluster.local"))
    for i, check in enumerate(_get(spec, "healthChecks", "active", default=[])):
        check_name = _get(check, "name")
        if isinstance(check_name, str) and len(n.active_check_name(cluster, check_name)) > MAX_CRONJOB_NAME:
            issues.append(SpecIssue(
                "%s spec.healthChecks.active[%d].name" % (label, i),
                "the CronJob %r would be longer than Kubernetes allows (%d characters); shorten the check's or "
                "the cluster's name" % (n.active_check_name(cluster, check_name), MAX_CRONJOB_NAME)))
    host = "%s-accounting-db-0.%s-accounting-db.%s.svc.%s" % (name, name, cluster.namespace, cluster.cluster_domain)
    if isinstance(cluster.cluster_domain, str) and len(host) > MAX_DNS_NAME:
        issues.append(SpecIssue("%s spec.clusterDomain" % label,
                                "pod DNS names like %r would be longer than %d characters" % (host, MAX_DNS_NAME)))
    return issues


def _nodeset_resource_checks(label, spec):
    issues = []
    resources = spec.get("resources")
    if not isinstance(resources, dict):
        return issues
    path = "%s spec.resources" % label
    slurm_node = _get(spec, "slurmNode", default={})
    for key in ("cpu", "memory"):
        if key not in resources:
            issues.append(SpecIssue(path, "must set %s (it also gives Slurm's %s)"
                                    % (key, "CPUs" if key == "cpu" else "RealMemory")))
    if "cpu" in resources and is_quantity(resources["cpu"]) and not slurm_node.get("cpus"):
        try:
            cpus = to_cpus(resources["cpu"])
            if cpus < 1:
                issues.append(SpecIssue(child_path(path, "cpu"), "must be at least 1 CPU"))
            elif cpus > UINT16_MAX:
                issues.append(SpecIssue(child_path(path, "cpu"), "%d CPUs: Slurm's CPUs holds at most %d (set "
                                        "slurmNode.cpus to what Slurm should see)" % (cpus, UINT16_MAX)))
        except QuantityError as e:
            issues.append(SpecIssue(child_path(path, "cpu"), str(e)))
    if "memory" in resources and is_quantity(resources["memory"]) and not slurm_node.get("realMemory"):
        if to_mib(resources["memory"]) < 1:
            issues.append(SpecIssue(child_path(path, "memory"), "must be at least 1Mi"))
    issues.extend(_cpu_layout_checks(label, spec))
    gres = [g for g in spec.get("gres") or [] if isinstance(g, str)]
    gpus = sum(int(g.rsplit(":", 1)[1]) for g in gres
               if isinstance(g, str) and compile_pattern(GRES_PATTERN).search(g) and g.split(":", 1)[0] == "gpu")
    requested = resources.get("nvidia.com/gpu")
    if requested is not None and is_quantity(requested):
        try:
            count = to_cpus(requested)
        except QuantityError:
            issues.append(SpecIssue(child_path(path, "nvidia.com/gpu"), "must be a whole number"))
        else:
            if count != gpus:
                issues.append(SpecIssue(child_path(path, "nvidia.com/gpu"),
                                        "%d GPUs requested but gres declares %d (they must match)" % (count, gpus)))
    gres_names = [g.split(":", 1)[0] for g in gres]
    for name in set(x for x in gres_names if gres_names.count(x) > 1):
        issues.append(SpecIssue("%s spec.gres" % label, "GRES %r is declared more than once" % name))
    for i, g in enumerate(spec.get("gres") or []):
        if isinstance(g, str) and compile_pattern(GRES_PATTERN).search(g) and g.split(":", 1)[0] == "gpu" \
                and int(g.rsplit(":", 1)[1]) > MAX_NODE_RANGE:
            # gres.conf names the device files as one hostlist: /dev/nvidia[0-N].
            issues.append(SpecIssue("%s spec.gres[%d]" % (label, i), "at most %d GPUs per node" % MAX_NODE_RANGE))
    return issues


def slurm_cpu_layout(cpus: int, sockets: Optional[int], cores: Optional[int],
                     threads: Optional[int]) -> Tuple[int, int, int]:
    """(sockets, cores, threads) as slurm.conf's reader completes a node line (_parse_nodename in read_config.c):
    cores and threads default to 1; missing sockets are CPUs / (cores x threads) when that divides, else 1."""
    cores, threads = cores or 1, threads or 1
    if not sockets:
        sockets = cpus // (cores * threads) if cpus % (cores * threads) == 0 and cpus >= cores * threads else 1
    return sockets, cores, threads


def _cpu_layout_checks(label, spec):
    """A NodeSet's CPUs must be one of Sockets, Sockets x CoresPerSocket or Sockets x CoresPerSocket x
    ThreadsPerCore: Slurm resets any other count to the last ("CPUs=6 match no Sockets, ..., Resetting CPUs")."""
    slurm_node = _get(spec, "slurmNode", default={})
    layout = [slurm_node.get(k) for k in ("sockets", "coresPerSocket", "threadsPerCore")]
    if not any(isinstance(v, int) for v in layout) or not all(v is None or isinstance(v, int) for v in layout):
        return []
    if isinstance(slurm_node.get("cpus"), int):
        cpus, path = slurm_node["cpus"], "%s spec.slurmNode.cpus" % label
    else:
        cpu = _get(spec, "resources", "cpu")
        try:
            cpus = to_cpus(cpu) if cpu is not None and is_quantity(cpu) else None
        except QuantityError:
            cpus = None
        path = "%s spec.resources.cpu" % label
    if not isinstance(cpus, int) or cpus < 1:
        return []               # reported on its own
    sockets, cores, threads = slurm_cpu_layout(cpus, *layout)
    allowed = (sockets, sockets * cores, sockets * cores * threads)
    if cpus in allowed:
        return []
    return [SpecIssue(path, "%d CPUs match none of Sockets (%d), Sockets x CoresPerSocket (%d) or Sockets x "
                            "CoresPerSocket x ThreadsPerCore (%d) of spec.slurmNode: Slurm would reset them to %d"
                      % ((cpus,) + allowed + (allowed[2],)))]


def _scheduling(spec):
    return m.Scheduling(
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tuple(m.Toleration(t.get("key"), t["operator"], t.get("value"), t.get("effect"),
                                       t.get("tolerationSeconds")) for t in spec.get("tolerations") or []),
        affinity=copy.deepcopy(spec.get("affinity")),
        priority_class_name=spec.get("priorityClassName"),
        runtime_class_name=spec.get("runtimeClassName"),
    )


def _str_map(values):
    return {k: str(v) for k, v in (values or {}).items()}


def _image(images, explicit, component):
    return explicit or "%s/%s:%s" % (images["registry"], component, images["tag"])


def _parse_gres(text):
    parts = text.split(":")
    return m.Gres(name=parts[0], type=parts[1] if len(parts) == 3 else None, count=int(parts[-1]))


def _gpus(node_set_spec):
    return sum(g.count for g in (_parse_gres(text) for text in node_set_spec["gres"]) if g.name == "gpu")


def _node_set_model(doc, images):
    spec = doc["spec"]
    slurm_node = spec["slurmNode"]
    resources = _str_map(spec["resources"])
    gres = tuple(_parse_gres(g) for g in spec["gres"])
    gpus = _gpus(spec)
    if gpus and "nvidia.com/gpu" not in resources:
        resources["nvidia.com/gpu"] = str(gpus)
    return m.NodeSet(
        name=doc["metadata"]["name"],
        replicas=replicas_of(spec),
        max_replicas=spec["maxReplicas"] if spec.get("maxReplicas") is not None else replicas_of(spec),
        resources=resources,
        cpus=slurm_node.get("cpus") or to_cpus(spec["resources"]["cpu"]),
        real_memory_mib=slurm_node.get("realMemory") or to_mib(spec["resources"]["memory"]),
        sockets=slurm_node.get("sockets"),
        cores_per_socket=slurm_node.get("coresPerSocket"),
        threads_per_core=slurm_node.get("threadsPerCore"),
        weight=slurm_node["weight"],
        gres=gres,
        features=tuple(spec["features"]),
        scheduling=_scheduling(spec),
        max_unavailable=spec["maxUnavailable"],
        image=spec.get("image") or (images.worker_gpu if gpus else images.worker),
        shared_memory=str(spec["sharedMemory"]) if spec.get("sharedMemory") is not None else None,
        update_strategy=_update_strategy(spec["updateStrategy"]),
        ephemeral=ephemeral_model(spec),
    )


def _update_strategy(strategy):
    window = strategy.get("window") or {}
    return m.UpdateStrategy(strategy["type"], strategy["maxUnavailable"],
                            window_start=parse_start(window["start"]) if window else None,
                            window_minutes=window.get("durationMinutes"))


def _model(cluster, node_set_docs):
    meta, spec = cluster["metadata"], cluster["spec"]
    images = spec["images"]
    image_set = m.Images(
        controller=_image(images, images.get("controller"), "controller"),
        worker=_image(images, images.get("worker"), "worker"),
        login=_image(images, images.get("login"), "login"),
        # The jail holds what jobs load: with GPU NodeSets, the CUDA runtime and NCCL too.
        populate_jail=_image(images, images.get("populateJail"),
                             "jail-gpu" if any(_gpus(d["spec"]) for d in node_set_docs) else "jail"),
        accounting=_image(images, images.get("accounting"), "accounting"),
        mariadb=images["mariadb"],
        remediation=_image(images, images.get("remediation"), "ansible-runner"),
        pull_policy=images["pullPolicy"],
        pull_secrets=tuple(images["pullSecrets"]),
        worker_gpu=_image(images, images.get("workerGpu"), "worker-gpu"),
    )
    node_sets = tuple(sorted((_node_set_model(d, image_set) for d in node_set_docs), key=lambda n: n.name))
    partitions = tuple(
        m.Partition(p["name"], tuple(p["nodeSets"]), p["default"], _str_map(p["config"]))
        for p in spec["partitions"]
    ) or ((m.Partition("main", tuple(n.name for n in node_sets), True, {}),) if node_sets else ())
    jail, volume = spec["jail"], spec["jail"]["volume"]
    db = spec["accounting"]["database"]
    in_cluster = db.get("inCluster")
    if spec["accounting"]["enabled"] and db.get("external") is None and in_cluster is None:
        in_cluster = {"storage": "20Gi", "storageClassName": None, "resources": {}}
    external = db.get("external")
    passive = spec["healthChecks"]["passive"]
    remediation = spec["remediation"]
    return m.ClusterModel(
        name=meta["name"],
        namespace=meta["namespace"],
        cluster_domain=spec["clusterDomain"],
        images=image_set,
        jail=m.Jail(
            volume=m.JailVolume(volume.get("existingClaim"), str(volume["size"]) if volume.get("size") else None,
                                volume.get("storageClassName"), tuple(volume["accessModes"])),
            populate_image=jail["populate"].get("image") or image_set.populate_jail,
            overwrite=jail["populate"]["overwrite"],
            populate_backoff_limit=jail["populate"]["backoffLimit"],
        ),
        controller=m.Controller(
            resources=_str_map(spec["controller"]["resources"]),
            spool_size=str(spec["controller"]["spool"]["size"]),
            spool_storage_class_name=spec["controller"]["spool"].get("storageClassName"),
            port=spec["controller"]["port"],
            scheduling=_scheduling(spec["controller"]),
            replicas=spec["controller"]["replicas"],
            spool_access_modes=tuple(spec["controller"]["spool"]["accessModes"]),
        ),
        login=m.Login(
            replicas=spec["login"]["replicas"],
            service=m.LoginService(
                type=spec["login"]["service"]["type"],
                port=spec["login"]["service"]["port"],
                node_port=spec["login"]["service"].get("nodePort"),
                source_ranges=tuple(spec["login"]["service"]["sourceRanges"]),
                annotations=dict(spec["login"]["service"]["annotations"]),
            ),
            ssh_root_public_keys=tuple(spec["login"]["sshRootPublicKeys"]),
            resources=_str_map(spec["login"]["resources"]),
            scheduling=_scheduling(spec["login"]),
        ),
        accounting=m.Accounting(
            enabled=spec["accounting"]["enabled"],
            port=spec["accounting"]["port"],
            resources=_str_map(spec["accounting"]["resources"]),
            in_cluster=m.InClusterDatabase(str(in_cluster["storage"]), in_cluster.get("storageClassName"),
                                           _str_map(in_cluster.get("resources")))
            if in_cluster is not None else None,
            external=m.ExternalDatabase(
                external["host"], external["port"], external["user"], external["database"],
                m.PasswordSecretRef(external["passwordSecret"]["name"], external["passwordSecret"]["key"]))
            if external is not None else None,
            policy=policy_model(spec["accounting"]),
        ),
        node_sets=node_sets,
        partitions=partitions,
        slurm_config=_str_map(spec["slurmConfig"]),
        cgroup_config=_str_map(spec["cgroupConfig"]),
        mpi=m.Mpi(spec["mpi"]["default"], _str_map(spec["mpi"]["config"])),
        topology=m.Topology(spec["topology"]["enabled"], tuple(
            m.Switch(s["name"], tuple(s["nodeSets"]), tuple(s["switches"])) for s in spec["topology"]["switches"]),
            node_labels_model(spec["topology"])),
        health_checks=m.HealthChecks(
            passive=m.PassiveChecks(
                enabled=passive["enabled"], interval=passive["interval"], node_states=tuple(passive["nodeStates"]),
                cycle=passive["cycle"], gpu=passive["gpu"], memory=passive["memory"], munge=passive["munge"],
                min_free_disk_percent=passive["minFreeDiskPercent"],
                custom=tuple(m.CustomCheck(c["name"], c["command"], c["timeoutSeconds"]) for c in passive["custom"]),
            ),
            active=tuple(m.ActiveCheck(
                name=c["name"], type=c["type"], schedule=c["schedule"], node_sets=tuple(c["nodeSets"]),
                script=c.get("script"), timeout_seconds=c["timeoutSeconds"],
                min_bus_bandwidth_gbs=c.get("minBusBandwidthGBs"), min_write_mbs=c.get("minWriteMBs"),
                min_read_mbs=c.get("minReadMBs"), drain_on_failure=c["drainOnFailure"],
            ) for c in spec["healthChecks"]["active"]),
        ),
        remediation=m.Remediation(
            enabled=remediation["enabled"], schedule=remediation["schedule"],
            drain_reason_prefix=remediation["drainReasonPrefix"],
            replace_drained_nodes=remediation["replaceDrainedNodes"],
            cordon_kubernetes_node=remediation["cordonKubernetesNode"],
            successful_jobs_history_limit=remediation["successfulJobsHistoryLimit"],
            failed_jobs_history_limit=remediation["failedJobsHistoryLimit"],
        ),
        observability=_observability(spec["observability"]),
        cluster_spec=cluster,
        node_set_specs={d["metadata"]["name"]: d for d in node_set_docs},
        identity=identity_model(spec),
        containers=containers_model(spec["containers"]),
        rest=rest_model(spec["rest"]),
        workers=workers_model(spec["workers"]),
    )


def _observability(obs):
    monitor, rule, boards = obs["serviceMonitor"], obs["prometheusRule"], obs["dashboards"]
    return m.Observability(
        exporter=m.Exporter(enabled=obs["exporter"]["enabled"], port=obs["exporter"]["port"],
                            scrape_timeout=obs["exporter"]["scrapeTimeout"]),
        service_monitor=m.ServiceMonitor(enabled=monitor["enabled"], labels=dict(monitor["labels"]),
                                         interval=monitor["interval"]),
        prometheus_rule=m.Labelled(rule["enabled"], dict(rule["labels"])),
        dashboards=m.Labelled(boards["enabled"], dict(boards["labels"])))


def check_documents(documents: Any) -> List[SpecIssue]:
    """Every issue of a spec (empty list when it is valid)."""
    cluster, node_sets, issues = validate_documents(documents)
    return issues + _cross_checks(cluster, node_sets)


def build_model(documents: Any) -> m.ClusterModel:
    """Validated, defaulted ClusterModel from a SlurmCluster and its NodeSets. Raises SpecError with every issue."""
    cluster, node_sets, issues = validate_documents(documents)
    issues += _cross_checks(cluster, node_sets)
    if issues:
        raise SpecError(issues)
    return _model(cluster, [doc for _label, doc in node_sets])
