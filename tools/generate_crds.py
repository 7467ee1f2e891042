"""Write crds/*.yaml from plugins/module_utils/spec/crds.py (the schema spec.py validates with). Run after a spec change;
tests/unit/spec/test_crds.py fails while the files are stale."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.soperator.slurm.plugins.module_utils.spec.crds import crds  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import to_yaml  # noqa: E402


def crd_files():
    return {"%s.yaml" % crd["metadata"]["name"]: "---\n" + to_yaml(crd) for crd in crds()}


if __name__ == "__main__":
    for name, text in crd_files().items():
        with open(os.path.join(ROOT, "crds", name), "w") as f:
            f.write(text)
        print("wrote crds/%s" % name)
