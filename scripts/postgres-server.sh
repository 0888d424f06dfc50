# shellcheck shell=bash
# A throw-away PostgreSQL server for the test suite and the benchmarks.
#
# Sourced (not run) by scripts/test and scripts/bench-postgres:
#
#     source "$(dirname "$0")/postgres-server.sh"
#     pg_server_start      # exports AGENT_SESSION_POSTGRES_URL, stops the server on exit
#     cargo test ...
#
# pg_server_start does nothing if AGENT_SESSION_POSTGRES_URL is already set: that server is
# used instead. Otherwise it finds the PostgreSQL server binaries (installing Debian's
# `postgresql` package if there are none), runs initdb into a new temporary directory
# (trust authentication, superuser `agent_session`), starts the server on a free port of
# 127.0.0.1 with fsync off, and sets an EXIT trap that stops it and removes the directory,
# keeping the script's exit status.
#
# The server also accepts TLS: a throw-away CA and a server certificate for `localhost`
# and 127.0.0.1 (made with `openssl`, installed from Debian's `openssl` package if
# missing), with AGENT_SESSION_POSTGRES_CA exported as the CA's PEM file, for
# tests/postgres_tls.rs. AGENT_SESSION_POSTGRES_URL says `sslmode=disable`: the rest of
# the suite (and the benchmarks) talk to it in clear text, as before; the TLS tests put
# `sslmode=require` after it. Without openssl the server starts without TLS and
# AGENT_SESSION_POSTGRES_CA is not set (the TLS tests then fail saying so). PostgreSQL refuses to run as root: as root the cluster
# belongs to, and runs as, the `postgres` system user (created if missing).
#
# Settings (environment):
#   AGENT_SESSION_POSTGRES_URL   use this server; start nothing
#   AGENT_SESSION_POSTGRES_CA    (with the URL) the PEM file of the CA that signed its certificate
#   AGENT_SESSION_PG_BINDIR      directory holding initdb, pg_ctl and postgres (skips the search)
#   AGENT_SESSION_PG_OS_USER     system user that runs the server when we are root (postgres)
#
# The caller should run under `set -euo pipefail`. A caller with its own EXIT trap must
# call pg_server_stop from it (pg_server_start replaces the EXIT trap).

# shellcheck source=scripts/debian-package.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/debian-package.sh"

# Where Debian and Ubuntu install the server binaries, one directory per major version.
PG_SERVER_LIB_ROOT=${PG_SERVER_LIB_ROOT:-/usr/lib/postgresql}
PG_SERVER_USER=agent_session

pg_server__log() {
    printf '%s: %s\n' "${PG_SERVER_PROG:-${0##*/}}" "$*" >&2
}

# Prints the directory holding initdb, pg_ctl and postgres, preferring the newest
# $PG_SERVER_LIB_ROOT/<N>/bin, then the directory of `initdb` on PATH. Fails (status 1,
# nothing printed) if there is none.
pg_server_find_bindir() {
    local dir best='' best_major=-1 major
    if [[ -n ${AGENT_SESSION_PG_BINDIR:-} ]]; then
        if [[ -x $AGENT_SESSION_PG_BINDIR/initdb && -x $AGENT_SESSION_PG_BINDIR/pg_ctl ]]; then
            printf '%s\n' "$AGENT_SESSION_PG_BINDIR"
            return 0
        fi
        pg_server__log "AGENT_SESSION_PG_BINDIR=$AGENT_SESSION_PG_BINDIR has no initdb and pg_ctl"
        return 1
    fi
    for dir in "$PG_SERVER_LIB_ROOT"/*/bin; do
        [[ -x $dir/initdb && -x $dir/pg_ctl && -x $dir/postgres ]] || continue
        major=${dir%/bin}
        major=${major##*/}
        major=${major%%.*} # 9.6 -> 9
        [[ $major =~ ^[0-9]+$ ]] || continue
        if ((major > best_major)); then
            best=$dir
            best_major=$major
        fi
    done
    if [[ -n $best ]]; then
        printf '%s\n' "$best"
        return 0
    fi
    # On PATH (Homebrew, Fedora, a source build, or Debian's /usr/local/bin symlinks):
    # resolve symlinks so postgres, pg_isready and psql are taken from the same place.
    local initdb pg_ctl
    initdb=$(command -v initdb 2>/dev/null) || return 1
    pg_ctl=$(command -v pg_ctl 2>/dev/null) || return 1
    [[ -n $initdb && -n $pg_ctl ]] || return 1
    dir=$(dirname -- "$(readlink -f -- "$initdb" 2>/dev/null || printf '%s' "$initdb")")
    if [[ -x $dir/pg_ctl ]]; then
        printf '%s\n' "$dir"
    else
        dirname -- "$initdb"
    fi
}

