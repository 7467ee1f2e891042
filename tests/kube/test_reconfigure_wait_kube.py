"""slurm_cluster target=kubernetes waits until the controller pod sees the slurm.conf it applied before it runs
`scontrol reconfigure` (the kubelet refreshes a mounted ConfigMap only on its next sync).

The controller pod's exec handler plays the kubelet's part for /etc/slurm: it keeps a copy of the slurm-configs
ConfigMap as a directory and refreshes it from the emulator's ConfigMap only after a number of reads the test
chooses. `sha256sum` really runs on that copy; every other command (scontrol) really runs against a local Slurm
cluster (tests/slurm's local_cluster), or cannot start at all where the test has none."""
import copy
import os
import re
import subprocess

import yaml

from emulator import podexec
import test_exec_slurm
from kube_module import SMALL, module, spec_docs

local_cluster = test_exec_slurm.local_cluster   # the real-daemons fixture, shared with tests/slurm
NS = test_exec_slurm.NS
POD = "small-controller-0"
CONFIGS = "small-slurm-configs"
CONF_DIR = "/etc/slurm"      # constants.SLURM_CONF_DIR, where the controller mounts the ConfigMap


class KubeletView(object):
    """An exec handler for the controller pod. Reads of /etc/slurm/* see the ConfigMap as it was at the last sync;
    the sync happens once `lag` reads saw the old copy (lag=None: never). `events` lists, in order, ("read",
    {file name: text served}) and ("exec", argv) of every other command."""

    def __init__(self, emulator, directory, lag, slurm=None):
        self.emulator = emulator
        self.directory = str(directory)
        self.lag = lag
        self.slurm = slurm
        self.reads = 0
        self.events = []
        os.makedirs(self.directory, exist_ok=True)
        self.sync()

    def sync(self):
        data = self.emulator.get("v1", "ConfigMap", CONFIGS, NS)["data"]
        for name in os.listdir(self.directory):
            if name not in data:
                os.unlink(os.path.join(self.directory, name))
        for key, text in data.items():
            with open(os.path.join(self.directory, key), "w") as f:
                f.write(text)

    def __call__(self, namespace, pod, container, argv, stdin):
        assert (namespace, pod, container) == (NS, POD, "slurmctld")
        if argv[:1] == ["sha256sum"]:
            if self.lag is not None and self.reads >= self.lag:
                self.sync()
            self.reads += 1
            local = [os.path.join(self.directory, os.path.relpath(a, CONF_DIR)) if a.startswith(CONF_DIR + "/")
                     else a for a in argv]
            served = {}
            for path in local[1:]:
                if os.path.exists(path):
                    with open(path) as f:
                        served[os.path.basename(path)] = f.read()
            self.events.append(("read", served))
            proc = subprocess.run(local, capture_output=True, timeout=30, check=False)
            # the output names the files as the pod does
            pod_paths = [(self.directory + "/").encode(), (CONF_DIR + "/").encode()]
            return proc.returncode, proc.stdout.replace(*pod_paths), proc.stderr.replace(*pod_paths)
        self.events.append(("exec", list(argv)))
        if self.slurm is None:
            raise podexec.ExecStartError('exec: "%s": executable file not found in $PATH' % argv[0])
        return self.slurm(namespace, pod, container, argv, stdin)


def _controller_pod(emulator):
    emulator.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    emulator.put_object({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NS},
                         "spec": {"nodeName": "n1", "containers": [{"name": "slurmctld", "image": "soperator:test"}]}})
    emulator.set_status("v1", "Pod", POD, NS, {"phase": "Running"}, manager="kubelet")


def _edited(docs, slurmd_timeout, cgroup=None):
    edited = copy.deepcopy(docs)
    edited[0]["spec"]["slurmConfig"]["SlurmdTimeout"] = slurmd_timeout
    if cgroup is not None:
        edited[0]["spec"]["cgroupConfig"] = cgroup
    return edited


def _slurm_conf(emulator, key="slurm.conf"):
    return emulator.get("v1", "ConfigMap", CONFIGS, NS)["data"][key]


