"""CustomResourceDefinitions: checking a CRD, serving its resources, and pruning/defaulting/validating custom objects
against the version's openAPIV3Schema the way the real server's apiextensions does."""
import copy
import datetime
import re

from . import cel
from . import errors as E
from .registry import ResourceType
from .schema import CustomSchemas, LIST, MAP, STRUCT
from .validation import dns_label, dns_subdomain

SCHEMA_FIELD = "spec.versions[%d].schema.openAPIV3Schema"


class Version(object):
    def __init__(self, crd_version, builtin):
        self.name = crd_version["name"]
        self.served = bool(crd_version.get("served"))
        self.storage = bool(crd_version.get("storage"))
        self.raw = ((crd_version.get("schema") or {}).get("openAPIV3Schema")) or {}
        self.schemas = CustomSchemas(self.raw, builtin)
        subs = crd_version.get("subresources") or {}
        self.status = "status" in subs
        scale = subs.get("scale")
        self.scale = None
        if isinstance(scale, dict):
            self.scale = {"spec": scale.get("specReplicasPath"), "status": scale.get("statusReplicasPath"),
                          "selector": scale.get("labelSelectorPath")}
        self.rules = {}  # id(schema node) -> [(compiled, rule dict)]
        _compile_rules(self.raw, self.rules)

    @property
    def root(self):
        return self.schemas.root()


def _compile_rules(schema, out):
    if not isinstance(schema, dict):
        return
    rules = schema.get("x-kubernetes-validations")
    if rules:
        compiled = []
        for r in rules:
            try:
                compiled.append((cel.compile_rule(r["rule"]), r))
            except cel.Unsupported as e:
                raise E.internal("emulator: CEL rule %r is not supported: %s" % (r.get("rule"), e))
        out[id(schema)] = compiled
    for child in (schema.get("properties") or {}).values():
        _compile_rules(child, out)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _compile_rules(schema[key], out)


class CustomKind(object):
    """Everything the store needs about one registered CRD."""

    def __init__(self, crd, builtin):
        spec = crd["spec"]
        self.name = crd["metadata"]["name"]
        self.group = spec["group"]
        self.names = spec["names"]
        self.plural = self.names["plural"]
        self.kind = self.names["kind"]
        self.namespaced = spec.get("scope") == "Namespaced"
        self.versions = dict((v["name"], Version(v, builtin)) for v in spec.get("versions") or [])
        self.storage_version = next(v.name for v in self.versions.values() if v.storage)

    def resource_types(self):
        out = []
        for v in self.versions.values():
            if not v.served:
                continue
            out.append(ResourceType(self.group, v.name, self.plural, self.kind, namespaced=self.namespaced,
                                    singular=self.names.get("singular"), short_names=self.names.get("shortNames") or (),
                                    categories=self.names.get("categories") or (), status=v.status, scale=v.scale,
                                    generation=True, crd=self.name, list_kind=self.names.get("listKind")))
        return out


