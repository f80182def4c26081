#!/usr/bin/env bash
# Install posixlake (scripts/setup.sh) and run the demo: create, insert, merge, delete, time travel.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
