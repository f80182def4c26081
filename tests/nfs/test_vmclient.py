"""The kernel-client harness check: a harness that is not installed skips, a broken one fails.

`harness_state` is run on folders made here: missing, with the tools but a failing or
hanging setup, and with a working one.
"""

from __future__ import annotations

from pathlib import Path

from tests.nfs.vmclient import VmHarness, harness_state


def _tools(folder: Path, setup: str) -> Path:
    folder.mkdir()
    for name, body in (("nfs-vm-run", "exit 0"), ("nfs-vm-setup", setup)):
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return folder


def test_a_harness_not_installed_is_absent(tmp_path: Path) -> None:
    got = harness_state(tmp_path / "nowhere", named=False)
    assert got.state == "absent" and "nfs-vm-run not found" in got.reason


def test_a_harness_named_or_present_without_its_tools_is_broken(tmp_path: Path) -> None:
    assert harness_state(tmp_path / "nowhere", named=True).state == "broken"
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "nfs-vm-run").write_text("#!/bin/sh\n")  # not executable
    assert harness_state(tmp_path / "half", named=False).state == "broken"


def test_a_failing_or_hanging_setup_is_broken_and_a_passing_one_ready(tmp_path: Path) -> None:
    failing = _tools(tmp_path / "failing", "echo 'apt: no network' >&2; exit 100")
    assert harness_state(failing, named=False) == VmHarness(
        "broken", "nfs-vm-setup failed (100): apt: no network"
    )
    hanging = _tools(tmp_path / "hanging", "exec sleep 30")
    assert harness_state(hanging, named=False, timeout=0.5) == VmHarness(
        "broken", "nfs-vm-setup timed out after 0.5 s"
    )
    ready = _tools(tmp_path / "ready", "echo /var/cache/nfs-vm")
    assert harness_state(ready, named=False) == VmHarness(
        "ready", "nfs-vm cache at /var/cache/nfs-vm"
    )
