#!/usr/bin/env bash
# Install posixlake (scripts/setup.sh) and run the demo: create, insert, merge, delete, time travel.
# When a Spark Connect server of posixlake runs (`posixlake spark start`), the demo's Spark
# engine runs on it (no JVM start); `--engine local` runs without Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ " $* " != *" --engine local "* && -z "${POSIXLAKE_SPARK_MASTER:-}${POSIXLAKE_SPARK_REMOTE:-}" ]]; then
    remote="$(.venv/bin/python -c '
from posixlake.engines.spark import running_servers
servers = running_servers()
print(servers[0].url if servers else "")')"
    if [ -n "$remote" ]; then
        echo "demo: Spark engine on the Spark Connect server at $remote (posixlake spark status)"
        export POSIXLAKE_SPARK_REMOTE="$remote"
    fi
fi
exec .venv/bin/python scripts/demo.py "$@"
