"""The project's modules by dotted name, read from the source tree (for the tests that
check its import graph: tests/test_import_graph.py, tests/posixlake/test_layers.py)."""

from __future__ import annotations

from pathlib import Path


def source_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Map each module of ``packages`` under ``root`` (a package by its ``__init__``) to
    its file; a compiled module (posixlake/csvcodec/_lines.c) is known by its stub."""
    found: dict[str, Path] = {}
    for package in packages:
        stubs = [p for p in (root / package).rglob("*.pyi") if not p.with_suffix(".py").exists()]
        for path in [*(root / package).rglob("*.py"), *stubs]:
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found
