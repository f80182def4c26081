"""Compute engines behind DatabaseOps: ``local`` (delta-rs + DataFusion) and ``spark`` (PySpark)."""

from __future__ import annotations

import os
from typing import Any

from posixlake.engines.base import Engine, FileFormat, MergeOutcome, WriteOutcome
from posixlake.engines.local import LocalEngine
from posixlake.errors import InvalidOperation

__all__ = ["Engine", "FileFormat", "LocalEngine", "MergeOutcome", "WriteOutcome", "resolve_engine"]

ENGINE_ENV = "POSIXLAKE_ENGINE"


def resolve_engine(
    engine: str | Engine | None,
    *,
    master: str | None = None,
    remote: str | None = None,
    spark: Any = None,
) -> Engine:
    """Return the engine to use: an Engine, ``"local"``, ``"spark"``, or the default.

    The default is ``$POSIXLAKE_ENGINE``, else ``"spark"``. The Spark engine starts its
    session lazily, at the first Spark job: in this process (``master``), or as a client
    of a Spark Connect server (``remote``, ``sc://host:15002``).

    Raises:
        InvalidOperation: an unknown engine name.
    """
    if engine is not None and not isinstance(engine, str):
        return engine
    name = (engine or os.environ.get(ENGINE_ENV) or "spark").strip().lower()
    if name == "local":
        return LocalEngine()
    if name == "spark":
        from posixlake.engines.spark import SparkEngine

        return SparkEngine(master=master, remote=remote, spark=spark)
    raise InvalidOperation(f"unknown engine {name!r}: use 'local' or 'spark'")
