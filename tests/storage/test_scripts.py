"""scripts/test_python_s3.py and scripts/test_python_azure.py run green against our servers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.storage.servers import REPO, LocalServer, free_port


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.s3
def test_s3_script(moto_server: LocalServer) -> None:
    done = run(
        "test_python_s3.py",
        "--endpoint",
        moto_server.endpoint,
        "--access-key",
        "testing",
        "--secret-key",
        "testing",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: all checks passed" in done.stdout
    assert "FAIL" not in done.stdout


@pytest.mark.azure
def test_azure_script(azurite_server: LocalServer) -> None:
    done = run("test_python_azure.py", "--emulator", "--endpoint", azurite_server.endpoint)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: all checks passed" in done.stdout


def test_scripts_fail_on_an_unreachable_endpoint() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    s3 = run("test_python_s3.py", "--endpoint", dead, "--access-key", "a", "--secret-key", "b")
    assert s3.returncode == 1
    assert "FAIL create: NetworkError" in s3.stdout
    az = run("test_python_azure.py", "--emulator", "--endpoint", dead)
    assert az.returncode == 1
    assert "FAIL create: NetworkError" in az.stdout
