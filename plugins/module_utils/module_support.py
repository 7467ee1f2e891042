# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules repeat, written once: the checks of their options and how a spec reaches them.

    ms.require_yaml(module)
    ms.require_positive(module, "wait_timeout", "api_timeout")
    model = ms.model_from_options(module)        # src / definition -> ClusterModel, or fail_json with the field paths

How a module reaches Slurm or Kubernetes (argument specs, runner, client) is args.py and kube/module.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import missing_required_lib

# require_positive and fail_spec_error live in args.py (slurm_cluster imports them from there); the other modules
# take every shared check from this file.
from ansible_collections.soperator.slurm.plugins.module_utils.args import fail_spec_error, require_positive
from ansible_collections.soperator.slurm.plugins.module_utils.render.yaml_dump import HAS_YAML
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import documents_from

__all__ = ["fail_spec_error", "model_from_options", "require_positive", "require_yaml"]


def require_yaml(module):
    """Fail as Ansible does for a missing library when PyYAML is not installed (specs are YAML)."""
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"))


def model_from_options(module, src="src", definition="definition"):
    """The ClusterModel of the module's `src` (a YAML file) or `definition` option. An unreadable file fails with
    'cannot read src', a spec that does not validate with every issue and its field path."""
    params = module.params
    try:
        return build_model(documents_from(params[src], params[definition]))
    except SpecError as e:
        fail_spec_error(module, e)
    except (IOError, OSError) as e:
        module.fail_json(msg="cannot read src %s: %s" % (params[src], e))
