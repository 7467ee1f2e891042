"""Server-side apply: merging an applied configuration, field ownership per manager, conflicts and removal.

Follows the algorithm of structured-merge-diff (the real server's library), written from its documented behaviour:
- apply: live + config merged by the schema's topology; the applier now owns exactly the config's fields; fields it
  owned before and no longer applies are removed unless someone else owns them; a field another manager owns whose
  value the merge changes is a conflict (409) unless force, which takes the field from them.
- update (PUT, patches, controllers): fields the write adds or changes are taken from everyone else and given to the
  writer; fields it removes are no longer owned by anyone.
Managers are keyed (name, operation, subresource); each entry is {"set": paths, "time": str, "apiVersion": str}.
"""
import copy

from . import errors
from . import fieldpath as fp
from .schema import ANY, LIST, MAP, STRUCT

MISSING = fp.MISSING
# Fields nobody owns (the real server strips them from every managed set).
STRIPPED = [("f", "apiVersion"), ("f", "kind")]
_META_STRIPPED = ["name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
                  "managedFields", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"]
STRIPPED_PREFIXES = [(p,) for p in STRIPPED] + [(("f", "metadata"), ("f", m)) for m in _META_STRIPPED]


def strip(paths):
    paths = fp.filter_out(paths, STRIPPED_PREFIXES)
    paths.discard((("f", "metadata"),))
    return paths


# -- merge --------------------------------------------------------------------------------------------------------
def merge(live, config, node):
    """live with config applied on top (SMD Merge). Nulls in config remove the field."""
    if node is None:
        return copy.deepcopy(config)
    if isinstance(config, dict) and node.kind in (STRUCT, MAP, ANY) and not node.atomic:
        out = dict(live) if isinstance(live, dict) else {}
        for k, v in config.items():
            if v is None:
                out.pop(k, None)
                continue
            out[k] = merge(out.get(k, MISSING), v, node.field(k))
        return out
    if isinstance(config, list) and node.kind == LIST and not node.atomic:
        return _merge_list(live if isinstance(live, list) else [], config, node)
    return copy.deepcopy(config)


def _pes(node, items):
    out = []
    for i, item in enumerate(items):
        try:
            out.append(fp.item_pe(node, item, i))
        except fp.TypeError_:
            out.append(("i", i))
    return out


def _merge_list(lhs, rhs, node):
    """Associative lists and sets: shared items keep the applied order, others keep their place (SMD's walk)."""
    elem = node.elem()
    lpes, rpes = _pes(node, lhs), _pes(node, rhs)
    lmap, rmap = {}, {}
    for pe, item in zip(lpes, lhs):
        lmap.setdefault(pe, item)
    for pe, item in zip(rpes, rhs):
        rmap.setdefault(pe, item)
    shared = [pe for pe in rpes if pe in lmap]
    nxt = shared.pop(0) if shared else None
    merged_rhs = set()
    out = []
    li = ri = 0

    def item(pe):
        if node.list_type == "map":
            return merge(lmap.get(pe, MISSING), rmap[pe], elem)
        return copy.deepcopy(rmap[pe])

    while li < len(lpes) or ri < len(rpes):
        if li < len(lpes) and ri < len(rpes):
            pe = lpes[li]
            if pe == rpes[ri]:
                merged_rhs.add(pe)
                out.append(item(pe))
                li += 1
                ri += 1
                nxt = shared.pop(0) if shared else None
                continue
            if pe in rmap and nxt is not None and pe != nxt:
                li += 1
                continue
        if li < len(lpes):
            pe = lpes[li]
            if pe not in rmap:
                out.append(copy.deepcopy(lhs[li]))
                li += 1
                continue
            if pe in merged_rhs:
                li += 1
                continue
        if ri < len(rpes):
            pe = rpes[ri]
            if pe not in merged_rhs:
                merged_rhs.add(pe)
                out.append(item(pe))
            ri += 1
            if nxt is not None and nxt == pe:
                nxt = shared.pop(0) if shared else None
    return out


# -- managers -----------------------------------------------------------------------------------------------------
def copy_managers(managers):
    return dict((k, {"set": set(v["set"]), "time": v["time"], "apiVersion": v["apiVersion"]})
                for k, v in managers.items())


def decode_managed_fields(entries):
    out = {}
    for e in entries or []:
        key = (e.get("manager", ""), e.get("operation", "Update"), e.get("subresource", ""))
        paths = fp.decode(e.get("fieldsV1") or {})
        if key in out:
            out[key]["set"] |= paths
        else:
            out[key] = {"set": paths, "time": e.get("time"), "apiVersion": e.get("apiVersion", "")}
    return out


def encode_managed_fields(managers):
    entries = []
    for (name, op, sub), e in managers.items():
        entry = {"manager": name, "operation": op, "apiVersion": e["apiVersion"]}
        if e["time"]:
            entry["time"] = e["time"]
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = fp.encode(e["set"])
        if sub:
            entry["subresource"] = sub
        entries.append(entry)
    entries.sort(key=lambda x: (x["operation"], x.get("time") or "", x["manager"], x["apiVersion"],
                                x.get("subresource", "")))
    return entries


def describe_manager(key, api_version):
    name, op, sub = key
    text = '"%s"' % name
    if sub:
        text += ' with subresource "%s"' % sub
    if op == "Update":
        text += " using %s" % api_version
    return text


def conflict_error(conflicts, api_version):
    """409 like the real server: one cause per field, message grouped by manager."""
    items = []
    for key in sorted(conflicts, key=lambda k: describe_manager(k, api_version)):
        for path in sorted(conflicts[key], key=fp.path_str):
            items.append((key, path))
    causes = [{"reason": "FieldManagerConflict", "message": "conflict with %s" % describe_manager(k, api_version),
               "field": fp.path_str(p)} for k, p in items]
    if len(items) == 1:
        k, p = items[0]
        message = "Apply failed with 1 conflict: conflict with %s: %s" % (describe_manager(k, api_version),
                                                                          fp.path_str(p))
    else:
        lines = []
        for key in sorted(conflicts, key=lambda k: describe_manager(k, api_version)):
            lines.append("conflicts with %s:" % describe_manager(key, api_version))
            lines.extend("- %s" % fp.path_str(p) for p in sorted(conflicts[key], key=fp.path_str))
        message = "Apply failed with %d conflicts: %s" % (len(items), "\n".join(lines))
    return errors.ApiError(409, "Conflict", message, {"causes": causes})


def _owned_union(managers):
    out = set()
    for e in managers.values():
        out |= e["set"]
    return out


def prune(obj, node, last_set, managers):
    """Remove what the applier owned before, no longer applies, and nobody else owns (SMD prune)."""
    owned = _owned_union(managers)
    owned_prefixes = set()
    for p in owned:
        for i in range(len(p)):
            owned_prefixes.add(p[:i])
    for path in sorted(last_set - owned, key=len):
        if path in owned_prefixes:
            # Someone owns something inside (e.g. another manager's field of this list item): keep the node.
            continue
        if len(path) >= 2 and path[-2][0] == "k" and path[-1][0] == "f" and path[-1][1] in dict(path[-2][1]):
            continue  # a key field goes with its item, never alone
        if fp.remove(obj, path, node):
            _drop_empty_parents(obj, path, node, owned, owned_prefixes)


def _drop_empty_parents(obj, path, node, owned, owned_prefixes):
    """Named struct fields left empty by a removal go too, unless someone owns them or something in them."""
    for n in range(len(path) - 1, 0, -1):
        parent = path[:n]
        if parent[-1][0] != "f" or parent in owned or parent in owned_prefixes:
            return
        hit = fp.locate(obj, parent, node)
        if hit is None:
            return
        container, key, value = hit
        parent_node = _node_at(node, parent[:-1])
        if parent_node is None or parent_node.kind != STRUCT or not isinstance(value, (dict, list)) or value:
            return
        del container[key]


def _node_at(node, path):
    for t, v in path:
        if node is None:
            return None
        node = node.field(v) if t == "f" else node.elem()
    return node


def apply(live, config, managers, key, node, force, ignored, api_version, custom, now):
    """-> (merged object, managers). `live` is {} for a create. Raises ApiError 409 on conflicts."""
    managers = copy_managers(managers)
    if not managers and live:
        # Objects that were never tracked: their current fields go to a "before-first-apply" manager.
        cmp = fp.compare({}, live, node, custom)
        first = strip(fp.filter_out(cmp.changed(), ignored))
        if first:
            managers[("before-first-apply", "Update", "")] = {"set": first, "time": now, "apiVersion": api_version}
    merged = merge(live, config, node)
    new_set = strip(fp.filter_out(fp.to_set(config, node), ignored))
    last = managers[key]["set"] if key in managers else set()
    previous_time = managers[key]["time"] if key in managers else None
    managers[key] = {"set": new_set, "time": previous_time or now, "apiVersion": api_version}
    prune(merged, node, last, managers)
    cmp = fp.compare(live, merged, node, custom)
    changed = strip(fp.filter_out(cmp.changed(), ignored))
    conflicts = {}
    for k, e in managers.items():
        if k != key:
            c = e["set"] & changed
            if c:
                conflicts[k] = c
    if conflicts and not force:
        raise conflict_error(conflicts, api_version)
    for k, e in managers.items():
        if k != key:
            e["set"] -= conflicts.get(k, set())
            e["set"] -= cmp.removed
    for k in [k for k, e in managers.items() if not e["set"]]:
        del managers[k]
    return merged, managers


def update(old, new, managers, key, node, ignored, api_version, custom, now):
    """Ownership after a non-apply write by manager `key`; -> managers."""
    managers = copy_managers(managers)
    cmp = fp.compare(old if old is not None else {}, new, node, custom)
    changed = strip(fp.filter_out(cmp.changed(), ignored))
    for k, e in managers.items():
        if k != key:
            e["set"] -= changed
            e["set"] -= cmp.removed
    if key in managers:
        managers[key]["set"] -= cmp.removed
    if changed:
        prev = managers[key]["set"] if key in managers else set()
        managers[key] = {"set": prev | changed, "time": now, "apiVersion": api_version}
    for k in [k for k, e in managers.items() if not e["set"]]:
        del managers[k]
    return managers
