"""Typed views of object schemas: what server-side apply, strategic merge patch, pruning and defaulting walk.

The real server reads list/map topology (x-kubernetes-list-type, -list-map-keys, -map-type, patch strategy) from its
OpenAPI. Built-in kinds: we read the same extensions from the Kubernetes 1.32 JSON schemas that kubernetes_validate
ships. Custom resources: from the CRD's openAPIV3Schema, with metadata typed as ObjectMeta as the real server does.
"""
import json
import os

import kubernetes_validate

K8S_VERSION = "1.32"
STRUCT, MAP, LIST, SCALAR, ANY = "struct", "map", "list", "scalar", "any"
QUANTITY_DEF = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META_DEF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Key fields with a server-side default: the real OpenAPI declares them, so SSA fills a missing key with it.
KEY_DEFAULTS = {"protocol": "TCP"}


def schema_dir(strict=True):
    base = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
    name = "v%s.0-local%s" % (K8S_VERSION, "-strict" if strict else "")
    return os.path.join(base, name)


def _non_null_type(raw):
    t = raw.get("type")
    if isinstance(t, list):
        t = [x for x in t if x != "null"]
        return t[0] if len(t) == 1 else (t or None)
    return t


class Node(object):
    """One schema node. kind: struct (named fields), map (string keys -> elem), list, scalar, any (untyped)."""

    __slots__ = ("kind", "raw", "resolver", "atomic", "list_type", "keys", "patch_strategy", "patch_key",
                 "scalar_types", "quantity", "preserve_unknown", "nullable", "_fields", "_elem", "_children",
                 "def_name", "int_or_string", "custom")

    def __init__(self, raw, resolver, def_name=None, custom=False):
        self.raw = raw
        self.resolver = resolver
        self.def_name = def_name
        self.custom = custom
        self._children = {}
        self._fields = None
        self._elem = None
        self.atomic = False
        self.list_type = None
        self.keys = ()
        self.patch_strategy = raw.get("x-kubernetes-patch-strategy", "")
        self.patch_key = raw.get("x-kubernetes-patch-merge-key")
        self.scalar_types = None
        self.quantity = def_name == QUANTITY_DEF
        self.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
        self.nullable = bool(raw.get("nullable"))
        self.int_or_string = bool(raw.get("x-kubernetes-int-or-string"))
        self._classify()

    def _classify(self):
        raw = self.raw
        t = _non_null_type(raw)
        if self.int_or_string or self.quantity or ("oneOf" in raw and not self.custom):
            # IntOrString / Quantity: a scalar that is a string or a number.
            self.kind = SCALAR
            self.scalar_types = ("string", "integer", "number") if self.quantity else ("string", "integer")
            return
        if "properties" in raw or (t == "object" and raw.get("additionalProperties") is False):
            self.kind = STRUCT
            self._fields = raw.get("properties") or {}
            self._elem = raw.get("additionalProperties") if isinstance(raw.get("additionalProperties"), dict) else None
            self.atomic = raw.get("x-kubernetes-map-type") == "atomic"
            return
        if isinstance(raw.get("additionalProperties"), dict):
            self.kind = MAP
            self._elem = raw["additionalProperties"]
            self.atomic = raw.get("x-kubernetes-map-type") == "atomic"
            return
        if t == "array" or "items" in raw:
            self.kind = LIST
            self._elem = raw.get("items") if isinstance(raw.get("items"), dict) else {}
            lt = raw.get("x-kubernetes-list-type")
            if lt is None and "merge" in self.patch_strategy.split(","):
                # kube-openapi's rule for lists that only carry a patch strategy.
                lt = "map" if self.patch_key else "set"
            self.list_type = lt or "atomic"
            if self.list_type == "map":
                self.keys = tuple(raw.get("x-kubernetes-list-map-keys") or ([self.patch_key] if self.patch_key else []))
            self.atomic = self.list_type == "atomic"
            return
        if t in ("string", "integer", "number", "boolean"):
            self.kind = SCALAR
            self.scalar_types = (t, "integer") if t == "number" else (t,)
            return
        if t == "object" and self.custom and not self.preserve_unknown:
            # `type: object` with nothing declared: everything under it is pruned.
            self.kind = STRUCT
            self._fields = {}
            return
        self.kind = ANY
        self.atomic = raw.get("x-kubernetes-map-type") == "atomic"

    # -- navigation ---------------------------------------------------------------------------------------------
    def declared(self, name):
        return self.kind == STRUCT and name in self._fields

    def field(self, name):
        """Schema of field/key `name`; None when the field is unknown here (would be pruned / rejected)."""
        if name in self._children:
            return self._children[name]
        child = None
        if self.kind == STRUCT:
            if name in self._fields:
                child = self.resolver.node(self._fields[name], self)
            elif self._elem is not None:
                child = self.resolver.node(self._elem, self)
            elif self.preserve_unknown:
                child = self.resolver.any_node
        elif self.kind == MAP:
            child = self.resolver.node(self._elem, self)
        elif self.kind == ANY:
            child = self.resolver.any_node
        self._children[name] = child
        return child

    def elem(self):
        if "[]" not in self._children:
            if self.kind == LIST:
                self._children["[]"] = self.resolver.node(self._elem, self)
            else:
                self._children["[]"] = self.resolver.any_node
        return self._children["[]"]

    def field_names(self):
        return list(self._fields) if self.kind == STRUCT else []

    def key_of(self, item):
        """Associative-list key of an item: tuple of (name, value) sorted by name; None if a key field is missing."""
        if not isinstance(item, dict):
            return None
        out = []
        for k in self.keys:
            if k in item and item[k] is not None:
                out.append((k, item[k]))
            elif k in KEY_DEFAULTS and not self.custom:
                out.append((k, KEY_DEFAULTS[k]))
            elif self.custom and isinstance(self.elem().raw.get("properties", {}).get(k), dict) \
                    and "default" in self.elem().raw["properties"][k]:
                out.append((k, self.elem().raw["properties"][k]["default"]))
            else:
                return None
        return tuple(sorted(out))

    def __repr__(self):
        return "<Node %s %s>" % (self.kind, self.def_name or "")


