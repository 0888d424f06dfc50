# shellcheck shell=bash
# Installs a missing tool from Debian's packages, for the scripts that need one.
#
# Sourced (not run) by scripts/postgres-server.sh and scripts/test:
#
#     ensure_command strace strace "the SQLite power-loss model traces the store's calls"
#
# ensure_command CMD PACKAGE WHY returns 0 if CMD is on PATH, or after installing PACKAGE
# with apt-get (as root, or through `sudo -n` without a terminal so a password prompt
# never hangs a CI job). It returns 1 without apt-get, root or sudo, or if the install
# fails; apt's output goes to stderr, never to the caller's stdout.
ensure_command() {
    local cmd=$1 package=$2 why=$3
    command -v "$cmd" >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1 || return 1
    local -a sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || return 1
        if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
    fi
    printf '%s: %s not found (%s): installing Debian'\''s %s package\n' \
        "${0##*/}" "$cmd" "$why" "$package" >&2
    { ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update \
        && ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends "$package"; } >&2 || return 1
    command -v "$cmd" >/dev/null 2>&1
}
