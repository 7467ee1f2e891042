"""The object store and every write path of the emulated API server.

All state lives here and every public method holds `self.lock`, so the HTTP handlers (on the emulator's event loop)
and the test-side helpers (other threads) never see a half-done write. A write goes through the stages of the real
server: decode (types, unknown fields) -> merge/patch -> strategy (status reset, metadata, generation) -> defaulting
-> validation -> managed fields -> storage (resourceVersion) -> controllers.
"""
import base64
import copy
import datetime
import hashlib
import json
import random
import string
import threading
import uuid

from . import crd as crdmod
from . import defaults
from . import errors as E
from . import fieldpath as fp
from . import patch as patchmod
from . import quantity
from . import selectors
from . import ssa
from . import validation
from .controllers import Controllers
from .registry import Registry
from .schema import BuiltinSchemas

SCALE_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
STATUS_PREFIX = (("f", "status"),)
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Options(object):
    """Query options of one request."""

    def __init__(self, dry_run=False, field_manager=None, field_validation="Warn", force=False,
                 propagation_policy=None):
        self.dry_run = dry_run
        self.field_manager = field_manager
        self.field_validation = field_validation
        self.force = force
        self.propagation_policy = propagation_policy


class Result(object):
    def __init__(self, code, body, warnings=None):
        self.code = code
        self.body = body
        self.warnings = warnings or []


def _meta(obj):
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


