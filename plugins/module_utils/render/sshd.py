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
- shared_source (the Kubernetes login pods): no per-source penalties. OpenSSH 9.8+ refuses, for a while, every
  connection from an address whose clients failed to log in (PerSourcePenalties, on by default; the login image's
  10.6 penalises a failed key 5 s, a connection without authentication 1 s, and refuses the address once 15 s are
  due). Behind a Service that translates source addresses (NodePort and LoadBalancer with externalTrafficPolicy
  Cluster, the default) every user arrives from the node's address, so one user's failures would lock out all.
  OpenSSH before 9.8 (the host's 9.2: the local backend) does not know the key and refuses the file with it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.config_syntax import (
    comment, sshd_line, sshd_literal)

SSHD_CONFIG = "sshd_config"
# The login image's copy of node/authorized_keys.py (the cluster's keys, then the directory's).
AUTHORIZED_KEYS_PROGRAM = "/opt/soperator/bin/authorized-keys"


def host_key_paths(key_dir):
    """The private host key files sshd loads from `key_dir` (the files of the SSH host keys Secret)."""
    return ["%s/%s" % (key_dir.rstrip("/"), s.ssh_host_key_file(t)) for t in s.SSH_HOST_KEY_TYPES]


def render_sshd_config(chroot_dir, host_key_dir, authorized_keys_dir, port=22, listen_address=None, pid_file=None,
                       set_env=None, strict_modes=True, use_pam=True, notes=(), keys_by_command=False,
                       identity_keys=False, identity_command=None, shared_source=False):
    """The sshd_config text of a login node.

    chroot_dir: the jail as sshd sees it. host_key_dir: the directory of the host keys (host_key_paths).
    authorized_keys_dir: one file per user name with the keys the cluster grants (kube_objects.py: the ConfigMap).
    listen_address / pid_file / set_env ({name: value}) / strict_modes / use_pam / notes (comment lines): what the
    local backend changes for a process on a shared host (see local/login.py render_login_sshd_config).
    keys_by_command: the cluster's keys are read by AuthorizedKeysCommand (cat, as nobody) instead of
    AuthorizedKeysFile. For a ConfigMap volume: the kubelet makes its directory mode 0777, and StrictModes refuses
    every AuthorizedKeysFile below it ("bad ownership or modes"), while a command's input is not checked.
    identity_keys (spec.identity on): the directory's keys too, from SSSD (sss_ssh_authorizedkeys, the sshPublicKey of
    the user's entry), through node/authorized_keys.py: it offers them only while the directory answers (fail
    closed) and prints the cluster's keys too. identity_command: how to run it (default AUTHORIZED_KEYS_PROGRAM, the
    login image's copy); it gets the keys directory and `%u`.
    shared_source: clients may share one source address; turns sshd's per-source penalties off (OpenSSH 9.8+ only).
    """
    # Every line goes through config_syntax.sshd_line / comment: a path with a space, a quote, '#' or a '%' that sshd
    # would expand raises ConfigSyntaxError instead of writing a line sshd reads differently.
    jail = sshd_literal(chroot_dir.rstrip("/") or "/", "the jail path")
    keys_dir = sshd_literal(authorized_keys_dir.rstrip("/"), "the authorized keys directory")
    lines = [comment("sshd_config of the login nodes (rendered by soperator.slurm; edits are overwritten).")]
    lines += [comment(note) for note in notes]
    lines += [sshd_line("Port", "%d" % port)]
    if listen_address:
        lines.append(sshd_line("ListenAddress", listen_address))
    lines += [sshd_line("HostKey", sshd_literal(path, "the host key path")) for path in host_key_paths(host_key_dir)]
    if pid_file:
        lines.append(sshd_line("PidFile", pid_file))
    lines += [
        "",
        comment("Public keys only."),
        sshd_line("PubkeyAuthentication", "yes"),
        sshd_line("AuthenticationMethods", "publickey"),
        sshd_line("PasswordAuthentication", "no"),
        sshd_line("KbdInteractiveAuthentication", "no"),
        sshd_line("HostbasedAuthentication", "no"),
        sshd_line("PermitEmptyPasswords", "no"),
        sshd_line("PermitRootLogin", "prohibit-password"),
    ]
    own_keys = "%s%%h/.ssh/authorized_keys" % ("" if jail == "/" else jail)
    key_command = list(identity_command or [AUTHORIZED_KEYS_PROGRAM]) + [keys_dir, "%u"]
    if keys_by_command:
        command = key_command if identity_keys else ["/usr/bin/cat", "%s/%%u" % keys_dir]
        lines += [sshd_line("AuthorizedKeysFile", own_keys),
                  sshd_line("AuthorizedKeysCommand", *command),
                  sshd_line("AuthorizedKeysCommandUser", "nobody")]
    else:
        lines.append(sshd_line("AuthorizedKeysFile", "%s/%%u" % keys_dir, own_keys))
        if identity_keys:
            lines += [sshd_line("AuthorizedKeysCommand", *key_command),
                      sshd_line("AuthorizedKeysCommandUser", "nobody")]
    lines += [
        sshd_line("StrictModes", "yes" if strict_modes else "no"),
        # PAM does account and session management only (no password is ever asked). Without it sshd refuses
        # accounts whose password is locked (`!` in shadow), which is what `useradd` gives a key-only user.
        sshd_line("UsePAM", "yes" if use_pam else "no"),
        sshd_line("PermitUserEnvironment", "no"),
        sshd_line("LoginGraceTime", "30"),
        sshd_line("MaxAuthTries", "4"),
        sshd_line("ClientAliveInterval", "60"),
        sshd_line("ClientAliveCountMax", "3"),
        sshd_line("UseDNS", "no"),
        sshd_line("PrintMotd", "no"),
        sshd_line("AcceptEnv", "LANG", "LC_*"),
    ]
    if shared_source:
        lines += [comment("Clients share the node's address behind the Service: no per-source lockout (OpenSSH 9.8+)."),
                  sshd_line("PerSourcePenalties", "no")]
    if set_env:
        lines.append(sshd_line("SetEnv", *["%s=%s" % (k, v) for k, v in sorted(set_env.items())]))
    lines += [
        "",
        comment("Every session runs in the jail: the root filesystem that the jobs see too."),
        sshd_line("ChrootDirectory", jail),
        sshd_line("Subsystem", "sftp", "internal-sftp"),
        sshd_line("X11Forwarding", "no"),
        sshd_line("AllowAgentForwarding", "no"),
        sshd_line("AllowTcpForwarding", "local"),
        sshd_line("AllowStreamLocalForwarding", "no"),
        sshd_line("GatewayPorts", "no"),
        sshd_line("PermitTunnel", "no"),
    ]
    return "\n".join(lines) + "\n"
