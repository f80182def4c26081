#!/usr/bin/env bash
# Install what the tests need (scripts/setup.sh --dev) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
export PATH="$(pwd)/.venv/bin:$(pwd)/node_modules/.bin:$PATH"
.venv/bin/python -m ruff check posixlake nfs cli tests benchmarks scripts
.venv/bin/python -m ruff format --check -q posixlake nfs cli tests benchmarks scripts
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
