"""Find the data files the Spark engine wrote (tagged per operation, at the table root)."""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Final

SPARK_FILE: Final = re.compile(r"part-\d{5}-spark[0-9a-z]+-[0-9a-f]+\.snappy\.parquet")


def is_spark_file(name: str) -> bool:
    """Return whether ``name`` (a path or key) is a data file written by the Spark engine."""
    return SPARK_FILE.fullmatch(name.rsplit("/", 1)[-1]) is not None


def spark_files(path: Path) -> list[str]:
    """The Spark engine's data files in the table folder ``path`` (names, sorted)."""
    return sorted(n for n in os.listdir(path) if is_spark_file(n)) if path.exists() else []


def stray_spark_files(path: Path) -> list[str]:
    """Spark-written data files that no commit of the table at ``path`` ever added."""
    added: set[str] = set()
    log = path / "_delta_log"
    for name in os.listdir(log) if log.exists() else []:
        if name.endswith(".json"):
            with open(log / name) as fh:
                for line in fh:
                    action = json.loads(line)
                    if "add" in action:
                        added.add(urllib.parse.unquote(action["add"]["path"]))
    return [f for f in spark_files(path) if f not in added]
