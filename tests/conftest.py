"""Make the repository importable as ansible_collections.soperator.slurm, the way Ansible loads it."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = os.path.join(ROOT, "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