# Installs Debian's `postgresql` package (apt-get, as root or through sudo).
pg_server_install() {
    local -a sudo=()
    if ((EUID != 0)); then
        if ! command -v sudo >/dev/null 2>&1; then
            pg_server__log "PostgreSQL server binaries (initdb, pg_ctl) not found, and not root and no sudo to install them."
            pg_server__log "Install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql),"
            pg_server__log "or set AGENT_SESSION_PG_BINDIR to the directory holding initdb, or AGENT_SESSION_POSTGRES_URL to a running server."
            return 1
        fi
        # Without a terminal a password prompt would hang: fail instead.
        if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        pg_server__log "PostgreSQL server binaries (initdb, pg_ctl) not found and apt-get is not available to install them."
        pg_server__log "Install the PostgreSQL server with this system's package manager (the package is usually 'postgresql' or 'postgresql-server'),"
        pg_server__log "or set AGENT_SESSION_PG_BINDIR to the directory holding initdb, or AGENT_SESSION_POSTGRES_URL to a running server."
        return 1
    fi
    pg_server__log "PostgreSQL server binaries not found: installing Debian's postgresql package"
    # To stderr: callers capture this function's stdout.
    if ! ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update >&2 \
        || ! ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends postgresql >&2; then
        pg_server__log "could not install PostgreSQL: run 'apt-get update && apt-get install -y --no-install-recommends postgresql' as root"
        return 1
    fi
}

# Finds the binaries, installing them if needed; prints the directory.
pg_server_ensure_bindir() {
    local dir
    if dir=$(pg_server_find_bindir); then
        printf '%s\n' "$dir"
        return 0
    fi
    pg_server_install >&2 || return 1
    if dir=$(pg_server_find_bindir); then
        printf '%s\n' "$dir"
        return 0
    fi
    pg_server__log "PostgreSQL was installed but initdb and pg_ctl are still not found (looked on PATH and in $PG_SERVER_LIB_ROOT/*/bin)"
    return 1
}

# Runs a command as the cluster's owner: ourselves, or the postgres system user when root.
# Runs from the cluster's directory, which that user can always enter.
pg_server__as_owner() {
    if ((EUID != 0)); then
        (cd -- "$PG_SERVER_ROOT" && "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd -- "$PG_SERVER_ROOT" && runuser -u "$PG_SERVER_OS_USER" -- "$@")
    else
        (cd -- "$PG_SERVER_ROOT" && su "$PG_SERVER_OS_USER" -s /bin/bash -c "$(printf '%q ' "$@")")
    fi
}

# As root: makes sure the system user that will own the cluster exists.
pg_server__ensure_os_user() {
    id -u "$PG_SERVER_OS_USER" >/dev/null 2>&1 && return 0
    pg_server__log "creating system user $PG_SERVER_OS_USER to run PostgreSQL (it refuses to run as root)"
    if command -v useradd >/dev/null 2>&1; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$PG_SERVER_OS_USER"
    elif command -v adduser >/dev/null 2>&1; then
        adduser -S -D -H "$PG_SERVER_OS_USER"
    else
        pg_server__log "no useradd or adduser to create the $PG_SERVER_OS_USER user"
        return 1
    fi
}

# Is something listening on 127.0.0.1:$1?
pg_server__port_busy() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -Htln "sport = :$port" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
}

pg_server__free_port() {
    local port tries
    for ((tries = 0; tries < 100; tries++)); do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 20001))
        if ! pg_server__port_busy "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    pg_server__log "no free port found in 20000-40000"
    return 1
}

