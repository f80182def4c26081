#!/usr/bin/env python3
"""End-to-end check of posixlake on S3: create, health, insert/query across reopen, merge.

    scripts/test_python_s3.py                       # starts a local moto_server itself
    scripts/test_python_s3.py --endpoint http://127.0.0.1:9000 --access-key K --secret-key S
    AWS_ENDPOINT_URL=... AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... scripts/test_python_s3.py
    scripts/test_python_s3.py --aws --bucket my-bucket   # real AWS, credentials from the env

Without --endpoint, $AWS_ENDPOINT_URL or --aws, a moto_server is started on a free
local port and stopped at the end. The table is written under a fresh prefix of the
bucket and deleted afterwards (unless --keep). Exit status: 0 when every check passes,
1 when any fails, 2 for bad arguments or no server.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid

from _storage_check import cleanup, run_checks

from posixlake import S3Config
from posixlake.errors import PosixLakeError
from tests.storage.servers import ServerUnavailable, start_moto


def main(argv: list[str] | None = None) -> int:
    """Run the checks; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="S3 endpoint URL (default: $AWS_ENDPOINT_URL)")
    parser.add_argument("--access-key", help="access key id (default: $AWS_ACCESS_KEY_ID)")
    parser.add_argument("--secret-key", help="secret key (default: $AWS_SECRET_ACCESS_KEY)")
    parser.add_argument("--region", help="region (default: $AWS_REGION or us-east-1)")
    parser.add_argument("--bucket", help="bucket (default: a new posixlake-check-* bucket)")
    parser.add_argument("--aws", action="store_true", help="use AWS itself (no endpoint)")
    parser.add_argument("--engine", default="local", choices=["local", "spark"])
    parser.add_argument("--keep", action="store_true", help="keep the table afterwards")
    args = parser.parse_args(argv)

    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    server = None
    if not endpoint and not args.aws:
        try:
            server = start_moto()
        except (ServerUnavailable, RuntimeError) as err:
            print(f"cannot start a local S3 server: {err}", file=sys.stderr)
            return 2
        endpoint = server.endpoint
        print(f"started moto_server at {endpoint} (pid {server.pid})", flush=True)
    try:
        local = server is not None
        config = S3Config(
            endpoint,
            args.access_key or ("testing" if local else None),
            args.secret_key or ("testing" if local else None),
            args.region,
        ).resolved()
        bucket = args.bucket or f"posixlake-check-{uuid.uuid4().hex[:12]}"
        uri = f"s3://{bucket}/posixlake-check-{uuid.uuid4().hex[:8]}"
        print(f"table: {uri} on {config.describe()}", flush=True)
        failures, created = run_checks(
            uri, config, engine=args.engine, create_bucket=args.bucket is None
        )
        if created and not args.keep:
            try:
                cleanup(uri, config)
            except PosixLakeError as err:
                print(f"cleanup failed: {err}", flush=True)
    finally:
        if server is not None:
            server.stop()
    print("OK: all checks passed" if failures == 0 else f"FAILED: {failures} check(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
