"""The checkout's root directory, for tests at any depth below tests/ (tests/conftest.py puts tests/ on sys.path),
and a loader for the checkout's scripts that are no package (tools/)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name, *path):
    """The Python file at ROOT/path..., imported as a module called name."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
