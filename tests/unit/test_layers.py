"""The layers of plugins/module_utils only point downwards: a module imports its own layer or a lower one, never a
higher one (an AST walk over every import, function-level ones included). node/ is apart: the images copy it into
one directory and run it as programs, so it imports nothing of ours but node/, and anyone may import it."""
import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "plugins", "module_utils")
PACKAGE = "ansible_collections.soperator.slurm.plugins.module_utils"

# Bottom to top. The Slurm ops sit below the backends: kube/ and local/ drive them (drain, remove, remediate, roll)
# and hand them what differs (a runner's transport, a replacer), so they never import a backend.
LAYERS = (
    ("base", ("slurm_syntax", "constants", "errors", "files", "wait", "retry")),
    ("spec", ("spec",)),
    ("slurm ops", ("slurm",)),
    ("observe", ("observe",)),
    ("render", ("render",)),
    ("backends", ("kube", "local")),
    ("wiring", ("args", "module_base", "module_support", "kube.module", "slurm.remediation_setup",
                "slurm.accounting_setup")),
)
APART = "node"


def layer_of(module):
    """(rank, name) of a dotted module path below module_utils; the longest matching prefix decides."""
    best = None
    for rank, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), rank, name)
    if best is None:
        raise AssertionError("module_utils/%s is in no layer: add it to LAYERS" % module.replace(".", "/"))
    return best[1], best[2]


def our_imports(path, module):
    """(line, imported module) for every import of ours in the file at `path`, at any depth."""
    tree = ast.parse(open(path).read(), path)
    package = module.split(".")[:-1] if not path.endswith("__init__.py") else module.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith(PACKAGE):
                target = node.module[len(PACKAGE) + 1:]
            else:
                continue
            # `from package import module` names modules: each counts as imported
            for alias in node.names:
                full = "%s.%s" % (target, alias.name) if target else alias.name
                yield node.lineno, full if _is_module(full) else target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    yield node.lineno, alias.name[len(PACKAGE) + 1:]


def _is_module(dotted):
    path = os.path.join(ROOT, *dotted.split("."))
    return os.path.isfile(path + ".py") or os.path.isdir(path)


def modules():
    for folder, _dirs, files in os.walk(ROOT):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)[:-3]
                if rel.endswith("__init__"):
                    rel = rel[:-len("__init__")].rstrip(os.sep)
                yield path, rel.replace(os.sep, ".")


def violations(files):
    found = []
    for path, module in files:
        if not module:
            continue
        for line, target in our_imports(path, module):
            where = "module_utils/%s.py:%d imports %s" % (module.replace(".", "/"), line, target)
            if module.split(".")[0] == APART or target.split(".")[0] == APART:
                if module.split(".")[0] == APART and target.split(".")[0] != APART:
                    found.append("%s: node/ imports nothing of ours but node/" % where)
                continue
            (rank, name), (target_rank, target_name) = layer_of(module), layer_of(target)
            if target_rank > rank:
                found.append("%s: %s is below %s" % (where, name, target_name))
    return found


def test_no_layer_imports_a_higher_one():
    assert violations(modules()) == []


def test_spec_and_render_import_nothing_of_slurm_ops():
    """The Slurm syntax they need lives in slurm_syntax/; slurm/ is the orchestration above them."""
    found = ["module_utils/%s.py:%d imports %s" % (module.replace(".", "/"), line, target)
             for path, module in modules() if module.split(".")[0] in ("spec", "render")
             for line, target in our_imports(path, module) if target.split(".")[0] == "slurm"]
    assert found == []


def test_every_module_is_in_a_layer():
    for _path, module in modules():
        if module and module.split(".")[0] != APART:
            layer_of(module)


@pytest.mark.parametrize("module, source, problem", [
    ("spec.bad", "from %s.slurm import nodes\n" % PACKAGE, "spec is below slurm ops"),
    ("render.bad", "def f():\n    from %s.kube.client import KubeError\n" % PACKAGE, "render is below backends"),
    ("slurm.bad", "from ..local import backend\n", "slurm ops is below backends"),
    ("node.bad", "from %s import constants\n" % PACKAGE, "node/ imports nothing of ours but node/"),
])
def test_a_higher_import_is_reported(tmp_path, module, source, problem):
    path = tmp_path / "bad.py"
    path.write_text(source)
    found = violations([(str(path), module)])
    assert len(found) == 1 and found[0].endswith(problem), found
