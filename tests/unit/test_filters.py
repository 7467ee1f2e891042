"""Filter plugins soperator.slurm.hostlist_* and quantity_*: behaviour, errors, documentation, a real Ansible run."""
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.soperator.slurm.plugins.filter import hostlist as hostlist_filters
from ansible_collections.soperator.slurm.plugins.filter import quantity as quantity_filters

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILTER_DIR = os.path.join(ROOT, "plugins", "filter")

FILTERS = dict(hostlist_filters.FilterModule().filters())
FILTERS.update(quantity_filters.FilterModule().filters())
NAMES = ["hostlist_expand", "hostlist_compress", "quantity_to_mib", "quantity_to_cpus"]


def test_filter_names():
    assert sorted(FILTERS) == sorted(NAMES)


# ---------------------------------------------------------------------------------------------------
# hostlist


@pytest.mark.parametrize("value,expected", [
    ("gpu-[0-3,7]", ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-7"]),
    ("node[008-010]", ["node008", "node009", "node010"]),
    ("login-0,cpu-[1-2]", ["login-0", "cpu-1", "cpu-2"]),
    (["login-0", "cpu-[1-2]"], ["login-0", "cpu-1", "cpu-2"]),
    (("a[1-2]", "a1"), ["a1", "a2", "a1"]),
])
def test_hostlist_expand(value, expected):
    assert FILTERS["hostlist_expand"](value) == expected


@pytest.mark.parametrize("value,message", [
    ("a[3-1]", "hostlist_expand: reversed range '3-1' in 'a[3-1]'"),
    ("a[1-2", "hostlist_expand: unclosed '['"),
    ("a[1-2]b", "hostlist_expand: text 'b' after the last ']'"),
    ("", "hostlist_expand: empty hostlist"),
    ([], "hostlist_expand: empty list of hostlists"),
    (["a", 1], "hostlist_expand: list items must be strings, got int 1"),
    (None, "hostlist_expand: expected a string or a list of strings, got NoneType"),
    ({"a": 1}, "hostlist_expand: expected a string or a list of strings, got dict"),
    (7, "hostlist_expand: expected a string or a list of strings, got int"),
])
def test_hostlist_expand_errors(value, message):
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["hostlist_expand"](value)
    assert message in str(err.value)


def test_hostlist_max_hosts():
    assert len(FILTERS["hostlist_expand"]("n[1-3]", max_hosts=3)) == 3
    with pytest.raises(AnsibleFilterError, match="more than 2 hosts"):
        FILTERS["hostlist_expand"]("n[1-3]", max_hosts=2)
    # the bound is over the whole list, not each item
    with pytest.raises(AnsibleFilterError, match="more than 3 hosts"):
        FILTERS["hostlist_expand"](["n[1-2]", "m[1-2]"], max_hosts=3)
    with pytest.raises(AnsibleFilterError, match="more than 1000000 hosts"):
        FILTERS["hostlist_compress"]("n[1-1000001]")
    assert FILTERS["hostlist_compress"]("n[1-1000001]", max_hosts=None) == "n[1-1000001]"


@pytest.mark.parametrize("value,expected", [
    (["gpu-3", "gpu-0", "gpu-1", "gpu-2", "gpu-7", "gpu-1"], "gpu-[0-3,7]"),
    ("worker02,worker01,login-0,worker03", "login-0,worker[01-03]"),
    ("worker02 worker01\nworker03", "worker[01-03]"),
    (["gpu-[0-3]", "gpu-4"], "gpu-[0-4]"),
    ("n[3-5],n[1-2]", "n[1-5]"),
    (["n01", "n1"], "n[1,01]"),
    ([], ""),
    ("", ""),
    (" , ", ""),
    (["", "n1"], "n1"),
])
def test_hostlist_compress(value, expected):
    assert FILTERS["hostlist_compress"](value) == expected


@pytest.mark.parametrize("value,message", [
    ("n[1-", "hostlist_compress: unclosed '['"),
    (["n1", None], "hostlist_compress: list items must be strings, got NoneType"),
    (3, "hostlist_compress: expected a string or a list of strings, got int"),
])
def test_hostlist_compress_errors(value, message):
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["hostlist_compress"](value)
    assert message in str(err.value)


# ---------------------------------------------------------------------------------------------------
# quantities


@pytest.mark.parametrize("value,kwargs,expected", [
    ("1600Gi", {}, 1638400),
    ("512Mi", {}, 512),
    ("1Ti", {}, 1048576),
    ("1G", {}, 953),
    ("1G", {"rounding": "ceil"}, 954),
    ("1G", {"rounding": "floor"}, 953),
    ("1.5Gi", {}, 1536),
    ("1e9", {}, 953),
    (1048576, {}, 1),
    (1048575, {}, 0),
    (1048575, {"rounding": "ceil"}, 1),
    ("0", {}, 0),
])
def test_quantity_to_mib(value, kwargs, expected):
    result = FILTERS["quantity_to_mib"](value, **kwargs)
    assert result == expected and isinstance(result, int) and not isinstance(result, bool)


@pytest.mark.parametrize("value,kwargs,message", [
    ("16GB", {}, "quantity_to_mib: '16GB' is not a quantity"),
    ("", {}, "quantity_to_mib: '' is not a quantity"),
    (None, {}, "quantity_to_mib: None is not a quantity"),
    (1.5, {}, "quantity_to_mib: 1.5 is not a quantity"),
    (True, {}, "quantity_to_mib: True is not a quantity"),
    ("-1Gi", {}, "quantity_to_mib: '-1Gi' is negative"),
    (-1, {}, "quantity_to_mib: -1 is negative"),
    ("1Gi", {"rounding": "up"}, "quantity_to_mib: rounding must be 'floor' or 'ceil', got 'up'"),
])
def test_quantity_to_mib_errors(value, kwargs, message):
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["quantity_to_mib"](value, **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("value,expected", [
    ("16", 16), (16, 16), ("16000m", 16), ("1e2", 100), ("0", 0), ("2k", 2000),
])
def test_quantity_to_cpus(value, expected):
    result = FILTERS["quantity_to_cpus"](value)
    assert result == expected and isinstance(result, int) and not isinstance(result, bool)


@pytest.mark.parametrize("value,message", [
    ("500m", "quantity_to_cpus: '500m' is not a whole number of CPUs"),
    ("1.5", "quantity_to_cpus: '1.5' is not a whole number of CPUs"),
    ("four", "quantity_to_cpus: 'four' is not a quantity"),
    ("-2", "quantity_to_cpus: '-2' is negative"),
    ([], "quantity_to_cpus: [] is not a quantity"),
])
def test_quantity_to_cpus_errors(value, message):
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["quantity_to_cpus"](value)
    assert message in str(err.value)


# ---------------------------------------------------------------------------------------------------
# documentation: one adjacent YAML file per filter, in ansible-core's format


@pytest.mark.parametrize("name", NAMES)
def test_documentation_file(name):
    with open(os.path.join(FILTER_DIR, name + ".yml")) as f:
        doc = yaml.safe_load(f)
    assert sorted(doc) == ["DOCUMENTATION", "EXAMPLES", "RETURN"]
    d = doc["DOCUMENTATION"]
    assert d["name"] == name
    assert str(d["version_added"]) == "0.1.0"
    assert d["short_description"] and d["description"] and d["author"]
    positional = [p.strip() for p in d["positional"].split(",")]
    assert positional[0] == "_input"
    assert set(positional) <= set(d["options"])
    assert d["options"]["_input"]["required"] is True
    # documented defaults are the real ones
    func = FILTERS[name]
    defaults = dict(zip(func.__code__.co_varnames[func.__code__.co_argcount - len(func.__defaults__ or ()):],
                        func.__defaults__ or ()))
    for option, spec in d["options"].items():
        if option != "_input":
            assert spec.get("default") == defaults[option], option
    assert "soperator.slurm." + name in doc["EXAMPLES"]
    assert set(doc["RETURN"]) == {"_value"}


def _ansible_env(tmp_path):
    # Ansible's own defaults (no ansible.cfg), the collection found through ANSIBLE_COLLECTIONS_PATH alone.
    return ansible_run.ansible_env(config=None, json_output=False, ANSIBLE_COLLECTIONS_PATH=ansible_run.COLLECTIONS,
                                   ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_HOME=str(tmp_path / "home"),
                                   ANSIBLE_FORCE_COLOR="0")


def _require(name):
    if not os.path.exists(ansible_run.tool(name)):
        pytest.skip("%s is not installed" % name)


def test_ansible_doc_reads_the_documentation(tmp_path):
    _require("ansible-doc")
    proc = ansible_run.run(["ansible-doc", "-t", "filter", "--json"] + ["soperator.slurm." + n for n in NAMES],
                           env=_ansible_env(tmp_path), cwd=tmp_path, timeout=120, expect_rc=0)
    docs = json.loads(proc.stdout)
    assert sorted(docs) == sorted("soperator.slurm." + n for n in NAMES)
    for full_name, entry in docs.items():
        assert entry["doc"]["name"] == full_name.rsplit(".", 1)[1]
        assert entry["doc"]["version_added"] == "0.1.0"
        assert entry["doc"]["collection"] == "soperator.slurm"
        assert entry["examples"] and entry["return"]["_value"]
    assert "ERROR" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr


def test_filters_in_a_playbook(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text("""
- hosts: localhost
  gather_facts: false
  vars:
    workers: [worker02, worker01, login-0, worker03, worker01]
  tasks:
    - assert:
        that:
          - "'gpu-[0-3,7]' | soperator.slurm.hostlist_expand == ['gpu-0', 'gpu-1', 'gpu-2', 'gpu-3', 'gpu-7']"
          - "workers | soperator.slurm.hostlist_compress == 'login-0,worker[01-03]'"
          - "'node[001-100]' | soperator.slurm.hostlist_expand | soperator.slurm.hostlist_compress == 'node[001-100]'"
          - "'1600Gi' | soperator.slurm.quantity_to_mib == 1638400"
          - "'1G' | soperator.slurm.quantity_to_mib('ceil') == 954"
          - "('16000m' | soperator.slurm.quantity_to_cpus) is integer"
    - debug:
        msg: "{{ 'n[3-1]' | soperator.slurm.hostlist_expand }}"
      register: bad
      ignore_errors: true
    - assert:
        that:
          - bad is failed
          - "'reversed range' in bad.msg"
""")
    _require("ansible-playbook")
    proc = ansible_run.playbook(playbook, "-i", "localhost,", "-c", "local", env=_ansible_env(tmp_path), cwd=tmp_path,
                                timeout=300, expect_rc=0)
    assert "failed=0" in proc.stdout and "ignored=1" in proc.stdout, proc.stdout
