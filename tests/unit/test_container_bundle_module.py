"""The container_bundle module, run in-process as Ansible runs it: check mode and the real run from one plan, diff,
a second run unchanged, state=absent only for our bundle, options refused before anything is written. Registry
images: tests/slurm/test_oci_registry.py (a real registry)."""
import json
import os
import sys

from ansible_collections.soperator.slurm.plugins.modules import container_bundle
import oci_helpers
from test_module_contract import run_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "node"))
import test_jail_hostile as hostile     # noqa: E402  pylint: disable=wrong-import-position

LAYER = [hostile.D("etc"), hostile.F("etc/os-release", b"ID=tiny\n")]


def test_check_mode_diff_present_again_and_absent(capsys, tmp_path):
    layout = str(tmp_path / "layout")
    desc = oci_helpers.make_layout(layout, [LAYER])
    jail = tmp_path / "jail"
    cache = str(jail / "opt" / "bundles")
    name = "sha256-" + desc["digest"].split(":")[1]
    params = dict(source=layout, cache=cache, jail_dir=str(jail), _ansible_diff=True)
    code, checked = run_module(container_bundle, capsys, _ansible_check_mode=True, **params)
    assert code == 0 and checked["changed"] and not jail.exists(), "check mode writes nothing"
    assert checked["diff"] == {"before": {"bundle": os.path.join(cache, name), "state": "absent"},
                               "after": {"bundle": os.path.join(cache, name), "state": "present"}}
    code, made = run_module(container_bundle, capsys, **params)
    assert code == 0 and made["changed"] and made["digest"] == desc["digest"] and made["commands"] == []
    assert made["bundle"] == checked["bundle"] and made["container_path"] == "/opt/bundles/" + name
    assert os.path.isfile(os.path.join(made["bundle"], "rootfs", "etc", "os-release"))
    code, again = run_module(container_bundle, capsys, **params)
    assert code == 0 and not again["changed"] and again["diff"]["before"] == again["diff"]["after"]
    code, checked = run_module(container_bundle, capsys, _ansible_check_mode=True, state="absent", **params)
    assert code == 0 and checked["changed"] and os.path.isdir(made["bundle"])
    code, gone = run_module(container_bundle, capsys, state="absent", **params)
    assert code == 0 and gone["changed"] and os.listdir(cache) == []
    code, again = run_module(container_bundle, capsys, state="absent", **params)
    assert code == 0 and not again["changed"]


def test_absent_refuses_a_folder_we_did_not_make(capsys, tmp_path):
    layout = str(tmp_path / "layout")
    desc = oci_helpers.make_layout(layout, [LAYER])
    cache = tmp_path / "cache"
    theirs = cache / ("sha256-" + desc["digest"].split(":")[1])
    theirs.mkdir(parents=True)
    (theirs / "data").write_text("someone's")
    code, result = run_module(container_bundle, capsys, source=layout, cache=str(cache), state="absent",
                              _ansible_check_mode=True)
    assert code == 1 and "was not made by soperator-bundle" in result["msg"] and not result["changed"]
    code, result = run_module(container_bundle, capsys, source=layout, cache=str(cache), state="absent")
    assert code == 1 and (theirs / "data").read_text() == "someone's"


def test_a_cache_outside_the_jail_or_a_missing_source_fails_before_anything_is_written(capsys, tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [LAYER])
    code, result = run_module(container_bundle, capsys, source=layout, cache=str(tmp_path / "cache"),
                              jail_dir=str(tmp_path / "jail"))
    assert code == 1 and result["msg"].endswith("is not inside the jail %s" % (tmp_path / "jail"))
    code, result = run_module(container_bundle, capsys, source=str(tmp_path / "nothing"),
                              cache=str(tmp_path / "cache"))
    assert code == 1 and "No such file or directory" in result["msg"]
    assert not (tmp_path / "cache").exists()
    code, result = run_module(container_bundle, capsys, source=layout, cache=str(tmp_path / "cache"),
                              registry_username="u", registry_password="p")
    assert code == 1 and "registry_username is for a registry image" in result["msg"]


def test_the_bundle_is_for_the_user_and_mounts_given_and_another_user_is_refused(capsys, tmp_path):
    layout = str(tmp_path / "layout")
    oci_helpers.make_layout(layout, [LAYER])
    cache = str(tmp_path / "cache")
    code, made = run_module(container_bundle, capsys, source=layout, cache=cache, user="1500:1600",
                            mounts=["/home", "/data"])
    assert code == 0 and made["changed"], made
    with open(os.path.join(made["bundle"], "config.json")) as f:
        config = json.load(f)
    assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1500, "size": 1}]
    assert [m["destination"] for m in config["mounts"][-2:]] == ["/home", "/data"]
    code, checked = run_module(container_bundle, capsys, source=layout, cache=cache, user="1501:1600",
                               _ansible_check_mode=True)
    assert code == 1 and "made with another config.json" in checked["msg"]
    code, bad = run_module(container_bundle, capsys, source=layout, cache=cache, user="alice")
    assert code == 1 and bad["msg"] == "user 'alice' is not UID:GID"
