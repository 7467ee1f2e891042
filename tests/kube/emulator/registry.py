"""The resources the emulator serves (built-in table + registered CRDs) and the discovery documents for them."""
import re

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]


class ResourceType(object):
    """One served resource of one group/version."""

    def __init__(self, group, version, plural, kind, namespaced=True, singular=None, short_names=(),
                 categories=(), status=False, scale=None, generation=False, verbs=None, log=False,
                 crd=None, list_kind=None, exec_=False):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.singular = singular or kind.lower()
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.status = status
        # scale: {"spec": ".spec.replicas", "status": ".status.replicas", "selector": ".status.selector" or None}
        self.scale = scale
        self.generation = generation
        self.verbs = verbs or VERBS
        self.log = log
        self.exec_ = exec_   # pods/exec (a websocket connect subresource, podexec.py)
        self.crd = crd  # name of the CRD that defines it, None for built-ins
        self.list_kind = list_kind or kind + "List"

    @property
    def api_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    @property
    def custom(self):
        return self.crd is not None

    @property
    def group_resource(self):
        return "%s.%s" % (self.plural, self.group) if self.group else self.plural

    def discovery(self):
        out = [{"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced, "kind": self.kind,
                "verbs": list(self.verbs)}]
        if self.short_names:
            out[0]["shortNames"] = list(self.short_names)
        if self.categories:
            out[0]["categories"] = list(self.categories)
        if self.status:
            out.append({"name": self.plural + "/status", "singularName": "", "namespaced": self.namespaced,
                        "kind": self.kind, "verbs": list(SUB_VERBS)})
        if self.scale:
            out.append({"name": self.plural + "/scale", "singularName": "", "namespaced": self.namespaced,
                        "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": list(SUB_VERBS)})
        if self.log:
            out.append({"name": self.plural + "/log", "singularName": "", "namespaced": self.namespaced,
                        "kind": self.kind, "verbs": ["get"]})
        if self.exec_:
            out.append({"name": self.plural + "/exec", "singularName": "", "namespaced": self.namespaced,
                        "kind": "PodExecOptions", "verbs": ["create", "get"]})
        return out


def version_priority(version):
    """Sort key of Kubernetes version names: GA before beta before alpha, higher numbers first, others last."""
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), version)


STS_SCALE = {"spec": ".spec.replicas", "status": ".status.replicas", "selector": None}


def builtin_types():
    R = ResourceType
    return [
        R("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"], status=True,
          verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
        R("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
        R("", "v1", "secrets", "Secret"),
        R("", "v1", "services", "Service", short_names=["svc"], categories=["all"], status=True,
          verbs=["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]),
        R("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
        R("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=["pvc"], status=True),
        R("", "v1", "pods", "Pod", short_names=["po"], categories=["all"], status=True, log=True,
          exec_=True),
        R("", "v1", "events", "Event", short_names=["ev"]),
        R("", "v1", "nodes", "Node", namespaced=False, short_names=["no"], status=True),
        R("apps", "v1", "statefulsets", "StatefulSet", short_names=["sts"], categories=["all"], status=True,
          scale=STS_SCALE, generation=True),
        R("apps", "v1", "deployments", "Deployment", short_names=["deploy"], categories=["all"], status=True,
          generation=True),
        R("batch", "v1", "jobs", "Job", categories=["all"], status=True, generation=True),
        R("batch", "v1", "cronjobs", "CronJob", short_names=["cj"], categories=["all"], status=True,
          generation=True),
        R("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short_names=["pdb"], status=True,
          generation=True),
        R("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        R("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        R("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        R("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
        R("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False,
          short_names=["crd", "crds"], status=True, generation=True),
    ]


class Registry(object):
    def __init__(self):
        self._types = []
        for rt in builtin_types():
            self.add(rt)

    def add(self, rt):
        self._types.append(rt)

    def remove_crd(self, crd_name):
        self._types = [t for t in self._types if t.crd != crd_name]

    def types(self):
        return list(self._types)

    def by_path(self, group, version, plural):
        for t in self._types:
            if t.group == group and t.version == version and t.plural == plural:
                return t
        return None

    def by_kind(self, api_version, kind):
        for t in self._types:
            if t.api_version == api_version and t.kind == kind:
                return t
        return None

    def versions_of(self, group, plural):
        return [t for t in self._types if t.group == group and t.plural == plural]

    def groups(self):
        """[(group, [versions])] in registration order, versions as registered (preferred first)."""
        out = []
        for t in self._types:
            if t.group == "":
                continue
            for g, versions in out:
                if g == t.group:
                    if t.version not in versions:
                        versions.append(t.version)
                    break
            else:
                out.append((t.group, [t.version]))
        return [(g, sorted(vs, key=version_priority)) for g, vs in out]

    # -- discovery documents ----------------------------------------------------------------------------------
    def api_group(self, group, versions):
        gvs = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in versions]
        return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}

    def api_group_list(self):
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self.api_group(g, vs) for g, vs in self.groups()]}

    def resource_list(self, group, version):
        types = [t for t in self._types if t.group == group and t.version == version]
        if not types:
            return None
        resources = []
        for t in types:
            resources.extend(t.discovery())
        gv = "%s/%s" % (group, version) if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
