#!/usr/bin/env bash
# MariaDB entrypoint: on an empty data directory, create the system tables, set root's password and create the
# database and its user from the environment (the public image's variables); then run mariadbd as mysql with the
# container's args as options. Root is used only to own the data directory.
set -euo pipefail

log() { echo "mariadb-entrypoint: $*" >&2; }

DATADIR=/var/lib/mysql
SOCKET=/run/mysqld/mysqld.sock
: "${MARIADB_ROOT_PASSWORD:?MARIADB_ROOT_PASSWORD is not set}"

# A string as an SQL literal: backslash and quote escaped (the default sql_mode reads backslash escapes).
sql_string() {
    local s=${1//\\/\\\\}
    printf "'%s'" "${s//\'/\'\'}"
}
sql_name() {
    case $1 in
        *[!A-Za-z0-9_]*|'') log "name '$1' is not [A-Za-z0-9_]+"; exit 1 ;;
    esac
    printf '`%s`' "$1"
}

install -d -o mysql -g mysql -m 0755 /run/mysqld
install -d -o mysql -g mysql -m 0750 "$DATADIR"
chown mysql:mysql "$DATADIR"

if [ ! -d "$DATADIR/mysql" ]; then
    log "initializing $DATADIR"
    setpriv --reuid=mysql --regid=mysql --init-groups -- \
        mariadb-install-db --datadir="$DATADIR" --auth-root-authentication-method=normal --skip-test-db \
        >/dev/null
    setpriv --reuid=mysql --regid=mysql --init-groups -- \
        mariadbd --datadir="$DATADIR" --skip-networking --socket="$SOCKET" &
    pid=$!
    for _ in $(seq 60); do
        mariadb-admin --socket="$SOCKET" -uroot ping >/dev/null 2>&1 && break
        sleep 1
    done
    {
        printf 'ALTER USER root@localhost IDENTIFIED BY %s;\n' "$(sql_string "$MARIADB_ROOT_PASSWORD")"
        if [ -n "${MARIADB_DATABASE:-}" ]; then
            printf 'CREATE DATABASE IF NOT EXISTS %s;\n' "$(sql_name "$MARIADB_DATABASE")"
        fi
        if [ -n "${MARIADB_USER:-}" ]; then
            printf "CREATE USER %s@'%%' IDENTIFIED BY %s;\n" "$(sql_string "$MARIADB_USER")" \
                "$(sql_string "${MARIADB_PASSWORD:?MARIADB_PASSWORD is not set}")"
            if [ -n "${MARIADB_DATABASE:-}" ]; then
                printf "GRANT ALL ON %s.* TO %s@'%%';\n" "$(sql_name "$MARIADB_DATABASE")" \
                    "$(sql_string "$MARIADB_USER")"
            fi
        fi
        printf 'FLUSH PRIVILEGES;\n'
    } | mariadb --socket="$SOCKET" -uroot
    mariadb-admin --socket="$SOCKET" -uroot --password="$MARIADB_ROOT_PASSWORD" shutdown
    wait "$pid"
    log "initialized"
fi

# The public image's convention: args that start with '-' are mariadbd options.
if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then
    exec setpriv --reuid=mysql --regid=mysql --init-groups --inh-caps=-all -- \
        mariadbd --datadir="$DATADIR" --socket="$SOCKET" --bind-address=0.0.0.0 --port=3306 "$@"
fi
exec "$@"
