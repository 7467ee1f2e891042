# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # How a module reaches Slurm. Use together with kubernetes.core.k8s_auth_options (the Kubernetes credentials
    # of O(transport=kubernetes)).
    DOCUMENTATION = r"""
options:
  transport:
    description:
      - How Slurm commands (C(scontrol), C(sinfo), C(squeue)) are run.
      - V(local) runs them on the managed host, with C(SLURM_CONF) from O(slurm_conf) or the environment (the local
        backend exports it).
      - V(kubernetes) runs them in the controller pod C(<cluster_name>-controller-0), container
        O(controller_container), of O(namespace) through the Kubernetes exec API; the Kubernetes credentials are the
        kubernetes.core auth options (O(kubeconfig), O(context), O(host), O(api_key), ...). When that pod is gone or
        its container is not running, they run in C(<cluster_name>-controller-1) (a backup controller's pod), whose
        clients reach whichever controller is in control.
    type: str
    choices: [local, kubernetes]
    default: local
  slurm_conf:
    description:
      - Path of C(slurm.conf) to use. With O(transport=local), the default is C(SLURM_CONF) of the environment, then
        Slurm's built-in default.
      - With O(transport=kubernetes), a path inside the controller pod; by default the image's own configuration.
    type: path
  namespace:
    description:
      - Kubernetes namespace of the cluster. Required with O(transport=kubernetes).
    type: str
  cluster_name:
    description:
      - Name of the SlurmCluster; the controller pod is C(<cluster_name>-controller-0). Required with
        O(transport=kubernetes).
    type: str
  controller_container:
    description:
      - Container of the controller pod that runs slurmctld (and has the Slurm client commands).
    type: str
    default: slurmctld
  retries:
    description:
      - How many times a command is retried when the Slurm controller (or the controller pod) does not answer.
      - Other failures are never retried. After the last retry the task fails; it never reports success it did not
        read back from slurmctld.
    type: int
    default: 3
  retry_delay:
    description:
      - Seconds before the first retry; the delay grows by this much before each further retry.
    type: float
    default: 2.0
  command_timeout:
    description:
      - Seconds one Slurm command may run before it counts as not answering (and is retried).
      - With O(transport=kubernetes), the command is also ended in the pod (by coreutils C(timeout) there) a second
        later, so a command the module stopped waiting for does not go on running beside its retry.
    type: int
    default: 60
requirements:
  - Slurm client commands (C(scontrol), C(sinfo), C(squeue)) where they run, and munge access to the cluster.
  - With O(transport=kubernetes), the C(kubernetes) Python client on the host that runs the module and the right to
    create C(pods/exec) in O(namespace).
"""
