"""Stand-ins for the controllers of a running cluster: they fill status as Kubernetes would once pods run.

They run synchronously right after a stored write (the write's response does not show their work, the next read
does), react only to writes outside .status (so a test's set_status() sticks until the next spec change), and write
as "kube-controller-manager" on the status subresource. CRD establishment is part of the API server and always on.
"""
import copy
import math

from . import crd as crdmod
from . import validation

MANAGER = "kube-controller-manager"
FAKE_CA = "-----BEGIN CERTIFICATE-----\nMIIBemulatorFAKECA\n-----END CERTIFICATE-----\n"


def _outside_status(obj):
    out = dict((k, v) for k, v in obj.items() if k != "status")
    meta = dict(out.get("metadata") or {})
    for k in ("resourceVersion", "managedFields"):
        meta.pop(k, None)
    out["metadata"] = meta
    return out


class Controllers(object):
    def __init__(self, store, enabled=True, pods=False):
        self.store = store
        self.enabled = enabled
        self.pods = pods

    def _now(self):
        from .store import now
        return now()

    # -- hooks ----------------------------------------------------------------------------------------------------
    def after_write(self, rt, key, old, new):
        if rt.kind == "CustomResourceDefinition" and not rt.custom:
            self._crd(rt, key, old, new)
        if not self.enabled:
            return
        if old is not None and _outside_status(old) == _outside_status(new):
            return
        if new["metadata"].get("deletionTimestamp") and "orphan" in (new["metadata"].get("finalizers") or []):
            self._orphan_finalizer(rt, key, new)
            return
        ns = key[2]
        if rt.kind == "Namespace" and old is None:
            self._namespace_content(key[3])
        elif rt.kind == "StatefulSet":
            self._statefulset(rt, key)
            self._pdbs(ns)
        elif rt.kind == "Job":
            self._job(rt, key)
        elif rt.kind == "PodDisruptionBudget":
            self._pdb(rt, key)
        elif rt.kind == "PersistentVolumeClaim":
            self._pvc(rt, key)
        elif rt.kind == "Pod":
            self._pdbs(ns)

    def after_delete(self, rt, key, obj, orphan=False):
        if not self.enabled:
            return
        uid = obj["metadata"].get("uid")
        # Garbage collection: dependents go with their owner (background propagation), or lose their reference to it
        # and stay (propagationPolicy=Orphan, done at once where no other finalizer holds the owner).
        if orphan:
            self._orphan_dependents(uid)
        for k, o in list(self.store.objects.items()):
            refs = o["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs) and k in self.store.objects:
                self.store.remove_internal(self.store._type_for_key(k), k)
        if rt.kind in ("StatefulSet", "Pod"):
            self._pdbs(key[2])
        if rt.kind == "Pod":
            for k, o in list(self.store.objects.items()):
                if k[1] == "persistentvolumeclaims" and k[2] == key[2]:
                    self._pvc(self.store._type_for_key(k), k)

    def _orphan_dependents(self, uid):
        for k, o in list(self.store.objects.items()):
            refs = o["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):
                kept = copy.deepcopy(o)
                kept["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self.store.write_internal(self.store._type_for_key(k), k, kept, MANAGER)

    def _orphan_finalizer(self, rt, key, obj):
        """The garbage collector's part of a deletion with propagationPolicy=Orphan that other finalizers hold: drop
        the dependents' references, then its own `orphan` finalizer."""
        self._orphan_dependents(obj["metadata"].get("uid"))
        new = copy.deepcopy(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"] if f != "orphan"]
        self.store.write_internal(rt, key, new, MANAGER)

    # -- CRDs (API server) ----------------------------------------------------------------------------------------
    def _crd(self, rt, key, old, new):
        if old is None or old.get("spec") != new.get("spec"):
            self.store.register(new)
        status = crdmod.crd_status(new, self._now(), new.get("status"))
        current = new.get("status") or {}
        if status != current:
            self.store.set_status(rt, None, key[3], status, manager="kube-apiserver")

    # -- namespaces -----------------------------------------------------------------------------------------------
    def _namespace_content(self, ns):
        self.store.create_internal({"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": "default", "namespace": ns}}, MANAGER)
        self.store.create_internal({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": ns, "annotations": {
                "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver "
                                             "when using internal endpoints such as the internal service IP or "
                                             "kubernetes.default.svc. No other usage is guaranteed across "
                                             "distributions of Kubernetes clusters."}},
            "data": {"ca.crt": FAKE_CA}}, MANAGER)

    # -- statefulsets ---------------------------------------------------------------------------------------------
    def _statefulset(self, rt, key):
        from .store import revision_hash
        sts = self.store.objects.get(key)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return   # the real controller neither syncs nor adopts for a StatefulSet being deleted
        spec = sts.get("spec") or {}
        n = spec.get("replicas", 1)
        name = sts["metadata"]["name"]
        revision = "%s-%s" % (name, revision_hash(spec.get("template")))
        status = {"observedGeneration": sts["metadata"].get("generation", 1), "replicas": n}
        if n:
            status.update(readyReplicas=n, currentReplicas=n, updatedReplicas=n)
        status.update(currentRevision=revision, updateRevision=revision, collisionCount=0, availableReplicas=n)
        if self.pods:
            self._statefulset_pods(sts, n, revision)
        if sts.get("status") != status:
            self.store.set_status(rt, key[2], name, status, manager=MANAGER)

    def _statefulset_pods(self, sts, n, revision):
        spec = sts.get("spec") or {}
        ns, name, uid = sts["metadata"]["namespace"], sts["metadata"]["name"], sts["metadata"]["uid"]
        tmpl = copy.deepcopy(spec.get("template") or {})
        owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": uid, "controller": True,
                 "blockOwnerDeletion": True}
        pod_rt = self.store.rt_for("v1", "Pod")
        self._adopt_pods(sts, owner, pod_rt)
        for k, o in list(self.store.objects.items()):
            if k[1] != "pods" or k[2] != ns or not any(r.get("uid") == uid for r in
                                                       o["metadata"].get("ownerReferences") or []):
                continue
            labels = o["metadata"].get("labels") or {}
            index = int(labels.get("apps.kubernetes.io/pod-index", "-1"))
            if index >= n or labels.get("controller-revision-hash") != revision:
                self.store.remove_internal(pod_rt, k)
        for i in range(n):
            pod_name = "%s-%d" % (name, i)
            if self.store.objects.get(("", "pods", ns, pod_name)) is not None:
                continue
            for t in spec.get("volumeClaimTemplates") or []:
                claim = copy.deepcopy(t)
                claim.pop("status", None)
                # as the real controller labels them: the template's labels plus the selector's matchLabels
                claim_labels = dict((t.get("metadata") or {}).get("labels") or {})
                claim_labels.update((spec.get("selector") or {}).get("matchLabels") or {})
                claim["metadata"] = {"name": "%s-%s" % (t["metadata"]["name"], pod_name), "namespace": ns,
                                     "labels": claim_labels}
                self.store.create_internal(claim, MANAGER)
            pod_spec = copy.deepcopy(tmpl.get("spec") or {})
            pod_spec["hostname"] = pod_name
            if spec.get("serviceName"):
                pod_spec["subdomain"] = spec["serviceName"]
            volumes = pod_spec.setdefault("volumes", [])
            for t in spec.get("volumeClaimTemplates") or []:
                claim_name = "%s-%s" % (t["metadata"]["name"], pod_name)
                volumes.insert(0, {"name": t["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}})
            labels = dict((tmpl.get("metadata") or {}).get("labels") or {})
            labels.update({"apps.kubernetes.io/pod-index": str(i), "controller-revision-hash": revision,
                           "statefulset.kubernetes.io/pod-name": pod_name})
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "namespace": ns, "labels": labels, "ownerReferences": [owner],
                                "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {})},
                   "spec": pod_spec}
            if self.store.create_internal(pod, MANAGER) is not None:
                self._run_pod(pod_rt, ("", "pods", ns, pod_name))

    def _adopt_pods(self, sts, owner, pod_rt):
        """Take over pods without a controller that match the selector and are named `<sts>-<ordinal>` (pods a
        deleted StatefulSet orphaned), as the StatefulSet controller's ClaimPods does."""
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        match = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        for k, o in list(self.store.objects.items()):
            meta = o["metadata"]
            if k[1] != "pods" or k[2] != ns or meta.get("deletionTimestamp") or \
                    any(r.get("controller") for r in meta.get("ownerReferences") or []):
                continue
            prefix, unused, ordinal = meta["name"].rpartition("-")
            labels = meta.get("labels") or {}
            if prefix != name or not ordinal.isdigit() or any(labels.get(lk) != lv for lk, lv in match.items()):
                continue
            adopted = copy.deepcopy(o)
            adopted["metadata"]["ownerReferences"] = list(meta.get("ownerReferences") or []) + [dict(owner)]
            self.store.write_internal(pod_rt, k, adopted, MANAGER)

    def _run_pod(self, rt, key):
        pod = self.store.objects.get(key)
        now = self._now()
        conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                      for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
        statuses = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                     "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}}
                    for c in (pod.get("spec") or {}).get("containers") or []]
        status = dict(pod.get("status") or {})
        status.update({"phase": "Running", "conditions": conditions, "containerStatuses": statuses,
                       "hostIP": "10.0.0.1", "podIP": "10.244.0.%d" % (len(self.store.objects) % 250 + 2),
                       "startTime": now})
        self.store.set_status(rt, key[2], key[3], status, manager="kubelet")

    # -- jobs -----------------------------------------------------------------------------------------------------
    def _job(self, rt, key):
        job = self.store.objects.get(key)
        if job is None:
            return
        spec = job.get("spec") or {}
        status = copy.deepcopy(job.get("status") or {})
        done = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in status.get("conditions") or [])
        if done:
            return
        now = self._now()
        if spec.get("suspend"):
            new = {"conditions": [{"type": "Suspended", "status": "True", "lastProbeTime": now,
                                   "lastTransitionTime": now, "reason": "JobSuspended", "message": "Job suspended"}]}
        else:
            outcome = self.store.job_outcomes.get((key[2], key[3]), "Complete")
            new = {"startTime": status.get("startTime") or now, "ready": 0, "terminating": 0,
                   "uncountedTerminatedPods": {}}
            if outcome == "Complete":
                new.update(completionTime=now, succeeded=spec.get("completions") or 1, conditions=[
                    _cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods",
                          now),
                    _cond("Complete", "CompletionsReached", "Reached expected number of succeeded pods", now)])
            elif outcome == "Failed":
                new.update(failed=(spec.get("backoffLimit") or 0) + 1, conditions=[
                    _cond("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit", now),
                    _cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", now)])
            else:
                new["active"] = spec.get("parallelism") or 1
        if new != status:
            self.store.set_status(rt, key[2], key[3], new, manager=MANAGER)

    # -- pod disruption budgets -----------------------------------------------------------------------------------
    def _pdbs(self, ns):
        for k in [k for k in self.store.objects if k[1] == "poddisruptionbudgets" and k[2] == ns]:
            self._pdb(self.store._type_for_key(k), k)

    def _pdb(self, rt, key):
        pdb = self.store.objects.get(key)
        if pdb is None:
            return
        spec = pdb.get("spec") or {}
        selector = spec.get("selector")
        expected = 0
        if self.pods:
            for k, o in self.store.objects.items():
                if k[1] == "pods" and k[2] == key[2] and validation.selector_matches(selector, o["metadata"].get(
                        "labels")) and (o.get("status") or {}).get("phase") == "Running":
                    expected += 1
        else:
            for k, o in self.store.objects.items():
                if k[1] == "statefulsets" and k[2] == key[2]:
                    labels = (((o.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels")
                    if selector and validation.selector_matches(selector, labels):
                        expected += (o.get("status") or {}).get("readyReplicas", 0)
        desired = _desired_healthy(spec, expected)
        allowed = max(0, expected - desired)
        now = self._now()
        old = pdb.get("status") or {}
        old_cond = next((c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
        cond_status = "True" if allowed > 0 else "False"
        cond = {"type": "DisruptionAllowed", "status": cond_status, "observedGeneration": pdb["metadata"]["generation"],
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": "",
                "lastTransitionTime": old_cond["lastTransitionTime"] if old_cond and
                old_cond.get("status") == cond_status else now}
        status = {"observedGeneration": pdb["metadata"]["generation"], "disruptionsAllowed": allowed,
                  "currentHealthy": expected, "desiredHealthy": desired, "expectedPods": expected,
                  "conditions": [cond]}
        if status != old:
            self.store.set_status(rt, key[2], key[3], status, manager=MANAGER)

    # -- persistent volume claims ---------------------------------------------------------------------------------
    def _pvc(self, rt, key):
        pvc = self.store.objects.get(key)
        if pvc is None:
            return
        meta = pvc["metadata"]
        if meta.get("deletionTimestamp"):
            if not self._claim_in_use(key[2], meta["name"]):
                new = copy.deepcopy(pvc)
                new["metadata"]["finalizers"] = [f for f in meta.get("finalizers") or []
                                                 if f != "kubernetes.io/pvc-protection"]
                self.store.write_internal(rt, key, new, MANAGER)
            return
        spec = pvc.get("spec") or {}
        if not spec.get("volumeName"):
            # The volume binder: bind to a new volume (annotations as the real controller writes them).
            new = copy.deepcopy(pvc)
            new["spec"]["volumeName"] = "pvc-" + meta["uid"]
            annotations = new["metadata"].setdefault("annotations", {})
            annotations.update({"pv.kubernetes.io/bind-completed": "yes",
                                "pv.kubernetes.io/bound-by-controller": "yes"})
            self.store.write_internal(rt, key, new, MANAGER)
            pvc = self.store.objects.get(key)
            spec = pvc.get("spec") or {}
        requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        status = {"phase": "Bound", "accessModes": list(spec.get("accessModes") or []),
                  "capacity": {"storage": requested}}
        if pvc.get("status") != status:
            self.store.set_status(rt, key[2], key[3], status, manager=MANAGER)

    def _claim_in_use(self, ns, claim):
        for k, o in self.store.objects.items():
            if k[1] == "pods" and k[2] == ns:
                for v in (o.get("spec") or {}).get("volumes") or []:
                    if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim:
                        return True
        return False


def _cond(type_, reason, message, now):
    return {"type": type_, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason,
            "message": message}


def _desired_healthy(spec, expected):
    def amount(v, round_up):
        if isinstance(v, str) and v.endswith("%"):
            x = expected * int(v[:-1]) / 100.0
            return int(math.ceil(x)) if round_up else int(math.floor(x))
        return int(v)
    if spec.get("minAvailable") is not None:
        return amount(spec["minAvailable"], True)
    if spec.get("maxUnavailable") is not None:
        return max(0, expected - amount(spec["maxUnavailable"], True))
    return expected
