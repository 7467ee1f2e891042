"""playbooks/site.yml (slurm_target=kubernetes, the default), scale.yml and teardown.yml through ansible-playbook
against the API emulator."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")


def playbook(name, *args, expect_rc=0):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", name)] + list(args), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == expect_rc, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    tasks = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            tasks[task["task"]["name"]] = task["hosts"].get("localhost", {})
    return tasks, out["stats"]["localhost"]


APPLY = "soperator.slurm.cluster : Converge the Slurm cluster on Kubernetes"
SCALE = "soperator.slurm.nodeset : Converge the NodeSet"


def test_site_scale_teardown(emulator, kubeconfig):
    kc = "kubeconfig=%s" % kubeconfig
    tasks, stats = playbook("site.yml", "-e", "spec_file=%s" % SMALL, "-e", kc, "-e", "wait_timeout=30")
    assert tasks[APPLY]["changed"] and tasks[APPLY]["status"]["phase"] == "Ready"
    assert emulator.get("apps/v1", "StatefulSet", "cpu", "slurm")["spec"]["replicas"] == 2

    emulator.reset_counts()
    tasks, stats = playbook("site.yml", "-e", "spec_file=%s" % SMALL, "-e", kc)
    assert stats["changed"] == 0 and emulator.counts()["writes"] == 0

    # scale up: new nodes join as FUTURE nodes register; nothing to drain, slurm.conf unchanged
    tasks, stats = playbook("scale.yml", "-e", "nodeset=cpu", "-e", "replicas=4", "-e", "cluster=small",
                            "-e", "slurm_namespace=slurm", "-e", kc)
    result = tasks[SCALE]
    assert result["changed"] and result["actions"] == []
    assert ("ConfigMap", "small-slurm-configs", "unchanged") in [(o["kind"], o["name"], o["action"])
                                                                 for o in result["objects"]]
    assert emulator.get("apps/v1", "StatefulSet", "cpu", "slurm")["spec"]["replicas"] == 4
    assert emulator.get("slurm.soperator.dev/v1alpha1", "NodeSet", "cpu", "slurm")["status"]["readyReplicas"] == 4

    # beyond maxReplicas: refused with the field, nothing written
    emulator.reset_counts()
    tasks, stats = playbook("scale.yml", "-e", "nodeset=cpu", "-e", "replicas=9", "-e", "cluster=small",
                            "-e", "slurm_namespace=slurm", "-e", kc, expect_rc=2)
    assert "NodeSet/cpu spec" in tasks[SCALE]["msg"] and emulator.counts()["writes"] == 0

    tasks, stats = playbook("teardown.yml", "-e", "spec_file=%s" % SMALL, "-e", kc)
    assert tasks[APPLY]["changed"]
    assert emulator.list("apps/v1", "StatefulSet", "slurm") == []
    assert emulator.get("v1", "PersistentVolumeClaim", "small-jail", "slurm") is not None
