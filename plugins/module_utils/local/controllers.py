# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local cluster's slurmctld processes with spec.controller.replicas 2: a primary and a backup on one machine.

slurmctld 22.05 finds its place in the SlurmctldHost lines by its host name (gethostname; a `localhost` line is
replaced by the host name, so two lines of one machine cannot differ), it kills the process named in
SlurmctldPidFile when it starts, and it binds the address of its own line (NoCtldInAddrAny). So each controller runs
in its own UTS and mount namespaces (`unshare`, root only): its host name is its line's (`<cluster>-controller-N`),
its SlurmctldPidFile directory (run/ctld) is its own (run/ctld-N bound onto it), and it listens on its own loopback
address (127.0.0.1 the primary, 127.0.0.2 the backup) at the cluster's slurmctld port: NoCtldInAddrAny binds the
address of gethostname(), so /etc/hosts there is the host's plus `<address> <its host name>` (run/ctld-N/hosts).
Both read and write the one StateSaveLocation (ctld/); slurmd and the clients read both lines from the one
slurm.conf. They log to the one slurmctld.log (their stdout/stderr apart, log/<name>.out). With one controller
nothing of this is used.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import sys
from typing import Dict, List, Sequence, Tuple

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import LOOPBACK

PRIMARY = "slurmctld"
BACKUP = "slurmctld-1"
ADDRESSES = (LOOPBACK, "127.0.0.2")
PID_DIR = "ctld"            # below run/: SlurmctldPidFile's directory, each controller's own

# Standard library only; run by the host's Python inside `unshare --uts --mount --propagation private`.
_CONTROLLER_NAMESPACE_PROGRAM = """
import os, socket, subprocess, sys
host, address, own, shared, mount = sys.argv[1:6]
socket.sethostname(host)
for path in (own, shared):
    os.makedirs(path, mode=0o755, exist_ok=True)
hosts = os.path.join(own, "hosts")
with open("/etc/hosts") as f:
    text = f.read()
with open(hosts + ".tmp", "w") as f:
    f.write(text.rstrip("\\n") + "\\n%s %s\\n" % (address, host))
os.rename(hosts + ".tmp", hosts)
subprocess.run([mount, "--no-canonicalize", "--bind", own, shared], check=True)
subprocess.run([mount, "--no-canonicalize", "--bind", hosts, "/etc/hosts"], check=True)
os.execv(sys.argv[6], sys.argv[6:])
"""


def daemon_names(replicas: int) -> List[str]:
    """The Daemons names of the controllers, primary first."""
    return [PRIMARY, BACKUP][:replicas]


def pid_dir(run_dir: str) -> str:
    return os.path.join(run_dir, PID_DIR)


def controller_lines(hosts: Sequence[str]) -> Tuple[str, ...]:
    """SlurmctldHost values of a local cluster with these controller host names (model.controller_hosts)."""
    return tuple("%s(%s)" % (host, address) for host, address in zip(hosts, ADDRESSES))


def controller_argv(run_dir: str, host: str, index: int, unshare: str, mount: str, slurmctld: str) -> List[str]:
    """argv of controller `index`: slurmctld -D in its own namespaces (see above)."""
    own = os.path.join(run_dir, "%s-%d" % (PID_DIR, index))
    return [unshare, "--uts", "--mount", "--propagation", "private", sys.executable, "-c",
            _CONTROLLER_NAMESPACE_PROGRAM, host, ADDRESSES[index], own, pid_dir(run_dir), mount, slurmctld, "-D"]


_PING = re.compile(r"Slurmctld\((primary|backup\d*)\) at (\S+) is (UP|DOWN)")


def ping_states(text: str) -> Dict[str, str]:
    """{host: 'UP'|'DOWN'} from `scontrol ping` (22.05: `Slurmctld(primary) at h is UP`, one line per controller)."""
    return dict((m.group(2), m.group(3)) for m in _PING.finditer(text))