def test_reconfigure_runs_only_once_the_controller_pod_sees_the_new_slurm_conf(emulator, kubeconfig, local_cluster,
                                                                               tmp_path):
    docs = spec_docs(SMALL)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    _controller_pod(emulator)
    args = dict(state="present", target="kubernetes", kubeconfig=str(kubeconfig), wait_sleep=0.1, wait_timeout=30)
    first = module("slurm_cluster", definition=docs, **args)
    assert not [a for a in first["actions"] if "reconfigure" in a]    # a new ConfigMap: nothing to reload
    old = _slurm_conf(emulator)
    slurm = podexec.LocalExec(env=dict(os.environ, **cluster.env()))
    view = emulator.set_exec_handler(KubeletView(emulator, tmp_path / "pod-etc-slurm", lag=3, slurm=slurm))

    done = module("slurm_cluster", definition=_edited(docs, 300), **args)
    new = _slurm_conf(emulator)
    assert "SlurmdTimeout=300" in new and old != new
    assert [e for e in view.events if e[0] == "exec"] == [("exec", ["scontrol", "reconfigure"])]
    reconfigure_at = view.events.index(("exec", ["scontrol", "reconfigure"]))
    reads = [served["slurm.conf"] for kind, served in view.events[:reconfigure_at] if kind == "read"]
    # the old file for the reads before the kubelet's sync, then the new one, and only then the reconfigure
    assert reads == [old, old, old, new]
    assert reconfigure_at == len(view.events) - 1
    # slurmctld (the real one) took the reconfigure
    assert slurm.calls and slurm.calls[-1][3] == ["scontrol", "reconfigure"]
    waited = [a for a in done["actions"] if a.startswith("waited")]
    assert len(waited) == 1 and re.match(r"^waited \d+ s for the changed Slurm configs to reach the controller pod "
                                         r"slurm/%s$" % POD, waited[0]), done["actions"]
    assert done["actions"].index(waited[0]) < done["actions"].index("ran scontrol reconfigure (slurm.conf changed)")

    # the pod already has the file: one read, no wait reported
    view.lag = 0
    again = module("slurm_cluster", definition=_edited(docs, 310), **args)
    assert not [a for a in again["actions"] if a.startswith("waited")]
    assert "ran scontrol reconfigure (slurm.conf changed)" in again["actions"]
    assert [kind for kind, unused in view.events[reconfigure_at + 1:]] == ["read", "exec"]

    # only cgroup.conf changes: slurm.conf is the same in the pod from the start, the wait is for cgroup.conf
    old_cgroup, same = _slurm_conf(emulator, "cgroup.conf"), _slurm_conf(emulator)
    view.lag = view.reads + 2
    start = len(view.events)
    cgroup = module("slurm_cluster", definition=_edited(docs, 310, cgroup={"ConstrainRAMSpace": "no"}), **args)
    assert ("ConfigMap", CONFIGS, "updated") in [(o["kind"], o["name"], o["action"]) for o in cgroup["objects"]]
    new_cgroup = _slurm_conf(emulator, "cgroup.conf")
    assert old_cgroup != new_cgroup and _slurm_conf(emulator) == same
    assert [(kind, served["cgroup.conf"] if kind == "read" else served) for kind, served in view.events[start:]] == \
        [("read", old_cgroup), ("read", old_cgroup), ("read", new_cgroup), ("exec", ["scontrol", "reconfigure"])]
    assert len([a for a in cgroup["actions"] if a.startswith("waited")]) == 1

    # slurm_transport=local: the controller reads its own local slurm.conf, there is no pod to wait for
    before = len(view.events)
    local = module("slurm_cluster", definition=_edited(docs, 320), slurm_transport="local",
                   slurm_conf=cluster.env()["SLURM_CONF"], **args)
    assert local["actions"] == ["ran scontrol reconfigure (slurm.conf changed)"]
    assert len(view.events) == before


def test_no_reconfigure_when_the_controller_pod_never_sees_the_new_slurm_conf(emulator, kubeconfig, tmp_path):
    docs = spec_docs(SMALL)
    _controller_pod(emulator)
    args = dict(state="present", target="kubernetes", kubeconfig=str(kubeconfig), wait_sleep=0.1, wait_timeout=3)
    module("slurm_cluster", definition=docs, **args)
    old = _slurm_conf(emulator)
    view = emulator.set_exec_handler(KubeletView(emulator, tmp_path / "pod-etc-slurm", lag=None))

    planned = module("slurm_cluster", check=True, definition=_edited(docs, 300), **args)
    assert "would run scontrol reconfigure (slurm.conf changed)" in planned["actions"]
    assert view.events == []      # check mode reads nothing in the pod

    failed = module("slurm_cluster", expect_failed=True, definition=_edited(docs, 300), **args)
    assert "pod slurm/%s still sees the old slurm.conf in /etc/slurm" % POD in failed["msg"], failed["msg"]
    assert "ConfigMap slurm/%s was applied" % CONFIGS in failed["msg"] and "reconfigure` was not run" in failed["msg"]
    # only reads (how many fit in wait_timeout depends on the machine's speed: at least one)
    assert set(kind for kind, unused in view.events) == {"read"} and len(view.events) >= 1
    assert set(served["slurm.conf"] for unused, served in view.events) == {old}
    # the ConfigMap stays applied (nothing is reverted)
    assert "SlurmdTimeout=300" in _slurm_conf(emulator)


