"""The module contract (module_base.py, errors.py, args.py): one exception hierarchy that every module turns into
fail_json in one place, the shared argument specs merged from one home, and a clear failure when a run needs the
kubernetes.core collection and it is missing. The modules run in-process here, as Ansible runs them."""
import ast
import copy
import importlib
import inspect
import json
import os
import pkgutil
import sys

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.modules import (
    jail_populate, slurm_account, slurm_cluster, slurm_cluster_info, slurm_drain, slurm_node_info, slurm_nodeset,
    slurm_qos, slurm_remediate, slurm_token, slurm_user)

UTILS = "ansible_collections.soperator.slurm.plugins.module_utils"
UTILS_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "plugins", "module_utils")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "small-cpu.yml")
MODULES = (jail_populate, slurm_cluster, slurm_cluster_info, slurm_drain, slurm_node_info, slurm_nodeset,
           slurm_remediate, slurm_account, slurm_user, slurm_qos, slurm_token)


def _library_modules():
    """Every module of module_utils but node/ (standalone programs for the images: standard library only)."""
    package = importlib.import_module(UTILS)
    for info in pkgutil.walk_packages(package.__path__, UTILS + "."):
        if ".node" not in info.name:
            yield importlib.import_module(info.name)


def test_every_public_exception_of_module_utils_is_a_soperator_error():
    found = []
    for module in _library_modules():
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module.__name__ \
                    and not name.startswith("_"):
                found.append(cls)
                assert issubclass(cls, SoperatorError), "%s.%s" % (module.__name__, name)
    assert len(found) >= 25     # the hierarchy, not one class that happens to be found


