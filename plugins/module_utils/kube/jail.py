# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""jail_populate on Kubernetes: the populate Job (render/kube_objects.populate_job) fills the jail volume, its program
(jail.py) keeps the sentinel in the jail and prints it, and we record it in the SlurmCluster's `.status.jail`, so
later runs know the jail is populated without starting a pod.

One run:
1. read the SlurmCluster (it must exist: the Job needs the jail claim and service account slurm_cluster applies),
   its `.status.jail` and the populate Job;
2. overwrite=never/if_empty: a recorded sentinel means done. Otherwise a running Job is waited for, a failed one is
   run again (deleted and re-created), a missing one is created; the jail's own sentinel decides in the pod;
3. overwrite=always: refused while login or worker pods run (they have the jail mounted) unless force; the Job is
   deleted and created again with overwrite=always;
4. a completed Job's pod log gives the sentinel, written to `.status.jail` under its own field manager (slurm_cluster
   writes the rest of `.status` and leaves it alone). A failed Job fails the run with its pod's log tail.
Check mode sends the Job's create/delete as server-side dry runs and writes no status.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.soperator.slurm.plugins.module_utils.errors import SoperatorError
from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.node import jail
from ansible_collections.soperator.slurm.plugins.module_utils.kube import readiness as kr
from ansible_collections.soperator.slurm.plugins.module_utils.spec import names
from ansible_collections.soperator.slurm.plugins.module_utils.kube.apply import owner_selector
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import CR_API_VERSION
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_builders import LOGIN, WORKER
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import populate_job
from ansible_collections.soperator.slurm.plugins.module_utils.kube import live
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

STATUS_FIELD_MANAGER = c.FIELD_MANAGER + "-jail"
STARTED = "started"
# sentinel key (jail.py) -> .status.jail key
_STATUS_KEYS = (("populated_at", "populatedAt"), ("source", "source"), ("source_type", "sourceType"),
                ("digest", "digest"), ("tag", "tag"), ("overwrite", "overwrite"), ("populated_by", "populatedBy"),
                ("job", "job"))


class JailKubeError(SoperatorError):
    def __init__(self, msg, action=None):
        super(JailKubeError, self).__init__(msg)
        self.action = action


def to_status(sentinel):
    return dict((camel, str(sentinel[snake])) for snake, camel in _STATUS_KEYS if sentinel.get(snake) is not None)


def from_status(record):
    if not record or not record.get("populatedAt"):
        return None
    return dict((snake, record[camel]) for snake, camel in _STATUS_KEYS if camel in record)