def _recorded_digest(emulator):
    cluster = emulator.get("slurm.soperator.dev/v1alpha1", "SlurmCluster", "small", NS)
    return (cluster.get("status") or {}).get("slurmConfigDigest")


def test_a_rerun_runs_the_reconfigure_that_a_timed_out_run_left_owed(emulator, kubeconfig, local_cluster, tmp_path):
    docs = spec_docs(SMALL)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    _controller_pod(emulator)
    args = dict(state="present", target="kubernetes", kubeconfig=str(kubeconfig), wait_sleep=0.1, wait_timeout=3)
    module("slurm_cluster", definition=docs, **args)
    # a new cluster: its controller starts with the configs just applied, so they count as loaded
    loaded = _recorded_digest(emulator)
    assert loaded and re.match(r"^[0-9a-f]{64}$", loaded)
    slurm = podexec.LocalExec(env=dict(os.environ, **cluster.env()))
    view = emulator.set_exec_handler(KubeletView(emulator, tmp_path / "pod-etc-slurm", lag=None, slurm=slurm))

    edited = _edited(docs, 300)
    failed = module("slurm_cluster", expect_failed=True, definition=edited, **args)
    assert "still sees the old slurm.conf" in failed["msg"] and "a re-run of this task" in failed["msg"], \
        failed["msg"]
    assert set(kind for kind, unused in view.events) == {"read"}
    assert _recorded_digest(emulator) == loaded       # slurmctld still runs the old configs

    # check mode: the ConfigMap is unchanged now, but the reload is owed; planned, nothing run in the pod
    reads = len(view.events)
    emulator.reset_counts()
    planned = module("slurm_cluster", check=True, definition=edited, **args)
    assert planned["changed"]
    assert planned["actions"] == ["would run scontrol reconfigure (configs not yet loaded by slurmctld)"]
    assert ("ConfigMap", CONFIGS, "unchanged") in [(o["kind"], o["name"], o["action"]) for o in planned["objects"]]
    assert len(view.events) == reads and emulator.counts()["writes"] == 0

    # the kubelet synced: the re-run waits for nothing, reconfigures and records what slurmctld loaded
    view.lag = 0
    done = module("slurm_cluster", definition=edited, **args)
    assert done["changed"] and done["actions"] == ["ran scontrol reconfigure (configs not yet loaded by slurmctld)"]
    assert set(o["action"] for o in done["objects"]) == {"unchanged"}
    assert [kind for kind, unused in view.events[reads:]] == ["read", "exec"]
    assert view.events[-1] == ("exec", ["scontrol", "reconfigure"])
    assert slurm.calls and slurm.calls[-1][3] == ["scontrol", "reconfigure"]
    assert done["status_updated"] and _recorded_digest(emulator) not in (None, loaded)
    assert done["status"]["slurmConfigDigest"] == _recorded_digest(emulator)

    # converged: no exec, no write
    events = len(view.events)
    emulator.reset_counts()
    third = module("slurm_cluster", definition=edited, **args)
    assert not third["changed"] and third["actions"] == [] and not third["status_updated"]
    assert emulator.counts()["writes"] == 0 and len(view.events) == events


def test_a_cluster_without_a_recorded_digest_is_reconfigured_once(emulator, kubeconfig, local_cluster, tmp_path):
    """Deployed before the digest was kept: which configs slurmctld read is unknown, so one reconfigure settles it."""
    docs = spec_docs(SMALL)
    cluster = local_cluster(yaml.safe_dump_all(docs))
    _controller_pod(emulator)
    args = dict(state="present", target="kubernetes", kubeconfig=str(kubeconfig), wait_sleep=0.1, wait_timeout=5)
    module("slurm_cluster", definition=docs, **args)
    status = emulator.get("slurm.soperator.dev/v1alpha1", "SlurmCluster", "small", NS)["status"]
    del status["slurmConfigDigest"]
    emulator.set_status("slurm.soperator.dev/v1alpha1", "SlurmCluster", "small", NS, status, manager="soperator.slurm")
    assert _recorded_digest(emulator) is None
    slurm = podexec.LocalExec(env=dict(os.environ, **cluster.env()))
    view = emulator.set_exec_handler(KubeletView(emulator, tmp_path / "pod-etc-slurm", lag=0, slurm=slurm))

    once = module("slurm_cluster", definition=docs, **args)
    assert once["actions"] == ["ran scontrol reconfigure (configs not yet loaded by slurmctld)"]
    assert [kind for kind, unused in view.events] == ["read", "exec"]
    assert _recorded_digest(emulator)

    emulator.reset_counts()
    again = module("slurm_cluster", definition=docs, **args)
    assert not again["changed"] and emulator.counts()["writes"] == 0 and len(view.events) == 2
