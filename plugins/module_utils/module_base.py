# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module contract: every module of the collection is a SoperatorModule.

    def main():
        module = SoperatorModule(OPTIONS, shared=(args.SPEC_SOURCE_SPEC, args.AUTH_ARG_SPEC),
                                 uses_kubernetes=lambda p: p["target"] == "kubernetes", supports_check_mode=True)
        module.run(_run)        # _run(module) -> the result dict, or raises a SoperatorError

SoperatorModule merges the module's own options with the shared specs of args.py, fails with missing_required_lib
when a run needs the kubernetes.core collection and it is not installed (it reaches an API server, or sets one of
that collection's auth options), and ends every run in one place: exit_json with what the run returned, or fail_json
with the message and result of the SoperatorError it raised.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError


def require_kubernetes_core(reason):
    """SoperatorError when the kubernetes.core collection (the Kubernetes credentials options) is missing: without it
    the auth options would go unused, and the API server would be reached with defaults instead."""
    if not args.HAS_KUBERNETES_CORE:
        raise SoperatorError(missing_required_lib("the kubernetes.core collection", reason=reason,
                                                  url="https://galaxy.ansible.com/ui/repo/published/kubernetes/core/"))


class SoperatorModule(AnsibleModule):
    """An AnsibleModule with the collection's shared options and failure handling.

    argument_spec: the module's own options; shared: the specs of args.py it adds (each a fresh copy);
    uses_kubernetes(params): True when this run reaches a Kubernetes API server (then kubernetes.core is needed).
    Every other keyword goes to AnsibleModule (mutually_exclusive, required_if, supports_check_mode...)."""

    def __init__(self, argument_spec, shared=(), uses_kubernetes=None, **kwargs):
        super(SoperatorModule, self).__init__(argument_spec=args.merged_spec(argument_spec, *shared), **kwargs)
        self.uses_kubernetes = uses_kubernetes or (lambda params: False)

    def run(self, operation):
        """Exit with operation(self), the result dict; fail with the message and result of a SoperatorError."""
        try:
            if self.uses_kubernetes(self.params):
                require_kubernetes_core("by the Kubernetes options of this task")
            given = sorted(name for name in args.AUTH_OPTIONS if self.params.get(name) is not None)
            if given:
                require_kubernetes_core("by the options %s" % ", ".join(given))
            end, result = self.exit_json, operation(self)
        except SoperatorError as e:
            end, result = self.fail_json, dict(e.result, msg=str(e))
        end(**result)
