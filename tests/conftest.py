"""Make the repository importable as ansible_collections.soperator.slurm, the way Ansible loads it."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = os.path.join(ROOT, "build", "collections")
_LINK = os.path.join(_COLLECTIONS, "ansible_collections", "soperator", "slurm")
if not os.path.exists(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    os.symlink(ROOT, _LINK)
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
