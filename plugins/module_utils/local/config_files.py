# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local cluster's files under etc/ and secrets/: the Slurm configs (local/configs.py renders them) written as one
set, and the munge key and database password generated once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import secrets
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c, files
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout, LocalClusterError
from ansible_collections.soperator.slurm.plugins.module_utils.local.state import current_text, read_secret

# A full filesystem or an exhausted quota under the state directory.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class ConfigFiles(object):
    """The config files of the cluster in `layout`, rendered for `user` (the SlurmUser), `jail_dir` and
    `spank_chroot` (local/configs.py local_slurm_configs; `renderer`: another render of the spec's configs)."""

    def __init__(self, layout: Layout, user: str, jail_dir: Optional[str], spank_chroot: Optional[str],
                 renderer: Optional[Callable[..., Any]] = None) -> None:
        self.layout = layout
        self.user = user
        self.jail_dir = jail_dir
        self.spank_chroot = spank_chroot
        self.renderer = renderer

    def render(self, model: Any, base_port: int, db_password: Optional[str]) -> Dict[str, str]:
        """The cluster's config files (name -> text) on the block from `base_port`: what a run writes and a plan
        compares."""
        return local_slurm_configs(model, self.layout.state_dir, base_port, user=self.user, db_password=db_password,
                                   jail_dir=self.jail_dir, spank_chroot=self.spank_chroot, renderer=self.renderer)

    def ensure_secrets(self, model: Any, changes: List[str]) -> None:
        """The munge key, (with accounting) the database password and (with spec.rest) the JWT key: generated when
        missing, then kept."""
        lay = self.layout
        if not os.path.exists(lay.munge_key):
            files.atomic_write(lay.munge_key, secrets.token_bytes(1024), 0o400)
            changes.append("generated munge key")
        if model.accounting.enabled and not os.path.exists(lay.db_password):
            files.atomic_write(lay.db_password, secrets.token_urlsafe(24), 0o600)
            changes.append("generated database password")
        if model.rest_api is not None and not os.path.exists(lay.jwt_key):
            # spec.rest's HS256 key, 32 random bytes as Slurm's jwt.html makes it; kept once made (never rotated:
            # a new key would void every token handed out)
            files.atomic_write(lay.jwt_key, secrets.token_bytes(32), 0o600)
            changes.append("generated JWT key")

    def write(self, model: Any, base_port: int, changes: List[str]) -> Dict[str, str]:
        """Write the configs that differ, all or none, and remove ours no longer rendered. -> the configs."""
        password = None
        if model.accounting.enabled:
            password = read_secret(self.layout.db_password)
        configs = self.render(model, base_port, password)
        etc = self.layout.etc
        writes = []
        for name, text in sorted(configs.items()):
            path = os.path.join(etc, name)
            old = current_text(path)
            if old != text:
                writes.append((path, text, 0o600 if name == c.SLURMDBD_CONF else 0o644))
                changes.append("%s %s" % ("updated" if old is not None else "wrote", name))
        try:
            files.replace_all(writes)             # all or none: daemons never read a half-changed set
        except OSError as e:
            if e.errno not in NO_SPACE:
                raise
            raise LocalClusterError("cannot write %s: %s; the Slurm configs in %s were left as they were (none was "
                                    "replaced). Free space on the filesystem of %s and run again"
                                    % (e.filename, e.strerror, etc, self.layout.state_dir))
        for name in sorted(os.listdir(etc)):
            if name not in configs and not name.startswith("."):
                os.remove(os.path.join(etc, name))
                changes.append("removed %s" % name)
        return configs

    def current(self) -> Dict[str, Optional[str]]:
        """The config files under etc/ (name -> text), as write() left them."""
        etc = self.layout.etc
        return dict((name, current_text(os.path.join(etc, name))) for name in sorted(os.listdir(etc))
                    if not name.startswith("."))
