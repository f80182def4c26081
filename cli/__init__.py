"""The ``posixlake`` command line (click): ``posixlake --help`` lists the commands."""

from __future__ import annotations

__all__: list[str] = []
