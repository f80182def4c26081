"""Verifying a backup: every byte hashed, the log cross-checked, the schema checked."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from posixlake.backup import original
from posixlake.backup.chain import StoredBackup, backup_chain, open_backup, original_backup_store
from posixlake.backup.log import LogFiles, read_log
from posixlake.backup.manifest import (
    FILES_DIR,
    MANIFEST_NAME,
    BackupCorrupted,
    BackupFile,
    Manifest,
    metadata_of,
)
from posixlake.backup.results import BackupMetadata, VerifyReport
from posixlake.backup.transfer import DEFAULT_WORKERS, Meter, Progress, hashed, parallel_map
from posixlake.errors import DeltaLakeError, InvalidOperation, NotFound
from posixlake.storage import FileEntry, join_uri, normalize_uri

__all__ = [
    "get_backup_metadata",
    "verify_backup",
]


def get_backup_metadata(
    path: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> BackupMetadata:
    """Return what the backup at ``path`` holds (reads and checks its manifest only).

    Raises:
        NotFound: no backup there. BackupCorrupted: a damaged manifest.
    """
    uri = normalize_uri(path)
    old = original_backup_store(uri, storage_options)
    if old is not None:
        return original.backup_metadata(uri, old)
    return metadata_of(uri, open_backup(uri, storage_options).manifest)


def verify_backup(
    path: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> VerifyReport:
    """Hash every file of the backup at ``path`` (and of its base chain) against the manifest.

    Never raises for damage: the report lists it.

    Raises:
        NotFound: there is no backup (nor anything else) at ``path``.
    """
    uri = normalize_uri(path)
    old = original_backup_store(uri, storage_options)
    if old is not None:
        return original.verify_backup(uri, old, progress=progress, workers=workers)
    try:
        top = open_backup(uri, storage_options)
    except BackupCorrupted as err:
        return VerifyReport(uri, None, None, (uri,), 0, 0, errors=(str(err),))
    m = top.manifest
    errors: list[str] = []
    try:
        chain = backup_chain(top, storage_options)
    except (BackupCorrupted, InvalidOperation) as err:
        errors.append(str(err))
        chain = {m.backup_id: top}
    listings: dict[str, dict[str, FileEntry]] = {}
    stray: list[str] = []
    for bid, b in chain.items():
        listings[bid] = {}
        for e in b.store.list():
            if e.key.startswith(FILES_DIR + "/"):
                listings[bid][e.key[len(FILES_DIR) + 1 :]] = e
            elif bid == m.backup_id and e.key != MANIFEST_NAME:
                stray.append(join_uri(uri, e.key))
    missing: list[str] = []
    corrupted: list[str] = []
    todo: list[BackupFile] = []
    for f in sorted(m.files.values(), key=lambda f: f.path):
        holder = chain.get(f.backup_id)
        if holder is None:
            if not errors:
                errors.append(
                    f"{f.path}: stored in backup {f.backup_id}, which is not in the chain"
                )
            missing.append(f"{f.backup_id}:{f.path}")
            continue
        entry = listings[f.backup_id].get(f.path)
        if entry is None:
            missing.append(holder.file_uri(f.path))
        elif entry.size != f.size:
            corrupted.append(holder.file_uri(f.path))
        else:
            todo.append(f)
    own = {f.path for f in m.files.values() if f.backup_id == m.backup_id}
    extra = [top.file_uri(k) for k in sorted(listings[m.backup_id]) if k not in own]
    extra += sorted(stray)
    meter = Meter(sum(f.size for f in todo), progress)

    tails: dict[str, bytes] = {}  # the last bytes of each data file: its Parquet footer

    def check(f: BackupFile) -> str | None:
        holder = chain[f.backup_id]
        where = holder.file_uri(f.path)
        tail = b""
        try:
            for chunk in hashed(
                holder.store.read_chunks(f"{FILES_DIR}/{f.path}"),
                expect_sha=f.sha256,
                expect_size=f.size,
                where=where,
                meter=meter,
            ):
                if f.kind == "data":
                    tail = (tail + chunk)[-_FOOTER_KEEP:]
        except BackupCorrupted:
            return where
        except NotFound:
            missing.append(where)
            return None
        if f.kind == "data":
            tails[f.path] = tail
        return None

    bad = [w for w in parallel_map(check, todo, workers) if w]
    corrupted.extend(bad)
    schema_errors: list[str] = []
    schema_checked = False
    if not bad and not missing:
        log_errors, scan = _check_log(m, chain, workers)
        errors.extend(log_errors)
        if scan is not None:
            schema_errors = _check_schema(m, scan, tails)
            schema_checked = True
    return VerifyReport(
        path=uri,
        backup_id=m.backup_id,
        table_version=m.table_version,
        chain=tuple(b.uri for b in chain.values()),
        files_checked=len(todo),
        bytes_checked=meter.done,
        missing=tuple(sorted(missing)),
        extra=tuple(extra),
        corrupted=tuple(sorted(corrupted)),
        errors=tuple(errors),
        schema_errors=tuple(schema_errors),
        schema_checked=schema_checked,
    )


def _check_log(
    m: Manifest, chain: Mapping[str, StoredBackup], workers: int
) -> tuple[list[str], LogFiles | None]:
    """Cross-check the manifest against the (verified) Delta log it holds.

    Returns the problems found and the replayed log (None when it is unusable).
    """
    log_keys = {
        f.path: f.version
        for f in m.files.values()
        if f.kind == "log" and f.version is not None and f.version <= m.table_version
    }

    def read(key: str) -> bytes:
        f = m.files[key]
        return chain[f.backup_id].store.read_bytes(f"{FILES_DIR}/{key}")

    try:
        scan = read_log(
            {k: v for k, v in log_keys.items() if v is not None},
            m.table_version,
            read,
            workers,
            modified={k: m.files[k].modified for k in log_keys},
            where="the backed-up Delta log",
        )
    except (DeltaLakeError, InvalidOperation) as err:
        return [f"the backed-up Delta log is unusable: {err}"], None
    problems = []
    for key, f in sorted(scan.files.items()):
        if key in m.files:
            continue
        needed = f.removed is None or f.removed > m.restorable_from
        if needed:
            problems.append(
                f"the Delta log references {key} (version {f.added}), which the manifest does not list"
            )
    if scan.table_id and m.table_id and scan.table_id != m.table_id:
        problems.append("the manifest's table id does not match the Delta log")
    return problems, scan


_FOOTER_KEEP: Final = 1 << 20
"""Bytes kept from the end of each data file while hashing it: its Parquet footer."""


def _delta_type_matches(delta_type: Any, arrow_type: Any) -> str | None:
    """Return None if a Parquet column of ``arrow_type`` can hold the Delta type, else why."""
    import pyarrow as pa

    t = pa.types
    if isinstance(delta_type, str):
        checks: dict[str, Callable[[Any], bool]] = {
            "string": lambda a: t.is_string(a) or t.is_large_string(a) or t.is_string_view(a),
            "binary": lambda a: t.is_binary(a) or t.is_large_binary(a) or t.is_fixed_size_binary(a),
            "boolean": t.is_boolean,
            "byte": t.is_integer,
            "short": t.is_integer,
            "integer": t.is_integer,
            "long": t.is_integer,
            "float": t.is_floating,
            "double": t.is_floating,
            "date": t.is_date,
            "timestamp": t.is_timestamp,
            "timestamp_ntz": t.is_timestamp,
        }
        if delta_type.startswith("decimal"):
            ok = t.is_decimal(arrow_type) or t.is_integer(arrow_type)
        elif delta_type in checks:
            ok = checks[delta_type](arrow_type)
        else:
            return f"unknown Delta type {delta_type!r}"
        return None if ok else f"{delta_type} stored as {arrow_type}"
    if not isinstance(delta_type, dict):
        return f"malformed Delta type {delta_type!r}"
    kind = delta_type.get("type")
    if kind == "array":
        if not (t.is_list(arrow_type) or t.is_large_list(arrow_type)):
            return f"array stored as {arrow_type}"
        return _delta_type_matches(delta_type.get("elementType"), arrow_type.value_type)
    if kind == "map":
        if not t.is_map(arrow_type):
            return f"map stored as {arrow_type}"
        return _delta_type_matches(
            delta_type.get("keyType"), arrow_type.key_type
        ) or _delta_type_matches(delta_type.get("valueType"), arrow_type.item_type)
    if kind == "struct":
        if not t.is_struct(arrow_type):
            return f"struct stored as {arrow_type}"
        names = {
            arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)
        }
        for sub in delta_type.get("fields") or ():
            if not isinstance(sub, dict) or "name" not in sub:
                return "malformed struct field"
            if sub["name"] in names:
                why = _delta_type_matches(sub.get("type"), names[sub["name"]])
                if why:
                    return f"{sub['name']}: {why}"
        return None
    return f"unknown Delta type {delta_type!r}"


def _check_schema(m: Manifest, scan: LogFiles, tails: Mapping[str, bytes]) -> list[str]:
    """Check the Delta log's schema and that each live data file matches it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if scan.schema_json is None:
        return ["the Delta log has no table schema (metaData)"]
    try:
        schema = json.loads(scan.schema_json)
    except ValueError as err:
        return [f"the table schema is not valid JSON: {err}"]
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "struct"
        or not isinstance(fields, list)
    ):
        return ["the table schema is not a Delta struct schema"]
    problems: list[str] = []
    columns: dict[str, Any] = {}
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
            problems.append(f"malformed schema field {f!r}")
            continue
        why = _delta_type_matches(f["type"], pa.null()) if isinstance(f["type"], str) else None
        if why and why.startswith("unknown"):
            problems.append(f"column {f['name']!r}: {why}")
        columns[f["name"]] = f["type"]
    if problems or scan.column_mapping:  # mapped columns have physical names: not compared
        return problems
    stored = [c for c in columns if c not in scan.partition_columns]
    for key, entry in sorted(scan.files.items()):
        if entry.removed is not None or key not in tails:
            continue
        tail = tails[key]
        if len(tail) < 12 or tail[-4:] != b"PAR1":
            problems.append(f"{key}: not a Parquet file")
            continue
        footer = int.from_bytes(tail[-8:-4], "little")
        if footer + 8 > len(tail):
            problems.append(f"{key}: Parquet footer too large to check")
            continue
        try:
            file_schema = pq.read_schema(pa.BufferReader(b"PAR1" + tail[-(footer + 8) :]))
        except (pa.ArrowException, OSError, ValueError) as err:
            problems.append(f"{key}: unreadable Parquet footer ({err})")
            continue
        for col in stored:
            if col not in file_schema.names:
                problems.append(f"{key}: column {col!r} is missing")
                continue
            why = _delta_type_matches(columns[col], file_schema.field(col).type)
            if why:
                problems.append(f"{key}: column {col!r}: {why}")
    return problems
