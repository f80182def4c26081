#!/usr/bin/env python3
"""End-to-end check of posixlake on Azure Blob Storage: create, health, insert/query across reopen, merge.

    scripts/test_python_azure.py                    # starts a local Azurite itself
    scripts/test_python_azure.py --endpoint http://127.0.0.1:10000/devstoreaccount1 --emulator
    scripts/test_python_azure.py --account myacct --key KEY --container lake
    AZURE_STORAGE_CONNECTION_STRING="..." scripts/test_python_azure.py --container lake

Without --endpoint, --account, --connection-string or the standard environment variables
(AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_NAME), Azurite is started on a
free local port and stopped at the end. The table is written under a fresh prefix and
deleted afterwards (unless --keep). Exit status: 0 when every check passes, 1 when any
fails, 2 for bad arguments or no server.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid

from _storage_check import cleanup, run_checks

from posixlake import AzureConfig
from posixlake.errors import PosixLakeError
from tests.storage.servers import ServerUnavailable, start_azurite


def main(argv: list[str] | None = None) -> int:
    """Run the checks; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="blob endpoint URL (Azurite: .../devstoreaccount1)")
    parser.add_argument("--account", help="storage account (default: $AZURE_STORAGE_ACCOUNT_NAME)")
    parser.add_argument("--key", help="account key (default: $AZURE_STORAGE_ACCOUNT_KEY)")
    parser.add_argument("--sas-token", help="a SAS token instead of a key")
    parser.add_argument("--connection-string", help="an Azure storage connection string")
    parser.add_argument("--emulator", action="store_true", help="Azurite's well-known account")
    parser.add_argument("--container", help="container (default: a new posixlake-check-* one)")
    parser.add_argument("--engine", default="local", choices=["local", "spark"])
    parser.add_argument("--keep", action="store_true", help="keep the table afterwards")
    args = parser.parse_args(argv)

    configured = any((args.endpoint, args.account, args.connection_string, args.emulator)) or any(
        os.environ.get(v) for v in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME")
    )
    server = None
    workdir = None
    if not configured:
        workdir = tempfile.TemporaryDirectory(prefix="azurite-")
        try:
            server = start_azurite(workdir=workdir.name)
        except (ServerUnavailable, RuntimeError) as err:
            print(f"cannot start Azurite: {err}", file=sys.stderr)
            workdir.cleanup()
            return 2
        print(f"started Azurite at {server.endpoint} (pid {server.pid})", flush=True)
    try:
        if server is not None:
            config = AzureConfig.emulator(server.endpoint)
        elif args.connection_string:
            config = AzureConfig.from_connection_string(args.connection_string)
        else:
            config = AzureConfig(
                args.account,
                args.key,
                args.endpoint,
                sas_token=args.sas_token,
                use_emulator=args.emulator,
            )
        config = config.resolved()
        container = args.container or f"posixlake-check-{uuid.uuid4().hex[:12]}"
        uri = f"az://{container}/posixlake-check-{uuid.uuid4().hex[:8]}"
        print(f"table: {uri} on {config.describe()}", flush=True)
        failures, created = run_checks(
            uri, config, engine=args.engine, create_bucket=args.container is None
        )
        if created and not args.keep:
            try:
                cleanup(uri, config)
            except PosixLakeError as err:
                print(f"cleanup failed: {err}", flush=True)
    finally:
        if server is not None:
            server.stop()
        if workdir is not None:
            workdir.cleanup()
    print("OK: all checks passed" if failures == 0 else f"FAILED: {failures} check(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
