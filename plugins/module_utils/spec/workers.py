# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SlurmCluster's `spec.workers`: what holds for the workers of every NodeSet together (one place for its schema
and its model).

`maxStartingPods` bounds how many worker pods of the cluster's StatefulSets may be asked for and not Ready at once
(kube/stagger.py raises the StatefulSets' replicas in steps to keep it). It is the cluster's, not a NodeSet's: the
registration storm it guards against is slurmctld's, whichever NodeSets its nodes come from.

Why 100 by default: kube-controller-manager makes pods at about 20 a second (its default client QPS), so a
StatefulSet raised from 0 to 1,000 has hundreds of pods starting, and their slurmd registering, at once. Measured
here (README, "Scale"; host Slurm 22.05) one registration cost slurmctld 0.8 to 0.9 ms on average with 128 slurmd
starting at once and 5 to 7 ms with 256 to 512: 100 keeps below the count where it grew, and at 20 pods a second
the controller needs 5 s to make a step of 100 anyway, so a cluster of 1,000 workers takes 10 steps.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Dict

from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import Int, Node, Obj

INT32_MAX = 2 ** 31 - 1


def workers_schema() -> Node:
    return Obj("What holds for the workers of all NodeSets together.", {
        "maxStartingPods": Int("Worker pods of the NodeSets' StatefulSets that may be asked for and not Ready at "
                               "once, over all NodeSets: a run that waits (wait=true, site.yml's default) raises "
                               "replicas in steps, each waited for (up to wait_timeout) before the next. 0: no "
                               "bound (all at once). The nodes Slurm powers up (ephemeral) are paced by "
                               "ResumeRate instead.", minimum=0, maximum=INT32_MAX,
                               default=m.DEFAULT_MAX_STARTING_PODS),
    })


def workers_model(workers: Dict[str, Any]) -> m.Workers:
    """The model of a validated spec.workers."""
    return m.Workers(max_starting_pods=workers["maxStartingPods"])
