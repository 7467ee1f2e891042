# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One schema, two uses: validate + default a spec in Python, and emit the CRD's OpenAPI v3 schema.

Keeping both in one place means the Kubernetes API server and the Ansible modules can never disagree on what a
field is called, what type it has or what its default is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Pattern, Tuple, Union, cast

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError

_MISSING = object()
# A field check: value -> why it is wrong, or None; a map's entry check: map -> [(key, why)].
Check = Callable[[Any], Optional[str]]
EntryCheck = Callable[[Dict[str, Any]], List[Tuple[str, str]]]


def compile_pattern(pattern: str) -> Pattern[str]:
    r"""A schema pattern as Python must run it to agree with the API server.

    Patterns are written `^...$` for both. Kubernetes runs them with Go's regexp, where `$` is the end of the text;
    Python's `$` also matches before a final newline, so `"gpu\n"` would pass a name check here and split a config
    line. The trailing `$` becomes `\Z` (end of text) for Python. Go and Python also disagree on what `\s`, `\w`
    and `\d` match outside ASCII, so patterns spell their classes out instead.
    """
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")):
        raise ValueError("schema pattern %r must be anchored as ^...$" % pattern)
    for shorthand in ("\\s", "\\S", "\\w", "\\W", "\\d", "\\D", "\\b"):
        if shorthand in pattern:
            raise ValueError("schema pattern %r uses %s, which Go and Python read differently" % (pattern, shorthand))
    body = pattern[:-1]
    if "$" in body.replace("\\$", ""):
        raise ValueError("schema pattern %r may use '$' only at its end" % pattern)
    return re.compile(body + "\\Z")


class SpecIssue:
    """One problem in a spec: where (a field path) and what rule it broke."""

    __slots__ = ("path", "message")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.path, self.message) if self.path else self.message

    def __repr__(self):
        return "SpecIssue(%r, %r)" % (self.path, self.message)

    def __eq__(self, other):
        return isinstance(other, SpecIssue) and (self.path, self.message) == (other.path, other.message)

    def __hash__(self):
        return hash((self.path, self.message))