# -- CRD checks ---------------------------------------------------------------------------------------------------
def validate_crd(obj):
    errs = []
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    group = spec.get("group") or ""
    names = spec.get("names") or {}
    plural = names.get("plural") or ""
    if not group:
        errs.append(E.required("spec.group"))
    elif "." not in group:
        errs.append(E.invalid("spec.group", group, "should be a domain with at least one dot"))
    else:
        errs.extend(E.invalid("spec.group", group, m) for m in dns_subdomain(group))
    if name != "%s.%s" % (plural, group):
        errs.append(E.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        errs.append(E.not_supported("spec.scope", spec.get("scope"), ["Cluster", "Namespaced"]))
    if not plural:
        errs.append(E.required("spec.names.plural"))
    else:
        errs.extend(E.invalid("spec.names.plural", plural, m) for m in dns_label(plural))
    singular = names.get("singular")
    if singular:
        errs.extend(E.invalid("spec.names.singular", singular, m) for m in dns_label(singular))
    kind = names.get("kind")
    if not kind:
        errs.append(E.required("spec.names.kind"))
    elif not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", kind) or kind[0].islower():
        errs.append(E.invalid("spec.names.kind", kind, "may have mixed case, but should otherwise match: "
                                                       "[a-z]([-a-z0-9]*[a-z0-9])?"))
    versions = spec.get("versions") or []
    if not versions:
        errs.append(E.invalid("spec.versions", versions, "must have exactly one version marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errs.append(E.invalid("spec.versions", versions, "must have exactly one version marked as storage version"))
    seen = set()
    for i, v in enumerate(versions):
        vname = v.get("name") or ""
        errs.extend(E.invalid("spec.versions[%d].name" % i, vname, m) for m in dns_label(vname))
        if vname in seen:
            errs.append(E.FieldError("Duplicate", "spec.versions[%d].name" % i, vname))
        seen.add(vname)
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if not schema:
            errs.append(E.required(SCHEMA_FIELD % i, "schemas are required"))
            continue
        if schema.get("type") != "object":
            errs.append(E.required(SCHEMA_FIELD % i + ".type", "must not be empty at the root") if not
                        schema.get("type") else E.invalid(SCHEMA_FIELD % i + ".type", schema.get("type"),
                                                          "must be object at the root"))
        _structural(schema, SCHEMA_FIELD % i, errs, root=True)
        if not errs:
            _check_defaults(schema, SCHEMA_FIELD % i, errs)
    return errs


def _structural(schema, field, errs, root=False):
    if not isinstance(schema, dict):
        return
    typed = schema.get("type")
    ios = schema.get("x-kubernetes-int-or-string")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    if not typed and not ios and not preserve and not root:
        errs.append(E.required(field + ".type", "must not be empty for specified object fields"))
    if schema.get("properties") and schema.get("additionalProperties") not in (None, False):
        errs.append(E.forbidden(field + ".additionalProperties", "additionalProperties and properties are "
                                                                 "mutual exclusive"))
    lt = schema.get("x-kubernetes-list-type")
    if lt is not None and lt not in ("atomic", "set", "map"):
        errs.append(E.not_supported(field + ".x-kubernetes-list-type", lt, ["atomic", "set", "map"]))
    if lt == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        items = schema.get("items") or {}
        if not keys:
            errs.append(E.required(field + ".x-kubernetes-list-map-keys", "must not be empty if "
                                                                          "x-kubernetes-list-type is map"))
        if items.get("type") != "object":
            errs.append(E.invalid(field + ".items.type", items.get("type"), "must be object if parent array's "
                                                                            "x-kubernetes-list-type is map"))
        required = items.get("required") or []
        for k in keys:
            prop = (items.get("properties") or {}).get(k)
            if prop is None:
                errs.append(E.invalid(field + ".x-kubernetes-list-map-keys", keys,
                                      "entries must all be names of item properties"))
            elif k not in required and "default" not in prop:
                errs.append(E.required(field + ".items.properties[%s].default" % k,
                                       "this property is in x-kubernetes-list-map-keys, so it must have a default "
                                       "or be a required property"))
    if root:
        meta = (schema.get("properties") or {}).get("metadata")
        if isinstance(meta, dict) and set(meta.get("properties") or {}) - {"name", "generateName"}:
            errs.append(E.forbidden(field + ".properties[metadata]", "must not specify anything other than name "
                                                                     "and generateName, but metadata is implicitly "
                                                                     "specified"))
    for k, child in (schema.get("properties") or {}).items():
        if root and k == "metadata":
            continue
        _structural(child, "%s.properties[%s]" % (field, k), errs)
    if isinstance(schema.get("items"), dict):
        _structural(schema["items"], field + ".items", errs)
    if isinstance(schema.get("additionalProperties"), dict):
        _structural(schema["additionalProperties"], field + ".additionalProperties", errs)


def _check_defaults(schema, field, errs):
    """Every default must be valid against its own schema once defaulted and pruned, as the real server checks."""
    if not isinstance(schema, dict):
        return
    if "default" in schema:
        value = copy.deepcopy(schema["default"])
        apply_defaults(value, schema)
        sub = []
        validate_value(value, schema, field + ".default", sub)
        errs.extend(sub)
    for k, child in (schema.get("properties") or {}).items():
        _check_defaults(child, "%s.properties[%s]" % (field, k), errs)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _check_defaults(schema[key], "%s.%s" % (field, key), errs)


def crd_status(crd, now, old_status=None):
    """What the apiextensions controllers set once names are accepted: conditions, acceptedNames, storedVersions."""
    spec = crd["spec"]
    names = dict((k, v) for k, v in spec["names"].items())
    stored = list((old_status or {}).get("storedVersions") or [])
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    if storage not in stored:
        stored.append(storage)
    previous = dict((c["type"], c) for c in (old_status or {}).get("conditions") or [])

    def cond(type_, reason, message):
        c = {"type": type_, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message}
        old = previous.get(type_)
        if old and old.get("status") == "True":
            c["lastTransitionTime"] = old.get("lastTransitionTime", now)
        return c

    return {"conditions": [cond("NamesAccepted", "NoConflicts", "no conflicts found"),
                           cond("Established", "InitialNamesAccepted", "the initial names have been accepted")],
            "acceptedNames": names, "storedVersions": stored}


# -- custom objects -----------------------------------------------------------------------------------------------
def prune_unknown(value, node, path, unknown):
    """Drop fields the schema does not declare (structural pruning); their paths are appended to `unknown`."""
    if node is None or value is None:
        return
    if isinstance(value, dict) and node.kind == STRUCT:
        for k in list(value):
            child = node.field(k)
            p = "%s.%s" % (path, k) if path else k
            if child is None:
                unknown.append(p)
                del value[k]
            else:
                prune_unknown(value[k], child, p, unknown)
    elif isinstance(value, dict) and node.kind == MAP:
        elem = node.field("")
        for k in value:
            prune_unknown(value[k], elem, "%s[%s]" % (path, k), unknown)
    elif isinstance(value, list) and node.kind == LIST:
        elem = node.elem()
        for i, item in enumerate(value):
            prune_unknown(item, elem, "%s[%d]" % (path, i), unknown)


def drop_nulls(value, schema):
    """Nulls of fields that are not nullable are pruned before defaulting, as the real server does."""
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
        for k in list(value):
            s = props.get(k, extra)
            if s is None:
                continue
            if value[k] is None and not s.get("nullable"):
                del value[k]
            else:
                drop_nulls(value[k], s)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            drop_nulls(item, schema["items"])


def apply_defaults(value, schema):
    """Schema defaults, top-down: a defaulted object gets its own properties' defaults too."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for k, s in props.items():
            if not isinstance(s, dict) or "default" not in s:
                continue
            if k not in value or (value[k] is None and not s.get("nullable")):
                value[k] = copy.deepcopy(s["default"])
        for k, v in value.items():
            if k in props:
                apply_defaults(v, props[k])
            elif isinstance(schema.get("additionalProperties"), dict):
                apply_defaults(v, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


def _type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _type_ok(v, t):
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return True


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _format_ok(value, fmt):
    if fmt == "date-time":
        if not _DATE_TIME.match(value):
            return False
        try:
            datetime.datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00").replace("t", "T"))
        except ValueError:
            return False
    return True


def validate_value(value, schema, path, errs, rules=None, root=False):
    """OpenAPI v3 checks of one value (kube-openapi's messages) plus CEL rules from `rules`."""
    if not isinstance(schema, dict):
        return
    if value is None:
        if not schema.get("nullable") and (schema.get("type") or schema.get("x-kubernetes-int-or-string")):
            t = schema.get("type") or "integer,string"
            errs.append(E.invalid(path, "null", "%s in body must be of type %s: \"null\"" % (path, t)))
        return
    before = len(errs)
    t = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok(value, "integer")):
            errs.append(E.invalid(path, _type_name(value), "%s in body must be of type integer,string: \"%s\""
                                  % (path, _type_name(value))))
            return
    elif t and not _type_ok(value, t):
        errs.append(E.invalid(path, _type_name(value), "%s in body must be of type %s: \"%s\""
                              % (path, t, _type_name(value))))
        return
    if "enum" in schema and value not in schema["enum"]:
        errs.append(E.not_supported(path, value, schema["enum"]))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(E.too_long(path, schema["maxLength"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append(E.invalid(path, value, "%s in body should be at least %d chars long"
                                  % (path, schema["minLength"])))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(E.invalid(path, value, "%s in body should match '%s'" % (path, schema["pattern"])))
        if "format" in schema and not _format_ok(value, schema["format"]):
            errs.append(E.invalid(path, value, "%s in body must be of type %s: %s"
                                  % (path, schema["format"], E.go_repr(value))))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
                errs.append(E.invalid(path, value, "%s in body should be greater than %s" % (path, schema["minimum"])))
            elif value < schema["minimum"]:
                errs.append(E.invalid(path, value, "%s in body should be greater than or equal to %s"
                                      % (path, schema["minimum"])))
        if "maximum" in schema:
            if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
                errs.append(E.invalid(path, value, "%s in body should be less than %s" % (path, schema["maximum"])))
            elif value > schema["maximum"]:
                errs.append(E.invalid(path, value, "%s in body should be less than or equal to %s"
                                      % (path, schema["maximum"])))
        if schema.get("multipleOf") and value % schema["multipleOf"]:
            errs.append(E.invalid(path, value, "%s in body should be a multiple of %s" % (path, schema["multipleOf"])))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(E.invalid(path, len(value), "%s in body should have at least %d items"
                                  % (path, schema["minItems"])))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(E.FieldError("TooMany", path, len(value), "must have at most %d items" % schema["maxItems"]))
        _list_uniqueness(value, schema, path, errs)
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                validate_value(item, schema["items"], "%s[%d]" % (path, i), errs, rules)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for k in schema.get("required") or []:
            if k not in value:
                errs.append(E.required("%s.%s" % (path, k) if path else k))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errs.append(E.FieldError("TooMany", path, len(value), "must have at most %d items"
                                     % schema["maxProperties"]))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errs.append(E.invalid(path, len(value), "%s in body should have at least %d properties"
                                  % (path, schema["minProperties"])))
        for k, v in value.items():
            p = "%s.%s" % (path, k) if path else k
            if k in props:
                if root and k in ("metadata", "apiVersion", "kind"):
                    continue
                validate_value(v, props[k], p, errs, rules)
            elif isinstance(schema.get("additionalProperties"), dict):
                validate_value(v, schema["additionalProperties"], "%s[%s]" % (path, k), errs, rules)
    for key in ("allOf", "anyOf", "oneOf", "not"):
        if key in schema:
            _combinator(key, schema[key], value, path, errs)
    if len(errs) == before and rules and id(schema) in rules:
        _cel(value, rules[id(schema)], path, errs)


def _combinator(key, subs, value, path, errs):
    def passes(s):
        sub = []
        validate_value(value, s, path, sub)
        return not sub
    if key == "allOf":
        for s in subs:
            validate_value(value, s, path, errs)
    elif key == "anyOf":
        if not any(passes(s) for s in subs):
            errs.append(E.invalid(path, value, "%s in body must be of type %s" % (
                path, ",".join(s.get("type", "?") for s in subs if isinstance(s, dict)))))
    elif key == "oneOf":
        if sum(1 for s in subs if passes(s)) != 1:
            errs.append(E.invalid(path, value, "%s in body must match exactly one schema in oneOf" % path))
    elif key == "not":
        if passes(subs):
            errs.append(E.invalid(path, value, "%s in body must not match the schema in not" % path))


def _list_uniqueness(value, schema, path, errs):
    lt = schema.get("x-kubernetes-list-type")
    if lt == "set" or schema.get("uniqueItems"):
        seen = []
        for i, item in enumerate(value):
            if item in seen:
                errs.append(E.FieldError("Duplicate", "%s[%d]" % (path, i), item))
            seen.append(item)
    elif lt == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        props = ((schema.get("items") or {}).get("properties") or {})
        seen = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = dict((k, item.get(k, (props.get(k) or {}).get("default"))) for k in keys)
            if key in seen:
                errs.append(E.FieldError("Duplicate", "%s[%d]" % (path, i), key))
            seen.append(key)


def _cel(value, compiled, path, errs):
    for ast, rule in compiled:
        field = path
        if rule.get("fieldPath"):
            field = (path + rule["fieldPath"]) if path else rule["fieldPath"].lstrip(".")
        try:
            ok = cel.evaluate(ast, value)
        except cel.EvalError as e:
            errs.append(E.invalid(field, _type_name(value), "%s evaluating rule: %s" % (e, rule["rule"])))
            continue
        if ok is not True:
            message = rule.get("message") or "failed rule: %s" % rule["rule"]
            kind = {"FieldValueForbidden": "Forbidden", "FieldValueRequired": "Required",
                    "FieldValueDuplicate": "Duplicate"}.get(rule.get("reason"), "Invalid")
            if kind == "Invalid":
                errs.append(E.invalid(field, _type_name(value), message))
            else:
                errs.append(E.FieldError(kind, field, detail=message))