def sentinel_from_log(text):
    """The last {"action": ..., "sentinel": {...}} line jail.py printed, or None."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("sentinel"), dict):
            return doc
    return None


class KubeJail(object):
    def __init__(self, client, model, overwrite=None, force=False, check_mode=False, wait=True, wait_timeout=600,
                 sleep=time.sleep, clock=time.monotonic, poll=2.0, timeout=None):
        self.client = client
        self.model = model
        self.overwrite = overwrite or model.jail.overwrite
        self.force = force
        self.check_mode = check_mode
        self.wait = wait
        self.wait_timeout = wait_timeout
        self.timeout = timeout      # the Job's program's own bound (--timeout); None: the rendered default
        self.sleep = sleep
        self.clock = clock
        self.poll = poll
        self.job_name = names.populate_jail_name(model)
        self.objects = []
        self.waited = []
        self.status_updated = False
        self.previous = None

    @property
    def namespace(self):
        return self.model.namespace

    def _object(self, kind, name, action):
        self.objects.append({"kind": kind, "name": name, "namespace": self.namespace, "action": action})

    # --- reading -----------------------------------------------------------------------------------------

    def running_pods(self):
        """Names of the login and worker pods that have not finished: they have the jail mounted."""
        pods = self.client.list("Pod", self.namespace, owner_selector(self.model.name))
        return sorted(p["metadata"]["name"] for p in pods
                      if (p["metadata"].get("labels") or {}).get(c.LABEL_COMPONENT) in (LOGIN, WORKER) and
                      ((p.get("status") or {}).get("phase") or "Pending") not in ("Succeeded", "Failed"))

    def _job_record(self, job):
        """(action, sentinel) the completed Job's pod printed; without a readable line, what the Job shows."""
        uid = job["metadata"].get("uid")
        pods = kr.job_pods(self.client, self.namespace, self.job_name, uid)
        line = None
        if pods:
            line = sentinel_from_log(self.client.pod_log(self.namespace, pods[-1]["metadata"]["name"], 20))
        if line is not None:
            sentinel = dict(line["sentinel"], job=self.job_name)
            return line.get("action") or jail.POPULATED, sentinel
        status = job.get("status") or {}
        return jail.POPULATED, {"populated_at": status.get("completionTime") or jail.utc_now(),
                                "source": self.model.jail.populate_image, "overwrite": self.overwrite,
                                "job": self.job_name}

    # --- the Job -----------------------------------------------------------------------------------------

    def _delete_job(self, job):
        # Foreground: the Job is gone only once its pods are, so no pod of it still writes the jail when the next
        # Job's pod starts (the program's lock on the jail serialises them too, where the volume has flock)
        self.client.delete("Job", self.job_name, self.namespace, dry_run=self.check_mode, propagation="Foreground")
        self._object("Job", self.job_name, "deleted")
        if self.check_mode:
            return
        uid = job["metadata"].get("uid")
        kr.wait_for(lambda: ((self.client.get("Job", self.job_name, self.namespace) or {}).get("metadata", {})
                             .get("uid") != uid, "still there"),
                    "Job %s to be deleted" % self.job_name, self.wait_timeout, self.sleep, self.clock, self.poll)

    def _create_job(self, overwrite):
        self._object("Job", self.job_name, "created")
        if self.check_mode and any(o["action"] == "deleted" for o in self.objects):
            return None     # a dry-run create would meet the Job that the dry-run delete left in place
        return self.client.create(populate_job(self.model, overwrite, self.timeout), dry_run=self.check_mode)

    def _wait_job(self, job):
        """Wait until the Job completes; a failed Job raises with its pod's log tail. -> the completed Job."""
        uid = job["metadata"].get("uid")
        states = []
        seen = {}

        def probe():
            current = self.client.get("Job", self.job_name, self.namespace)
            if current is None:
                raise JailKubeError("Job %s/%s disappeared while it was waited for" % (self.namespace, self.job_name))
            done, text = kr.workload_state(current)
            if not states or states[-1]["state"] != text:
                states.append({"state": text, "at": round(self.clock() - started, 1)})
            if kr.job_failed(current):
                log = kr.job_log_tail(self.client, self.namespace, self.job_name, uid)
                raise JailKubeError("Job %s/%s failed: %s%s" % (self.namespace, self.job_name, text, log))
            seen["job"] = current
            return done, "Job %s (%s)" % (self.job_name, text)

        started = self.clock()
        seconds = kr.wait_for(probe, "the jail to be populated", self.wait_timeout, self.sleep, self.clock,
                              self.poll)
        self.waited.append({"for": "the jail to be populated", "seconds": seconds, "states": states})
        return seen["job"]

    # --- status ------------------------------------------------------------------------------------------

    def _record(self, sentinel):
        record = to_status(sentinel)
        if self.check_mode or record == to_status(self.previous or {}):
            return
        body = {"apiVersion": CR_API_VERSION, "kind": "SlurmCluster",
                "metadata": {"name": self.model.name, "namespace": self.namespace}, "status": {"jail": record}}
        self.client.apply(body, subresource="status", force=True, field_manager=STATUS_FIELD_MANAGER)
        self.status_updated = True

    # --- the run -----------------------------------------------------------------------------------------

    def run(self):
        if self.overwrite not in jail.OVERWRITE_MODES:
            raise JailKubeError("overwrite must be one of %s" % ", ".join(jail.OVERWRITE_MODES))
        cluster = self.client.get("SlurmCluster", self.model.name, self.namespace)
        if cluster is None:
            raise JailKubeError(
                "SlurmCluster %s/%s does not exist: apply the cluster first (soperator.slurm.slurm_cluster "
                "state=present); the populate Job mounts its jail claim" % (self.namespace, self.model.name))
        self.previous = from_status((cluster.get("status") or {}).get("jail"))
        job = self.client.get("Job", self.job_name, self.namespace)
        if self.overwrite == "always":
            return self._always(job)
        if self.previous is not None:
            message = "the jail was populated at %s from %s (recorded in the SlurmCluster status)" % (
                self.previous.get("populated_at"), self.previous.get("source"))
            return self.result(jail.UNCHANGED, self.previous, message)
        if job is not None and kr.job_failed(job):
            # run it again: the cause may be fixed (an image, the volume), and the program is idempotent
            self._delete_job(job)
            job = None
        if job is None:
            job = self._create_job(self.overwrite)
            if self.check_mode:
                return self.result(jail.POPULATED, None, "would create Job %s; its program populates the jail "
                                   "unless the jail's own sentinel says it is populated" % self.job_name)
        elif kr.workload_state(job)[0]:
            action, sentinel = self._job_record(job)
            self._record(sentinel)
            return self.result(jail.UNCHANGED, sentinel, "Job %s had completed: %s" % (self.job_name, action))
        return self._finish(job)

    def _always(self, job):
        pods = self.running_pods()
        if pods and not self.force:
            raise JailKubeError(
                "refusing overwrite=always while pods that mount the jail are running (%s): replacing the root "
                "filesystem under them breaks running jobs and logins. Scale them down, or set force=true"
                % ", ".join(pods), action=jail.REFUSED)
        if job is not None:
            self._delete_job(job)
        job = self._create_job("always")
        if self.check_mode:
            return self.result(jail.REPLACED, None, "would run Job %s with overwrite=always" % self.job_name)
        return self._finish(job)

    def _finish(self, job):
        if not self.wait:
            return self.result(STARTED, None, "Job %s is running; not waited for (wait=false)" % self.job_name)
        done = self._wait_job(job)
        action, sentinel = self._job_record(done)
        self._record(sentinel)
        return self.result(action, sentinel, "Job %s completed" % self.job_name)

    def result(self, action, sentinel, message):
        return {"changed": any(o["action"] != "unchanged" for o in self.objects), "action": action,
                "sentinel": sentinel, "previous": self.previous, "message": message, "objects": list(self.objects),
                "waited": list(self.waited), "status_updated": self.status_updated,
                "requests": dict(self.client.calls)}


def model_from_cluster(client, name, namespace):
    """The ClusterModel of the SlurmCluster `name` and its NodeSets as they are in the cluster."""
    docs = live.cluster_documents(client, name, namespace)
    if docs is None:
        raise JailKubeError("SlurmCluster %s/%s does not exist: apply the cluster first (soperator.slurm."
                            "slurm_cluster state=present), or pass its spec" % (namespace, name))
    return build_model(docs)
