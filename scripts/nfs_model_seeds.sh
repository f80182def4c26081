#!/usr/bin/env bash
# Hunt for failures of the NFS writer model (tests/nfs/test_nfs_writes_model.py) with random
# seeds: CI runs it derandomized with 20 examples; this runs SEEDS seeds of EXAMPLES examples
# each (POSIXLAKE_MODEL_EXAMPLES, pytest's --hypothesis-seed), stops at the first failure and
# prints the seed and the command that reproduces it. Exit status 0: no seed failed.
#
#   scripts/nfs_model_seeds.sh [-n SEEDS] [-e EXAMPLES] [-s STEPS] [-k PYTEST_K] [-- PYTEST_ARGS]
#
#   -n SEEDS     how many seeds (default 10)
#   -e EXAMPLES  examples per seed (default 200)
#   -s STEPS     steps per example (default: the test's own, 15)
#   -k EXPR      passed to pytest -k (a test of the module)
#   --seeds "S1 S2 ..."  these seeds instead of random ones (a rerun)
# PYTHON picks the interpreter (default: python on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

seeds=10
examples=200
steps=""
kexpr=""
given=""
while (($#)); do
    case "$1" in
    -n) seeds=$2; shift 2 ;;
    -e) examples=$2; shift 2 ;;
    -s) steps=$2; shift 2 ;;
    -k) kexpr=$2; shift 2 ;;
    --seeds) given=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "nfs_model_seeds.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $seeds =~ ^[1-9][0-9]*$ && $examples =~ ^[1-9][0-9]*$ ]] ||
    { echo "nfs_model_seeds.sh: -n and -e take positive integers" >&2; exit 2; }
[[ -z $steps || $steps =~ ^[1-9][0-9]*$ ]] ||
    { echo "nfs_model_seeds.sh: -s takes a positive integer" >&2; exit 2; }

python=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export POSIXLAKE_MODEL_EXAMPLES=$examples
[[ -n $steps ]] && export POSIXLAKE_MODEL_STEPS=$steps

if [[ -n $given ]]; then
    read -r -a list <<<"$given"
else
    list=()
    for ((i = 0; i < seeds; i++)); do
        list+=("$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')")
    done
fi

env_text="POSIXLAKE_MODEL_EXAMPLES=$examples${steps:+ POSIXLAKE_MODEL_STEPS=$steps}"
start=$SECONDS
n=0
for seed in "${list[@]}"; do
    n=$((n + 1))
    echo "== seed $seed ($n/${#list[@]}, $examples examples)"
    args=(-m pytest -q -p no:cacheprovider -x tests/nfs/test_nfs_writes_model.py
        "--hypothesis-seed=$seed")
    [[ -n $kexpr ]] && args+=(-k "$kexpr")
    if ! "$python" "${args[@]}" "$@"; then
        echo
        echo "FAILED at seed $seed after $((SECONDS - start)) s. Reproduce with:"
        echo "  $env_text $python -m pytest -p no:cacheprovider tests/nfs/test_nfs_writes_model.py" \
            "--hypothesis-seed=$seed${kexpr:+ -k '$kexpr'}"
        exit 1
    fi
done
echo "no failure: ${#list[@]} seeds x $examples examples in $((SECONDS - start)) s"
