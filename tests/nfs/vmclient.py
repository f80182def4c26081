"""Run shell scripts in a throw-away VM whose Linux kernel NFS client mounts our server.

A thin wrapper over ``nfs-vm-run`` of the shared tools (see its README): the
VM mounts ``10.0.2.2:/`` (the host's 127.0.0.1) with NFSv3 over TCP on the given
port (MOUNT on the same port), runs the script in ``/mnt`` as root (or ``user``),
syncs, unmounts and powers off. About 5 s per run under TCG.

    require_vm()  # skips if the harness is not installed, fails if it is but cannot run
    res = run_in_vm(server.port, "echo hi > /mnt/a.txt")
    assert res.returncode == 0, res.stderr

The tools are found at ``shared/tools/nfs-vm`` beside the repository root (the checkout's
parent folder holds ``shared/``); the NFS_VM_TOOLS environment variable points elsewhere.

The harness is *absent* when its tools are not there (a checkout without ``shared/``):
tests skip. It is *broken* when the tools are there, or NFS_VM_TOOLS names them, but
``nfs-vm-setup`` fails or times out: tests fail, so a broken harness never passes as a
skip. A run that times out (exit status 124) or cannot boot or mount (125) is the
caller's failure too.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal, NamedTuple

import pytest

__all__ = [
    "NFS_VM_TOOLS",
    "VmHarness",
    "harness_state",
    "require_vm",
    "run_in_vm",
    "vm_available",
    "vm_harness",
    "vm_status",
]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
NFS_VM_TOOLS: Final = Path(
    os.environ.get("NFS_VM_TOOLS") or REPO_ROOT.parent / "shared" / "tools" / "nfs-vm"
)


class VmHarness(NamedTuple):
    """The state of the VM harness here: ``ready``, ``absent`` (not installed) or ``broken``."""

    state: Literal["ready", "absent", "broken"]
    reason: str


@functools.cache
def vm_harness() -> VmHarness:
    """Check (once per process) that the VM harness can run (see `harness_state`)."""
    return harness_state(NFS_VM_TOOLS, named=bool(os.environ.get("NFS_VM_TOOLS")))


def harness_state(tools: Path, *, named: bool, timeout: float = 900) -> VmHarness:
    """Check that the harness in ``tools`` can run: its tools are there and its setup passes.

    Runs ``nfs-vm-setup`` (idempotent; it installs packages as root and builds
    the cached kernel and initramfs when needed).

    Args:
        tools: the harness's folder.
        named: whether the user named that folder (NFS_VM_TOOLS): then it must be there.
        timeout: the limit of the setup, in seconds.

    Returns:
        ``absent`` when the tools are not there (and the folder is neither named nor
        present), ``broken`` when they are but the setup fails or times out, else
        ``ready``; with the reason.
    """
    run_tool = tools / "nfs-vm-run"
    setup = tools / "nfs-vm-setup"
    for tool in (run_tool, setup):
        if not os.access(tool, os.X_OK):
            # a tools folder that was asked for, or that is there, is broken, not absent
            state: Literal["absent", "broken"] = "broken" if named or tools.is_dir() else "absent"
            return VmHarness(state, f"{tool} not found or not executable")
    try:
        res = subprocess.run(
            [str(setup)], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return VmHarness("broken", f"nfs-vm-setup timed out after {timeout:g} s")
    if res.returncode != 0:
        tail = " ".join(res.stderr.strip().splitlines()[-3:])
        return VmHarness("broken", f"nfs-vm-setup failed ({res.returncode}): {tail}")
    return VmHarness("ready", f"nfs-vm cache at {res.stdout.strip()}")


def vm_status() -> tuple[bool, str]:
    """Return whether `run_in_vm` can work here, and why not (see `vm_harness`)."""
    harness = vm_harness()
    return harness.state == "ready", harness.reason


def vm_available() -> bool:
    """Return whether `run_in_vm` can work here (see `vm_status` for the reason)."""
    return vm_status()[0]


def require_vm() -> None:
    """Skip the calling test if the harness is absent; fail it if the harness is broken."""
    harness = vm_harness()
    if harness.state == "absent":
        pytest.skip(f"nfs-vm not installed: {harness.reason}")
    if harness.state == "broken":
        pytest.fail(f"nfs-vm is there (or named) but cannot run: {harness.reason}", pytrace=False)


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
    vers: str | None = None,
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
        vers: the NFS version to mount ("3" by default; "4.0", "4.1": no MOUNT protocol).

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
        if vers is not None:
            cmd += ["--vers", vers]
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
