"""JSON merge patch (RFC 7386), strategic merge patch (built-in kinds only) and JSON patch (RFC 6902)."""
import copy

from . import errors
from .schema import LIST


class PatchError(Exception):
    """A patch that cannot be applied; the server answers 422 (JSON patch) or 400 (malformed patch)."""


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


_DIRECTIVES = ("$patch", "$retainKeys", "$deleteFromPrimitiveList", "$setElementOrder")


def strategic_merge_patch(target, patch, node):
    """Maps merge; lists with patch strategy `merge` merge by their patch merge key (or as sets of scalars)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return dict((k, copy.deepcopy(v)) for k, v in patch.items() if not k.startswith("$"))
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$") or any(k.startswith(d + "/") for d in _DIRECTIVES):
            continue
        child = node.field(k) if node is not None else None
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and child is not None and child.kind == LIST \
                and "merge" in child.patch_strategy.split(","):
            out[k] = _merge_list(out.get(k) if isinstance(out.get(k), list) else [], v, child)
        elif isinstance(v, dict):
            merged = strategic_merge_patch(out.get(k), v, child)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    return out


def _merge_list(target, patch, node):
    key = node.patch_key
    if not key:
        # Lists of scalars with strategy merge (finalizers): union, patch order after existing items.
        out = list(target)
        for v in patch:
            if v not in out:
                out.append(copy.deepcopy(v))
        return out
    out = [copy.deepcopy(x) for x in target]
    elem = node.elem()
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            if isinstance(item, dict) and item.get("$patch") == "replace":
                continue
            raise PatchError("map: %s does not contain declared merge key: %s" % (item, key))
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(dict((k, copy.deepcopy(v)) for k, v in item.items() if not k.startswith("$")))
        else:
            out[idx] = strategic_merge_patch(out[idx], item, elem)
    return out


# -- JSON patch -----------------------------------------------------------------------------------------------
def _tokens(pointer):
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError("JSON pointer must start with /: %r" % pointer)
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _walk(doc, tokens):
    cur = doc
    for t in tokens:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError("doc is missing path: %s" % "/".join([""] + tokens))
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, False)]
        else:
            raise PatchError("doc is missing path: %s" % "/".join([""] + tokens))
    return cur


def _index(lst, token, for_add):
    if token == "-" and for_add:
        return len(lst)
    try:
        i = int(token)
    except ValueError:
        raise PatchError("invalid array index %r" % token)
    if i < 0 or i > len(lst) or (i == len(lst) and not for_add):
        raise PatchError("unable to access invalid index: %d" % i)
    return i


def _add(doc, tokens, value):
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, True), value)
    else:
        raise PatchError("doc is missing path")
    return doc


def _remove(doc, tokens):
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("unable to remove nonexistent key: %s: missing value" % last)
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, False))
    raise PatchError("doc is missing path")


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("invalid operation %r" % (op,))
        kind = op["op"]
        path = _tokens(op.get("path", ""))
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _walk(doc, path)
            if not path:
                doc = copy.deepcopy(op.get("value"))
            else:
                _remove(doc, path)
                doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            src = _tokens(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, src))
            if kind == "move":
                _remove(doc, src)
            doc = _add(doc, path, value)
        elif kind == "test":
            if _walk(doc, path) != op.get("value"):
                raise PatchError("testing value %s failed: test failed" % op.get("path"))
        else:
            raise PatchError("Unexpected kind: %s" % kind)
    return doc
