"""The typed public API (issue 25): every public function and method of the modules mypy checks (mypy.ini) has its
parameters and return annotated, so mypy checks its callers; a new untyped one fails here, naming it."""
import ast
import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = "ansible_collections.soperator.slurm."


def typed_files():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "mypy.ini"))
    names = config["mypy"]
    files = []
    for module in names["modules"].replace(",", " ").split():
        files.append(os.path.join(ROOT, *module[len(PREFIX):].split(".")) + ".py")
    for package in names["packages"].replace(",", " ").split():
        folder = os.path.join(ROOT, *package[len(PREFIX):].split("."))
        files.extend(os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".py"))
    return files


def public_functions(tree):
    """(name, node) of each function a caller outside the module may call: module functions and methods of public
    classes whose names do not start with '_' (and __init__, the constructor)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (not item.name.startswith("_") or item.name == "__init__"):
                    yield "%s.%s" % (node.name, item.name), item


def missing(node):
    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    if args and args[0].arg in ("self", "cls"):
        args = args[1:]
    args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
    gaps = [a.arg for a in args if a.annotation is None]
    if node.returns is None:
        gaps.append("return")
    return gaps


def test_public_functions_of_the_typed_modules_are_annotated():
    untyped = []
    for path in typed_files():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for name, node in public_functions(tree):
            gaps = missing(node)
            if gaps:
                untyped.append("%s:%d %s (%s)" % (os.path.relpath(path, ROOT), node.lineno, name, ", ".join(gaps)))
    assert not untyped, "public functions without annotations:\n" + "\n".join(untyped)


def test_the_check_sees_the_typed_modules():
    files = typed_files()
    assert all(os.path.isfile(f) for f in files) and any(f.endswith("spec/model.py") for f in files)
