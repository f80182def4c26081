"""The CSV renderer's compiled pass (``_lines.c``); see ``_render._native_lines``."""

from collections.abc import Sequence
from typing import Any

Column = tuple[int, int, int, Any, Any, int, Any, Any, int]

def lines(rows: int, columns: Sequence[Column], end: bytes, /) -> bytes: ...
def f64(value: float, /) -> str: ...
