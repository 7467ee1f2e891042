"""What the real server rejects: metadata rules, whole-object schema checks, kind rules and immutable fields.

Messages copy the real ones (field paths, "Invalid value", "Required value", "Forbidden"...), so a client that shows
the server's message shows the same text against the emulator.
"""
import base64
import binascii
import copy
import json
import os
import re
import threading

import jsonschema
from referencing import Registry, Resource

from . import errors as E
from . import quantity
from .schema import schema_dir

DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\." + DNS1123_LABEL + r")*"
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = r"(" + QUALIFIED_NAME + r")?"
CONFIG_KEY = r"[-._a-zA-Z0-9]+"
IANA_SVC_NAME = r"[-a-z0-9]+"

MSG_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
             "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '%s')"
             % DNS1123_LABEL)
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                 "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                 "is '%s')" % DNS1123_SUBDOMAIN)
MSG_DNS1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
               "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
               "validation is '%s')" % DNS1035_LABEL)
MSG_QUALIFIED = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                 "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                 "'%s')" % QUALIFIED_NAME)
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                   "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                   "regex used for validation is '%s')" % LABEL_VALUE)
MSG_CONFIG_KEY = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                  "'KEY_NAME',  or 'key-name', regex used for validation is '%s')" % CONFIG_KEY)


def _full(regex, value):
    return isinstance(value, str) and re.fullmatch(regex, value) is not None


def dns_label(value):
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _full(DNS1123_LABEL, value):
        out.append(MSG_LABEL)
    return out


def dns_subdomain(value):
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _full(DNS1123_SUBDOMAIN, value):
        out.append(MSG_SUBDOMAIN)
    return out


def dns1035_label(value):
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _full(DNS1035_LABEL, value):
        out.append(MSG_DNS1035)
    return out


def path_segment(value):
    if value in (".", ".."):
        return ["may not be '%s'" % value]
    for bad in ("/", "%"):
        if bad in value:
            return ["may not contain '%s'" % bad]
    return []


