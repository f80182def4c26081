#!/usr/bin/env bash
# Install what the tests need (scripts/setup.sh --dev) and run the whole test suite.
# Without arguments it then runs the Spark engine's suites again over a Spark Connect
# server that the run starts and stops (PySpark runs one mode per process, classic or
# Connect, hence a second pytest run); POSIXLAKE_TEST_SPARK=connect runs any tests so.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
export PATH="$(pwd)/.venv/bin:$(pwd)/node_modules/.bin:$PATH"
.venv/bin/python -m ruff check posixlake nfs cli tests benchmarks scripts
.venv/bin/python -m ruff format --check -q posixlake nfs cli tests benchmarks scripts
.venv/bin/python -m mypy
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
fi
.venv/bin/python -m pytest -q -p no:cacheprovider
echo "test.sh: the Spark engine's suites over Spark Connect" >&2
POSIXLAKE_TEST_SPARK=connect exec .venv/bin/python -m pytest -q -p no:cacheprovider -m spark \
    tests/posixlake/test_spark_engine.py tests/posixlake/test_spark_dml.py \
    tests/posixlake/test_spark_bulk.py tests/posixlake/test_spark_datasource.py
