# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Spec documents from a file, YAML text or Ansible's definition: parsed strictly (duplicate keys and
out-of-range numbers refused, with the document and line).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, List, Optional, Sequence

from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError, SpecIssue, child_path


def _printable_word(text):
    """A kind or name fit for an error message's label (one that holds a newline would split the message)."""
    return isinstance(text, str) and text != "" and all(" " < ch <= "~" for ch in text)


def documents_from(src: Optional[str] = None, definition: Any = None) -> List[Any]:
    """A module's spec documents: from `src` (a YAML file, UTF-8; IOError/OSError when unreadable) or `definition`
    (YAML text, one document, or a list of them). SpecError when the spec is not valid YAML or exceeds the bounds
    below (see check_bounds)."""
    if src:
        return load_documents(_read_spec_file(src), source=src)
    if definition is None:
        return []
    if isinstance(definition, str):
        return load_documents(definition)
    documents = [definition] if isinstance(definition, dict) else list(definition)
    check_bounds(documents)
    return documents


# What one spec may be. Each document becomes one custom resource, which Kubernetes keeps in etcd: a request over
# etcd's default limit (--max-request-bytes, 1.5 MiB) is refused, so no document may expand beyond it - YAML aliases
# counted at the size of what they repeat (an alias bomb of a few hundred bytes expands to gigabytes when serialised).
# Nesting is bounded well below what the recursive YAML composer and our validation can take (about 300 levels);
# the deepest real field (an affinity's matchExpressions values) is about 12 levels down.
MAX_DOCUMENT_BYTES = 1536 * 1024
MAX_DEPTH = 64
MAX_SPEC_FILE_BYTES = 16 << 20

# Byte order marks of the encodings YAML allows besides UTF-8; we read UTF-8 only (what every other input is).
_OTHER_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (b"\xfe\xff", "UTF-16"),
               (b"\xff\xfe", "UTF-16"))


def _read_spec_file(src):
    """The text of the spec file `src`: at most MAX_SPEC_FILE_BYTES, UTF-8 only (a UTF-8 byte order mark is
    dropped); SpecError naming the file otherwise."""
    with open(src, "rb") as f:
        data = f.read(MAX_SPEC_FILE_BYTES + 1)
    if len(data) > MAX_SPEC_FILE_BYTES:
        raise SpecError([SpecIssue("", "spec file %s is larger than %d bytes" % (src, MAX_SPEC_FILE_BYTES))])
    for bom, name in _OTHER_BOMS:
        if data.startswith(bom):
            raise SpecError([SpecIssue("", "spec file %s is %s-encoded: specs are read as UTF-8 only (convert it, "
                                           "e.g. iconv -f %s -t UTF-8)" % (src, name, name))])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise SpecError([SpecIssue("", "spec file %s is not UTF-8 (byte 0x%02x at line %d, offset %d): specs are "
                                       "read as UTF-8 only" % (src, data[e.start], line, e.start))])
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise SpecError([SpecIssue("", "spec file %s holds a NUL byte (line %d): UTF-16 or UTF-32 without a byte "
                                       "order mark? Specs are read as UTF-8 only" % (src, line))])
    return text


def doc_label(doc: object, index: int) -> str:
    """How an error names a document: Kind/name when both are plain words, else document[index]."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if _printable_word(kind) and _printable_word(name):
        return "%s/%s" % (kind, name)
    return "document[%d]" % index


def _scalar_bytes(value):
    """About what a scalar takes serialised (JSON): its text, or a number's digits."""
    if isinstance(value, (str, bytes)):
        return len(value) + 2
    return 8


def _bound_issue(doc, label):
    """The first place where `doc` exceeds MAX_DEPTH or MAX_DOCUMENT_BYTES, as a SpecIssue, or None. Walks the
    document as serialising it would (a value shared by aliases counted each time), iteratively, and stops at the
    first excess: the work is bounded by the limits, not by what the document would expand to."""
    total = 0
    todo = [(doc, "", 0)]
    while todo:
        value, path, depth = todo.pop()
        where = "%s %s" % (label, path) if path else label
        if depth > MAX_DEPTH:
            return SpecIssue(where, "nested more than %d levels deep (counting what YAML aliases repeat)"
                             % MAX_DEPTH)
        if isinstance(value, dict):
            total += 2
            items = [(child_path(path, k) if isinstance(k, str) else path, v) for k, v in value.items()]
            total += sum(_scalar_bytes(k) + 1 for k in value)
        elif isinstance(value, (list, tuple)):
            total += 2
            items = [(child_path(path, i), v) for i, v in enumerate(value)]
        else:
            total += _scalar_bytes(value)
            items = []
        if total > MAX_DOCUMENT_BYTES:
            return SpecIssue(where, "the document expands to more than %d bytes (about; with what YAML aliases "
                                    "repeat): Kubernetes stores an object of at most about that size (etcd's "
                                    "request limit)" % MAX_DOCUMENT_BYTES)
        todo.extend((v, p, depth + 1) for p, v in reversed(items))
    return None


