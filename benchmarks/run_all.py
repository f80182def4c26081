"""Run every ``benchmarks/bench_*.py`` in turn and print their tables.

Run:  python benchmarks/run_all.py [--only NAME ...] [--list]

Each benchmark runs in its own Python process with its default options (one at a time:
they measure, so they must not compete for the machine), and its output is printed as
it comes. At the end, a summary gives each benchmark's exit status and wall time. The
exit status is 1 when any benchmark failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> list[Path]:
    """Return the benchmark scripts, sorted by name."""
    return sorted(p for p in HERE.glob("bench_*.py") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only", nargs="*", default=None, help="run only these (e.g. api backup, or bench_api)"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args()
    scripts = discover()
    if args.only:
        wanted = {w.removeprefix("bench_").removesuffix(".py") for w in args.only}
        scripts = [p for p in scripts if p.stem.removeprefix("bench_") in wanted]
    if args.list:
        for p in scripts:
            print(p.name)
        return 0
    if not scripts:
        print("no benchmark matches", file=sys.stderr)
        return 1
    summary: list[tuple[str, int, float]] = []
    for script in scripts:
        print(f"\n=== {script.name} " + "=" * max(0, 60 - len(script.name)), flush=True)
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        summary.append((script.name, code, time.perf_counter() - t0))
    print("\n=== summary " + "=" * 52)
    width = max(len(name) for name, _, _ in summary)
    for name, code, seconds in summary:
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"{name.ljust(width)}  {seconds:7.1f} s  {status}")
    return 0 if all(code == 0 for _, code, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
