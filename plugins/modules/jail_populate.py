#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: jail_populate
short_description: Fill a Slurm cluster's jail (the root filesystem users see as /) from a root filesystem image
version_added: 0.1.0
description:
  - The jail is the root filesystem shared by the login and worker nodes; jobs and SSH logins are chrooted into it.
    This module fills it once, and records what filled it and when in a sentinel file at the jail's root
    (C(.soperator-jail.json)). The sentinel is written last, so a populate cut short is never taken for a populated
    jail.
  - With O(target=local), fills the directory O(jail_dir) from O(source) - a root filesystem tarball (plain, gzip,
    bzip2 or xz), an OCI image layout (unpacked with umoci), or a directory. The new root filesystem is written to a
    staging directory inside the jail first, then the old entries are moved out and the new ones in.
  - A tarball cannot write outside the jail. It is read in full before the jail is touched, and a member with C(..)
    in its path, one written through a symlink or a file, or a hard link to something that is not a regular file
    the archive wrote before it fails the task, naming the member; leading C(/) is taken as the jail's root. Nothing
    written follows a symlink, including one the archive itself made (a name that was a directory and is a symlink
    later is not given the directory's mode). Symlinks (absolute ones too, they resolve inside the jail), hard links,
    modes (setuid included) and numeric owners are kept. Device nodes are skipped and listed in RV(skipped_entries)
    (the jail's C(/dev) comes from the host when a job or a login enters it).
  - A tarball or directory whose files do not fit in the free space of the jail's filesystem (sparse files count in
    full, as they are written in full) fails the task before anything is written, saying what it needs and what is
    free. Every size, offset and sparse map in a tarball's headers is checked before it is used (not negative,
    inside the archive, no more than the jail's filesystem has free); a damaged or truncated archive fails the task
    naming the archive and the member.
  - One populate of a jail at a time, with O(target=local) and in the Job's program alike. A populate holds a lock
    file at the jail's root (C(.soperator-populate.lock), removed when it is done) and decides again under it, right
    before it moves its content in; a populate that waited for another one finds what that one did (with
    O(overwrite=never) the sentinel, so RV(outcome) is C(unchanged) and nothing is written).
  - A O(jail_dir) that is a symbolic link is refused, as C(slurm_cluster) refuses a linked C(state_dir); pass the
    directory it points to.
  - With O(target=kubernetes), runs the cluster's populate Job (as C(slurm_cluster) renders it) and waits for it.
    The Job's program is the same code, running in the populate image; the sentinel it prints is recorded in the
    SlurmCluster's C(.status.jail), so later runs know the jail is populated without starting a pod, and the Job is
    not created again.
author:
  - soperator.slurm contributors (@soperator-slurm)
attributes:
  check_mode:
    support: full
    details:
      - Reports the action the run would take (RV(outcome)) and, with O(target=local), the sentinel it would write
        (without C(populated_at)). A tarball or directory source is checked as the real run checks it (every
        member, and its size against the free space), so a source the run would refuse fails in check mode too,
        and so does a jail in use (O(overwrite)); RV(restarted) lists the login sshds the run would restart.
        Nothing is written.
      - With O(target=kubernetes), the Job's delete and create are sent as server-side dry runs and no status is
        written. Whether the Job's program finds the jail populated is known only when it runs.
  diff_mode:
    support: full
    details:
      - The sentinel before and after.
options:
  target:
    description:
      - V(local) fills O(jail_dir) on the machine the module runs on; V(kubernetes) runs the cluster's populate Job.
    type: str
    required: true
    choices: [kubernetes, local]
  overwrite:
    description:
      - V(never) populates an empty jail, leaves a jail with a sentinel alone, and refuses (fails) a jail that is not
        empty and has no sentinel - it was filled by someone else, or a populate was cut short; it is not ours to
        overwrite.
      - V(if_empty) populates only an empty jail (nothing but C(lost+found)); anything else is left as it is.
      - V(always) replaces the jail's contents on every run (C(lost+found) stays). It is refused while the jail is in
        use, unless O(force=true) - with O(target=kubernetes) while login or worker pods are running; with
        O(target=local) while a local cluster's slurmds or login sshd started with this jail run (the local
        clusters of the user running the module, known by their records, pid and start time). Refused before
        anything is written, in check mode too.
      - With O(target=kubernetes), defaults to the spec's C(jail.populate.overwrite); with O(target=local), to
        V(never).
    type: str
    choices: [never, if_empty, always]
  force:
    description:
      - With O(overwrite=always), replace the jail even while it is in use (running jobs and sessions see files
        change under them). With O(target=kubernetes) the login and worker pods keep running; with
        O(target=local) the slurmds keep running (each job step enters the jail anew) and each login sshd that
        used the jail is restarted, so that its mounts are made in the new jail (its sessions end; RV(restarted)).
    type: bool
    default: false
  source:
    description:
      - With O(target=local), the root filesystem - a tarball, an OCI image layout directory, or a directory.
    type: path
  oci_tag:
    description:
      - With an OCI image layout as O(source), the tag of the image to unpack. Needed only when the layout holds
        more than one tagged image.
    type: str
  source_label:
    description:
      - With O(target=local), what the sentinel records as the source (for example the image the tarball was made
        from). Defaults to O(source).
    type: str
  jail_dir:
    description:
      - With O(target=local), the jail directory. It is created when missing. A symbolic link is refused.
    type: path
  timeout:
    description:
      - The longest time in seconds the populate may take (reading the source, the wait for another populate of
        the jail, writing). Past it the task fails and the jail's contents are left as they were.
      - With O(target=local), the populate on this machine; with O(target=kubernetes), passed to the Job's program
        (C(--timeout)) when this module creates the Job (the Job C(slurm_cluster) creates uses the same default).
        O(wait_timeout) bounds how long the module waits for that Job.
    type: int
    default: 3600
  definition:
    description:
      - With O(target=kubernetes), the SlurmCluster and its NodeSets (as for C(soperator.slurm.slurm_cluster)).
      - Mutually exclusive with O(src), O(name).
    type: raw
  src:
    description:
      - With O(target=kubernetes), a multi-document YAML file holding the SlurmCluster and its NodeSets.
    type: path
  name:
    description:
      - With O(target=kubernetes), the SlurmCluster to read the spec from, in O(namespace) (instead of O(definition)
        or O(src)).
    type: str
  namespace:
    description:
      - The namespace of O(name).
    type: str
    default: default
  wait:
    description:
      - With O(target=kubernetes), wait for the Job to complete. Without waiting, RV(outcome) is C(started) and a
        later run records the sentinel.
    type: bool
    default: true
  wait_timeout:
    description:
      - With O(target=kubernetes), the longest wait in seconds for the Job (and for an old Job to be deleted).
    type: int
    default: 600
