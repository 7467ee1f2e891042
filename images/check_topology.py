# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does the controller image's slurmctld read the topology.yaml of spec.topology.nodeLabels as we mean it?

    python3 images/check_topology.py [--tag T] [--plugin topology/tree|topology/block]

examples/small-cpu.yml with spec.topology.nodeLabels is rendered (playbooks/render.yml), and its configs ConfigMap
given the topology.yaml of a placement (and a topology.conf without a tree: what slurmctld shows must come from
topology.yaml) - cpu-0, cpu-1 on leaf-1, cpu-2, cpu-3 on leaf-2, under
spine-a - as the Kubernetes backend renders them from the nodes' labels. The controller is started with podman
as images/smoke.py starts it (the ConfigMap at /etc/slurm). Accepted when slurmctld logs "Running as primary
controller" with no error about the topology, and `scontrol show topology` names the same leaves (blocks) and nodes.
For topology/tree it then tries Slurm's dynamic change of one node's place (`scontrol update NodeName=cpu-0
Topology=default:spine-a:leaf-2`, 25.05+) and prints what slurmctld makes of it. Exits non-zero when refused.
"""

from __future__ import print_function

import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time

import yaml

import smoke

sys.path.insert(0, os.path.join(smoke.ROOT, "collections"))

# pylint: disable=wrong-import-position
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs  # noqa
from ansible_collections.soperator.slurm.plugins.module_utils.spec import model as m  # noqa: E402
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model  # noqa: E402

READY = "Running as primary controller"
SPINE, LEAF = "topology.soperator.dev/spine", "topology.soperator.dev/leaf"
LEAVES = {"leaf-1": ["cpu-0", "cpu-1"], "leaf-2": ["cpu-2", "cpu-3"]}


def spec_docs(plugin):
    with open(os.path.join(smoke.ROOT, "examples", "small-cpu.yml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    tiers = [SPINE, LEAF] if plugin == "topology/tree" else [LEAF]
    docs[0]["spec"]["topology"] = {"nodeLabels": {"plugin": plugin, "tiers": tiers, "nodeSets": ["cpu"]}}
    return docs


def placed_configs(docs):
    """The Slurm configs of the spec with the workers placed on LEAVES (what kube/topology.py reads)."""
    model = build_model(docs)
    placement = dict((node, m.Placement("k8s-%s" % node, {SPINE: "spine-a", LEAF: leaf}))
                     for leaf, nodes in LEAVES.items() for node in nodes)
    labels = dataclasses.replace(model.topology.node_labels, placement=placement)
    model = dataclasses.replace(model, topology=dataclasses.replace(model.topology, node_labels=labels))
    return render_slurm_configs(model)


def shown_units(text):
    """{unit: [nodes]} of `scontrol show topology`: leaf switches (Level=0) or blocks, nodes expanded."""
    units = {}
    for line in text.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        name = fields.get("SwitchName") or fields.get("BlockName")
        if name and (fields.get("Level", "0") == "0") and fields.get("Nodes") not in (None, "(null)"):
            nodes = re.match(r"^(.*?)\[(\d+)-(\d+)\]$", fields["Nodes"])
            units[name] = (["%s%d" % (nodes.group(1), i) for i in range(int(nodes.group(2)), int(nodes.group(3)) + 1)]
                           if nodes else fields["Nodes"].split(","))
    return units


def check(plugin, args, tag):
    docs = spec_docs(plugin)
    spec = tempfile.NamedTemporaryFile("w", suffix=".yml", dir=os.path.join(smoke.ROOT, "build"), delete=False)
    with spec:
        yaml.safe_dump_all(docs, spec)
    ns = argparse.Namespace(spec=spec.name, registry=args.registry, accounting=False)
    cluster = smoke.Cluster(ns, tag)
    notes = []
    try:
        cluster.render()
        configs = placed_configs(docs)
        [config_map] = cluster.get("ConfigMap", "small-slurm-configs")
        # a topology.conf without the tree: what slurmctld shows must come from topology.yaml
        config_map["data"]["topology.conf"] = "# check_topology.py: slurmctld 25.05+ must read topology.yaml\n"
        config_map["data"]["topology.yaml"] = configs["topology.yaml"]
        print(configs["topology.yaml"])
        cluster.start(components={"controller"})
        controller = [c[1] for c in cluster.containers if "-controller-" in c[0]][0]
        deadline = time.monotonic() + args.timeout
        while True:
            logs = smoke.sh(["podman", "exec", controller, "cat", "/var/log/slurm/slurmctld.log"], check=False)
            running = smoke.sh(["podman", "inspect", "--format", "{{.State.Running}}", controller]).strip()
            if READY in logs or running != "true" or time.monotonic() > deadline:
                break
            time.sleep(1)
        about = [l for l in logs.splitlines() if re.search(r"topolog|switch|block", l, re.I)]
        bad = [l for l in about if re.search(r"\b(error|fatal)\b", l, re.I)]
        notes += about
        if READY not in logs or running != "true" or bad:
            cluster.diagnostics()
            return False, notes + ["not running, or errors about the topology"]
        shown = smoke.sh(["podman", "exec", controller, "scontrol", "show", "topology"])
        notes += ["scontrol show topology:"] + shown.splitlines()
        if shown_units(shown) != LEAVES:
            return False, notes + ["slurmctld shows %r, the file says %r" % (shown_units(shown), LEAVES)]
        if plugin == "topology/tree":
            moved = smoke.sh(["podman", "exec", controller, "scontrol", "update", "NodeName=cpu-0",
                              "Topology=default:spine-a:leaf-2"], check=False)
            after = smoke.sh(["podman", "exec", controller, "scontrol", "show", "topology"], check=False)
            notes += ["dynamic: scontrol update NodeName=cpu-0 Topology=default:spine-a:leaf-2 -> %r"
                      % moved.strip()] + after.splitlines()
        return True, notes
    finally:
        cluster.cleanup()
        os.unlink(spec.name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--registry", default=os.environ.get("REGISTRY") or "ghcr.io/soperator-slurm")
    parser.add_argument("--tag", default=os.environ.get("TAG") or "")
    parser.add_argument("--plugin", action="append", choices=["topology/tree", "topology/block"])
    parser.add_argument("--timeout", type=int, default=120)
    args = parser.parse_args(argv)
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(smoke.IMAGES, "containers.conf"))
    os.chdir(smoke.ROOT)
    tag = args.tag or smoke.sh([sys.executable, os.path.join(smoke.IMAGES, "build.py"), "--print-tag"],
                               timeout=600).strip()
    version = smoke.sh(["podman", "run", "--rm", "--network", "none", "%s/controller:%s" % (args.registry, tag),
                        "slurmctld", "-V"]).strip()
    refused = []
    for plugin in args.plugin or ["topology/tree", "topology/block"]:
        accepted, notes = check(plugin, args, tag)
        print("%s: topology.yaml %s by %s" % (plugin, "accepted" if accepted else "REFUSED", version))
        for line in notes:
            print("    %s" % line)
        if not accepted:
            refused.append(plugin)
    print("check-topology: %s" % ("REFUSED: %s" % ", ".join(refused) if refused else "OK"))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
