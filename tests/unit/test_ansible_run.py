"""tests/ansible_run.py, the suite's one runner of the Ansible CLIs: parsing, rc and failure checks, environment; its
module runs without the CLI (direct) return what the CLI returns."""
import json

import pytest

import ansible_run

PLAYS = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      ansible.builtin.debug: {msg: one}
- hosts: localhost
  gather_facts: false
  tasks:
    - name: second
      ansible.builtin.set_fact: {answer: 42}
"""


def test_environment(monkeypatch):
    monkeypatch.setenv("ANSIBLE_CONFIG", "/elsewhere.cfg")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    env = ansible_run.ansible_env()
    assert env["ANSIBLE_CONFIG"] == ansible_run.CHECKOUT_CONFIG and env["ANSIBLE_STDOUT_CALLBACK"] == "json"
    assert env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] == "1" and env["ANSIBLE_NOCOLOR"] == "1"
    plain = ansible_run.ansible_env(config=None, json_output=False, drop=("SLURM_CONF",), ANSIBLE_HOME="/h")
    assert "ANSIBLE_CONFIG" not in plain and "ANSIBLE_STDOUT_CALLBACK" not in plain and "SLURM_CONF" not in plain
    assert plain["ANSIBLE_HOME"] == "/h"


def test_module_result_and_failure():
    assert ansible_run.module("ansible.builtin.debug", {"msg": "hi"})["msg"] == "hi"
    failed = ansible_run.module("ansible.builtin.fail", {"msg": "no"}, expect_failed=True)
    assert failed["failed"] and failed["msg"] == "no"
    with pytest.raises(AssertionError, match="'msg': 'no'|\"msg\": \"no\""):
        ansible_run.module("ansible.builtin.fail", {"msg": "no"})
    # a short name is one of this collection's modules: it is found, and refuses an argument it does not have;
    # without the CLI (the default for this collection's modules) the result is the same
    refused = ansible_run.module("slurm_node_info", {"nonsense": 1}, expect_failed=True, cli=True)
    assert "Unsupported parameters for (soperator.slurm.slurm_node_info) module: nonsense" in refused["msg"], refused
    assert ansible_run.module("slurm_node_info", {"nonsense": 1}, expect_failed=True) == refused
    with pytest.raises(AssertionError, match="Unsupported parameters"):
        ansible_run.module("slurm_node_info", {"nonsense": 1})


# What a module can send back that the controller changes: typed warnings and deprecations, `failed` and `changed`
# left out, stdout without stdout_lines, a no_log value, check and diff mode.
PROBE = """
from ansible.module_utils.basic import AnsibleModule
m = AnsibleModule(argument_spec=dict(secret=dict(type="str", no_log=True), note=dict(type="str"),
                                     fail=dict(type="bool", default=False), crash=dict(type="bool", default=False)),
                  supports_check_mode=True)
if m.params["crash"]:
    raise RuntimeError("the probe crashed")
m.warn("careful: " + m.params["note"])
m.deprecate("an old way", version="2.0.0", collection_name="probe.check")
if m.params["fail"]:
    m.fail_json(msg="refused", rc=3, stdout="out 1\\nout 2")
m.exit_json(stdout="a\\nb", diff=dict(before="1", after="2"), echo=m.params["secret"], check=m.check_mode,
            diff_mode=m._diff)
"""


@pytest.fixture
def probe(tmp_path):
    """The collection probe.check with the module PROBE, found by the CLI (collections path) and direct (PYTHONPATH)."""
    modules = tmp_path / "ansible_collections" / "probe" / "check" / "plugins" / "modules"
    modules.mkdir(parents=True)
    (modules / "probe.py").write_text(PROBE)
    return dict(cli=ansible_run.ansible_env(ANSIBLE_COLLECTIONS_PATH=str(tmp_path)),
                direct=ansible_run.ansible_env(PYTHONPATH=str(tmp_path)))


@pytest.mark.parametrize("args, mode, failed", [
    ({"secret": "hush", "note": "hush and more"}, dict(check=True, diff=True), False),
    ({"secret": "hush", "note": "n", "fail": True}, {}, True),
])
def test_direct_returns_what_the_cli_returns(probe, args, mode, failed):
    by_cli = ansible_run.module("probe.check.probe", args, cli=True, env=probe["cli"], expect_failed=failed, **mode)
    direct = ansible_run.direct("probe.check.probe", args, env=probe["direct"], expect_failed=failed, **mode)
    assert direct == by_cli, (json.dumps(direct, indent=1), json.dumps(by_cli, indent=1))
    assert by_cli["warnings"] == ["careful: " + args["note"]] and by_cli["deprecations"][0]["msg"] == "an old way"
    if not failed:
        assert by_cli["check"] and by_cli["diff_mode"] and by_cli["echo"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_direct_asserts_with_the_module_output(probe):
    with pytest.raises(AssertionError, match="(?s)no module result.*the probe crashed"):
        ansible_run.direct("probe.check.probe", {"crash": True}, env=probe["direct"])


def test_playbook_tasks_stats_and_rc(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAYS)
    done = ansible_run.playbook(play)
    assert sorted(done.tasks()) == ["first", "second"] and list(done.tasks(play=1)) == ["second"]
    assert done.tasks()["first"]["msg"] == "one" and done.result()["msg"] == "one"
    assert done.stats()["ok"] == 2 and done.stats()["failures"] == 0
    with pytest.raises(AssertionError, match="rc 0 of .*ansible-playbook"):
        ansible_run.playbook(play, expect_rc=2)


def test_no_json_output_is_an_assertion_with_the_output(tmp_path):
    done = ansible_run.run(["ansible", "--version"], env=ansible_run.ansible_env(json_output=False), expect_rc=0)
    assert "ansible" in done.stdout
    with pytest.raises(AssertionError, match="no JSON output"):
        done.result()


def test_a_failed_playbook_names_its_failed_task_first(tmp_path):
    play = tmp_path / "fail.yml"
    play.write_text(PLAYS.replace("ansible.builtin.set_fact: {answer: 42}",
                                  "ansible.builtin.fail: {msg: the reason it stopped}"))
    done = ansible_run.playbook(play, expect_rc=None)   # one run: the CLI costs seconds on a loaded machine
    head = done.output().split("--- stdout", 1)[0]      # what playbook()'s assertion message starts with
    assert done.rc == 2 and "--- failed: second (localhost)\nthe reason it stopped" in head, head
    assert done.failures().count("--- failed:") == 1