extends_documentation_fragment:
  - soperator.slurm.attributes
  - kubernetes.core.k8s_auth_options
  - soperator.slurm.kube_target.api
notes:
  - An OCI image layout needs umoci (Debian package umoci); copy a registry image into a layout first with
    C(skopeo copy docker://IMAGE oci:LAYOUT:TAG) (Debian package skopeo).
  - Owners are kept only when the module runs as root; otherwise the files belong to the user running it.
  - With O(target=kubernetes), the SlurmCluster must have been applied (C(soperator.slurm.slurm_cluster)
    C(state=present)), as the Job mounts its jail claim. C(slurm_cluster) also creates the Job with the spec's overwrite
    mode; this module is how a jail is filled again or checked.
seealso:
  - module: soperator.slurm.slurm_cluster
"""

EXAMPLES = r"""
- name: Fill a local jail from a root filesystem tarball (a second run changes nothing)
  soperator.slurm.jail_populate:
    target: local
    source: /srv/images/jail-rootfs.tar.gz
    jail_dir: /srv/slurm/jail

- name: Fill it from an OCI image layout made with skopeo
  soperator.slurm.jail_populate:
    target: local
    source: /srv/images/jail-oci
    oci_tag: "24.04"
    jail_dir: /srv/slurm/jail

- name: Replace a local jail from a new tarball while the local cluster runs (its login sshd is restarted)
  soperator.slurm.jail_populate:
    target: local
    source: /srv/images/jail-rootfs-v2.tar
    jail_dir: /srv/slurm/jail
    overwrite: always
    force: true

- name: Populate the jail of a cluster on Kubernetes and wait for it
  soperator.slurm.jail_populate:
    target: kubernetes
    name: demo
    namespace: slurm
    wait_timeout: 1800
  register: jail

- name: Replace the jail's contents from a new image, with the login and worker pods still running
  soperator.slurm.jail_populate:
    target: kubernetes
    src: examples/gpu-accounting.yml
    overwrite: always
    force: true
"""

RETURN = r"""
outcome:
  description:
    - populated (an empty jail was filled), replaced (O(overwrite=always)), unchanged, refused (on failure), or
      started (O(target=kubernetes), O(wait=false)). In check mode, what would be done.
  returned: success, and when a run is refused
  type: str
  sample: populated
message:
  description: Why the action was taken.
  returned: success
  type: str
  sample: the jail is empty
sentinel:
  description:
    - The jail's sentinel after the run (in check mode, the one that would be written; null when not known).
  returned: success
  type: dict
  sample: {source: /srv/images/jail-rootfs.tar.gz, source_type: tar, digest: "sha256:4f1c...", overwrite: never,
           populated_at: "2025-01-31T10:00:00Z", populated_by: root@head, format: 1, program: soperator.slurm jail.py}
previous:
  description: The sentinel before the run (null when the jail had none).
  returned: success
  type: dict
skipped_entries:
  description:
    - With O(target=local), entries of the source that are not written (device nodes). Named so that Ansible does
      not take the result for a skipped task.
  returned: when O(target=local)
  type: list
  elements: str
  sample: ["dev/null (device node)"]
jail_dir:
  description: With O(target=local), the jail directory.
  returned: when O(target=local)
  type: str
in_use_by:
  description:
    - With O(target=local) and O(overwrite=always), the running daemons of local clusters that use the jail.
  returned: when O(target=local), and when a run is refused
  type: list
  elements: dict
  sample: [{state_dir: /root/.local/state/soperator/small, daemons: [{name: slurmd-cpu-0, pid: 4242},
            {name: sshd, pid: 4250}]}]
restarted:
  description:
    - With O(target=local) and O(force=true), the login sshds restarted in the replaced jail (in check mode, those
      that would be).
  returned: when O(target=local)
  type: list
  elements: str
  sample: ["restarted sshd of the local cluster in /root/.local/state/soperator/small (pid 4250 -> 5120) - the jail
           was replaced"]
objects:
  description: With O(target=kubernetes), the Job created or deleted.
  returned: when O(target=kubernetes)
  type: list
  elements: dict
  sample: [{kind: Job, name: demo-populate-jail, namespace: slurm, action: created}]
waited:
  description: With O(target=kubernetes), the wait for the Job, with how long and the states it went through.
  returned: when O(target=kubernetes)
  type: list
  elements: dict
  sample: [{for: "the jail to be populated", seconds: 84.0, states: [{state: "running (0 succeeded)", at: 0.0}]}]
status_updated:
  description: With O(target=kubernetes), whether the SlurmCluster's C(.status.jail) was written.
  returned: when O(target=kubernetes)
  type: bool
requests:
  description: With O(target=kubernetes), API requests made.
  returned: when O(target=kubernetes)
  type: dict
"""

from ansible_collections.soperator.slurm.plugins.module_utils import args
from ansible_collections.soperator.slurm.plugins.module_utils import module_support as ms
from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils.module_base import SoperatorModule
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail
from ansible_collections.soperator.slurm.plugins.module_utils.local import jail_use

OPTIONS = dict(
    target=dict(type="str", required=True, choices=args.TARGETS),
    overwrite=dict(type="str", choices=list(jail.OVERWRITE_MODES)),
    force=dict(type="bool", default=False),
    source=dict(type="path"),
    oci_tag=dict(type="str"),
    source_label=dict(type="str"),
    jail_dir=dict(type="path"),
    name=dict(type="str"),
    namespace=dict(type="str", default="default"),
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=600),
    timeout=dict(type="int", default=jail.DEFAULT_TIMEOUT),
)


def _diff(result):
    return {"before": {"sentinel": result.get("previous")}, "after": {"sentinel": result.get("sentinel")}}


def _local(module):
    params = module.params
    try:
        result = jail_use.populate(params["jail_dir"], params["source"], params["overwrite"] or "never",
                                   force=params["force"], check_mode=module.check_mode,
                                   label=params["source_label"], oci_tag=params["oci_tag"],
                                   timeout=params["timeout"])
    except (jail.JailError, OSError) as e:     # node/jail.py is standalone: its errors are no SoperatorError
        raise SoperatorError(str(e))
    result["jail_dir"] = result.pop("jail")
    result["outcome"] = result.pop("action")    # "action" is the module's name in a task result
    if result["outcome"] == jail.REFUSED:
        result.pop("changed")
        raise SoperatorError(result["message"], **result)
    if module._diff:
        result["diff"] = _diff(result)
    return result


def _kubernetes(module):
    # The Kubernetes backend is imported where it runs: a module run compiles what it imports anew (AnsiballZ's zip
    # keeps no bytecode), and the local target needs none of it.
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import jail as jk
    from ansible_collections.soperator.slurm.plugins.module_utils.kube import module as km
    params = module.params
    if not (params["name"] or params["src"] or params["definition"] is not None):
        raise SoperatorError("target=kubernetes needs the cluster: name (read from the cluster), src or definition")
    args.require_positive(params, "wait_timeout", "api_timeout")
    kube = None
    try:
        client = km.make_client(params)
        model = (jk.model_from_cluster(client, params["name"], params["namespace"]) if params["name"]
                 else ms.model_from_options(params))
        kube = jk.KubeJail(client, model, overwrite=params["overwrite"], force=params["force"],
                           check_mode=module.check_mode, wait=params["wait"], wait_timeout=params["wait_timeout"],
                           timeout=params["timeout"])
        result = kube.run()
        result["outcome"] = result.pop("action")
    except (jk.JailKubeError, km.KubeError, km.BackendError) as e:
        partial = kube.result(getattr(e, "action", None), None, str(e)) if kube is not None else {}
        partial["outcome"] = partial.pop("action", None)
        partial.pop("changed", None)
        partial.pop("message", None)
        raise SoperatorError(str(e), **partial)
    if module._diff:
        result["diff"] = _diff(result)
    return result


def _run(module):
    args.require_positive(module.params, "timeout")
    if module.params["target"] == "local":
        return _local(module)
    ms.require_yaml()
    return _kubernetes(module)


def main():
    module = SoperatorModule(
        OPTIONS, shared=(args.SPEC_SOURCE_SPEC, args.KUBE_API_SPEC, args.AUTH_ARG_SPEC),
        uses_kubernetes=lambda p: p["target"] == "kubernetes",
        mutually_exclusive=[("definition", "src", "name")],
        required_if=[("target", "local", ("source", "jail_dir"))],
        supports_check_mode=True,
    )
    module.run(_run)


if __name__ == "__main__":
    main()
