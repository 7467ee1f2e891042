"""tests/ansible_run.py, the suite's one runner of the Ansible CLIs: parsing, rc and failure checks, environment."""
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
    # a short name is one of this collection's modules: it is found, and refuses an argument it does not have
    refused = ansible_run.module("slurm_node_info", {"nonsense": 1}, expect_failed=True)
    assert "Unsupported parameters for (soperator.slurm.slurm_node_info) module: nonsense" in refused["msg"], refused


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
