"""Field paths and field sets as server-side apply tracks them, and their FieldsV1 encoding.

A path is a tuple of elements: ('f', name) a struct field or map key, ('k', ((key, value), ...)) an associative-list
item, ('v', json) a set item, ('i', n) a list index. A set of paths is a plain Python set; each path in it is a
member (the FieldsV1 "." marker says that a node with children is itself a member).
"""
import json

from .schema import ANY, LIST, MAP, SCALAR, STRUCT

MISSING = object()


def canon(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def pe_str(pe):
    t, v = pe
    if t == "f":
        return "f:" + v
    if t == "k":
        return "k:" + canon(dict(v))
    if t == "v":
        return "v:" + v
    return "i:%d" % v


def parse_pe(text):
    t, unused, rest = text.partition(":")
    if t == "f":
        return ("f", rest)
    if t == "k":
        return ("k", tuple(sorted(json.loads(rest).items())))
    if t == "v":
        return ("v", canon(json.loads(rest)))
    if t == "i":
        return ("i", int(rest))
    raise ValueError("bad path element %r" % text)


_ORDER = {"f": 0, "k": 1, "v": 2, "i": 3}


def _sort_key(text):
    return (_ORDER.get(text[:1], 9), text)


def encode(paths):
    """Set of paths -> FieldsV1 dict."""
    trie = {}
    for p in paths:
        node = trie
        for pe in p:
            node = node.setdefault(pe_str(pe), {})
        node["."] = None
    return _fix(trie)


def _fix(node):
    children = sorted((k for k in node if k != "."), key=_sort_key)
    out = {}
    if "." in node and children:
        out["."] = {}
    for k in children:
        out[k] = _fix(node[k])
    return out


def decode(fields):
    out = set()
    _decode(fields or {}, (), out)
    return out


def _decode(node, prefix, out):
    for k, v in node.items():
        if k == ".":
            out.add(prefix)
            continue
        p = prefix + (parse_pe(k),)
        if not v:
            out.add(p)
        else:
            _decode(v, p, out)


def path_str(path):
    """SMD's rendering, as in conflict messages: .spec.template.spec.containers[name="a"].image"""
    parts = []
    for t, v in path:
        if t == "f":
            parts.append("." + v)
        elif t == "k":
            parts.append("[" + ",".join("%s=%s" % (k, canon(x)) for k, x in v) + "]")
        elif t == "v":
            parts.append("[=" + v + "]")
        else:
            parts.append("[%d]" % v)
    return "".join(parts)


def has_prefix(path, prefix):
    return path[:len(prefix)] == prefix


def filter_out(paths, prefixes):
    return set(p for p in paths if not any(has_prefix(p, x) for x in prefixes))


class TypeError_(Exception):
    """A value does not fit the schema (SMD: 'failed to create typed ... object')."""


def item_pe(node, item, index):
    if node.list_type == "map":
        key = node.key_of(item)
        if key is None:
            missing = [k for k in node.keys if not isinstance(item, dict) or k not in item]
            raise TypeError_("element %d: associative list with keys has an element that omits key field %s"
                             % (index, canon(missing[0] if missing else node.keys[0])))
        return ("k", key)
    if node.list_type == "set":
        return ("v", canon(item))
    return ("i", index)


def check_type(value, node, path=(), errors=None, allow_unknown=False, check_keys=True):
    """SMD-style type check of a whole value; returns a list of 'path: message' strings.

    check_keys: associative-list items must carry their keys, without duplicates (apply configurations).
    """
    errors = [] if errors is None else errors
    if value is None or node is None:
        return errors
    k = node.kind
    if k == SCALAR:
        ok = _scalar_ok(value, node.scalar_types)
        if not ok:
            errors.append("%s: expected %s, got %s" % (path_str(path), _expected(node.scalar_types), _got(value)))
    elif k in (STRUCT, MAP) or (k == ANY and isinstance(value, dict)):
        if not isinstance(value, dict):
            if k != ANY:
                errors.append("%s: expected map, got %s" % (path_str(path), _got(value)))
            return errors
        for name, v in value.items():
            child = node.field(name)
            if child is None:
                if not allow_unknown:
                    errors.append("%s: field not declared in schema" % path_str(path + (("f", name),)))
                continue
            check_type(v, child, path + (("f", name),), errors, allow_unknown, check_keys)
    elif k == LIST:
        if not isinstance(value, list):
            errors.append("%s: expected list, got %s" % (path_str(path), _got(value)))
            return errors
        seen = set()
        elem = node.elem()
        for i, item in enumerate(value):
            try:
                pe = item_pe(node, item, i) if check_keys else ("i", i)
            except TypeError_ as e:
                errors.append("%s: %s" % (path_str(path), e))
                continue
            if check_keys and node.list_type in ("map", "set"):
                if pe in seen:
                    what = ",".join("%s=%s" % (a, canon(b)) for a, b in pe[1]) if pe[0] == "k" else pe[1]
                    errors.append("%s: duplicate entries for key [%s]" % (path_str(path), what))
                seen.add(pe)
            check_type(item, elem, path + (pe,), errors, allow_unknown, check_keys)
    return errors


def go_decode_error(value, node, struct="", names=()):
    """The first mismatch a Go JSON decode of a built-in object would report, in its words:
    `cannot unmarshal string into Go struct field StatefulSetSpec.spec.replicas of type int32` (None if none)."""
    if value is None or node is None:
        return None
    k = node.kind
    if k == SCALAR:
        fraction = isinstance(value, float) and not value.is_integer() and node.scalar_types == ("integer",)
        if _scalar_ok(value, node.scalar_types) and not fraction:
            return None
        return _go_error(value, node, struct, names)
    if k in (STRUCT, MAP):
        if not isinstance(value, dict):
            return _go_error(value, node, struct, names)
        inner = node.def_name.rsplit(".", 1)[-1] if k == STRUCT and node.def_name else struct
        for name, v in value.items():
            child = node.field(name)
            err = go_decode_error(v, child, inner, names + (name,)) if child is not None else None
            if err:
                return err
    elif k == LIST:
        if not isinstance(value, list):
            return _go_error(value, node, struct, names)
        elem = node.elem()
        for item in value:
            err = go_decode_error(item, elem, struct, names)
            if err:
                return err
    return None


def _go_type(node):
    raw = node.raw
    if node.kind == SCALAR:
        if node.quantity:
            return "resource.Quantity"
        if node.scalar_types == ("string", "integer"):
            return "intstr.IntOrString"
        t = node.scalar_types[0]
        if t == "integer":
            return raw.get("format") or "int64"
        return {"string": "string", "boolean": "bool", "number": "float64"}[t]
    if node.kind == STRUCT:
        return "v1." + (node.def_name or "").rsplit(".", 1)[-1]
    if node.kind == MAP:
        return "map[string]" + (_go_type(node.field("")) if node.field("") is not None else "interface {}")
    if node.kind == LIST:
        return "[]" + _go_type(node.elem())
    return "interface {}"


def _go_error(value, node, struct, names):
    if isinstance(value, bool):
        got = "bool"
    elif isinstance(value, (int, float)):
        got = "number" if not isinstance(value, float) or value.is_integer() else "number %s" % value
    elif isinstance(value, str):
        got = "string"
    elif isinstance(value, list):
        got = "array"
    else:
        got = "object"
    where = "%s.%s" % (struct, ".".join(names))
    return "cannot unmarshal %s into Go struct field %s of type %s" % (got, where, _go_type(node))


def _scalar_ok(value, types):
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return "integer" in types or "number" in types
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value == int(value))
    if isinstance(value, str):
        return "string" in types
    return False


