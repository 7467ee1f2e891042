# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sshd_config of the login nodes. One function, used by both backends: the Kubernetes login pods (a ConfigMap) and
the local backend's login sshd (the same text with local paths). Pure: text out, no I/O.

What it sets, and why:
- Every session is chrooted into the jail (ChrootDirectory), so users see the same `/` as their jobs.
- Public keys only: no passwords, no keyboard-interactive, no host-based trust; root only with a key.
- AuthorizedKeysFile: the cluster's keys (one file per user in `authorized_keys_dir`, `%u`) and the user's own
  `~/.ssh/authorized_keys` IN THE JAIL (`<jail>%h/...`): sshd reads it before it chroots, so a plain
  `.ssh/authorized_keys` would be the login container's file, not the user's.
- No X11, agent, tunnel or unix-socket forwarding and no gateway ports; local TCP forwarding (`ssh -L`, e.g. to a
  notebook on a worker) is allowed, remote forwarding (`ssh -R`, opening ports on the login node) is not.
- sftp is sshd's built-in server (internal-sftp): it works in the jail without an sftp-server binary there.
- Idle connections are dropped after about three minutes without an answer; unauthenticated ones after 30 s.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils import secrets as s

SSHD_CONFIG = "sshd_config"


def host_key_paths(key_dir):
    """The private host key files sshd loads from `key_dir` (the files of the SSH host keys Secret)."""
    return ["%s/%s" % (key_dir.rstrip("/"), s.ssh_host_key_file(t)) for t in s.SSH_HOST_KEY_TYPES]


def render_sshd_config(chroot_dir, host_key_dir, authorized_keys_dir, port=22, listen_address=None, pid_file=None,
                       set_env=None, strict_modes=True, use_pam=True, notes=()):
    """The sshd_config text of a login node.

    chroot_dir: the jail as sshd sees it. host_key_dir: the directory of the host keys (host_key_paths).
    authorized_keys_dir: one file per user name with the keys the cluster grants (render_kube: the ConfigMap).
    listen_address / pid_file / set_env ({name: value}) / strict_modes / use_pam / notes (comment lines): what the
    local backend changes for a process on a shared host (see local_backend.render_login_sshd_config).
    """
    jail = chroot_dir.rstrip("/") or "/"
    lines = ["# sshd_config of the login nodes (rendered by soperator.slurm; edits are overwritten)."]
    lines += ["# %s" % note for note in notes]
    lines += ["Port %d" % port]
    if listen_address:
        lines.append("ListenAddress %s" % listen_address)
    lines += ["HostKey %s" % path for path in host_key_paths(host_key_dir)]
    if pid_file:
        lines.append("PidFile %s" % pid_file)
    lines += [
        "",
        "# Public keys only.",
        "PubkeyAuthentication yes",
        "AuthenticationMethods publickey",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no",
        "PermitEmptyPasswords no",
        "PermitRootLogin prohibit-password",
        "AuthorizedKeysFile %s/%%u %s%%h/.ssh/authorized_keys" % (
            authorized_keys_dir.rstrip("/"), "" if jail == "/" else jail),
        "StrictModes %s" % ("yes" if strict_modes else "no"),
        # PAM does account and session management only (no password is ever asked). Without it sshd refuses
        # accounts whose password is locked (`!` in shadow), which is what `useradd` gives a key-only user.
        "UsePAM %s" % ("yes" if use_pam else "no"),
        "PermitUserEnvironment no",
        "LoginGraceTime 30",
        "MaxAuthTries 4",
        "ClientAliveInterval 60",
        "ClientAliveCountMax 3",
        "UseDNS no",
        "PrintMotd no",
        "AcceptEnv LANG LC_*",
    ]
    if set_env:
        lines.append("SetEnv %s" % " ".join("%s=%s" % (k, v) for k, v in sorted(set_env.items())))
    lines += [
        "",
        "# Every session runs in the jail: the root filesystem that the jobs see too.",
        "ChrootDirectory %s" % jail,
        "Subsystem sftp internal-sftp",
        "X11Forwarding no",
        "AllowAgentForwarding no",
        "AllowTcpForwarding local",
        "AllowStreamLocalForwarding no",
        "GatewayPorts no",
        "PermitTunnel no",
    ]
    return "\n".join(lines) + "\n"
