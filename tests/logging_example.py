"""examples/logging/soperator-logs.alloy, read for the tests that check it: its pod selector, its relabel rules and
the regex of its loki.process stage. The reader knows only the blocks and values that file uses (a block `name {`,
`key = "string"` or `key = ["string", ...]`, both JSON-quoted); Alloy itself does not run here."""
import json
import os
import re

from repo_root import ROOT

ALLOY = os.path.join(ROOT, "examples", "logging", "soperator-logs.alloy")
_BLOCK = re.compile(r"^\s*(rule|selectors|stage\.regex)\s*\{(.*?)^\s*\}", re.S | re.M)
_VALUE = re.compile(r'^\s*(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|\[[^\]]*\])\s*$', re.M)


def _blocks(kind):
    with open(ALLOY) as f:
        text = "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("//"))
    return [dict((key, json.loads(value)) for key, value in _VALUE.findall(body))
            for name, body in _BLOCK.findall(text) if name == kind]


def selectors():
    """[{"role": ..., "label": ...}]: the discovery's selectors, as Prometheus' kubernetes_sd_configs takes them."""
    return _blocks("selectors")


def relabel_configs():
    """The discovery.relabel rules as Prometheus' relabel_configs (the same keys, the same meaning)."""
    return _blocks("rule")


def daemon_regex():
    """The regex of the loki.process stage that names a line's daemon (RE2; the subset Python's re reads alike)."""
    (stage,) = _blocks("stage.regex")
    return re.compile(stage["expression"])