class BuiltinSchemas(object):
    """Nodes for built-in kinds, from kubernetes_validate's Kubernetes 1.32 definitions (loaded once)."""

    def __init__(self):
        with open(os.path.join(schema_dir(strict=True), "_definitions.json")) as f:
            self.defs = json.load(f)["$defs"]
        self._nodes = {}
        self.any_node = Node({}, self)
        self._by_gvk = {}
        for name, d in self.defs.items():
            for gvk in d.get("x-kubernetes-group-version-kind") or []:
                api_version = "%s/%s" % (gvk["group"], gvk["version"]) if gvk["group"] else gvk["version"]
                self._by_gvk.setdefault((api_version, gvk["kind"]), name)

    def _deref(self, raw):
        ref = raw.get("$ref")
        if not ref:
            return raw, None
        name = ref.rsplit("/", 1)[-1]
        merged = dict(self.defs[name])
        for k, v in raw.items():
            if k.startswith("x-kubernetes-"):
                merged[k] = v
        return merged, name

    def node(self, raw, parent=None):
        key = id(raw)
        hit = self._nodes.get(key)
        if hit is not None:
            return hit[1]
        resolved, name = self._deref(raw)
        n = Node(resolved, self, def_name=name)
        self._nodes[key] = (raw, n)  # keep raw alive so its id stays unique
        return n

    def def_node(self, name):
        return self.node({"$ref": "#/$defs/" + name})

    def root(self, api_version, kind):
        name = self._by_gvk.get((api_version, kind))
        if name is None:
            return None
        if ("root", name) not in self._nodes:
            self._nodes[("root", name)] = (None, self.node(self.defs[name]))
        return self._nodes[("root", name)][1]

    def object_meta(self):
        return self.def_node(OBJECT_META_DEF)


class CustomSchemas(object):
    """Nodes for one CRD version's openAPIV3Schema. metadata at the root is ObjectMeta, as for built-ins."""

    def __init__(self, openapi_schema, builtin):
        self.builtin = builtin
        self.any_node = Node({"x-kubernetes-preserve-unknown-fields": True}, self, custom=True)
        self._nodes = {}
        raw = dict(openapi_schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        props = dict(raw.get("properties") or {})
        props["apiVersion"] = {"type": "string"}
        props["kind"] = {"type": "string"}
        props["metadata"] = {"type": "object", "x-emulator-object-meta": True}
        raw["properties"] = props
        raw.setdefault("type", "object")
        self.raw = raw
        self.root_node = self.node(raw)

    def node(self, raw, parent=None):
        if raw.get("x-emulator-object-meta"):
            return self.builtin.object_meta()
        key = id(raw)
        hit = self._nodes.get(key)
        if hit is not None:
            return hit[1]
        if raw.get("x-kubernetes-embedded-resource"):
            # Embedded objects carry apiVersion, kind and metadata even when the schema does not list them.
            raw = dict(raw)
            props = dict(raw.get("properties") or {})
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props.setdefault("metadata", {"type": "object", "x-emulator-object-meta": True})
            raw["properties"] = props
        n = Node(raw, self, custom=True)
        self._nodes[key] = (raw, n)
        return n

    def root(self):
        return self.root_node
