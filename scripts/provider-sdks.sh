# shellcheck shell=bash
# The official provider SDKs (Python `openai`, `anthropic` and `google-genai`, with their
# pydantic models) in a virtual environment, for tests/provider_sdks.rs, which checks that
# the messages the crate exports validate against the SDKs' own request types.
#
# Sourced (not run) by scripts/test:
#
#     source "$(dirname "$0")/provider-sdks.sh"
#     provider_sdks_setup   # exports AGENT_SESSION_SDK_PYTHON
#
# provider_sdks_setup does nothing if AGENT_SESSION_SDK_PYTHON is already set (that Python
# is used, and must have the packages). Otherwise it creates target/provider-sdks/ (a
# venv; `python3 -m venv`, installing Debian's python3-venv package if the module is
# missing, as root or with sudo) and installs the pinned versions below into it from PyPI,
# once: a stamp file records what was installed, so later runs start at once.
#
# The versions are pinned so that a new SDK release cannot fail the suite by itself; raise
# them on purpose, together, and read what changed in their request types.
PROVIDER_SDKS_PACKAGES=(openai==3.57.0 anthropic==2.15.0 google-genai==3.6.1 pydantic==2.14.4)

provider_sdks__log() {
    printf '%s: %s\n' "${PG_SERVER_PROG:-${0##*/}}" "$*" >&2
}

# Installs Debian's python3-venv (apt-get, as root or through sudo).
provider_sdks__install_venv_module() {
    local -a sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        if ! command -v sudo >/dev/null 2>&1; then
            provider_sdks__log "python3 has no venv module, and not root and no sudo to install python3-venv"
            return 1
        fi
        if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        provider_sdks__log "python3 has no venv module and apt-get is not available to install it"
        return 1
    fi
    provider_sdks__log "installing python3-venv (Debian) for the provider SDK check"
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update >&2 &&
        ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends python3-venv >&2
}

provider_sdks_setup() {
    if [[ -n ${AGENT_SESSION_SDK_PYTHON:-} ]]; then
        return 0
    fi
    local dir=${CARGO_TARGET_DIR:-target}/provider-sdks
    local stamp=$dir/installed
    local want="${PROVIDER_SDKS_PACKAGES[*]}"
    if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
        if ! command -v python3 >/dev/null 2>&1; then
            provider_sdks__log "python3 is needed for the provider SDK check (tests/provider_sdks.rs); install it"
            return 1
        fi
        if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
            provider_sdks__install_venv_module || return 1
        fi
        rm -rf "$dir"
        provider_sdks__log "installing ${PROVIDER_SDKS_PACKAGES[*]} into $dir"
        python3 -m venv "$dir" >&2 &&
            "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
                "${PROVIDER_SDKS_PACKAGES[@]}" >&2 || {
            provider_sdks__log "could not install the provider SDKs into $dir"
            return 1
        }
        printf '%s' "$want" >"$stamp"
    fi
    AGENT_SESSION_SDK_PYTHON=$(cd "$dir/bin" && pwd)/python
    export AGENT_SESSION_SDK_PYTHON
}
