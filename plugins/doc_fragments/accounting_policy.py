# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The options slurm_account, slurm_user and slurm_qos share beside their list (module_utils/slurm/accounting_setup.py).
    DOCUMENTATION = r"""
options:
  src:
    description:
      - Path of the spec (a SlurmCluster and its NodeSets, multi-document YAML) whose C(spec.accounting) to apply,
        instead of the module's list. The whole spec is validated first; its C(metadata.name) is the Slurm cluster.
      - Mutually exclusive with O(definition) and the module's list.
    type: path
  definition:
    description:
      - The spec's documents themselves (as O(src) holds them).
    type: raw
  purge:
    description:
      - Also delete what this collection created (a Description that starts with C(soperator:)) and the entries no
        longer declare. Never while a job that would lose it is pending or running; the run is then refused before
        any command, naming the jobs.
    type: bool
    default: false
notes:
  - Reads with one C(sacctmgr -n -P show) per kind and runs only the C(add) / C(modify) (and with O(purge),
    C(delete)) commands that are needed; a re-run runs none. After the commands it reads everything back, and a change
    that does not show (C(sacctmgr) exits 0 for some refusals) fails the task.
  - A field left out of an entry is left as Slurm has it; a limit of V(-1) removes that limit.
  - Slurm lowercases names and descriptions; an entry with capitals is refused rather than changed behind your back.
  - Associations are made in the cluster O(cluster_name), else the spec's, else the C(ClusterName) that
    C(scontrol show config) reports. With O(src) or O(definition), O(namespace) and O(cluster_name) default to the
    spec's (O(transport=kubernetes) needs them otherwise).
"""
