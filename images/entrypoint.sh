#!/usr/bin/env bash
# Entrypoint of the Slurm images (controller, worker, login, accounting): the pod templates of
# plugins/module_utils/render/kube_objects.py give only args (`slurmctld -D`, `slurmd -D -N <pod>`, `slurmdbd -D`,
# `/usr/sbin/sshd -D -e -f ...`, `/opt/soperator/bin/active-check ...`). This script starts munged with the
# cluster's key (the <cluster>-munge Secret at /etc/munge/munge.key), prepares what the daemon writes, and execs the
# args, dropping root wherever the daemon does not need it.
#
# Privileges: the script itself runs as root (the image's user) only to copy the key and create directories.
#   munged     runs as munge (no capability).
#   slurmctld  runs as slurm (SlurmUser): it never needs root.
#   slurmdbd   runs as slurm (SlurmUser) with its 0600 config.
#   slurmd     stays root: it starts job steps as their users, creates job cgroups, and the chroot SPANK plugin
#              mounts the jail (the worker container is privileged; see kube_objects._worker).
#   sshd       stays root: it authenticates users, switches to them and chroots (CAP_SYS_CHROOT) into the jail.
set -euo pipefail

log() { echo "soperator-entrypoint: $*" >&2; }

MUNGE_KEY_SOURCE=${MUNGE_KEY_SOURCE:-/etc/munge/munge.key}
# munged refuses a key that it cannot read or that others can: the Secret's file is root's (mode 0400), so munged
# gets its own copy.
MUNGE_KEY=/var/lib/munge/munge.key
MUNGE_SOCKET=/run/munge/munge.socket.2

as_user() {
    local user=$1
    shift
    exec setpriv --reuid="$user" --regid="$user" --init-groups --inh-caps=-all -- "$@"
}

start_munged() {
    if [ ! -r "$MUNGE_KEY_SOURCE" ]; then
        log "no munge key at $MUNGE_KEY_SOURCE (mount the cluster's munge Secret there)"
        exit 1
    fi
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    install -o munge -g munge -m 0400 "$MUNGE_KEY_SOURCE" "$MUNGE_KEY"
    # In the foreground (-F) munged logs to its standard error, each line prefixed "munged: ": the container's, so
    # `kubectl logs` and log collectors see it beside the Slurm daemon's own lines (which `-D` sends there too).
    # Started in the background of this script, it stays a child of the daemon exec'd below.
    setpriv --reuid=munge --regid=munge --init-groups --inh-caps=-all -- \
        munged -F --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCKET" &
    local munged=$! deadline=$((SECONDS + ${MUNGED_START_SECONDS:-30}))
    until [ -S "$MUNGE_SOCKET" ]; do
        if ! kill -0 "$munged" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
            log "munged did not create $MUNGE_SOCKET"
            exit 1
        fi
        sleep 0.1
    done
}

# spec.rest: slurmctld and slurmdbd verify tokens with the cluster's JWT key as SlurmUser. The Secret's file
# (JWT_KEY_SOURCE, set by the pod template only with spec.rest) is root's (0400): SlurmUser gets its own copy (0600)
# at the path slurm.conf and slurmdbd.conf name (constants.JWT_KEY).
JWT_KEY=/run/slurm-jwt/jwt_hs256.key
copy_jwt_key() {
    [ -n "${JWT_KEY_SOURCE:-}" ] || return 0
    if [ ! -r "$JWT_KEY_SOURCE" ]; then
        log "no JWT key at $JWT_KEY_SOURCE (mount the cluster's jwt-key Secret there)"
        exit 1
    fi
    install -d -o slurm -g slurm -m 0700 "$(dirname "$JWT_KEY")"
    install -o slurm -g slurm -m 0600 "$JWT_KEY_SOURCE" "$JWT_KEY"
}

slurm_dirs() {
    install -d -o slurm -g slurm -m 0755 /run/slurm /var/log/slurm
}

# A recreated worker pod has a new IP, and slurmctld keeps the address it first resolved for the node's name
# (seen on a real node: jobs on a recreated cpu-0 hung until "not responding"). Before slurmd starts, tell
# slurmctld this pod's address (POD_IP, from the downward API), as root with the cluster's munge key. Bounded: when
# slurmctld cannot be reached (it is starting, it will resolve the name afresh), slurmd starts anyway.
announce_address() {
    local node="" prev="" arg deadline
    for arg in "$@"; do
        [ "$prev" = "-N" ] && node=$arg
        prev=$arg
    done
    [ -n "$node" ] && [ -n "${POD_IP:-}" ] || return 0
    deadline=$((SECONDS + ${SLURMD_ANNOUNCE_SECONDS:-60}))
    until scontrol update NodeName="$node" NodeAddr="$POD_IP" NodeHostname="$node" 2>/dev/null; do
        if [ $SECONDS -ge $deadline ]; then
            log "could not tell slurmctld that $node is at $POD_IP; starting slurmd anyway"
            return 0
        fi
        sleep 2
    done
    log "told slurmctld that $node is at $POD_IP"
}

