"""A writer process for the concurrency test: ``python -m tests.storage._append_worker SPEC``.

SPEC is JSON: {"kind": "s3"|"azure", "endpoint": ..., "uri": ..., "worker": n, "count": k}.
The worker opens the table, prints ``ready``, waits for ``go`` on stdin (so that all
writers start together), appends ``count`` single-row commits and prints ``done``.
"""

from __future__ import annotations

import json
import sys

from posixlake import AzureConfig, DatabaseOps, S3Config


def main(argv: list[str]) -> int:
    """Run one writer; return the exit status."""
    spec = json.loads(argv[1])
    if spec["kind"] == "s3":
        storage: S3Config | AzureConfig = S3Config(
            spec["endpoint"], "testing", "testing", "us-east-1"
        )
    else:
        storage = AzureConfig.emulator(spec["endpoint"])
    db = DatabaseOps.open(spec["uri"], storage=storage, engine="local")
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    base = int(spec["worker"]) * 1000
    for i in range(int(spec["count"])):
        db.insert({"id": base + i, "worker": int(spec["worker"])})
    db.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