# Makes the TLS files in $1 (a new directory): ca.pem, a CA valid for a week, and
# server.pem / server.key, signed by it for DNS:localhost and IP:127.0.0.1. The CA's key
# is deleted once the server's certificate is signed. P-256 keys: quick to make.
pg_server__make_certs() {
    local dir=$1
    (
        set -e
        cd -- "$dir"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout ca.key -out ca.pem -days 7 -subj "/CN=agent-session test CA" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout server.key -out server.csr -subj "/CN=localhost"
        printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" \
            "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
            "extendedKeyUsage=serverAuth" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out server.pem -days 7 -extfile server.ext
        rm -f ca.key ca.srl server.csr server.ext
        # PostgreSQL refuses a key that others may read; it must belong to the server user.
        chmod 600 server.key
        chmod 644 ca.pem server.pem
    ) >"$dir/openssl.log" 2>&1
}

pg_server__log_tail() {
    local file=$1
    if [[ -s $file ]]; then
        pg_server__log "last lines of ${file##*/}:"
        tail -n 30 -- "$file" >&2
    fi
}

# Starts the server (see the top of this file). Sets PG_SERVER_BINDIR, PG_SERVER_ROOT,
# PG_SERVER_DATA, PG_SERVER_PORT, exports AGENT_SESSION_POSTGRES_URL, and the EXIT trap.
pg_server_start() {
    if [[ -n ${AGENT_SESSION_POSTGRES_URL:-} ]]; then
        pg_server__log "using the server in AGENT_SESSION_POSTGRES_URL; starting none"
        return 0
    fi
    local started=$SECONDS
    PG_SERVER_OS_USER=${AGENT_SESSION_PG_OS_USER:-postgres}
    PG_SERVER_BINDIR=$(pg_server_ensure_bindir) || return 1

    # From here on, whatever happens, the EXIT trap stops the server and removes the files.
    PG_SERVER_ROOT=''
    PG_SERVER_STARTED=0
    trap pg_server__on_exit EXIT
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM

    if ((EUID == 0)); then
        pg_server__ensure_os_user || return 1
    fi
    # The socket lives in this directory, and a Unix socket path is limited to ~107 bytes;
    # the server user must also be able to reach it. /tmp always qualifies.
    local tmp=${TMPDIR:-/tmp}
    if ((${#tmp} > 60)) || [[ $tmp == *[[:space:]\'\"\\]* ]]; then tmp=/tmp; fi
    PG_SERVER_ROOT=$(mktemp -d "$tmp/agent-session-pg.XXXXXX") || return 1
    if ((EUID == 0)); then
        chown "$PG_SERVER_OS_USER:" "$PG_SERVER_ROOT" || return 1
        if ! pg_server__as_owner test -w "$PG_SERVER_ROOT" 2>/dev/null; then
            # TMPDIR is inside a directory the server user cannot enter (e.g. /root/tmp).
            rm -rf -- "$PG_SERVER_ROOT"
            PG_SERVER_ROOT=$(mktemp -d /tmp/agent-session-pg.XXXXXX) || return 1
            chown "$PG_SERVER_OS_USER:" "$PG_SERVER_ROOT" || return 1
        fi
    fi
    PG_SERVER_DATA=$PG_SERVER_ROOT/data

    # C locale: no dependency on which locales this machine has generated.
    if ! pg_server__as_owner "$PG_SERVER_BINDIR/initdb" -D "$PG_SERVER_DATA" -U "$PG_SERVER_USER" \
        -A trust -E UTF8 --locale=C --no-sync >"$PG_SERVER_ROOT/initdb.log" 2>&1; then
        pg_server__log "initdb failed"
        pg_server__log_tail "$PG_SERVER_ROOT/initdb.log"
        return 1
    fi
    # TLS with a throw-away CA (see the top of this file); a server without it otherwise.
    local tls_dir=$PG_SERVER_ROOT/tls tls_conf=''
    if ensure_command openssl openssl "it makes the test server's TLS certificate" && mkdir -m 755 -- "$tls_dir" \
        && pg_server__make_certs "$tls_dir"; then
        if ((EUID == 0)); then
            chown "$PG_SERVER_OS_USER:" "$tls_dir/server.key" "$tls_dir/server.pem" || return 1
        fi
        tls_conf="ssl = on
ssl_cert_file = '$tls_dir/server.pem'
ssl_key_file = '$tls_dir/server.key'"
    else
        pg_server__log "could not make a TLS certificate (no openssl?): the server starts without TLS, and the TLS tests will fail"
        pg_server__log_tail "$tls_dir/openssl.log"
    fi
    # Settings for a throw-away server: reachable only from this machine, no durability.
    # (Single-quoted values: the directory name comes from mktemp and holds no quote.)
    cat >>"$PG_SERVER_DATA/postgresql.conf" <<EOF

# scripts/postgres-server.sh: throw-away test server
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_SERVER_ROOT'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
$tls_conf
EOF

    # Another process may take the port between the check and the bind: try a few.
    local attempt
    for ((attempt = 1; attempt <= 5; attempt++)); do
        PG_SERVER_PORT=$(pg_server__free_port) || return 1
        : >"$PG_SERVER_ROOT/server.log"
        ((EUID != 0)) || chown "$PG_SERVER_OS_USER:" "$PG_SERVER_ROOT/server.log"
        if pg_server__as_owner "$PG_SERVER_BINDIR/pg_ctl" -D "$PG_SERVER_DATA" \
            -o "-p $PG_SERVER_PORT" -l "$PG_SERVER_ROOT/server.log" -t 60 -w start >/dev/null; then
            PG_SERVER_STARTED=1
            break
        fi
        if grep -q 'could not bind\|Address already in use\|could not create lock file' \
            "$PG_SERVER_ROOT/server.log" 2>/dev/null; then
            pg_server__log "port $PG_SERVER_PORT was taken; trying another"
            continue
        fi
        break
    done
    if ((PG_SERVER_STARTED == 0)); then
        pg_server__log "PostgreSQL failed to start"
        pg_server__log_tail "$PG_SERVER_ROOT/server.log"
        return 1
    fi

    local isready=$PG_SERVER_BINDIR/pg_isready
    [[ -x $isready ]] || isready=$(command -v pg_isready 2>/dev/null) || isready=''
    if [[ -n $isready ]]; then
        local waited
        for ((waited = 0; ; waited++)); do
            "$isready" -q -h 127.0.0.1 -p "$PG_SERVER_PORT" -U "$PG_SERVER_USER" -d postgres && break
            if ((waited >= 300)); then
                pg_server__log "PostgreSQL started but did not accept connections within 30 s"
                pg_server__log_tail "$PG_SERVER_ROOT/server.log"
                return 1
            fi
            sleep 0.1
        done
    fi

    # Clear text for the suite, as before: the server now offers TLS, which the store's
    # default (sslmode=prefer) would use and verify against roots that lack the test CA.
    export AGENT_SESSION_POSTGRES_URL="host=127.0.0.1 port=$PG_SERVER_PORT user=$PG_SERVER_USER dbname=postgres sslmode=disable"
    if [[ -n $tls_conf ]]; then
        export AGENT_SESSION_POSTGRES_CA=$tls_dir/ca.pem
    fi
    pg_server__log "PostgreSQL $("$PG_SERVER_BINDIR/postgres" --version 2>/dev/null | awk '{print $3}') ready in $((SECONDS - started)) s: AGENT_SESSION_POSTGRES_URL=\"$AGENT_SESSION_POSTGRES_URL\"${AGENT_SESSION_POSTGRES_CA:+ AGENT_SESSION_POSTGRES_CA=$AGENT_SESSION_POSTGRES_CA}"
}

# Stops the server started by pg_server_start and removes its directory. Safe to call
# more than once, and when nothing was started.
pg_server_stop() {
    [[ -n ${PG_SERVER_ROOT:-} ]] || return 0
    # postmaster.pid, not PG_SERVER_STARTED: a start interrupted or timed out may have
    # left a server running.
    if [[ -f $PG_SERVER_DATA/postmaster.pid ]]; then
        # Immediate: nothing in this cluster needs a checkpoint.
        if ! pg_server__as_owner "$PG_SERVER_BINDIR/pg_ctl" -D "$PG_SERVER_DATA" \
            -m immediate -t 30 -w stop >/dev/null 2>&1; then
            local pid
            pid=$(head -n 1 -- "$PG_SERVER_DATA/postmaster.pid" 2>/dev/null) || pid=''
            if [[ $pid =~ ^[0-9]+$ ]]; then
                pg_server__log "pg_ctl stop failed; killing the server (pid $pid)"
                kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
    fi
    PG_SERVER_STARTED=0
    rm -rf -- "$PG_SERVER_ROOT"
    PG_SERVER_ROOT=''
}

pg_server__on_exit() {
    local status=$?
    trap - EXIT
    pg_server_stop || true
    exit "$status"
}
