"""Run shell scripts in a throw-away VM whose Linux kernel NFS client mounts our server.

A thin wrapper over ``nfs-vm-run`` of the shared tools (see its README): the
VM mounts ``10.0.2.2:/`` (the host's 127.0.0.1) with NFSv3 over TCP on the given
port (MOUNT on the same port), runs the script in ``/mnt`` as root (or ``user``),
syncs, unmounts and powers off. About 5 s per run under TCG.

    if not vm_available():
        pytest.skip(vm_status()[1])
    res = run_in_vm(server.port, "echo hi > /mnt/a.txt")
    assert res.returncode == 0, res.stderr

The tools are found at ``shared/tools/nfs-vm`` beside the repository root (the checkout's
parent folder holds ``shared/``); the NFS_VM_TOOLS environment variable points elsewhere.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = ["NFS_VM_TOOLS", "run_in_vm", "vm_available", "vm_status"]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
NFS_VM_TOOLS: Final = Path(
    os.environ.get("NFS_VM_TOOLS") or REPO_ROOT.parent / "shared" / "tools" / "nfs-vm"
)


@functools.cache
def vm_status() -> tuple[bool, str]:
    """Check (once per process) that the VM harness can run: tools present, setup passes.

    Runs ``nfs-vm-setup`` (idempotent; it installs packages as root and builds
    the cached kernel and initramfs when needed).

    Returns:
        (available, reason): the reason explains why not, for a skip message.
    """
    run_tool = NFS_VM_TOOLS / "nfs-vm-run"
    setup = NFS_VM_TOOLS / "nfs-vm-setup"
    for tool in (run_tool, setup):
        if not os.access(tool, os.X_OK):
            return False, f"{tool} not found or not executable"
    try:
        res = subprocess.run([str(setup)], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        return False, "nfs-vm-setup timed out"
    if res.returncode != 0:
        tail = " ".join(res.stderr.strip().splitlines()[-3:])
        return False, f"nfs-vm-setup failed ({res.returncode}): {tail}"
    return True, f"nfs-vm cache at {res.stdout.strip()}"


def vm_available() -> bool:
    """Return whether `run_in_vm` can work here (see `vm_status` for the reason)."""
    return vm_status()[0]


def run_in_vm(
    port: int,
    script: str,
    *,
    timeout: int = 120,
    user: int | str | None = None,
    opts: str | None = None,
    export: str = "/",
    mount_port: int | None = None,
    env: Mapping[str, str] | None = None,
    merge: bool = False,
    rpcbind: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Boot the VM, mount the server on 127.0.0.1:`port` at /mnt and run `script` there.

    Args:
        port: the NFS (and MOUNT) port on the host loopback.
        script: a shell script (bash unless it has a ``#!`` line); cwd is /mnt.
        timeout: the whole run's limit in seconds (exit status 124 on expiry).
        user: run as this uid or "uid:gid" (AUTH_SYS) instead of root.
        opts: extra mount options, e.g. "noac" or "actimeo=0".
        export: the path to mount.
        mount_port: a separate MOUNT port (default: `port`).
        env: variables exported for the script.
        merge: merge stderr into stdout.
        rpcbind: give the kernel no ports: it asks the port mapper on host port 111
            (serve one with ``NfsServer(..., portmapper=True, portmap_port=111)``).

    Returns:
        The finished process: the script's exit status (125: the VM could not
        boot or mount; 124: timeout), its stdout, and its stderr followed by
        harness messages (``nfs-vm-run: guest kernel: ...`` lines are kernel
        messages logged while the script ran).
    """
    with tempfile.TemporaryDirectory(prefix="nfsvm-") as tmp:
        path = Path(tmp) / "script.sh"
        path.write_text(script)
        cmd = [str(NFS_VM_TOOLS / "nfs-vm-run"), "--export", export, "--timeout", str(timeout)]
        cmd += ["--rpcbind"] if rpcbind else ["--port", str(port)]
        if mount_port is not None:
            cmd += ["--mount-port", str(mount_port)]
        if user is not None:
            cmd += ["--user", str(user)]
        if opts:
            cmd += ["--opts", opts]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        if merge:
            cmd.append("--merge")
        cmd.append(str(path))
        return subprocess.run(
            cmd,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout + 120,
            check=False,
        )