def _expected(types):
    if "string" in types and "integer" in types:
        return "string or number"
    t = types[0]
    return {"integer": "numeric (int or float)", "number": "numeric (int or float)", "boolean": "boolean"}.get(t, t)


def _got(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "numeric"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def to_set(value, node, path=(), out=None):
    """The fields a value sets (SMD ToFieldSet): leaves, list items, and maps given empty or by undeclared key."""
    out = set() if out is None else out
    if node is None:
        out.add(path)
        return out
    k = node.kind
    if isinstance(value, dict) and k in (STRUCT, MAP, ANY):
        if node.atomic:
            out.add(path)
            return out
        for name, v in value.items():
            child = node.field(name)
            p = path + (("f", name),)
            to_set(v, child, p, out)
            if v is None or (isinstance(v, dict) and not v) or not node.declared(name):
                out.add(p)
        return out
    if isinstance(value, list) and k == LIST and not node.atomic:
        elem = node.elem()
        for i, item in enumerate(value):
            p = path + (item_pe(node, item, i),)
            if node.list_type == "map":
                to_set(item, elem, p, out)
            out.add(p)
        return out
    out.add(path)
    return out


class Comparison(object):
    def __init__(self):
        self.added, self.modified, self.removed = set(), set(), set()

    def changed(self):
        return self.added | self.modified


def compare(lhs, rhs, node, custom=False, path=(), out=None):
    """SMD Compare: which paths rhs adds, modifies or removes relative to lhs (MISSING = absent)."""
    out = Comparison() if out is None else out
    leaf = _compare_leaf_kind(lhs, rhs, node)
    if leaf:
        if lhs is MISSING and rhs is not MISSING:
            out.added.add(path)
        elif rhs is MISSING and lhs is not MISSING:
            out.removed.add(path)
        elif lhs != rhs or type(lhs) is not type(rhs) and not (_num(lhs) and _num(rhs)):
            out.modified.add(path)
        return out
    if isinstance(lhs if lhs is not MISSING else rhs, dict):
        lm = lhs if isinstance(lhs, dict) else {}
        rm = rhs if isinstance(rhs, dict) else {}
        for name in list(lm) + [x for x in rm if x not in lm]:
            child = node.field(name) if node is not None else None
            compare(lm.get(name, MISSING), rm.get(name, MISSING), child, custom, path + (("f", name),), out)
        # Built-in structs always exist in the Go object; only maps (and every object of a custom resource) are
        # reported as added or removed themselves, as the real server records them.
        if node is None or node.kind != STRUCT or custom:
            if lhs is MISSING and path:
                out.added.add(path)
            elif rhs is MISSING and path:
                out.removed.add(path)
        return out
    # associative list / set
    elem = node.elem()
    lidx = _index(node, lhs if isinstance(lhs, list) else [])
    ridx = _index(node, rhs if isinstance(rhs, list) else [])
    for pe in list(lidx) + [x for x in ridx if x not in lidx]:
        a, b = lidx.get(pe, MISSING), ridx.get(pe, MISSING)
        p = path + (pe,)
        if node.list_type == "map":
            compare(a, b, elem, custom, p, out)
        if a is MISSING:
            out.added.add(p)
        elif b is MISSING:
            out.removed.add(p)
    if lhs is MISSING and path:
        out.added.add(path)
    elif rhs is MISSING and path:
        out.removed.add(path)
    return out


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _compare_leaf_kind(lhs, rhs, node):
    """True when SMD compares this node as a leaf: scalars, atomics, and empty-or-absent on both sides."""
    if node is None:
        return True
    v = lhs if lhs is not MISSING else rhs
    if node.kind == SCALAR or node.atomic:
        return True
    if isinstance(v, dict) and node.kind in (STRUCT, MAP, ANY):
        return _empty(lhs) and _empty(rhs)
    if isinstance(v, list) and node.kind == LIST:
        return _empty(lhs) and _empty(rhs)
    return True


def _empty(v):
    return v is MISSING or v is None or (isinstance(v, (dict, list)) and not v)


def _index(node, items):
    out = {}
    for i, item in enumerate(items):
        try:
            pe = item_pe(node, item, i)
        except TypeError_:
            pe = ("i", i)
        out.setdefault(pe, item)
    return out


# -- paths inside objects ---------------------------------------------------------------------------------------
def locate(obj, path, node):
    """-> (container, key_or_index, value) of the path in obj, or None when absent."""
    container, key, cur = None, None, obj
    for pe in path:
        t, v = pe
        if t == "f":
            if not isinstance(cur, dict) or v not in cur:
                return None
            container, key, cur = cur, v, cur[v]
            node = node.field(v) if node is not None else None
        else:
            if not isinstance(cur, list):
                return None
            found = None
            for i, item in enumerate(cur):
                try:
                    if node is not None and item_pe(node, item, i) == pe:
                        found = i
                        break
                except TypeError_:
                    continue
                if node is None and t == "i" and i == v:
                    found = i
                    break
            if found is None:
                return None
            container, key, cur = cur, found, cur[found]
            node = node.elem() if node is not None else None
    return container, key, cur


def remove(obj, path, node):
    hit = locate(obj, path, node)
    if hit is None or hit[0] is None:
        return False
    container, key, unused = hit
    del container[key]
    return True