def _without_bookkeeping(obj):
    """The object as field ownership sees it: no managedFields / resourceVersion."""
    out = copy.copy(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    meta.pop("resourceVersion", None)
    out["metadata"] = meta
    return out


def _content(obj):
    """What counts as a change: everything but resourceVersion."""
    out = copy.copy(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("resourceVersion", None)
    out["metadata"] = meta
    return out


def _spec_part(obj, rt):
    """What a generation counts: all but metadata (and status, when it has its own subresource)."""
    skip = ("metadata", "apiVersion", "kind", "status") if rt.status else ("metadata", "apiVersion", "kind")
    return dict((k, v) for k, v in obj.items() if k not in skip)


def get_path(obj, dotted):
    cur = obj
    for p in dotted.strip(".").split("."):
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def set_path(obj, dotted, value):
    parts = dotted.strip(".").split(".")
    cur = obj
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


def selector_string(selector):
    """metav1.LabelSelector as the string form Scale.status.selector carries."""
    if not isinstance(selector, dict):
        return ""
    parts = ["%s=%s" % (k, v) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        op = req.get("operator")
        if op == "Exists":
            parts.append(req["key"])
        elif op == "DoesNotExist":
            parts.append("!" + req["key"])
        else:
            parts.append("%s %s (%s)" % (req["key"], op.lower(), ",".join(sorted(req.get("values") or []))))
    return ",".join(sorted(parts))


class Store(object):
    def __init__(self, simulate_controllers=True, simulate_pods=False):
        self.lock = threading.RLock()
        self.registry = Registry()
        self.builtin = BuiltinSchemas()
        self.validator = validation.SchemaValidator()
        self.objects = {}  # (group, plural, namespace, name) -> stored object
        self.custom = {}  # CRD name -> crd.CustomKind
        self.rv = 0
        self.pod_logs = {}
        self.job_outcomes = {}
        self.controller_errors = []  # objects a simulated controller failed to create (the server refused them)
        self.events = []  # (rv, type, (group, plural, ns, name), object) for watches
        self.watch_cond = threading.Condition(self.lock)
        self._ips = set()
        self._node_ports = set()
        self._ip_counter = 10
        self.controllers = Controllers(self, enabled=simulate_controllers, pods=simulate_pods)
        for ns in INITIAL_NAMESPACES:
            self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.seed({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default",
                                                                       "labels": {"component": "apiserver",
                                                                                  "provider": "kubernetes"}},
                   "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443,
                                                                 "targetPort": 6443}]}}, manager="kube-apiserver")

    # -- helpers --------------------------------------------------------------------------------------------------
    def _key(self, rt, ns, name):
        return (rt.group, rt.plural, ns or "" if rt.namespaced else "", name)

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def node(self, rt):
        if rt.custom:
            return self.custom[rt.crd].versions[rt.version].root
        return self.builtin.root(rt.api_version, rt.kind)

    def out(self, rt, obj, with_type=True):
        o = copy.deepcopy(obj)
        if with_type:
            o["apiVersion"] = rt.api_version
            o["kind"] = rt.kind
        else:
            o.pop("apiVersion", None)
            o.pop("kind", None)
        return o

    def _namespace_exists(self, ns):
        return ("", "namespaces", "", ns) in self.objects

    def _check_namespace(self, rt, ns):
        if rt.namespaced and not self._namespace_exists(ns):
            raise E.not_found("namespaces", "", ns)

    def _manager(self, opts, user_agent):
        if opts.field_manager:
            return opts.field_manager
        return (user_agent or "unknown").split("/")[0].strip() or "unknown"

    def _record(self, type_, key, obj):
        self.events.append((self.rv, type_, key, copy.deepcopy(obj)))
        if len(self.events) > 20000:
            del self.events[:10000]
        self.watch_cond.notify_all()

    # -- decoding -------------------------------------------------------------------------------------------------
    def _check_body(self, rt, body, ns, name=None, apply=False):
        if not isinstance(body, dict):
            raise E.bad_request("Object 'Kind' is missing in '%s'" % json.dumps(body)[:200])
        if apply and (not body.get("kind") or not body.get("apiVersion")):
            missing = "Kind" if not body.get("kind") else "apiVersion"
            raise E.bad_request("Object '%s' is missing in '%s'" % (missing, json.dumps(body)[:200]))
        av = body.get("apiVersion")
        if av and av != rt.api_version:
            raise E.bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                                % (av, rt.api_version))
        kind = body.get("kind")
        if kind and kind != rt.kind:
            raise E.bad_request("the kind in the data (%s) does not match the expected kind (%s)" % (kind, rt.kind))
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise E.bad_request("%s in version \"%s\" cannot be handled as a %s: json: cannot unmarshal %s into Go "
                                "struct field %s.metadata of type v1.ObjectMeta"
                                % (rt.kind, rt.version, rt.kind, type(meta).__name__, rt.kind))
        meta = meta or {}
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise E.bad_request("the namespace of the provided object does not match the namespace sent on the "
                                "request")
        if name is not None and meta.get("name") and meta["name"] != name:
            raise E.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                % (meta["name"], name))

    def _decode(self, rt, body, opts, warnings):
        """Non-apply bodies: wrong types fail decoding (built-ins, 400); unknown fields per fieldValidation."""
        node = self.node(rt)
        if not rt.custom:
            err = fp.go_decode_error(body, node)
            if err:
                raise E.bad_request("%s in version \"%s\" cannot be handled as a %s: json: %s"
                                    % (rt.kind, rt.version, rt.kind, err))
        unknown = []
        crdmod.prune_unknown(body, node, "", unknown)
        if unknown:
            if opts.field_validation == "Strict":
                raise E.bad_request("%s in version \"%s\" cannot be handled as a %s: strict decoding error: %s"
                                    % (rt.kind, rt.version, rt.kind,
                                       ", ".join('unknown field "%s"' % u for u in unknown)))
            if opts.field_validation != "Ignore":
                warnings.extend('unknown field "%s"' % u for u in unknown)

    def _typed_patch_check(self, rt, config, ns, name):
        errs = fp.check_type(config, self.node(rt), allow_unknown=False, check_keys=True)
        if errs:
            where = "%s/%s" % (ns, name) if rt.namespaced else "/" + name
            text = errs[0] if len(errs) == 1 else "errors:\n  " + "\n  ".join(errs)
            raise E.internal("failed to create typed patch object (%s; %s, Kind=%s): %s"
                             % (where, rt.api_version, rt.kind, text))

    # -- the write pipeline ---------------------------------------------------------------------------------------
    def _defaults(self, rt, obj):
        """Decode-time defaulting (SetDefaults_*, CRD schema defaults, canonical quantities). The fields it sets are
        owned by the writer of an update, and by nobody after an apply, as on the real server."""
        if rt.custom:
            raw = self.custom[rt.crd].versions[rt.version].raw
            crdmod.drop_nulls(obj, raw)
            crdmod.apply_defaults(obj, raw)
            return
        defaults.go_roundtrip(obj, self.node(rt))
        defaults.apply_defaults(obj)
        if rt.kind == "Secret":
            string_data = obj.pop("stringData", None)
            if isinstance(string_data, dict):
                data = obj.setdefault("data", {})
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
            err = validation.secret_decode_error(obj)
            if err:
                raise E.bad_request("Secret in version \"v1\" cannot be handled as a Secret: %s" % err)
        try:
            defaults.canonicalize_quantities(obj, self.node(rt))
        except quantity.QuantityError as e:
            raise E.bad_request("%s in version \"%s\" cannot be handled as a %s: %s"
                                % (rt.kind, rt.version, rt.kind, e))

    def _strategy(self, rt, obj, old, creating):
        """What strategies, allocators and admission do after field ownership is recorded (nobody owns it)."""
        kind = rt.kind
        meta = _meta(obj)
        if creating and rt.status and not rt.custom:
            obj["status"] = defaults.initial_status(obj)
        if kind == "Job" and creating:
            defaults.job_selector(obj, meta["uid"])
        elif kind == "Service":
            self._service_allocation(obj, old, creating)
        elif kind == "PersistentVolumeClaim" and creating:
            finalizers = meta.setdefault("finalizers", [])
            if "kubernetes.io/pvc-protection" not in finalizers:
                finalizers.append("kubernetes.io/pvc-protection")
        elif kind == "Namespace":
            spec = obj.setdefault("spec", {})
            if creating:
                finalizers = spec.setdefault("finalizers", [])
                if "kubernetes" not in finalizers:
                    finalizers.append("kubernetes")
            elif "finalizers" in (old.get("spec") or {}):
                spec["finalizers"] = copy.deepcopy(old["spec"]["finalizers"])
            else:
                spec.pop("finalizers", None)
        elif kind == "Pod" and creating:
            defaults.pod_admission(obj)

    def _validate(self, rt, obj, old, creating):
        """Everything the real server checks before storing. Raises ApiError (422, or 400 for decode errors)."""
        errs = validation.validate_meta(obj, rt, creating)
        if rt.custom:
            version = self.custom[rt.crd].versions[rt.version]
            crdmod.validate_value(obj, version.raw, "", errs, version.rules, root=True)
        else:
            type_errors, required, unknown = self.validator.errors(obj)
            if unknown:
                raise E.bad_request("%s in version \"%s\" cannot be handled as a %s: strict decoding error: %s"
                                    % (rt.kind, rt.version, rt.kind,
                                       ", ".join('unknown field "%s"' % u for u in unknown)))
            if type_errors:
                raise E.bad_request("%s in version \"%s\" cannot be handled as a %s: %s: %s"
                                    % (rt.kind, rt.version, rt.kind, type_errors[0][0], type_errors[0][1]))
            errs.extend(E.required(f) for f in required)
            rule = validation.KIND_RULES.get(rt.kind)
            if rule:
                rule(obj, errs)
            if rt.kind == "CustomResourceDefinition":
                errs.extend(crdmod.validate_crd(obj))
                if not errs:
                    crdmod.CustomKind(obj, self.builtin)  # compiles the CEL rules: unsupported ones fail loudly
        if old is not None:
            errs.extend(validation.validate_update(rt, old, obj))
        if errs:
            raise E.invalid_error(rt.kind, rt.group, _meta(obj).get("name", ""), errs)

    def _service_allocation(self, obj, old, creating):
        spec = obj.setdefault("spec", {})
        ospec = (old or {}).get("spec") or {}
        if spec.get("type") == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
            return
        if not spec.get("clusterIP") and ospec.get("clusterIP") and ospec.get("type") != "ExternalName":
            spec["clusterIP"] = ospec["clusterIP"]
            spec["clusterIPs"] = copy.deepcopy(ospec.get("clusterIPs") or [ospec["clusterIP"]])
        ip = spec.get("clusterIP")
        if not ip:
            ip = self._allocate_ip()
            spec["clusterIP"] = ip
        elif ip != "None" and ip != ospec.get("clusterIP") and ip in self._ips:
            raise E.invalid_error("Service", "", _meta(obj).get("name", ""), [E.invalid(
                "spec.clusterIPs", [ip], "failed to allocate IP %s: provided IP is already allocated" % ip)])
        if ip != "None" and not ip.startswith("10.9") and ip != ospec.get("clusterIP"):
            raise E.invalid_error("Service", "", _meta(obj).get("name", ""), [E.invalid(
                "spec.clusterIPs", [ip], "failed to allocate IP %s: the provided IP (%s) is not in the valid range. "
                "The range of valid IPs is 10.96.0.0/12" % (ip, ip))])
        spec.setdefault("clusterIPs", [ip])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            old_ports = dict(((p.get("port"), p.get("protocol")), p.get("nodePort")) for p in ospec.get("ports") or [])
            for p in spec.get("ports") or []:
                if not p.get("nodePort"):
                    p["nodePort"] = old_ports.get((p.get("port"), p.get("protocol"))) or self._allocate_port()
                elif p["nodePort"] in self._node_ports and p["nodePort"] not in old_ports.values():
                    raise E.invalid_error("Service", "", _meta(obj).get("name", ""), [E.invalid(
                        "spec.ports[0].nodePort", p["nodePort"], "provided port is already allocated")])

    def _allocate_ip(self):
        while True:
            self._ip_counter += 1
            ip = "10.96.%d.%d" % (self._ip_counter // 250, self._ip_counter % 250 + 1)
            if ip not in self._ips:
                return ip

    def _allocate_port(self):
        for port in range(30000, 32768):
            if port not in self._node_ports:
                return port
        raise E.internal("no node ports left")

    def _reserve(self, obj):
        if obj.get("kind") == "Service":
            spec = obj.get("spec") or {}
            if spec.get("clusterIP") and spec["clusterIP"] != "None":
                self._ips.add(spec["clusterIP"])
            for p in spec.get("ports") or []:
                if p.get("nodePort"):
                    self._node_ports.add(p["nodePort"])

    def _release(self, obj):
        if obj.get("kind") == "Service":
            spec = obj.get("spec") or {}
            self._ips.discard(spec.get("clusterIP"))
            for p in spec.get("ports") or []:
                self._node_ports.discard(p.get("nodePort"))

    def _managers(self, obj):
        return ssa.decode_managed_fields(_meta(obj).get("managedFields"))

    def _store(self, rt, key, obj, type_):
        old = self.objects.get(key)
        if old is not None:
            self._release(old)
        _meta(obj)["resourceVersion"] = self.next_rv()
        self._order_meta(obj)
        self.objects[key] = obj
        self._reserve(obj)
        self._record(type_, key, obj)

    def _create(self, rt, ns, obj, opts, manager_key, managers=None, warnings=None):
        """Strategy + storage of a new object. `managers`: ownership computed by apply; else an Update entry."""
        meta = _meta(obj)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choice(_GENERATE_ALPHABET) for unused in range(5))
            meta["name"] = meta["generateName"] + suffix
        for k in ("uid", "creationTimestamp", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "selfLink", "generation"):
            meta.pop(k, None)
        body_managers = ssa.decode_managed_fields(meta.pop("managedFields", None))
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        if rt.generation:
            meta["generation"] = 1
        if rt.status:
            obj.pop("status", None)
        name = meta.get("name")
        self._check_namespace(rt, ns)
        self._defaults(rt, obj)
        if managers is None:
            managers = body_managers
            if manager_key is not None:
                managers = ssa.update({}, _without_bookkeeping(obj), managers, manager_key, self.node(rt),
                                      self._ignored(rt, ""), rt.api_version, rt.custom, now())
        self._strategy(rt, obj, None, creating=True)
        self._validate(rt, obj, None, creating=True)
        key = self._key(rt, ns, meta["name"])
        if key in self.objects:
            raise E.already_exists(rt.plural, rt.group, name)
        if managers:
            meta["managedFields"] = ssa.encode_managed_fields(managers)
        self._order_meta(obj)
        if opts.dry_run:
            return Result(201, self.out(rt, obj), warnings)
        self._store(rt, key, obj, "ADDED")
        result = Result(201, self.out(rt, obj), warnings)
        self.controllers.after_write(rt, key, None, obj)
        return result

    def _order_meta(self, obj):
        """Field order of the real server's JSON (cosmetic: clients compare dicts, people read dumps)."""
        meta = obj["metadata"]
        order = ["name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
                 "finalizers", "managedFields"]
        ordered = dict([(k, meta[k]) for k in order if k in meta] + [(k, v) for k, v in meta.items() if k not in order])
        head = [(k, obj[k]) for k in ("apiVersion", "kind") if k in obj]
        rest = [(k, v) for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")]
        obj.clear()
        obj.update(head)
        obj["metadata"] = ordered
        obj.update(rest)

    def _update(self, rt, key, old, new, opts, manager_key, subresource="", managers=None, warnings=None,
                apply_key=None):
        """Strategy + storage of a changed object (PUT, patches, apply, subresources)."""
        meta = _meta(new)
        ometa = old["metadata"]
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        for k in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "generation"):
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        if subresource == "status":
            # Status writes change nothing but status (ResetObjectMetaForStatus + the status strategy).
            status = new.get("status")
            new.clear()
            new.update(copy.deepcopy(old))
            new.pop("status", None)
            if status is not None:
                new["status"] = status
            meta = new["metadata"]
        elif rt.status and subresource == "":
            new.pop("status", None)
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
        body_managed = meta.pop("managedFields", None)
        meta.pop("resourceVersion", None)
        self._defaults(rt, new)
        if managers is None:
            old_managers = ssa.decode_managed_fields(body_managed) if body_managed is not None else \
                self._managers(old)
            if manager_key is not None and (old_managers or body_managed is not None or ometa.get("managedFields")):
                managers = ssa.update(_without_bookkeeping(old), _without_bookkeeping(new), old_managers,
                                      manager_key, self.node(rt), self._ignored(rt, subresource), rt.api_version,
                                      rt.custom, now())
            else:
                managers = old_managers
        self._strategy(rt, new, old, creating=False)
        if rt.generation and _spec_part(new, rt) != _spec_part(old, rt):
            meta["generation"] = ometa.get("generation", 0) + 1
        changed = _content(_without_bookkeeping(new)) != _content(_without_bookkeeping(old))
        if changed:
            self._validate(rt, new, old, creating=False)  # an unchanged object was valid when it was stored
        if apply_key is not None and apply_key in managers:
            previous = self._managers(old).get(apply_key)
            managers[apply_key]["time"] = now() if (changed or previous is None) else previous["time"]
        if managers:
            meta["managedFields"] = ssa.encode_managed_fields(managers)
        self._order_meta(new)
        if _content(new) == _content(old):
            return Result(200, self.out(rt, old), warnings)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer is gone: the object is deleted now.
            if not opts.dry_run:
                self._remove(rt, key)
            return Result(200, self.out(rt, new), warnings)
        if opts.dry_run:
            meta["resourceVersion"] = ometa.get("resourceVersion")
            return Result(200, self.out(rt, new), warnings)
        self._store(rt, key, new, "MODIFIED")
        result = Result(200, self.out(rt, new), warnings)
        self.controllers.after_write(rt, key, old, new)
        return result

    def _ignored(self, rt, subresource):
        """Paths a write cannot own: status on the main resource of kinds with a status subresource."""
        if subresource == "" and rt.status:
            return [STATUS_PREFIX]
        return []

    # -- public operations ---------------------------------------------------------------------------------------
    def get(self, rt, ns, name):
        with self.lock:
            obj = self.objects.get(self._key(rt, ns, name))
            if obj is None:
                raise E.not_found(rt.plural, rt.group, name)
            return self.out(rt, obj)

    def list(self, rt, ns, label_selector=None, field_selector=None, limit=None, continue_token=None):
        with self.lock:
            lreqs = selectors.parse_label_selector(label_selector)
            freqs = selectors.parse_field_selector(field_selector, rt.kind)
            items = []
            for key in sorted(self.objects):
                g, plural, ons, unused = key
                if g != rt.group or plural != rt.plural or (ns and ons != ns):
                    continue
                obj = self.objects[key]
                if not selectors.label_match(lreqs, _meta(obj).get("labels")):
                    continue
                if not selectors.field_match(freqs, obj):
                    continue
                items.append((key, obj))
            start = 0
            if continue_token:
                try:
                    token = json.loads(base64.urlsafe_b64decode(continue_token.encode()).decode())
                    start = next((i for i, (k, unused) in enumerate(items) if list(k) > token["after"]), len(items))
                except (ValueError, KeyError, TypeError):
                    raise E.bad_request("continue key is not valid: illegal base64 data at input byte 0")
            page = items[start:]
            meta = {"resourceVersion": str(self.rv)}
            if limit and int(limit) > 0 and len(page) > int(limit):
                page = page[:int(limit)]
                token = {"after": list(page[-1][0]), "rv": self.rv}
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
                meta["remainingItemCount"] = len(items) - start - len(page)
            return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                    "items": [self.out(rt, o, with_type=rt.custom) for unused, o in page]}

    def create(self, rt, ns, body, opts, user_agent=None):
        with self.lock:
            warnings = []
            self._check_body(rt, body, ns)
            self._check_namespace(rt, ns)
            if (body.get("metadata") or {}).get("resourceVersion"):
                raise E.internal("resourceVersion should not be set on objects to be created")
            body = copy.deepcopy(body)
            self._decode(rt, body, opts, warnings)
            if rt.custom:
                body["apiVersion"] = rt.api_version
            key = (self._manager(opts, user_agent), "Update", "")
            return self._create(rt, ns, body, opts, key, warnings=warnings)

    def _existing(self, rt, ns, name):
        key = self._key(rt, ns, name)
        obj = self.objects.get(key)
        if obj is None:
            raise E.not_found(rt.plural, rt.group, name)
        return key, obj

    def _preconditions(self, rt, old, body, require_rv=False):
        meta = (body or {}).get("metadata") or {}
        rv = meta.get("resourceVersion")
        name = old["metadata"]["name"]
        if rv and rv != old["metadata"].get("resourceVersion"):
            raise E.stale(rt.plural, rt.group, name)
        if require_rv and not rv and (rt.custom or rt.kind == "CustomResourceDefinition"):
            raise E.invalid_error(rt.kind, rt.group, name, [E.FieldError(
                "Invalid", "metadata.resourceVersion", E.Raw("0x0"), "must be specified for an update")])
        uid = meta.get("uid")
        if uid and uid != old["metadata"].get("uid"):
            raise E.conflict(rt.plural, rt.group, name, "Precondition failed: UID in precondition: %s, UID in "
                                                        "object meta: %s" % (uid, old["metadata"].get("uid")))

    def update(self, rt, ns, name, body, opts, user_agent=None, subresource=""):
        with self.lock:
            warnings = []
            if subresource == "scale":
                return self._scale_write(rt, ns, name, opts, user_agent, body=body)
            self._check_body(rt, body, ns, name)
            key, old = self._existing(rt, ns, name)
            body = copy.deepcopy(body)
            self._decode(rt, body, opts, warnings)
            self._preconditions(rt, old, body, require_rv=True)
            manager = (self._manager(opts, user_agent), "Update", subresource)
            return self._update(rt, key, old, body, opts, manager, subresource, warnings=warnings)

    def patch(self, rt, ns, name, content_type, body, opts, user_agent=None, subresource=""):
        with self.lock:
            if content_type == "application/apply-patch+yaml":
                return self._apply(rt, ns, name, body, opts, subresource)
            if opts.force:
                raise E.options_invalid("PatchOptions", [E.forbidden("force", "may not be specified for "
                                                                              "non-apply patch")])
            if subresource == "scale":
                return self._scale_write(rt, ns, name, opts, user_agent, patch=(content_type, body))
            key, old = self._existing(rt, ns, name)
            current = self.out(rt, old)
            patched = self._patched(rt, current, content_type, body, self.node(rt))
            warnings = []
            self._check_body(rt, patched, ns, name)
            self._decode(rt, patched, opts, warnings)
            self._preconditions(rt, old, patched)
            manager = (self._manager(opts, user_agent), "Update", subresource)
            return self._update(rt, key, old, patched, opts, manager, subresource, warnings=warnings)

    def _patched(self, rt, current, content_type, body, node):
        try:
            if content_type == "application/merge-patch+json":
                if not isinstance(body, dict):
                    raise E.bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}"
                                        % type(body).__name__)
                return patchmod.merge_patch(current, body)
            if content_type == "application/strategic-merge-patch+json":
                if rt.custom:
                    raise E.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                     "accepted media types include: application/json-patch+json, "
                                     "application/merge-patch+json, application/apply-patch+yaml")
                if not isinstance(body, dict):
                    raise E.bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}"
                                        % type(body).__name__)
                return patchmod.strategic_merge_patch(current, body, node)
            if content_type == "application/json-patch+json":
                return patchmod.json_patch(current, body)
        except patchmod.PatchError as e:
            raise E.ApiError(422, "Invalid", str(e))
        raise E.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                         "media types include: application/json-patch+json, application/merge-patch+json, "
                         "application/apply-patch+yaml, application/strategic-merge-patch+json")

    def _apply(self, rt, ns, name, config, opts, subresource):
        if not opts.field_manager:
            raise E.options_invalid("PatchOptions", [E.required("fieldManager", "is required for apply patch")])
        if len(opts.field_manager) > 128:
            raise E.options_invalid("PatchOptions", [E.too_long("fieldManager", 128)])
        if subresource == "scale":
            return self._scale_write(rt, ns, name, opts, None, apply=config)
        self._check_body(rt, config, ns, name, apply=True)
        meta = config.get("metadata") or {}
        if meta.get("managedFields") is not None:
            raise E.bad_request("metadata.managedFields must be nil")
        self._typed_patch_check(rt, config, ns, name)
        key = self._key(rt, ns, name)
        old = self.objects.get(key)
        rv = meta.get("resourceVersion")
        if old is None:
            if subresource:
                raise E.not_found(rt.plural, rt.group, name)
            self._check_namespace(rt, ns)
            if rv:
                raise E.conflict(rt.plural, rt.group, name, "the object has been modified; please apply your "
                                                            "changes to the latest version and try again")
        else:
            self._preconditions(rt, old, config)
        config = copy.deepcopy(config)
        config["apiVersion"] = rt.api_version
        if subresource == "status":
            effective = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {"name": name}}
            if "status" in config:
                effective["status"] = config["status"]
            ignored_only = STATUS_PREFIX
        else:
            effective = config
            if rt.status:
                effective = dict(config)
                effective.pop("status", None)
            ignored_only = None
        apply_key = (opts.field_manager, "Apply", subresource)
        node = self.node(rt)
        live = _without_bookkeeping(old) if old is not None else {}
        old_managers = self._managers(old) if old is not None else {}
        ignored = self._ignored(rt, subresource)
        if ignored_only:
            ignored = _everything_but(live, effective, ignored_only)
        merged, managers = ssa.apply(live, effective, old_managers, apply_key, node, opts.force, ignored,
                                     rt.api_version, rt.custom, now())
        if old is None:
            merged.setdefault("metadata", {})["name"] = name
            if apply_key in managers:  # an apply that sets no field leaves no entry
                managers[apply_key]["time"] = now()
            return self._create(rt, ns, merged, opts, None, managers=managers)
        return self._update(rt, key, old, merged, opts, None, subresource, managers=managers, apply_key=apply_key)

    # -- scale ----------------------------------------------------------------------------------------------------
    def _scale_of(self, rt, obj):
        sc = rt.scale
        meta = obj["metadata"]
        selector = ""
        if sc.get("selector"):
            selector = get_path(obj, sc["selector"]) or ""
        elif rt.kind == "StatefulSet":
            selector = selector_string((obj.get("spec") or {}).get("selector"))
        out = {"kind": "Scale", "apiVersion": "autoscaling/v1",
               "metadata": dict((k, meta[k]) for k in SCALE_META if k in meta),
               "spec": {}, "status": {"replicas": get_path(obj, sc["status"]) or 0}}
        replicas = get_path(obj, sc["spec"])
        if replicas is not None:
            out["spec"]["replicas"] = replicas
        if selector:
            out["status"]["selector"] = selector
        return out

    def get_scale(self, rt, ns, name):
        with self.lock:
            unused, obj = self._existing(rt, ns, name)
            return self._scale_of(rt, obj)

    def _scale_write(self, rt, ns, name, opts, user_agent, body=None, patch=None, apply=None):
        key, old = self._existing(rt, ns, name)
        current = self._scale_of(rt, old)
        if body is not None:
            scale = body
        elif patch is not None:
            scale = self._patched(rt, current, patch[0], patch[1], self.builtin.root("autoscaling/v1", "Scale"))
        else:
            scale = apply
        if not isinstance(scale, dict):
            raise E.bad_request("Object 'Kind' is missing")
        smeta = scale.get("metadata") or {}
        if smeta.get("name") and smeta["name"] != name:
            raise E.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                % (smeta["name"], name))
        if smeta.get("resourceVersion") and smeta["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise E.stale(rt.plural, rt.group, name)
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise E.bad_request("Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal into "
                                "Go struct field ScaleSpec.spec.replicas of type int32")
        if replicas < 0:
            raise E.invalid_error("Scale", "autoscaling", name, [E.invalid("spec.replicas", replicas,
                                                                           "must be greater than or equal to 0")])
        path = tuple(("f", p) for p in rt.scale["spec"].strip(".").split("."))
        new = copy.deepcopy(old)
        set_path(new, rt.scale["spec"], replicas)
        if apply is not None:
            config = {}
            set_path(config, rt.scale["spec"], replicas)
            apply_key = (opts.field_manager, "Apply", "scale")
            live = _without_bookkeeping(old)
            ignored = _everything_but(live, config, path)
            merged, managers = ssa.apply(live, config, self._managers(old), apply_key, self.node(rt), opts.force,
                                         ignored, rt.api_version, rt.custom, now())
            result = self._update(rt, key, old, merged, opts, None, "scale", managers=managers, apply_key=apply_key)
        else:
            manager = (self._manager(opts, user_agent), "Update", "scale")
            result = self._update(rt, key, old, new, opts, manager, "scale")
        stored = self.objects.get(key) if not opts.dry_run else result.body
        return Result(200, self._scale_of(rt, stored if stored is not None else result.body), result.warnings)

    # -- delete ---------------------------------------------------------------------------------------------------
    def delete(self, rt, ns, name, opts, body=None):
        with self.lock:
            key, old = self._existing(rt, ns, name)
            body = body if isinstance(body, dict) else {}
            policy = opts.propagation_policy or body.get("propagationPolicy")
            if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
                raise E.options_invalid("DeleteOptions", [E.not_supported("propagationPolicy", policy,
                                                                          ["Foreground", "Background", "Orphan"])])
            pre = body.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise E.conflict(rt.plural, rt.group, name, "Precondition failed: UID in precondition: %s, UID in "
                                                            "object meta: %s" % (pre["uid"], old["metadata"]["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise E.conflict(rt.plural, rt.group, name, "Precondition failed: ResourceVersion in precondition: "
                                                            "%s, ResourceVersion in object meta: %s"
                                 % (pre["resourceVersion"], old["metadata"]["resourceVersion"]))
            finalizers = old["metadata"].get("finalizers") or []
            if rt.kind == "Namespace":
                finalizers = []  # the namespace controller empties namespaces at once here
            if finalizers:
                new = copy.deepcopy(old)
                if not new["metadata"].get("deletionTimestamp"):
                    new["metadata"]["deletionTimestamp"] = now()
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    if policy == "Orphan":
                        # the garbage collector orphans the dependents, then removes this finalizer
                        new["metadata"]["finalizers"] = finalizers + ["orphan"]
                    if opts.dry_run:
                        return Result(200, self.out(rt, new))
                    self._store(rt, key, new, "MODIFIED")
                    self.controllers.after_write(rt, key, old, new)
                return Result(200, self.out(rt, self.objects.get(key, new)))
            gone = copy.deepcopy(old)
            if not opts.dry_run:
                self._remove(rt, key, orphan=policy == "Orphan")
            if rt.kind == "Namespace":
                gone["metadata"]["deletionTimestamp"] = now()
                gone["status"] = {"phase": "Terminating"}
                return Result(200, self.out(rt, gone))
            if rt.custom or rt.kind == "Pod":
                return Result(200, self.out(rt, gone))
            return Result(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                "details": {"name": name, "group": rt.group, "kind": rt.plural,
                                            "uid": old["metadata"]["uid"]}})

    def delete_collection(self, rt, ns, opts, label_selector=None, field_selector=None):
        with self.lock:
            listed = self.list(rt, ns, label_selector, field_selector)
            for item in listed["items"]:
                meta = item["metadata"]
                self.delete(rt, meta.get("namespace"), meta["name"], opts)
            return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": str(self.rv)},
                    "items": listed["items"]}

    def _remove(self, rt, key, orphan=False):
        obj = self.objects.pop(key, None)
        if obj is None:
            return
        self._release(obj)
        self.rv += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record("DELETED", key, gone)
        if rt.kind == "Namespace":
            ns = key[3]
            for k in [k for k in self.objects if k[2] == ns and k[0:2] != ("", "namespaces")]:
                t = self._type_for_key(k)
                self._remove(t, k)
        if rt.kind == "CustomResourceDefinition":
            self._unregister(obj)
        self.controllers.after_delete(rt, key, obj, orphan=orphan)

    def _type_for_key(self, key):
        group, plural = key[0], key[1]
        types = self.registry.versions_of(group, plural)
        return types[0]

    # -- CRDs -----------------------------------------------------------------------------------------------------
    def register(self, crd_obj):
        """(Re)serve the resources of a stored CRD."""
        kind = crdmod.CustomKind(crd_obj, self.builtin)
        self.registry.remove_crd(kind.name)
        self.custom[kind.name] = kind
        for rt in kind.resource_types():
            self.registry.add(rt)
        # Stored objects move to the (possibly new) storage version.
        for key, obj in self.objects.items():
            if key[0] == kind.group and key[1] == kind.plural:
                obj["apiVersion"] = "%s/%s" % (kind.group, kind.storage_version)

    def _unregister(self, crd_obj):
        name = crd_obj["metadata"]["name"]
        kind = self.custom.pop(name, None)
        if kind is None:
            return
        for key in [k for k in self.objects if k[0] == kind.group and k[1] == kind.plural]:
            gone = self.objects.pop(key)
            self.rv += 1
            self._record("DELETED", key, gone)
        self.registry.remove_crd(name)

    # -- direct access (tests) -----------------------------------------------------------------------------------
    def rt_for(self, api_version, kind):
        rt = self.registry.by_kind(api_version, kind)
        if rt is None:
            raise KeyError("no resource serves %s %s" % (api_version, kind))
        return rt

    def seed(self, obj, manager=None):
        """Store an object as a create (or replace) would, without a request: defaults, validation, metadata."""
        with self.lock:
            rt = self.rt_for(obj.get("apiVersion"), obj.get("kind"))
            obj = copy.deepcopy(obj)
            meta = _meta(obj)
            ns = meta.get("namespace") if rt.namespaced else None
            if rt.namespaced and not ns:
                ns = "default"
            key = self._key(rt, ns, meta.get("name"))
            opts = Options(field_validation="Strict")
            mkey = (manager, "Update", "") if manager else None
            status = obj.get("status")
            self._decode(rt, obj, opts, [])
            if key in self.objects:
                result = self._update(rt, key, self.objects[key], obj, opts, mkey)
            else:
                result = self._create(rt, ns, obj, opts, mkey)
            if status is not None and rt.status:
                self.set_status(rt, ns, meta["name"], status, manager=manager)
                return self.out(rt, self.objects[key])
            return result.body

    def set_status(self, rt, ns, name, status, manager="kube-controller-manager", controller=False):
        """Replace .status the way a controller's status update does (bumps resourceVersion, owns the fields)."""
        with self.lock:
            key, old = self._existing(rt, ns, name)
            new = copy.deepcopy(old)
            new["status"] = copy.deepcopy(status)
            mkey = (manager, "Update", "status" if rt.status else "") if manager else None
            return self._update(rt, key, old, new, Options(), mkey, "status" if rt.status else "").body

    def write_internal(self, rt, key, new, manager, subresource=""):
        """A controller's write of a whole object (spec or status)."""
        old = self.objects.get(key)
        if old is None:
            return None
        return self._update(rt, key, old, new, Options(), (manager, "Update", subresource), subresource).body

    def create_internal(self, obj, manager):
        rt = self.rt_for(obj["apiVersion"], obj["kind"])
        ns = (obj.get("metadata") or {}).get("namespace")
        key = self._key(rt, ns, obj["metadata"]["name"])
        if key in self.objects:
            return None
        try:
            return self._create(rt, ns, copy.deepcopy(obj), Options(), (manager, "Update", "")).body
        except E.ApiError as e:
            self.controller_errors.append("%s %s/%s: %s" % (obj["kind"], ns, obj["metadata"]["name"], e.message))
            return None

    def remove_internal(self, rt, key):
        self._remove(rt, key)


def _everything_but(live, config, keep_prefix):
    """Ignored paths for a subresource write: all top-level fields except the one the subresource owns."""
    names = set(live) | set(config)
    out = [(("f", n),) for n in names if n != keep_prefix[0][1]]
    if len(keep_prefix) > 1:
        top = keep_prefix[0]
        inner = set((live.get(top[1]) or {})) | set((config.get(top[1]) or {}))
        out.extend((top, ("f", n)) for n in inner if n != keep_prefix[1][1])
    return out


def revision_hash(template):
    """A stable ControllerRevision-like hash of a pod template (10 characters, like the real ones)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    alphabet = string.digits + "bcdfghjklmnpqrstvwxz"
    n = int(digest[:16], 16)
    out = ""
    while len(out) < 10:
        out += alphabet[n % len(alphabet)]
        n //= len(alphabet)
    return out