class SpecError(SoperatorError, ValueError):
    """Raised with every issue of a spec at once."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues = list(issues)
        lines = [str(i) for i in self.issues]
        super(SpecError, self).__init__(
            "invalid spec (%d error%s):\n  %s" % (len(lines), "" if len(lines) == 1 else "s", "\n  ".join(lines)),
            errors=[{"path": i.path, "message": i.message} for i in self.issues])   # the module's failure result


def child_path(path: str, key: Union[int, str]) -> str:
    """`spec.login` + `replicas` -> `spec.login.replicas`; odd keys are quoted like kubectl explain does."""
    if isinstance(key, int):
        return "%s[%d]" % (path, key)
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
        return "%s.%s" % (path, key) if path else key
    return '%s["%s"]' % (path, key)


def _number_text(value):
    """A number for a message; an int too long for str() (Python refuses over 4300 digits) by its size."""
    if isinstance(value, int) and value.bit_length() > 200:
        return "an integer of %d bits" % value.bit_length()
    return str(value)


# bool before int: True is an int to isinstance
_TYPE_NAMES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (dict, "object"), (list, "array"))


def _type_name(value):
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


class Node:
    """A schema node. Build them with the helpers below (Str, Int, Obj, ...), not directly."""

    def __init__(self, kind: str, description: str = "", default: Any = _MISSING, enum: Optional[Iterable[Any]] = None,
                 minimum: Optional[float] = None, maximum: Optional[float] = None, pattern: Optional[str] = None,
                 pattern_help: Optional[str] = None, max_length: Optional[int] = None,
                 properties: Optional[Dict[str, "Node"]] = None, required: Iterable[str] = (),
                 items: Optional["Node"] = None, values: Optional["Node"] = None, min_items: Optional[int] = None,
                 unique_key: Optional[str] = None, optional: bool = False, checks: Iterable[Check] = (),
                 cel: Iterable[Tuple[str, ...]] = (), openapi_extra: Optional[Dict[str, Any]] = None,
                 keys: Optional["Node"] = None, entry_checks: Iterable[EntryCheck] = ()) -> None:
        self.kind = kind
        self.description = description
        self.default = default
        self.enum = list(enum) if enum else None
        self.minimum = minimum
        self.maximum = maximum
        self.pattern = pattern
        self.pattern_re = compile_pattern(pattern) if pattern else None
        self.pattern_help = pattern_help
        self.max_length = max_length
        self.properties = properties or {}
        self.required = tuple(required)
        self.items = items
        self.values = values
        self.keys = keys                    # a map's key rule (a Str node); Python only, see _check_map
        self.entry_checks = tuple(entry_checks)     # a map's rules over all its entries: map -> [(key, message)]
        self.min_items = min_items
        self.unique_key = unique_key
        self.optional = optional
        self.checks = tuple(checks)
        self.cel = tuple(cel)
        self.openapi_extra = openapi_extra or {}

    # ---- validation + defaulting -------------------------------------------------------------------------------

    def validate(self, value: Any, path: str, issues: List[SpecIssue]) -> Any:
        """Return `value` with defaults filled in; append a SpecIssue for every rule it breaks."""
        checker = getattr(self, "_check_" + self.kind)
        result = checker(value, path, issues)
        if result is not _MISSING:
            for check in self.checks:
                message = check(result)
                if message:
                    issues.append(SpecIssue(path, message))
        return None if result is _MISSING else result

    def _wrong_type(self, value, path, issues, expected):
        issues.append(SpecIssue(path, "must be %s, got %s" % (expected, _type_name(value))))
        return _MISSING

    def _check_string(self, value, path, issues):
        if not isinstance(value, str):
            return self._wrong_type(value, path, issues, "a string")
        if self.enum and value not in self.enum:
            issues.append(SpecIssue(path, "must be one of %s, got %r" % (", ".join(self.enum), value)))
        if self.max_length is not None and len(value) > self.max_length:
            issues.append(SpecIssue(path, "must be at most %d characters long" % self.max_length))
        if self.pattern_re and not self.pattern_re.search(value):
            issues.append(SpecIssue(path, "%r %s" % (value, self.pattern_help or "must match %s" % self.pattern)))
        return value

    def _check_number_like(self, value, path, issues, kinds, expected):
        if isinstance(value, bool) or not isinstance(value, kinds):
            return self._wrong_type(value, path, issues, expected)
        if self.minimum is not None and value < self.minimum:
            issues.append(SpecIssue(path, "must be >= %s, got %s" % (self.minimum, _number_text(value))))
        if self.maximum is not None and value > self.maximum:
            issues.append(SpecIssue(path, "must be <= %s, got %s" % (self.maximum, _number_text(value))))
        return value

    def _check_integer(self, value, path, issues):
        return self._check_number_like(value, path, issues, int, "an integer")

    def _check_number(self, value, path, issues):
        if isinstance(value, float) and not math.isfinite(value):
            # YAML's .inf / .nan: JSON (health.json, the API server) has no such number.
            issues.append(SpecIssue(path, "must be a finite number, got %s" % value))
            return _MISSING
        return self._check_number_like(value, path, issues, (int, float), "a number")

    def _check_boolean(self, value, path, issues):
        if not isinstance(value, bool):
            return self._wrong_type(value, path, issues, "a boolean (true/false)")
        return value

    def _check_int_or_string(self, value, path, issues):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return self._wrong_type(value, path, issues, "an integer or a string")
        if isinstance(value, str) and self.pattern_re and not self.pattern_re.search(value):
            issues.append(SpecIssue(path, "%r %s" % (value, self.pattern_help or "must match %s" % self.pattern)))
        return value

    def _check_object(self, value, path, issues):
        if not isinstance(value, dict):
            return self._wrong_type(value, path, issues, "an object (mapping)")
        out = {}
        for key in value:
            if not isinstance(key, str):
                issues.append(SpecIssue(path, "field names must be strings, got %r" % (key,)))
            elif key not in self.properties:
                known = ", ".join(sorted(self.properties)) or "none"
                issues.append(SpecIssue(child_path(path, key), "unknown field (known fields: %s)" % known))
        for name, node in self.properties.items():
            sub = child_path(path, name)
            if name in value and value[name] is not None:
                out[name] = node.validate(value[name], sub, issues)
            elif name in self.required:
                issues.append(SpecIssue(sub, "is required"))
            elif node.default is not _MISSING:
                out[name] = node.validate(copy.deepcopy(node.default), sub, issues)
            elif node.kind == "object" and not node.optional:
                # Present-by-default sections: `login: {}` and no `login` mean the same thing.
                out[name] = node.validate({}, sub, issues)
            else:
                out[name] = None
        return out

    def _check_map(self, value, path, issues):
        if not isinstance(value, dict):
            return self._wrong_type(value, path, issues, "a mapping")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                issues.append(SpecIssue(path, "keys must be strings, got %r" % (key,)))
                continue
            if self.keys is not None:
                # Reported at the key's own path. The CRD cannot say it (no propertyNames in a structural schema).
                key_issues = []
                self.keys.validate(key, child_path(path, key), key_issues)
                issues.extend(SpecIssue(i.path, "key " + i.message) for i in key_issues)
            out[key] = self.values.validate(item, child_path(path, key), issues)
        for check in self.entry_checks:
            # Rules that need a key with its value or its siblings, reported at each key's own path.
            issues.extend(SpecIssue(child_path(path, key), message) for key, message in check(out))
        return out

    def _check_array(self, value, path, issues):
        if not isinstance(value, list):
            return self._wrong_type(value, path, issues, "a list")
        if self.min_items is not None and len(value) < self.min_items:
            issues.append(SpecIssue(path, "must have at least %d item%s" % (self.min_items,
                                                                            "" if self.min_items == 1 else "s")))
        out = [self.items.validate(item, child_path(path, i), issues) for i, item in enumerate(value)]
        if self.unique_key:
            seen = {}
            for i, item in enumerate(out):
                key = item.get(self.unique_key) if isinstance(item, dict) else item
                if key is None:
                    continue
                if key in seen:
                    issues.append(SpecIssue(child_path(child_path(path, i), self.unique_key) if isinstance(item, dict)
                                            else child_path(path, i),
                                            "duplicate %r (already at index %d)" % (key, seen[key])))
                else:
                    seen[key] = i
        return out

    def _check_any(self, value, path, issues):
        return copy.deepcopy(value)

    def _check_any_object(self, value, path, issues):
        if not isinstance(value, dict):
            return self._wrong_type(value, path, issues, "an object (mapping)")
        return copy.deepcopy(value)

    # ---- OpenAPI v3 (structural schema for a CRD) ------------------------------------------------------------

    def openapi(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.description:
            out["description"] = self.description
        kind = self.kind
        if kind in ("string", "integer", "number", "boolean"):
            out["type"] = kind
        elif kind == "int_or_string":
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            out["x-kubernetes-int-or-string"] = True
        elif kind == "object":
            out["type"] = "object"
            out["properties"] = {name: node.openapi() for name, node in self.properties.items()}
            if self.required:
                out["required"] = list(self.required)
        elif kind == "map":
            out["type"] = "object"
            out["additionalProperties"] = cast(Node, self.values).openapi()     # Map() always sets it
        elif kind == "array":
            out["type"] = "array"
            out["items"] = cast(Node, self.items).openapi()     # Arr() always sets it
            if self.min_items is not None:
                out["minItems"] = self.min_items
            if self.unique_key:
                # Keyed lists merge per item under server-side apply instead of being replaced whole.
                out["x-kubernetes-list-type"] = "map"
                out["x-kubernetes-list-map-keys"] = [self.unique_key]
        elif kind == "any_object":
            out["type"] = "object"
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif kind == "any":
            out["x-kubernetes-preserve-unknown-fields"] = True
        if self.enum:
            out["enum"] = list(self.enum)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.pattern:
            out["pattern"] = self.pattern
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.default is not _MISSING:
            out["default"] = copy.deepcopy(self.default)
        elif kind == "object" and not self.optional and not self.required and not self.cel:
            # Not with CEL rules: the API server checks a default against them and refuses a CRD whose {} breaks one
            # (jail.volume's "exactly one of existingClaim or size").
            out["default"] = {}
        if self.cel:
            # (rule, message) or (rule, message, fieldPath): the server then names that field, as our checks do
            out["x-kubernetes-validations"] = [dict(zip(("rule", "message", "fieldPath"), rule)) for rule in self.cel]
        out.update(self.openapi_extra)
        return out


# ---- builders --------------------------------------------------------------------------------------------------

def Str(description: str = "", **kw: Any) -> Node:
    return Node("string", description, **kw)


def Int(description: str = "", **kw: Any) -> Node:
    return Node("integer", description, **kw)


def Num(description: str = "", **kw: Any) -> Node:
    return Node("number", description, **kw)


def Bool(description: str = "", **kw: Any) -> Node:
    return Node("boolean", description, **kw)


def IntOrStr(description: str = "", **kw: Any) -> Node:
    return Node("int_or_string", description, **kw)


def Obj(description: str = "", properties: Optional[Dict[str, Node]] = None, **kw: Any) -> Node:
    return Node("object", description, properties=properties, **kw)


def Arr(items: Node, description: str = "", **kw: Any) -> Node:
    return Node("array", description, items=items, **kw)


def Map(values: Node, description: str = "", **kw: Any) -> Node:
    return Node("map", description, values=values, **kw)


def AnyObj(description: str = "", **kw: Any) -> Node:
    """A Kubernetes object we pass through untouched (affinity, securityContext, ...)."""
    return Node("any_object", description, **kw)