def check_bounds(documents: Sequence[Any]) -> None:
    """SpecError when a document nests deeper than MAX_DEPTH or expands beyond MAX_DOCUMENT_BYTES, naming the field
    where it first does. Specs from a file, from Ansible's definition and from live custom resources all pass here
    before validation, which recurses."""
    issues = [issue for issue in (_bound_issue(doc, doc_label(doc, i)) for i, doc in enumerate(documents))
              if issue is not None]
    if issues:
        raise SpecError(issues)


# An integer literal longer than this is refused while loading: Python's int() refuses over 4300 digits, and no
# field takes a number anywhere near it.
MAX_YAML_INT_DIGITS = 100


def _yaml_scalar(node, key):
    """The scalar value under `key` of a YAML mapping node, or None."""
    import yaml
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value_node
    return None


def _yaml_label(node, index):
    import yaml
    kind, meta = _yaml_scalar(node, "kind"), _yaml_scalar(node, "metadata")
    name = _yaml_scalar(meta, "name") if meta is not None else None
    if isinstance(kind, yaml.ScalarNode) and isinstance(name, yaml.ScalarNode) and _printable_word(kind.value) \
            and _printable_word(name.value):
        return "%s/%s" % (kind.value, name.value)
    return "document[%d]" % index


def _yaml_issues(node, label, path, issues, seen):
    """What PyYAML would load silently or crash on: a key given twice (the last one silently wins), an alias that
    contains itself (validation would recurse forever), an integer of thousands of digits (int() raises)."""
    import yaml
    where = ("%s %s" % (label, path)) if path else label
    line = "line %d" % (node.start_mark.line + 1)
    if id(node) in seen:
        if seen[id(node)] is None:
            issues.append(SpecIssue(where, "a YAML alias refers to a node that contains it (%s)" % line))
        return
    seen[id(node)] = None               # in progress: meeting it again below is a cycle
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:int" and len(node.value) > MAX_YAML_INT_DIGITS:
            issues.append(SpecIssue(where, "a number of %d digits is too large (%s)" % (len(node.value), line)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _yaml_issues(item, label, child_path(path, i), issues, seen)
    elif isinstance(node, yaml.MappingNode):
        first = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key_node.tag != "tag:yaml.org,2002:merge":
                if (key_node.tag, key) in first:
                    lines = (key_node.start_mark.line + 1, first[(key_node.tag, key)])
                    issues.append(SpecIssue("%s %s" % (label, child_path(path, key)),
                                            "duplicate key %r (line %d; first given at line %d): YAML would keep "
                                            "only the last one" % ((key,) + lines)))
                else:
                    first[(key_node.tag, key)] = key_node.start_mark.line + 1
            _yaml_issues(value_node, label, child_path(path, key) if isinstance(key, str) else path, issues, seen)
    seen[id(node)] = True


def _bounded_loader():
    """PyYAML's SafeLoader whose composer refuses nesting deeper than MAX_DEPTH: it recurses once per level, so a
    20,000-deep list ended in RecursionError."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent, index):
            if self._depth >= MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, "the spec is nested more than %d levels deep" % MAX_DEPTH, self.peek_event().start_mark)
            self._depth += 1
            try:
                return super(BoundedLoader, self).compose_node(parent, index)
            finally:
                self._depth -= 1
    return BoundedLoader


def load_documents(text: str, source: Optional[str] = None) -> List[Any]:
    """Parse a multi-document YAML spec (SlurmCluster + NodeSets); empty documents are skipped. `source`: the file
    it was read from, named in every error.

    The text is composed first (nesting bounded) and checked (duplicate keys, self-containing aliases, huge integers)
    with the field path of each problem, then constructed with PyYAML's safe constructor, and then bounded in size
    (check_bounds)."""
    import yaml
    try:
        try:
            loader = _bounded_loader()(text)
            loader.name = source or loader.name       # the file, in every mark of an error
            nodes = []
            try:
                while loader.check_node():
                    nodes.append(loader.get_node())
            finally:
                loader.dispose()
            nodes = [node for node in nodes if node is not None]
            issues: List[SpecIssue] = []
            for index, node in enumerate(nodes):
                _yaml_issues(node, _yaml_label(node, index), "", issues, {})
            if issues:
                raise SpecError(issues)
            documents = [doc for doc in (yaml.SafeLoader("").construct_document(node) for node in nodes)
                         if doc is not None]
        except yaml.YAMLError as e:
            raise SpecError([SpecIssue("", "the spec is not valid YAML: %s" % e)])
        check_bounds(documents)
        return documents
    except SpecError as e:
        if source is None:
            raise
        raise SpecError([SpecIssue(i.path, i.message if '"%s"' % source in i.message else
                                   "%s (in %s)" % (i.message, source)) for i in e.issues])
