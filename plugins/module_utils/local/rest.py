# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local cluster's slurmrestd (spec.rest): the host's slurmrestd on 127.0.0.1:<base_port + REST_OFFSET>, reading
the cluster's slurm.conf, supervised like the Slurm daemons.

slurmrestd refuses to run as root or as SlurmUser (src/slurmrestd/slurmrestd.c of 22.05), so it is started as root
and drops to an unprivileged user itself (`-u`, render/rest.py REST_USER): a local cluster with spec.rest needs
root, as one with a backup controller does. It reads slurm.conf at its start only: it restarts with slurm.conf's
changes (its record's digest is slurmctld's). The key stays with slurmctld and slurmdbd (secrets/, 0600, SlurmUser's):
slurmrestd passes each request's token on and never reads it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
from typing import Any, List, Optional

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import (
    LOOPBACK, REST_DAEMON, REST_OFFSET, Layout, LocalClusterError)
from ansible_collections.soperator.slurm.plugins.module_utils.local.plan import _digest
from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import Daemons, find_binary
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import OLDEST_SLURM, host_slurm_version
from ansible_collections.soperator.slurm.plugins.module_utils.render.rest import (
    REST_ENV, REST_USER, openapi_plugins, slurmrestd_argv)


def _listening(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((LOOPBACK, port)) == 0


class RestServer(object):
    """The slurmrestd of the cluster in `layout`, started through `daemons`."""

    def __init__(self, layout: Layout, daemons: Daemons) -> None:
        self.layout = layout
        self.daemons = daemons

    @staticmethod
    def check(model: Optional[Any]) -> None:
        """Refuse, before anything is written, a REST API this machine cannot run."""
        if model is None or model.rest_api is None:
            return
        if os.geteuid() != 0:
            raise LocalClusterError("spec.rest needs root locally: slurmrestd refuses to run as root or as SlurmUser, "
                                    "and only root can start it as another user (%s)" % REST_USER)
        find_binary("slurmrestd")

    @staticmethod
    def url(model: Optional[Any], base_port: Optional[int]) -> Optional[str]:
        """slurmrestd's base URL when `model` enables it and the ports are chosen, else None."""
        if model is None or model.rest_api is None or not base_port:
            return None
        return "http://%s:%d" % (LOOPBACK, base_port + REST_OFFSET)

    def _argv(self, model, base_port):
        plugins = openapi_plugins(host_slurm_version() or OLDEST_SLURM, model.accounting.enabled)
        environment = ["%s=%s" % kv for kv in sorted(REST_ENV.items())]
        return [find_binary("env")] + environment + slurmrestd_argv(
            find_binary("slurmrestd"), "%s:%d" % (LOOPBACK, base_port + REST_OFFSET), plugins)

    def ensure(self, model: Any, base_port: int, slurm_hash: str, changes: List[str]) -> None:
        """slurmrestd running as `model` wants it (with the configuration `slurm_hash`), or stopped."""
        if model.rest_api is None:
            if self.daemons.running(REST_DAEMON):
                self.daemons.stop(REST_DAEMON)
                changes.append("stopped %s (spec.rest disabled)" % REST_DAEMON)
            return
        argv = self._argv(model, base_port)
        port = base_port + REST_OFFSET
        self.daemons.ensure(REST_DAEMON, argv, changes, digest=_digest(slurm_hash, *argv),
                            ready=lambda: _listening(port), ports=[port])

    def plan(self, model: Any, base_port: Optional[int], slurm_hash: Optional[str]) -> List[str]:
        """What ensure() would do, as 'would ...' actions (`slurm_hash`: None when the configuration is not known
        yet). Reads only."""
        running = self.daemons.running(REST_DAEMON)
        if model.rest_api is None:
            return ["would stop %s (spec.rest disabled)" % REST_DAEMON] if running else []
        if not running:
            return ["would start %s" % REST_DAEMON]
        if base_port is None or slurm_hash is None or \
                self.daemons.records()[REST_DAEMON].get("digest") != _digest(slurm_hash, *self._argv(model, base_port)):
            return ["would restart %s (configuration changed)" % REST_DAEMON]
        return []