# slurmdbd.conf = the ConfigMap's template + StoragePass from the Secret, mode 0600, owned by SlurmUser (slurmdbd
# refuses anything else). Then wait (bounded) until the database accepts connections: slurmdbd exits when it
# cannot reach it at start.
slurmdbd_config() {
    local template=${SLURMDBD_CONF_TEMPLATE:?SLURMDBD_CONF_TEMPLATE is not set}
    local conf=/etc/slurm/slurmdbd.conf
    : "${SLURMDBD_STORAGE_PASS:?SLURMDBD_STORAGE_PASS is not set}"
    case $SLURMDBD_STORAGE_PASS in
        *$'\n'*|*'#'*) log "the database password holds a newline or '#', which slurmdbd.conf cannot carry"; exit 1 ;;
    esac
    install -d -m 0755 /etc/slurm
    (umask 077 && { grep -v '^[[:space:]]*StoragePass[[:space:]]*=' "$template"; \
        printf 'StoragePass=%s\n' "$SLURMDBD_STORAGE_PASS"; } >"$conf.tmp")
    chown slurm:slurm "$conf.tmp"
    mv -f "$conf.tmp" "$conf"
    local host port deadline
    host=$(sed -n 's/^[[:space:]]*StorageHost[[:space:]]*=[[:space:]]*//p' "$conf" | tail -n1)
    port=$(sed -n 's/^[[:space:]]*StoragePort[[:space:]]*=[[:space:]]*//p' "$conf" | tail -n1)
    host=${host:-localhost}
    port=${port:-3306}
    deadline=$((SECONDS + ${SLURMDBD_DB_WAIT_SECONDS:-300}))
    until (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "database $host:$port not reachable after ${SLURMDBD_DB_WAIT_SECONDS:-300}s"
            exit 1
        fi
        sleep 2
    done
}

# Login sessions (sshd's ChrootDirectory) and job steps (the SPANK plugin) resolve names with the jail's
# /etc/resolv.conf, and slurmstepd itself, once in the jail, must still reach slurmctld by its DNS name. Every pod of
# the cluster has the same DNS settings (one namespace, one dnsConfig), so the login and worker pods copy theirs
# into the jail. Not when the jail's /etc or its resolv.conf is a symbolic link: the jail's content is not trusted
# to redirect a write of root's.
JAIL=${SOPERATOR_JAIL:-/mnt/jail}
share_resolv_conf() {
    local etc=$JAIL/etc
    if [ ! -d "$etc" ] || [ -L "$etc" ] || [ -L "$etc/resolv.conf" ] || [ ! -r /etc/resolv.conf ]; then
        log "not copying /etc/resolv.conf into the jail ($etc missing or a symbolic link)"
        return 0
    fi
    if cmp -s /etc/resolv.conf "$etc/resolv.conf"; then
        return 0
    fi
    local tmp
    tmp=$(mktemp "$etc/.resolv.conf.soperator.XXXXXX")
    cat /etc/resolv.conf >"$tmp"
    chmod 0644 "$tmp"
    mv -fT "$tmp" "$etc/resolv.conf"
}

# The populate Job may still be filling the jail when this pod starts (it swaps the jail's entries for the
# tarball's, which has no resolv.conf), and a later populate with overwrite=always swaps them again: once the
# jail's sentinel is there, compare every 30 s and copy again when the jail's file differs.
keep_resolv_conf_shared() {
    if [ -e "$JAIL/.soperator-jail.json" ]; then
        share_resolv_conf
    fi
    (
        while sleep 30; do
            if [ -e "$JAIL/.soperator-jail.json" ]; then
                share_resolv_conf >/dev/null 2>&1 || true
            fi
        done
    ) &
}

if [ $# -eq 0 ]; then
    log "no command given (the pod template's args)"
    exit 2
fi

# `slurmctld -V` and the like only print: no munged, no directories.
case ${2:-} in
    -V|--version|-h|--help|--usage) exec "$@" ;;
esac

case $(basename -- "$1") in
    slurmctld)
        start_munged
        slurm_dirs
        copy_jwt_key
        # The spool volume is created root-owned.
        install -d -o slurm -g slurm -m 0750 /var/spool/slurmctld
        chown slurm:slurm /var/spool/slurmctld
        as_user slurm "$@"
        ;;
    slurmdbd)
        start_munged
        slurm_dirs
        copy_jwt_key
        slurmdbd_config
        as_user slurm "$@"
        ;;
    slurmd)
        start_munged
        slurm_dirs
        install -d -m 0755 /var/spool/slurmd
        keep_resolv_conf_shared
        announce_address "$@"
        exec "$@"
        ;;
    sshd)
        start_munged
        # sshd's privilege separation directory.
        install -d -m 0755 /run/sshd
        keep_resolv_conf_shared
        exec "$@"
        ;;
    *)
        # Slurm clients (active checks, scontrol, srun): munged when the key is there.
        if [ -r "$MUNGE_KEY_SOURCE" ]; then
            start_munged
        fi
        exec "$@"
        ;;
esac
