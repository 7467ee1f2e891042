"""labelSelector and fieldSelector query parameters, with the real server's syntax and semantics."""
import re

from . import errors as E

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


def _split_top(text):
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_label_selector(text):
    """-> list of (key, op, values); op in =, !=, in, notin, exists, !exists, gt, lt. Raises 400 when malformed."""
    reqs = []
    if text is None or not text.strip():
        return reqs
    for part in _split_top(text):
        m = (re.fullmatch(r"(%s)\s+(in|notin)\s*\((.*)\)" % _KEY, part)
             or re.fullmatch(r"(%s)\s*(==|=|!=|>|<)\s*(.*)" % _KEY, part)
             or re.fullmatch(r"(!?)\s*(%s)" % _KEY, part))
        if not m:
            raise _bad(text, part)
        if m.re.pattern.startswith("(!?)"):
            neg, key = m.group(1), m.group(2)
            reqs.append((key, "!exists" if neg else "exists", []))
            continue
        key, op, rest = m.group(1), m.group(3), m.group(4)
        if op in ("in", "notin"):
            values = [v.strip() for v in rest.split(",")] if rest.strip() else []
            if not values or any(not re.fullmatch(_VALUE, v) for v in values):
                raise _bad(text, part)
            reqs.append((key, op, values))
        else:
            value = rest.strip()
            if op in (">", "<"):
                if not re.fullmatch(r"-?[0-9]+", value):
                    raise _bad(text, part)
                reqs.append((key, "gt" if op == ">" else "lt", [value]))
                continue
            if not re.fullmatch(_VALUE, value):
                raise _bad(text, part)
            reqs.append((key, "!=" if op == "!=" else "=", [value]))
    return reqs


def _bad(text, part):
    return E.bad_request("unable to parse requirement: found '%s', expected: valid label selector in %r"
                         % (part, text))


def label_match(reqs, labels):
    labels = labels or {}
    for key, op, values in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "=" and (not has or v != values[0]):
            return False
        if op == "!=" and has and v == values[0]:
            return False
        if op == "in" and (not has or v not in values):
            return False
        if op == "notin" and has and v in values:
            return False
        if op == "exists" and not has:
            return False
        if op == "!exists" and has:
            return False
        if op in ("gt", "lt"):
            try:
                n = int(v)
            except (TypeError, ValueError):
                return False
            if (op == "gt" and n <= int(values[0])) or (op == "lt" and n >= int(values[0])):
                return False
    return True


# Fields each kind supports in fieldSelector besides metadata.name and metadata.namespace.
FIELD_LABELS = {
    "Pod": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
            "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    "Secret": ("type",),
    "Event": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
              "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
              "reportingComponent", "source", "type"),
    "Namespace": ("status.phase",),
    "Job": ("status.successful",),
}


def parse_field_selector(text, kind):
    reqs = []
    if text is None or not text.strip():
        return reqs
    allowed = ("metadata.name", "metadata.namespace") + FIELD_LABELS.get(kind, ())
    for part in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise E.bad_request("invalid selector: '%s'; can't understand '%s'" % (text, part))
        field, op, value = m.group(1), m.group(2), m.group(3)
        if field not in allowed:
            raise E.bad_request('field label not supported: %s' % field)
        reqs.append((field, "!=" if op == "!=" else "=", value))
    return reqs


def _field_value(obj, path):
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def field_match(reqs, obj):
    for field, op, value in reqs:
        v = _field_value(obj, field)
        if (op == "=" and v != value) or (op == "!=" and v == value):
            return False
    return True