def test_the_node_programs_import_nothing_of_the_collection_but_each_other():
    node_dir = os.path.join(UTILS_DIR, "node")
    for name in sorted(os.listdir(node_dir)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(node_dir, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "soperator" in node.module:
                assert node.module.startswith(UTILS + ".node"), (name, node.module)


def test_a_soperator_error_carries_its_message_and_result():
    e = SoperatorError("it broke", objects=[1], changed=False)
    assert str(e) == "it broke" and e.msg == "it broke" and e.result == {"objects": [1], "changed": False}


def test_merged_spec_copies_the_shared_specs_and_refuses_an_option_defined_twice():
    spec = args.merged_spec(dict(name=dict(type="str")), args.KUBE_API_SPEC)
    spec["api_retries"]["default"] = 99
    assert args.KUBE_API_SPEC["api_retries"]["default"] == 3
    with pytest.raises(ValueError, match="options defined twice: api_timeout"):
        args.merged_spec(dict(api_timeout=dict(type="int")), args.KUBE_API_SPEC)


def run_module(module, capsys, **params):
    """(exit code, result) of module.main() with `params`, run as Ansible runs it."""
    with patch_module_args(params):
        with pytest.raises(SystemExit) as exit_:
            module.main()
    return exit_.value.code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_module_has_the_kubernetes_core_auth_options(module, capsys, monkeypatch):
    captured = {}

    def capture(self, argument_spec, **kwargs):
        captured.update(argument_spec)
        raise SystemExit(0)
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.__init__", capture)
    with pytest.raises(SystemExit):
        module.main()
    assert set(args.AUTH_ARG_SPEC) <= set(captured)
    assert all(captured[k] == args.AUTH_ARG_SPEC[k] and captured[k] is not args.AUTH_ARG_SPEC[k]
               for k in args.AUTH_ARG_SPEC)


def test_an_invalid_spec_fails_with_every_field_path(capsys, tmp_path):
    docs = list(yaml.safe_load_all(open(EXAMPLE)))
    docs[1]["spec"]["replicas"] = 99
    code, result = run_module(slurm_cluster, capsys, state="rendered", dest=str(tmp_path), definition=docs)
    assert code == 1 and result["failed"]
    assert result["errors"] == [{"path": "NodeSet/cpu spec", "message": "maxReplicas (4) must be >= replicas (99)"}]
    assert result["msg"].startswith("invalid spec (1 error)")
    assert os.listdir(str(tmp_path)) == []


def test_a_run_exits_with_its_result_and_reruns_unchanged(capsys, tmp_path):
    dest = str(tmp_path / "out")
    code, first = run_module(slurm_cluster, capsys, state="rendered", dest=dest, src=EXAMPLE)
    assert code == 0 and first["changed"] and first["cluster"]["name"] == "small"
    code, again = run_module(slurm_cluster, capsys, state="rendered", dest=dest, src=EXAMPLE)
    assert code == 0 and not again["changed"] and again["generated_secrets"] == []


def test_an_option_check_fails_the_module(capsys, tmp_path):
    code, result = run_module(slurm_cluster, capsys, state="rendered", dest=str(tmp_path), src=EXAMPLE,
                              wait_timeout=0)
    assert code == 1 and result["msg"] == "wait_timeout must be > 0, got 0"


@pytest.mark.parametrize("module, params", [
    (slurm_cluster, dict(state="present", target="kubernetes", src=EXAMPLE)),
    (slurm_cluster_info, dict(name="small", namespace="slurm")),
    (slurm_nodeset, dict(name="cpu", namespace="slurm", cluster_name="small")),
    (slurm_drain, dict(nodes="w-0", reason="r", transport="kubernetes", namespace="slurm", cluster_name="small")),
    (slurm_node_info, dict(transport="kubernetes", namespace="slurm", cluster_name="small")),
    (jail_populate, dict(target="kubernetes", name="small", namespace="slurm")),
    (slurm_remediate, dict(target="kubernetes", src=EXAMPLE)),
    (slurm_qos, dict(qos=[{"name": "high"}], transport="kubernetes", namespace="slurm", cluster_name="small")),
    (slurm_account, dict(accounts=[{"name": "a"}], transport="kubernetes", namespace="slurm", cluster_name="small")),
    (slurm_user, dict(transport="kubernetes", src=EXAMPLE)),
    (slurm_token, dict(user="alice", transport="kubernetes", namespace="slurm", cluster_name="small")),
], ids=lambda v: v.__name__.rsplit(".", 1)[-1] if hasattr(v, "__name__") else "")
def test_a_kubernetes_run_without_kubernetes_core_fails_clearly(module, params, capsys, monkeypatch):
    monkeypatch.setattr(args, "HAS_KUBERNETES_CORE", False)
    code, result = run_module(module, capsys, **copy.deepcopy(params))
    assert code == 1 and "kubernetes.core collection" in result["msg"], result


def test_a_local_run_does_not_need_kubernetes_core(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(args, "HAS_KUBERNETES_CORE", False)
    code, result = run_module(slurm_cluster, capsys, state="rendered", dest=str(tmp_path), src=EXAMPLE)
    assert code == 0 and result["changed"]


@pytest.fixture
def without_kubernetes_core(monkeypatch):
    """args.py loaded as where the kubernetes.core collection is not installed: its import fails."""
    monkeypatch.setitem(sys.modules, "ansible_collections.kubernetes.core.plugins.module_utils.args_common", None)
    importlib.reload(args)
    yield
    monkeypatch.undo()
    importlib.reload(args)


@pytest.mark.parametrize("option, value", [("kubeconfig", "/root/.kube/config"), ("verify_ssl", False)])
def test_kubernetes_options_without_kubernetes_core_fail_naming_the_collection(option, value, without_kubernetes_core,
                                                                               capsys, tmp_path):
    assert not args.HAS_KUBERNETES_CORE
    # a run that reaches no API server otherwise (rendered files): the options alone need kubernetes.core
    code, result = run_module(slurm_cluster, capsys, state="rendered", dest=str(tmp_path), src=EXAMPLE,
                              **{option: value})
    assert code == 1 and "kubernetes.core collection" in result["msg"], result
    named = "validate_certs" if option == "verify_ssl" else option     # an alias is reported by its option
    assert named in result["msg"] and "Unsupported parameters" not in result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_the_auth_options_known_without_kubernetes_core_are_its_options():
    assert args.HAS_KUBERNETES_CORE     # installed here (requirements.yml): the list is checked against it
    assert args.AUTH_OPTIONS == dict((name, tuple(spec.get("aliases", ())))
                                     for name, spec in args.AUTH_ARG_SPEC.items())
