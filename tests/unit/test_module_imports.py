"""What a module run imports: the kubernetes client only when the run reaches an API server. Importing it costs about
0.6 s of CPU (kubernetes' package imports its config loaders, dynamic client and kubernetes_validate), which every
run of every module paid before (kube/client.py imports it where a request is made). Each case runs in a fresh
interpreter, as Ansible runs a module, and reads sys.modules afterwards."""
import json
import os
import subprocess
import sys

import pytest

MODULES = "ansible_collections.soperator.slurm.plugins.modules"
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "small-cpu.yml")
# every module of the collection, a new one included
ALL = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules"))
             if name.endswith(".py") and name != "__init__.py")

SCRIPT = """
import json, sys
from ansible.module_utils.testing import patch_module_args
import importlib
module = importlib.import_module(%(module)r)
params = %(params)s
if params is not None:
    with patch_module_args(params):
        try:
            module.main()
        except SystemExit:
            pass
sys.stderr.write("\\nIMPORTED " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes")))
"""


def kubernetes_modules_after(module, params=None):
    """The kubernetes.* modules imported after importing `module` (and running it with `params`, when given);
    with the module's result (its stdout)."""
    code = SCRIPT % dict(module="%s.%s" % (MODULES, module), params=json.dumps(params) if params else "None")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), check=False)
    assert "\nIMPORTED " in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stderr.rsplit("\nIMPORTED ", 1)[1]), proc.stdout


@pytest.mark.parametrize("module", ALL)
def test_importing_a_module_imports_no_kubernetes(module):
    assert kubernetes_modules_after(module) == ([], "")


def test_a_rendered_run_imports_no_kubernetes_and_a_kube_run_does(tmp_path):
    imported, out = kubernetes_modules_after("slurm_cluster", dict(state="rendered", src=os.path.abspath(EXAMPLE),
                                                                   dest=str(tmp_path / "out")))
    assert json.loads(out).get("failed") is not True, out
    assert sorted(os.listdir(tmp_path / "out")) and imported == []
    # the other side, so the first cannot pass for a wrong reason: a run for the Kubernetes target reaches for the
    # client (and fails here: no server at this kubeconfig)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    imported, out = kubernetes_modules_after("slurm_cluster", dict(
        state="present", target="kubernetes", src=os.path.abspath(EXAMPLE), kubeconfig=str(kubeconfig),
        api_retries=0, api_timeout=5))
    assert json.loads(out).get("failed") is True, out
    assert "kubernetes.client" in imported, imported
