# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""spec.identity names Secrets and ConfigMaps the user owns (the bind password, the CA, a ready sssd.conf): each must
exist, with its key, before anything is applied, or the SSSD sidecars would wait in ContainerCreating. Checked before
the first write, check mode too; an error names the field. A Secret's values are read by the GET and dropped here:
only whether the key is there leaves this module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.kube.readiness import BackendError
from ansible_collections.soperator.slurm.plugins.module_utils.render.identity_kube import identity_refs
from ansible_collections.soperator.slurm.plugins.module_utils.render.sssd_conf import ca_bundle_problem


def check_identity_refs(client, model):
    """Raise BackendError naming every field whose Secret or ConfigMap (or key) is missing."""
    problems = []
    for path, kind, ref in identity_refs(model):
        obj = client.get(kind, ref.name, model.namespace)
        if obj is None:
            problems.append("%s: %s %r does not exist in namespace %r" % (path, kind, ref.name, model.namespace))
            continue
        keys = set(obj.get("data") or {}) | set(obj.get("binaryData") or {})
        if ref.key not in keys:
            problems.append("%s: %s %r has no key %r" % (path, kind, ref.name, ref.key))
        elif kind == "ConfigMap":
            problem = ca_bundle_problem((obj.get("data") or {}).get(ref.key) or "")
            if problem:
                problems.append("%s: ConfigMap %r key %r %s" % (path, ref.name, ref.key, problem))
    if problems:
        raise BackendError("; ".join(problems) + " (create it first; nothing was applied)")
