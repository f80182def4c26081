"""Run ``posixlake`` (``python -m cli.main``) as a real subprocess of this checkout.

For what CliRunner cannot show: what a JVM or PySpark writes on the process's own
stderr, which modules a command imports, and Spark Connect clients (PySpark runs one
mode per process, and the test process runs a local Spark).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def posixlake(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``posixlake ARGS`` with this checkout first on the path; wait for it."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("POSIXLAKE_", "SPARK_CONNECT_MODE", "PYSPARK_"))
    }
    if "POSIXLAKE_STATE_DIR" in os.environ:  # the test run's own state directory
        base["POSIXLAKE_STATE_DIR"] = os.environ["POSIXLAKE_STATE_DIR"]
    base["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
