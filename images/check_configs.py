# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is each example's rendered slurm.conf accepted by the controller image's slurmctld (the real daemon)?

    python3 images/check_configs.py [--tag T] [examples/*.yml]

Each spec is rendered and its controller started with podman exactly as images/smoke.py starts it (the pod
template's args, the configs ConfigMap at /etc/slurm), with slurmdbd and its database when the spec has accounting
(slurmctld waits for slurmdbd before it serves). A config is accepted when slurmctld logs "Running as primary
controller" with no fatal error within the time limit. Every error or warning slurmctld logs at start is printed:
what the images' Slurm has to say about a config written for another version. Exits non-zero when a config is
refused; the last line sums up.
"""

from __future__ import print_function

import argparse
import glob
import os
import re
import subprocess
import sys
import time

import smoke

READY = "Running as primary controller"
# Log lines about this short-lived setup rather than the config: no workers, no mail program, reverse DNS,
# slurmdbd still waiting for its new database when slurmctld first calls, a new spool without state files.
NOT_CONFIG = ("auth_p_get_host", "MailProg", "_xgetaddrinfo", "slurm_set_addr", "Unable to resolve", "slurmdbd",
              "PersistInit", "persistent connection", "ClusterID", "Association database", "state file",
              "state save file")


def check(spec, args, tag):
    ns = argparse.Namespace(spec=spec, registry=args.registry, accounting=False)
    cluster = smoke.Cluster(ns, tag)
    try:
        cluster.render()
        cluster.start(components={"controller", "accounting", "accounting-db"})
        controller = [c[1] for c in cluster.containers if "-controller-" in c[0]][0]     # its container
        deadline = time.monotonic() + args.timeout
        while True:
            # slurmctld -D writes to its LogFile only (slurm.conf's SlurmctldLogFile), not to the container's log.
            logs = smoke.sh(["podman", "exec", controller, "cat", "/var/log/slurm/slurmctld.log"], check=False)
            running = smoke.sh(["podman", "inspect", "--format", "{{.State.Running}}", controller]).strip()
            if READY in logs or running != "true" or time.monotonic() > deadline:
                break
            time.sleep(1)
        fatal = [l for l in logs.splitlines() if "fatal" in l.lower()]
        notes = sorted(set(re.sub(r"^\[[^]]*\] ", "", l) for l in logs.splitlines()
                           if re.search(r"\b(error|warning)\b", l) and not any(n in l for n in NOT_CONFIG)))
        accepted = READY in logs and not fatal and running == "true"
        if not accepted:
            cluster.diagnostics()
        return accepted, fatal + notes
    finally:
        cluster.cleanup()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--registry", default=os.environ.get("REGISTRY") or "ghcr.io/soperator-slurm")
    parser.add_argument("--tag", default=os.environ.get("TAG") or "")
    parser.add_argument("--timeout", type=int, default=120)
    args = parser.parse_args(argv)
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(smoke.IMAGES, "containers.conf"))
    os.chdir(smoke.ROOT)
    tag = args.tag or smoke.sh([sys.executable, os.path.join(smoke.IMAGES, "build.py"), "--print-tag"],
                               timeout=600).strip()
    image = "%s/controller:%s" % (args.registry, tag)
    version = smoke.sh(["podman", "run", "--rm", "--network", "none", image, "slurmctld", "-V"]).strip()
    specs = args.specs or sorted(os.path.relpath(p, smoke.ROOT)
                                 for p in glob.glob(os.path.join(smoke.ROOT, "examples", "*.yml")))
    refused = []
    for spec in specs:
        try:
            accepted, notes = check(spec, args, tag)
        except (smoke.SmokeError, subprocess.SubprocessError, OSError) as e:
            accepted, notes = False, [str(e)]
        print("%s: %s by %s" % (spec, "accepted" if accepted else "REFUSED", version))
        for line in notes:
            print("    %s" % line)
        if not accepted:
            refused.append(spec)
    print("check-configs: %d of %d rendered slurm.conf accepted by %s%s" % (
        len(specs) - len(refused), len(specs), version, (" (refused: %s)" % ", ".join(refused)) if refused else ""))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
