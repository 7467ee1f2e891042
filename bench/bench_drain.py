"""Drain + resume 1,000 Slurm nodes: soperator.slurm.slurm_drain vs a per-node `scontrol update` loop, same slurmctld.

Starts a local cluster (the local backend: munged, slurmctld, 2 slurmd) whose NodeSet defines 1,000 nodes; the 998
without slurmd are first taken out of FUTURE as DOWN with our reason (nodes that registered once and whose slurmd is
gone), so both sides act on 1,000 visible nodes without force. Then, one run each:

* module (in process): slurm_drain's run_module(), i.e. the module's code without Ansible's process start:
  sinfo --json, one scontrol update, sinfo --json to verify; for drained, then for resumed.
* module (ansible): the same through `ansible localhost -m soperator.slurm.slurm_drain` (adds Ansible's start-up).
* loop: `scontrol update NodeName=<node> State=DRAIN Reason=...` for each node, then `State=RESUME` for each;
  no state read, no verification.

Prints the times and loop/module ratios; asserts nothing. Target: module <= 2 s and >= 20x faster than the loop.
Needs the Slurm daemons and munge (Debian: slurmctld slurmd slurm-client munge).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "tests"))   # tests/specs: the spec texts tests share

from ansible_collections.soperator.slurm.plugins.module_utils.local import backend as lb  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.documents import load_documents  # noqa: E402
from ansible_collections.soperator.slurm.plugins.modules import slurm_drain  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LocalClusterError  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary  # noqa: E402
from specs import spec_text  # noqa: E402

NODES = 1000
SPEC = spec_text("loopback-nodes", cluster="bench", replicas=2, nodes=NODES, slurm_config="{SlurmdTimeout: 600}")
EVERYTHING = "n-[0-%d]" % (NODES - 1)
REASON = "bench"


def module_params(slurm_conf, state):
    params = dict((k, v.get("default")) for k, v in slurm_drain.argument_spec().items())
    params.update(nodes=EVERYTHING, state=state, reason=REASON if state == "drained" else None,
                  slurm_conf=slurm_conf)
    return params


def run_in_process(slurm_conf, state):
    started = time.perf_counter()
    ok, result = slurm_drain.run_module(module_params(slurm_conf, state))
    took = time.perf_counter() - started
    if not ok:
        raise SystemExit("slurm_drain %s failed: %s" % (state, result.get("msg")))
    return took, result


def run_ansible(env, state):
    args = {"nodes": EVERYTHING, "state": state}
    if state == "drained":
        args["reason"] = REASON
    started = time.perf_counter()
    proc = subprocess.run(["ansible", "localhost", "-m", "soperator.slurm.slurm_drain", "-a", json.dumps(args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit("ansible slurm_drain %s failed: %s %s" % (state, proc.stdout[-2000:], proc.stderr[-2000:]))
    return took


def run_loop(env, state):
    started = time.perf_counter()
    for i in range(NODES):
        argv = ["scontrol", "update", "NodeName=n-%d" % i]
        argv += ["State=DRAIN", "Reason=soperator: %s" % REASON] if state == "drained" else ["State=RESUME"]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit("%s failed: %s" % (" ".join(argv), proc.stderr.strip()))
    return time.perf_counter() - started


def count_drained(cluster):
    nodes = cluster.sinfo_nodes()
    return sum(1 for n in nodes if "DRAIN" in n.get("state_flags", [])), len(nodes)


def main():
    for name in ("munged", "slurmctld", "slurmd", "scontrol", "sinfo"):
        try:
            find_binary(name)
        except LocalClusterError as e:
            raise SystemExit("bench_drain needs real Slurm: %s" % e)
    state_dir = tempfile.mkdtemp(prefix="sop-bench-", dir="/tmp")
    os.chmod(state_dir, 0o755)
    cluster = lb.LocalCluster(state_dir, build_model(load_documents(SPEC)), timeout=120)
    try:
        t0 = time.perf_counter()
        cluster.ensure_started()
        slurm_conf = cluster.env()["SLURM_CONF"]
        env = dict(os.environ, SLURM_CONF=slurm_conf, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                   ANSIBLE_NOCOLOR="1")
        cluster.run(["scontrol", "update", "NodeName=n-[2-%d]" % (NODES - 1), "State=DOWN",
                     "Reason=soperator: not started"], timeout=60)
        drained, visible = count_drained(cluster)
        print("cluster: %d nodes visible to sinfo (2 with slurmd), started in %.1f s"
              % (visible, time.perf_counter() - t0))

        rows = []
        drain_s, result = run_in_process(slurm_conf, "drained")
        assert count_drained(cluster)[0] == NODES, "module drain did not drain all nodes"
        commands = list(result["commands"])
        resume_s, result = run_in_process(slurm_conf, "resumed")
        assert count_drained(cluster)[0] == 0, "module resume left drained nodes"
        commands += result["commands"]
        rows.append(("module (in process)", drain_s, resume_s))

        a_drain = run_ansible(env, "drained")
        a_resume = run_ansible(env, "resumed")
        rows.append(("module (ansible -m)", a_drain, a_resume))
        started = time.perf_counter()
        subprocess.run(["ansible", "localhost", "-m", "ansible.builtin.ping"], cwd=ROOT, env=env, capture_output=True,
                       timeout=600, check=True)
        ping = time.perf_counter() - started

        l_drain = run_loop(env, "drained")
        assert count_drained(cluster)[0] == NODES, "loop drain did not drain all nodes"
        l_resume = run_loop(env, "resumed")
        assert count_drained(cluster)[0] == 0, "loop resume left drained nodes"
        rows.append(("per-node scontrol loop", l_drain, l_resume))

        print("module commands: %s" % "; ".join(commands))
        print("%-24s %9s %9s %9s" % ("", "drain s", "resume s", "total s"))
        for label, d, r in rows:
            print("%-24s %9.3f %9.3f %9.3f" % (label, d, r, d + r))
        loop_total = l_drain + l_resume
        for label, d, r in rows[:2]:
            print("loop / %s = %.1fx" % (label, loop_total / (d + r)))
        print("ansible start-up alone (ansible localhost -m ping): %.3f s per run" % ping)
        print("target: module <= 2 s and >= 20x faster than the loop (%d scontrol calls)" % (2 * NODES))
    finally:
        cluster.stop(purge=True)
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