def qualified_name(value):
    """Label/annotation key: optional DNS subdomain prefix, '/', name part of at most 63 characters."""
    out = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            out.extend("prefix part " + m for m in dns_subdomain(prefix))
    else:
        return ["a qualified name " + MSG_QUALIFIED.replace("name part must", "must") +
                " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    if name and not _full(QUALIFIED_NAME, name):
        out.append(MSG_QUALIFIED)
    return out


def label_value(value):
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _full(LABEL_VALUE, value):
        out.append(MSG_LABEL_VALUE)
    return out


NAME_RULES = {
    "Namespace": dns_label,
    "Service": dns1035_label,
    "Role": path_segment,
    "RoleBinding": path_segment,
    "ClusterRole": path_segment,
    "ClusterRoleBinding": path_segment,
}


def validate_labels(labels, field, errs):
    if labels is None:
        return
    if not isinstance(labels, dict):
        return
    for k, v in labels.items():
        for m in qualified_name(k):
            errs.append(E.invalid(field, k, m))
        if isinstance(v, str):
            for m in label_value(v):
                errs.append(E.invalid("%s" % field, v, m))


def validate_meta(obj, rt, creating):
    """ObjectMeta rules every kind shares, plus the kind's name rule."""
    errs = []
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        if not (creating and meta.get("generateName")):
            errs.append(E.required("metadata.name", "name or generateName is required"))
    else:
        rule = NAME_RULES.get(rt.kind, dns_subdomain) if not rt.custom else dns_subdomain
        for m in rule(name):
            errs.append(E.invalid("metadata.name", name, m))
    if meta.get("generateName") and creating and not name:
        rule = NAME_RULES.get(rt.kind, dns_subdomain) if not rt.custom else dns_subdomain
        gen = meta["generateName"]
        trimmed = gen.rstrip("-") if rule is not path_segment else gen
        for m in rule(trimmed or "a"):
            errs.append(E.invalid("metadata.generateName", gen, m))
    validate_labels(meta.get("labels"), "metadata.labels", errs)
    annotations = meta.get("annotations") or {}
    total = 0
    for k, v in annotations.items():
        for m in qualified_name(k):
            errs.append(E.invalid("metadata.annotations", k, m))
        total += len(k) + len(v if isinstance(v, str) else "")
    if total > 256 * 1024:
        errs.append(E.too_long("metadata.annotations", 256 * 1024))
    for i, f in enumerate(meta.get("finalizers") or []):
        if not isinstance(f, str):
            continue
        msgs = qualified_name(f)
        if msgs:
            errs.extend(E.invalid("metadata.finalizers[%d]" % i, f, m) for m in msgs)
        elif "/" not in f and f not in ("kubernetes", "orphan", "foregroundDeletion"):
            errs.append(E.invalid("metadata.finalizers[%d]" % i, f,
                                  "name is neither a standard finalizer name nor is it fully qualified"))
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for k in ("apiVersion", "kind", "name", "uid"):
            if isinstance(ref, dict) and not ref.get(k):
                errs.append(E.invalid("metadata.ownerReferences[%d].%s" % (i, k), ref.get(k, ""),
                                      "%s must not be empty" % k))
    return errs


# -- whole-object schema (kubernetes_validate's Kubernetes 1.32 strict schemas, loaded once) ----------------------
class SchemaValidator(object):
    """Caches what kubernetes_validate.validate() reloads on every call: the definitions and one validator per kind."""

    def __init__(self):
        self._dir = schema_dir(strict=True)
        with open(os.path.join(self._dir, "_definitions.json")) as f:
            defs = json.load(f)
        self._registry = Resource.from_contents(defs) @ Registry()
        self._validators = {}
        self._lock = threading.Lock()

    def _validator(self, api_version, kind):
        key = (api_version, kind)
        with self._lock:
            if key not in self._validators:
                group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
                path = os.path.join(self._dir, "%s-%s.json" % (kind.lower(), group_version))
                with open(path) as f:
                    schema = json.load(f)
                registry = Resource.from_contents(schema) @ self._registry
                self._validators[key] = jsonschema.validators.Draft202012Validator(schema, registry=registry)
            return self._validators[key]

    def errors(self, obj):
        """-> (type errors [(field, message)], required [field], unknown [field]) of the whole object."""
        validator = self._validator(obj["apiVersion"], obj["kind"])
        type_errors, required, unknown = [], [], []
        for e in validator.iter_errors(obj):
            _classify(e, type_errors, required, unknown)
        return type_errors, required, unknown


def field_path(parts):
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += "[%d]" % p
        else:
            out += ("." if out else "") + p
    return out


def _classify(e, type_errors, required, unknown):
    path = list(e.absolute_path)
    if e.validator == "required":
        m = re.match(r"^'(.*)' is a required property$", e.message)
        required.append(field_path(path + [m.group(1) if m else "?"]))
    elif e.validator == "additionalProperties" and e.validator_value is False:
        for extra in re.findall(r"'([^']*)'", e.message.split("(")[-1]):
            unknown.append(field_path(path + [extra]))
    elif e.validator in ("oneOf", "anyOf") and e.context:
        # IntOrString / Quantity: report the simplest branch error.
        type_errors.append((field_path(path), e.message))
    else:
        type_errors.append((field_path(path), e.message))


# -- kind rules ----------------------------------------------------------------------------------------------------
def _selector_matches(selector, labels):
    if not isinstance(selector, dict):
        return False
    labels = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selector_matches(selector, labels):
    return _selector_matches(selector, labels)


def _empty_selector(selector):
    return not selector or (not selector.get("matchLabels") and not selector.get("matchExpressions"))


def validate_label_selector(selector, field, errs):
    if not isinstance(selector, dict):
        return
    validate_labels(selector.get("matchLabels"), field + ".matchLabels", errs)
    for i, req in enumerate(selector.get("matchExpressions") or []):
        f = "%s.matchExpressions[%d]" % (field, i)
        op = req.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errs.append(E.invalid(f + ".operator", op, "not a valid selector operator"))
        elif op in ("In", "NotIn") and not req.get("values"):
            errs.append(E.required(f + ".values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and req.get("values"):
            errs.append(E.forbidden(f + ".values", "may not be specified when `operator` is 'Exists' or "
                                                   "'DoesNotExist'"))


def _quantity(value):
    try:
        return quantity.parse(value)[0]
    except quantity.QuantityError:
        return None


def validate_container(c, field, volumes, errs, names, pod):
    name = c.get("name")
    if not name:
        errs.append(E.required(field + ".name"))
    else:
        for m in dns_label(name):
            errs.append(E.invalid(field + ".name", name, m))
        if name in names:
            errs.append(FieldDuplicate(field + ".name", name))
        names.add(name)
    if not c.get("image"):
        errs.append(E.required(field + ".image"))  # templates too (validateContainerCommon)
    policy = c.get("imagePullPolicy")
    if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
        errs.append(E.not_supported(field + ".imagePullPolicy", policy, ["Always", "IfNotPresent", "Never"]))
    port_names = set()
    for i, p in enumerate(c.get("ports") or []):
        pf = "%s.ports[%d]" % (field, i)
        cp = p.get("containerPort")
        if isinstance(cp, int) and not 1 <= cp <= 65535:
            errs.append(E.invalid(pf + ".containerPort", cp, "must be between 1 and 65535, inclusive"))
        if p.get("protocol") not in (None, "TCP", "UDP", "SCTP"):
            errs.append(E.not_supported(pf + ".protocol", p["protocol"], ["SCTP", "TCP", "UDP"]))
        pn = p.get("name")
        if pn:
            if len(pn) > 15 or not _full(IANA_SVC_NAME, pn) or not re.search("[a-z]", pn) or "--" in pn \
                    or pn.startswith("-") or pn.endswith("-"):
                errs.append(E.invalid(pf + ".name", pn, "must be no more than 15 characters" if len(pn) > 15 else
                                      "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"))
            if pn in port_names:
                errs.append(FieldDuplicate(pf + ".name", pn))
            port_names.add(pn)
    mount_paths = set()
    for i, m in enumerate(c.get("volumeMounts") or []):
        mf = "%s.volumeMounts[%d]" % (field, i)
        if not m.get("name"):
            errs.append(E.required(mf + ".name"))
        elif m["name"] not in volumes:
            errs.append(FieldNotFound(mf + ".name", m["name"]))
        if not m.get("mountPath"):
            errs.append(E.required(mf + ".mountPath"))
        elif m["mountPath"] in mount_paths:
            errs.append(E.invalid(mf + ".mountPath", m["mountPath"], "must be unique"))
        else:
            mount_paths.add(m["mountPath"])
    for i, env in enumerate(c.get("env") or []):
        ef = "%s.env[%d]" % (field, i)
        if not env.get("name"):
            errs.append(E.required(ef + ".name"))
        if env.get("value") and env.get("valueFrom"):
            errs.append(E.invalid(ef + ".valueFrom", "", "may not be specified when `value` is not empty"))
    res = c.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    for k, v in requests.items():
        lim = limits.get(k)
        if lim is not None and _quantity(v) is not None and _quantity(lim) is not None and \
                _quantity(v) > _quantity(lim):
            errs.append(E.invalid("%s.resources.requests" % field, v,
                                  "must be less than or equal to %s limit of %s" % (k, lim)))


def FieldDuplicate(field, value):
    return E.FieldError("Duplicate", field, value)


def FieldNotFound(field, value):
    return E.FieldError("NotFound", field, value)


def validate_pod_spec(spec, field, errs, pod=False, restart_policies=None, extra_volumes=()):
    if not isinstance(spec, dict):
        return
    volumes = set(extra_volumes)
    for i, v in enumerate(spec.get("volumes") or []):
        vf = "%s.volumes[%d]" % (field, i)
        vname = v.get("name")
        if not vname:
            errs.append(E.required(vf + ".name"))
        else:
            for m in dns_label(vname):
                errs.append(E.invalid(vf + ".name", vname, m))
            if vname in volumes:
                errs.append(FieldDuplicate(vf + ".name", vname))
            volumes.add(vname)
        sources = [k for k in v if k != "name"]
        if len(sources) > 1:
            errs.append(E.forbidden(vf + "." + sources[1], "may not specify more than 1 volume type"))
    containers = spec.get("containers")
    if not containers:
        errs.append(E.required(field + ".containers"))
    names = set()
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, dict):
                validate_container(c, "%s.%s[%d]" % (field, key, i), volumes, errs, names, pod)
    rp = spec.get("restartPolicy")
    allowed = restart_policies or ["Always", "OnFailure", "Never"]
    if rp is not None and rp not in allowed:
        errs.append(E.not_supported(field + ".restartPolicy", rp, allowed))
    dp = spec.get("dnsPolicy")
    if dp is not None and dp not in ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"):
        errs.append(E.not_supported(field + ".dnsPolicy", dp, ["ClusterFirst", "ClusterFirstWithHostNet", "Default",
                                                               "None"]))
    validate_labels(spec.get("nodeSelector"), field + ".nodeSelector", errs)
    for i, t in enumerate(spec.get("tolerations") or []):
        tf = "%s.tolerations[%d]" % (field, i)
        op = t.get("operator", "Equal")
        if op not in ("Equal", "Exists"):
            errs.append(E.not_supported(tf + ".operator", op, ["Equal", "Exists"]))
        if op == "Exists" and t.get("value"):
            errs.append(E.invalid(tf + ".operator", t.get("value"),
                                  "value must be empty when `operator` is 'Exists'"))
        eff = t.get("effect")
        if eff and eff not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append(E.not_supported(tf + ".effect", eff, ["NoExecute", "NoSchedule", "PreferNoSchedule"]))
        if t.get("tolerationSeconds") is not None and eff != "NoExecute":
            errs.append(E.invalid(tf + ".effect", eff or "",
                                  "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    tgps = spec.get("terminationGracePeriodSeconds")
    if isinstance(tgps, int) and tgps < 0:
        errs.append(E.invalid(field + ".terminationGracePeriodSeconds", tgps, "must be greater than or equal to 0"))


def validate_template(tmpl, field, errs, restart_policies=None, extra_volumes=()):
    if not isinstance(tmpl, dict):
        errs.append(E.required(field))
        return
    validate_labels((tmpl.get("metadata") or {}).get("labels"), field + ".metadata.labels", errs)
    validate_pod_spec(tmpl.get("spec"), field + ".spec", errs, restart_policies=restart_policies,
                      extra_volumes=extra_volumes)


def _pvc_spec(spec, field, errs):
    spec = spec or {}
    modes = spec.get("accessModes") or []
    if not modes and not spec.get("dataSourceRef"):
        errs.append(E.required(field + ".accessModes", "at least 1 access mode is required"))
    for i, m in enumerate(modes):
        if m not in ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"):
            errs.append(E.not_supported("%s.accessModes[%d]" % (field, i), m,
                                        ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]))
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        errs.append(E.required(field + ".resources[storage]"))
    elif _quantity(storage) is not None and _quantity(storage) <= 0:
        errs.append(E.invalid(field + ".resources.requests[storage]", storage, "must be greater than zero"))
    vm = spec.get("volumeMode")
    if vm is not None and vm not in ("Block", "Filesystem"):
        errs.append(E.not_supported(field + ".volumeMode", vm, ["Block", "Filesystem"]))


def statefulset(obj, errs):
    spec = obj.get("spec") or {}
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        errs.append(E.invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    pmp = spec.get("podManagementPolicy")
    if pmp not in (None, "OrderedReady", "Parallel"):
        errs.append(E.not_supported("spec.podManagementPolicy", pmp, ["OrderedReady", "Parallel"]))
    us = (spec.get("updateStrategy") or {}).get("type")
    if us not in (None, "RollingUpdate", "OnDelete"):
        errs.append(E.not_supported("spec.updateStrategy.type", us, ["OnDelete", "RollingUpdate"]))
    if us == "OnDelete" and (spec.get("updateStrategy") or {}).get("rollingUpdate") is not None:
        errs.append(E.invalid("spec.updateStrategy.rollingUpdate", spec["updateStrategy"]["rollingUpdate"],
                              "only allowed for updateStrategy 'RollingUpdate'"))
    selector = spec.get("selector")
    if _empty_selector(selector):
        errs.append(E.invalid("spec.selector", selector, "empty selector is invalid for statefulset"))
    else:
        validate_label_selector(selector, "spec.selector", errs)
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if not _selector_matches(selector, labels):
            errs.append(E.invalid("spec.template.metadata.labels", labels,
                                  "`selector` does not match template `labels`"))
    claim_names = [((t.get("metadata") or {}).get("name")) for t in spec.get("volumeClaimTemplates") or []]
    validate_template(spec.get("template"), "spec.template", errs, restart_policies=["Always"],
                      extra_volumes=[n for n in claim_names if n])
    for i, t in enumerate(spec.get("volumeClaimTemplates") or []):
        f = "spec.volumeClaimTemplates[%d]" % i
        n = (t.get("metadata") or {}).get("name")
        if not n:
            errs.append(E.required(f + ".metadata.name", "name or generateName is required"))
        _pvc_spec(t.get("spec"), f + ".spec", errs)
    policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
    for k in ("whenDeleted", "whenScaled"):
        if policy.get(k) not in (None, "Retain", "Delete"):
            errs.append(E.not_supported("spec.persistentVolumeClaimRetentionPolicy." + k, policy[k],
                                        ["Retain", "Delete"]))


def job(obj, errs):
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name") or ""
    if len(name) > 63:
        errs.append(E.invalid("metadata.name", name, "must be no more than 63 characters"))
    for k in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        v = spec.get(k)
        if isinstance(v, int) and v < 0:
            errs.append(E.invalid("spec." + k, v, "must be greater than or equal to 0"))
    cm = spec.get("completionMode")
    if cm not in (None, "NonIndexed", "Indexed"):
        errs.append(E.not_supported("spec.completionMode", cm, ["NonIndexed", "Indexed"]))
    _job_template(spec, "spec", errs)


def _job_template(spec, field, errs):
    tmpl = spec.get("template")
    validate_template(tmpl, field + ".template", errs, restart_policies=["OnFailure", "Never"])
    selector = spec.get("selector")
    if selector:
        labels = ((tmpl or {}).get("metadata") or {}).get("labels")
        if not _selector_matches(selector, labels):
            errs.append(E.invalid(field + ".template.metadata.labels", labels,
                                  "`selector` does not match template `labels`"))


_CRON_ITEM = r"(\*|\?|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?"
CRON_FIELD = re.compile(r"^%s(,%s)*$" % (_CRON_ITEM, _CRON_ITEM))


def valid_schedule(schedule):
    if not isinstance(schedule, str) or not schedule.strip():
        return False
    if schedule.startswith("@"):
        return schedule in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly") or \
            schedule.startswith("@every ")
    fields = schedule.split()
    if fields and fields[0].startswith(("TZ=", "CRON_TZ=")):
        return False  # the real server rejects time zones in the schedule (spec.timeZone instead)
    return len(fields) == 5 and all(CRON_FIELD.match(f) for f in fields)


def cronjob(obj, errs):
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name") or ""
    if len(name) > 52:
        errs.append(E.invalid("metadata.name", name, "must be no more than 52 characters"))
    sched = spec.get("schedule")
    if not sched:
        errs.append(E.required("spec.schedule"))
    elif not valid_schedule(sched):
        errs.append(E.invalid("spec.schedule", sched, "unparseable schedule"))
    cp = spec.get("concurrencyPolicy")
    if cp not in (None, "Allow", "Forbid", "Replace"):
        errs.append(E.not_supported("spec.concurrencyPolicy", cp, ["Allow", "Forbid", "Replace"]))
    jt = (spec.get("jobTemplate") or {}).get("spec") or {}
    _job_template(jt, "spec.jobTemplate.spec", errs)


def service(obj, errs):
    spec = obj.get("spec") or {}
    t = spec.get("type")
    if t not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        errs.append(E.not_supported("spec.type", t, ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]))
    headless = spec.get("clusterIP") == "None"
    ports = spec.get("ports") or []
    if not ports and t != "ExternalName" and not headless:
        errs.append(E.required("spec.ports"))
    names, keys = set(), set()
    for i, p in enumerate(ports):
        f = "spec.ports[%d]" % i
        name = p.get("name")
        if len(ports) > 1 and not name:
            errs.append(E.required(f + ".name"))
        if name:
            for m in dns_label(name):
                errs.append(E.invalid(f + ".name", name, m))
            if name in names:
                errs.append(FieldDuplicate(f + ".name", name))
            names.add(name)
        port = p.get("port")
        if isinstance(port, int) and not 1 <= port <= 65535:
            errs.append(E.invalid(f + ".port", port, "must be between 1 and 65535, inclusive"))
        proto = p.get("protocol")
        if proto not in ("TCP", "UDP", "SCTP"):
            errs.append(E.not_supported(f + ".protocol", proto, ["SCTP", "TCP", "UDP"]))
        if (port, proto) in keys:
            errs.append(FieldDuplicate(f, {"port": port, "protocol": proto}))
        keys.add((port, proto))
        tp = p.get("targetPort")
        if isinstance(tp, int) and not 1 <= tp <= 65535:
            errs.append(E.invalid(f + ".targetPort", tp, "must be between 1 and 65535, inclusive"))
        if isinstance(tp, str) and not (_full(IANA_SVC_NAME, tp) and len(tp) <= 15 and re.search("[a-z]", tp)):
            errs.append(E.invalid(f + ".targetPort", tp, "must contain only alpha-numeric characters (a-z, 0-9), "
                                                         "and hyphens (-)"))
        if p.get("nodePort") is not None and t not in ("NodePort", "LoadBalancer"):
            errs.append(E.forbidden(f + ".nodePort", "may not be used when `type` is '%s'" % t))
        np = p.get("nodePort")
        if isinstance(np, int) and t in ("NodePort", "LoadBalancer") and not 30000 <= np <= 32767:
            errs.append(E.invalid(f + ".nodePort", np, "provided port is not in the valid range. The range of "
                                                       "valid ports is 30000-32767"))
    if spec.get("sessionAffinity") not in ("None", "ClientIP"):
        errs.append(E.not_supported("spec.sessionAffinity", spec.get("sessionAffinity"), ["ClientIP", "None"]))
    if t == "ExternalName" and not spec.get("externalName"):
        errs.append(E.required("spec.externalName"))
    validate_labels(spec.get("selector"), "spec.selector", errs)


def _config_keys(obj, errs, fields):
    seen = {}
    for field in fields:
        for k in (obj.get(field) or {}):
            if len(k) > 253 or not _full(CONFIG_KEY, k):
                errs.append(E.invalid("%s[%s]" % (field, k), k, MSG_CONFIG_KEY))
            if k in seen:
                errs.append(FieldDuplicate("%s[%s]" % (field, k), k))
            seen[k] = field


def configmap(obj, errs):
    _config_keys(obj, errs, ("data", "binaryData"))


def secret(obj, errs):
    _config_keys(obj, errs, ("data",))
    t = obj.get("type")
    data = obj.get("data") or {}
    if t == "kubernetes.io/dockerconfigjson" and ".dockerconfigjson" not in data:
        errs.append(E.required("data[.dockerconfigjson]"))
    if t == "kubernetes.io/tls":
        for k in ("tls.crt", "tls.key"):
            if k not in data:
                errs.append(E.required("data[%s]" % k))
    if t == "kubernetes.io/service-account-token" and not \
            ((obj.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/service-account.name"):
        errs.append(E.required("metadata.annotations[kubernetes.io/service-account.name]"))


def secret_decode_error(obj):
    """Secret data must be base64 (the real server fails decoding with 400 before validation)."""
    for k, v in (obj.get("data") or {}).items():
        if not isinstance(v, str):
            continue
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            return "illegal base64 data at input byte %d" % _bad_b64_index(v)
    return None


def _bad_b64_index(v):
    for i, ch in enumerate(v):
        if not (ch.isalnum() or ch in "+/="):
            return i
    return len(v)


def pvc(obj, errs):
    _pvc_spec(obj.get("spec"), "spec", errs)


def pdb(obj, errs):
    spec = obj.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errs.append(E.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    for k in ("minAvailable", "maxUnavailable"):
        v = spec.get(k)
        if isinstance(v, int) and v < 0:
            errs.append(E.invalid("spec." + k, v, "must be greater than or equal to 0"))
        if isinstance(v, str) and not re.fullmatch(r"[0-9]+%", v):
            errs.append(E.invalid("spec." + k, v, "a valid percent string must be a numeric string followed by an "
                                                  "ending '%' (e.g. '1%',  or '93%', regex used for validation is "
                                                  "'[0-9]+%')"))
    validate_label_selector(spec.get("selector"), "spec.selector", errs)


def _rules(obj, errs, cluster):
    for i, r in enumerate(obj.get("rules") or []):
        f = "rules[%d]" % i
        if not r.get("verbs"):
            errs.append(E.required(f + ".verbs", "verbs must contain at least one value"))
        if r.get("nonResourceURLs"):
            if not cluster:
                errs.append(E.invalid(f + ".nonResourceURLs", r["nonResourceURLs"],
                                      "namespaced rules cannot apply to non-resource URLs"))
            if r.get("resources") or r.get("apiGroups"):
                errs.append(E.invalid(f + ".nonResourceURLs", r["nonResourceURLs"],
                                      "rules cannot apply to both regular resources and non-resource URLs"))
            continue
        if not r.get("apiGroups"):
            errs.append(E.required(f + ".apiGroups", "resource rules must supply at least one api group"))
        if not r.get("resources"):
            errs.append(E.required(f + ".resources", "resource rules must supply at least one resource"))


def role(obj, errs):
    _rules(obj, errs, cluster=False)


def clusterrole(obj, errs):
    _rules(obj, errs, cluster=True)


def _binding(obj, errs, cluster):
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") != "rbac.authorization.k8s.io":
        errs.append(E.not_supported("roleRef.apiGroup", ref.get("apiGroup", ""), ["rbac.authorization.k8s.io"]))
    allowed = ["ClusterRole"] if cluster else ["Role", "ClusterRole"]
    if ref.get("kind") not in allowed:
        errs.append(E.not_supported("roleRef.kind", ref.get("kind", ""), allowed))
    if not ref.get("name"):
        errs.append(E.required("roleRef.name"))
    for i, s in enumerate(obj.get("subjects") or []):
        f = "subjects[%d]" % i
        if not s.get("name"):
            errs.append(E.required(f + ".name"))
        kind = s.get("kind")
        if kind == "ServiceAccount":
            if s.get("apiGroup"):
                errs.append(E.not_supported(f + ".apiGroup", s["apiGroup"], [""]))
            if cluster and not s.get("namespace"):
                errs.append(E.required(f + ".namespace"))
        elif kind in ("User", "Group"):
            if s.get("apiGroup") != "rbac.authorization.k8s.io":
                errs.append(E.not_supported(f + ".apiGroup", s.get("apiGroup"), ["rbac.authorization.k8s.io"]))
        else:
            errs.append(E.not_supported(f + ".kind", kind, ["ServiceAccount", "User", "Group"]))


def rolebinding(obj, errs):
    _binding(obj, errs, cluster=False)


def clusterrolebinding(obj, errs):
    _binding(obj, errs, cluster=True)


def pod(obj, errs):
    validate_pod_spec(obj.get("spec"), "spec", errs, pod=True)


KIND_RULES = {
    "StatefulSet": statefulset, "Job": job, "CronJob": cronjob, "Service": service, "ConfigMap": configmap,
    "Secret": secret, "PersistentVolumeClaim": pvc, "PodDisruptionBudget": pdb, "Role": role,
    "ClusterRole": clusterrole, "RoleBinding": rolebinding, "ClusterRoleBinding": clusterrolebinding, "Pod": pod,
}


# -- updates: immutable fields ----------------------------------------------------------------------------------
def _without(d, keys):
    d = copy.deepcopy(d or {})
    for k in keys:
        d.pop(k, None)
    return d


STS_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
               "minReadySeconds")


def validate_update(rt, old, new):
    errs = []
    kind = rt.kind
    if kind == "StatefulSet":
        if _without(old.get("spec"), STS_MUTABLE) != _without(new.get("spec"), STS_MUTABLE):
            errs.append(E.forbidden("spec", "updates to statefulset spec for fields other than 'replicas', "
                                            "'ordinals', 'template', 'updateStrategy', "
                                            "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are "
                                            "forbidden"))
    elif kind == "Job":
        o, n = old.get("spec") or {}, new.get("spec") or {}
        for k in ("selector", "template", "completions", "completionMode", "manualSelector", "podFailurePolicy",
                  "backoffLimitPerIndex", "podReplacementPolicy"):
            if k == "template" and o.get("suspend") and n.get("suspend") is not False:
                continue
            if o.get(k) != n.get(k):
                errs.append(E.invalid("spec." + k, n.get(k), "field is immutable"))
    elif kind == "Service":
        o, n = old.get("spec") or {}, new.get("spec") or {}
        if o.get("clusterIP") and n.get("type") != "ExternalName" and o.get("type") != "ExternalName" \
                and n.get("clusterIP") != o.get("clusterIP"):
            errs.append(E.invalid("spec.clusterIP", n.get("clusterIP", ""), "field is immutable"))
    elif kind == "PersistentVolumeClaim":
        o, n = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
        bound = (old.get("status") or {}).get("phase") == "Bound"
        if not o.get("volumeName"):
            o["volumeName"] = n.get("volumeName")
        old_size = _quantity(((o.get("resources") or {}).get("requests") or {}).get("storage"))
        new_size = _quantity(((n.get("resources") or {}).get("requests") or {}).get("storage"))
        if bound:
            for spec in (o, n):
                ((spec.get("resources") or {}).get("requests") or {}).pop("storage", None)
            o.pop("volumeAttributesClassName", None)
            n.pop("volumeAttributesClassName", None)
        if o != n:
            errs.append(E.forbidden("spec", "spec is immutable after creation except resources.requests and "
                                            "volumeAttributesClassName for bound claims"))
        if old_size is not None and new_size is not None and new_size < old_size:
            errs.append(E.forbidden("spec.resources.requests.storage", "field can not be less than previous value"))
    elif kind in ("ConfigMap", "Secret"):
        if old.get("immutable"):
            if not new.get("immutable"):
                errs.append(E.forbidden("immutable", "field is immutable when `immutable` is set"))
            for k in ("data", "binaryData"):
                if (old.get(k) or {}) != (new.get(k) or {}):
                    errs.append(E.forbidden(k, "field is immutable when `immutable` is set"))
        if kind == "Secret" and old.get("type") != new.get("type"):
            errs.append(E.invalid("type", new.get("type"), "field is immutable"))
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        if old.get("roleRef") != new.get("roleRef"):
            errs.append(E.invalid("roleRef", new.get("roleRef"), "cannot change roleRef"))
    elif kind == "CustomResourceDefinition":
        o, n = old.get("spec") or {}, new.get("spec") or {}
        if o.get("scope") != n.get("scope"):
            errs.append(E.invalid("spec.scope", n.get("scope"), "field is immutable"))
        if o.get("group") != n.get("group"):
            errs.append(E.invalid("spec.group", n.get("group"), "field is immutable"))
        served = [v.get("name") for v in n.get("versions") or []]
        for i, v in enumerate((old.get("status") or {}).get("storedVersions") or []):
            if v not in served:
                errs.append(E.invalid("status.storedVersions[%d]" % i, v, "must appear in spec.versions"))
    elif kind == "Pod":
        o, n = old.get("spec") or {}, new.get("spec") or {}
        if _pod_mutable(o) != _pod_mutable(n):
            errs.append(E.forbidden("spec", "pod updates may not change fields other than `spec.containers[*]."
                                            "image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                                            "`spec.tolerations` (only additions to existing tolerations),"
                                            "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
                                            "was previously negative)"))
    return errs


def _pod_mutable(spec):
    spec = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            c.pop("image", None)
    for k in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        spec.pop(k, None)
    return spec
