#!/usr/bin/env bash
# Install everything posixlake needs on a fresh Debian/Ubuntu machine (run as root or with sudo).
#   scripts/setup.sh          runtime: Java (for Spark), a virtualenv in .venv with posixlake
#   scripts/setup.sh --dev    + test tools: libnfs-utils, the nfs-vm kernel-client harness, Azurite (npm),
#                               moto_server, pytest, hypothesis, mypy, ruff
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0
[ "${1:-}" = "--dev" ] && DEV=1

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

need_apt=()
java_ok() { command -v java >/dev/null && java -version 2>&1 | grep -Eq 'version "(1[7-9]|2[0-9])'; }
java_ok || need_apt+=(openjdk-17-jre-headless)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv python3-pip)
# the CSV renderer's compiled pass (posixlake/csvcodec/_lines.c): a C compiler and the headers
command -v cc >/dev/null || need_apt+=(gcc libc6-dev)
python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null || need_apt+=(python3-dev)
if [ "$DEV" = 1 ]; then
    command -v nfs-cat >/dev/null || need_apt+=(libnfs-utils)
    command -v npm >/dev/null || need_apt+=(nodejs npm)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: apt-get install ${need_apt[*]}" >&2
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

pip_install() {  # quiet unless it fails
    if ! .venv/bin/python -m pip install -q -e "$1" >/tmp/posixlake-pip.log 2>&1; then
        cat /tmp/posixlake-pip.log >&2; echo "setup: pip install -e $1 failed" >&2; exit 1
    fi
}
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1
if [ "$DEV" = 1 ]; then
    pip_install '.[dev]'
    # Azurite (Azure Blob emulator) for the storage tests, kept inside the repo
    if [ ! -x node_modules/.bin/azurite-blob ]; then
        npm ci --no-audit --no-fund --silent >/dev/null 2>&1 \
            || echo "setup: npm ci (azurite) failed; Azure tests will skip" >&2
    fi
    # The Linux kernel NFS client harness (boots a small VM; needs root for apt)
    VMTOOLS="$(pwd)/../shared/tools/nfs-vm"
    if [ -x "$VMTOOLS/nfs-vm-setup" ]; then
        $SUDO "$VMTOOLS/nfs-vm-setup" >/tmp/posixlake-nfs-vm-setup.log 2>&1 \
            || { tail -20 /tmp/posixlake-nfs-vm-setup.log >&2; echo "setup: nfs-vm-setup failed; kernel-mount tests will skip" >&2; }
    else
        echo "setup: $VMTOOLS not found; kernel-mount tests will skip" >&2
    fi
else
    pip_install '.[spark,pandas,polars]'
fi
echo "setup: done (.venv)" >&2
