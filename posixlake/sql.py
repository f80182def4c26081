"""SQL statements as Delta users write them, translated to DatabaseOps calls (``db.sql``).

``db.query`` runs SELECT as the engine reads it; this module adds what Delta and Databricks
users type on top of that:

- time travel in FROM: ``SELECT ... FROM data VERSION AS OF 3`` and
  ``... FROM data TIMESTAMP AS OF '2024-05-01 12:00:00'`` (:func:`split_time_travel`, a
  cut of the clause from the text: the rest of the query reaches the engine unchanged);
- ``UPDATE``, ``DELETE``, ``INSERT INTO ... VALUES / SELECT`` and ``MERGE INTO ... USING``
  (:func:`run_statement`), parsed with sqlglot and run as the Python calls do it
  (``update``, ``delete_rows_where``, ``insert``, ``merge``): one commit each, the same
  checks, the same results.

The SQL is read the way the engine reads its own: Spark SQL (the ``databricks`` dialect)
on the Spark engine; on the local engine the same grammar with DataFusion's quoting
(``'it''s'`` is a quote inside a string, ``"Col"`` an identifier). The parts that reach the
engine (predicates, expressions, sub-queries) are written back in that quoting.

sqlglot is imported only for statements that need it: a plain SELECT costs one regular
expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from decimal import InvalidOperation as DecimalError
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import pyarrow as pa

from posixlake._ops.args import sql_literal
from posixlake.errors import QueryError

if TYPE_CHECKING:
    from sqlglot import exp
    from sqlglot.dialects.dialect import Dialect

    from posixlake.engines import Engine
    from posixlake.result import QueryResult, WriteResult
    from posixlake.types import MergeMetrics, Schema

__all__ = [
    "TABLE_NAME",
    "SqlTable",
    "StatementKind",
    "TimeTravel",
    "run_statement",
    "split_statements",
    "split_time_travel",
    "sql_literal",
    "statement_kind",
]

TABLE_NAME: Final = "data"

StatementKind = Literal["select", "update", "delete", "insert", "merge", "other"]

_COMMENTS: Final = re.compile(r"(--[^\n]*(\n|$)|/\*.*?\*/|\s+|\()", re.DOTALL)
_FIRST_WORD: Final = re.compile(r"[A-Za-z_]+")
_AS_OF: Final = re.compile(r"\bAS\s+OF\b", re.IGNORECASE)
_KINDS: Final[dict[str, StatementKind]] = {
    "select": "select",
    "with": "select",
    "values": "select",
    "table": "select",
    "show": "select",
    "describe": "select",
    "explain": "select",
    "update": "update",
    "delete": "delete",
    "insert": "insert",
    "merge": "merge",
}


def statement_kind(sql: str) -> StatementKind:
    """Return what ``sql`` is by its first keyword (comments and parentheses skipped)."""
    pos = 0
    while True:
        m = _COMMENTS.match(sql, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
    word = _FIRST_WORD.match(sql, pos)
    return _KINDS.get(word.group(0).lower(), "other") if word else "other"


@dataclass(frozen=True)
class TimeTravel:
    """A ``VERSION AS OF n`` or ``TIMESTAMP AS OF '...'`` clause found in a query."""

    version: int | None = None
    timestamp: str | None = None

    def describe(self) -> str:
        """Return the clause as SQL."""
        if self.version is not None:
            return f"VERSION AS OF {self.version}"
        return f"TIMESTAMP AS OF '{self.timestamp}'"


# -- dialects ------------------------------------------------------------------------------


def _dialect(engine: str) -> type[Dialect] | str:
    """Return the sqlglot dialect that reads and writes SQL for ``engine``."""
    if engine == "spark":
        return "databricks"
    return _local_dialect()


_LOCAL: list[type[Dialect]] = []


def _local_dialect() -> type[Dialect]:
    """Spark's grammar with DataFusion's quoting: ``''`` inside strings, ``"x"`` identifiers."""
    if not _LOCAL:
        from sqlglot.dialects.dialect import NormalizationStrategy
        from sqlglot.dialects.spark import Spark

        class LocalSql(Spark):
            NORMALIZATION_STRATEGY = NormalizationStrategy.LOWERCASE

            class Tokenizer(Spark.Tokenizer):
                IDENTIFIERS = ['"', "`"]  # noqa: RUF012 - sqlglot's own form
                STRING_ESCAPES = ["'"]  # noqa: RUF012

        _LOCAL.append(LocalSql)
    return _LOCAL[0]


def _parse(sql: str, engine: str) -> exp.Expr:
    """Parse one statement.

    Raises:
        QueryError: the text does not parse, or holds more than one statement.
    """
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        statements = [s for s in sqlglot.parse(sql, read=_dialect(engine)) if s is not None]
    except (ParseError, TokenError) as err:
        raise QueryError(f"cannot parse the SQL: {' '.join(str(err).split())}") from err
    if len(statements) != 1:
        raise QueryError(f"give one SQL statement at a time, not {len(statements)}")
    return statements[0]


def _sql(node: exp.Expr, engine: str) -> str:
    """Write ``node`` back as SQL the engine reads with the same meaning.

    For the local engine, unquoted names are lowercased first, as DataFusion reads them
    (else the generator would quote them to keep their case).
    """
    dialect = _dialect(engine)
    if engine != "spark":
        from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

        node = normalize_identifiers(node.copy(), dialect=dialect)
    return node.sql(dialect=dialect)


# -- time travel ---------------------------------------------------------------------------


def split_time_travel(sql: str, *, engine: str = "local") -> tuple[str, TimeTravel | None]:
    """Cut a ``VERSION AS OF`` / ``TIMESTAMP AS OF`` clause out of a query.

    The rest of the text is returned as written (the engine reads it); the clause tells
    which snapshot to query. Every ``data`` in the query must then name the same version.

    Raises:
        QueryError: clauses naming different versions, or a clause whose value is not a
            literal (``VERSION AS OF 3``, ``TIMESTAMP AS OF '2024-05-01 12:00:00'``).
    """
    if not _AS_OF.search(sql):
        return sql, None
    from sqlglot import exp
    from sqlglot.tokenizer_core import TokenType

    try:
        tree = _parse(sql, engine)
    except QueryError:
        return sql, None  # not for us to judge: the engine reports its own SQL errors
    found = list(tree.find_all(exp.Version))
    if not found:
        return sql, None
    travels = {_travel_of(v) for v in found}
    if len(travels) > 1:
        raise QueryError(
            "the query names different versions ("
            + ", ".join(sorted(t.describe() for t in travels))
            + "): one query reads one version of the table"
        )
    for v in found:
        table = v.parent
        if isinstance(table, exp.Table) and table.name.lower() != TABLE_NAME:
            raise _unknown_table(table.name)
    # cut each clause at its tokens: VERSION|TIMESTAMP AS OF <literal>
    toks = _local_dialect()().tokenize(sql) if engine != "spark" else _tokenize_spark(sql)
    cuts: list[tuple[int, int]] = []
    i = 0
    while i + 3 < len(toks):
        a, b, c, d = toks[i : i + 4]
        if (
            a.text.upper() in ("VERSION", "TIMESTAMP")
            and b.text.upper() == "AS"
            and c.text.upper() == "OF"
            and d.token_type in (TokenType.NUMBER, TokenType.STRING)
        ):
            cuts.append((a.start, d.end + 1))
            i += 4
        else:
            i += 1
    if len(cuts) != len(found):
        raise QueryError(
            "VERSION AS OF takes a version number and TIMESTAMP AS OF a quoted time "
            "(e.g. TIMESTAMP AS OF '2024-05-01 12:00:00'), not an expression"
        )
    out = sql
    for start, end in reversed(cuts):
        out = out[:start] + " " + out[end:]
    return out, travels.pop()


def _tokenize_spark(sql: str) -> list[Any]:
    from sqlglot.dialects.databricks import Databricks

    return list(Databricks().tokenize(sql))


def _travel_of(version: exp.Version) -> TimeTravel:
    from sqlglot import exp

    value = version.expression
    kind = str(version.this).upper()
    if not isinstance(value, exp.Literal):
        raise QueryError(
            f"{kind} AS OF takes a literal, not {value.sql()!r} "
            "(e.g. VERSION AS OF 3, TIMESTAMP AS OF '2024-05-01 12:00:00')"
        )
    if kind == "VERSION":
        text = value.this
        if value.is_string or not text.isdigit():
            raise QueryError(f"VERSION AS OF takes a version number, not {value.sql()}")
        return TimeTravel(version=int(text))
    if kind == "TIMESTAMP":
        return TimeTravel(timestamp=str(value.this))
    raise QueryError(f"unsupported time travel clause {version.sql()}")


def _unknown_table(name: str) -> QueryError:
    return QueryError(f"unknown table {name!r}: the table is called `{TABLE_NAME}`")


# -- statements ----------------------------------------------------------------------------


class SqlTable(Protocol):
    """The table a statement runs on: the ``DatabaseOps`` calls statements become."""

    @property
    def engine(self) -> Engine: ...

    @property
    def schema(self) -> Schema: ...

    @property
    def version(self) -> int: ...

    def query(
        self,
        sql: str,
        *,
        version: int | None = None,
        as_of: datetime | int | float | str | None = None,
    ) -> QueryResult: ...

    def insert(self, data: Any) -> WriteResult: ...

    def update(
        self, predicate: str | None, *, expressions: Mapping[str, str] | None = None
    ) -> WriteResult: ...

    def delete_rows_where(self, predicate: str) -> WriteResult: ...

    def merge(self, rows: Any, key: str | Sequence[str] | None = None) -> MergeMetrics: ...


def run_statement(db: SqlTable, sql: str) -> QueryResult:
    """Run one SQL statement on ``db``: a query, or UPDATE / DELETE / INSERT / MERGE.

    A write returns one row, as Databricks does: ``num_affected_rows`` and per kind
    ``num_updated_rows`` / ``num_deleted_rows`` / ``num_inserted_rows``, plus ``version``
    (the version committed; NULL when nothing changed).

    Raises:
        QueryError: SQL that does not parse, names another table, or uses a clause that
            has no equivalent here (named in the message).
    """
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("sql needs a statement")
    kind = statement_kind(sql)
    if kind == "select":
        return db.query(sql)
    engine = db.engine.name
    tree = _parse(sql, engine)
    from sqlglot import exp

    if isinstance(tree, exp.Update):
        return _update(db, tree, engine)
    if isinstance(tree, exp.Delete):
        return _delete(db, tree, engine)
    if isinstance(tree, exp.Insert):
        return _insert(db, tree, engine)
    if isinstance(tree, exp.Merge):
        return _merge(db, tree, engine)
    if isinstance(tree, exp.Query):
        return db.query(sql)
    raise QueryError(
        f"{tree.key.upper()} statements are not supported: sql runs SELECT, UPDATE, DELETE, "
        "INSERT INTO and MERGE INTO"
    )


def _written(kind: str, rows: int, version: int | None) -> QueryResult:
    from posixlake.result import QueryResult

    return QueryResult(
        pa.table(
            {
                "num_affected_rows": pa.array([rows], pa.int64()),
                f"num_{kind}_rows": pa.array([rows], pa.int64()),
                "version": pa.array([version], pa.int64()),
            }
        )
    )


def _target(node: exp.Expr, clause: str) -> str | None:
    """Check that a statement's target is ``data``; return its alias (None without one)."""
    from sqlglot import exp

    table = node.this if isinstance(node, exp.Schema) else node
    if not isinstance(table, exp.Table):
        raise QueryError(f"{clause} needs the table `{TABLE_NAME}` as its target")
    if table.name.lower() != TABLE_NAME or table.args.get("db"):
        raise _unknown_table(table.name)
    if table.args.get("version"):
        raise QueryError(f"{clause} writes the current version: remove the AS OF clause")
    return table.alias or None


def _check_tables(node: exp.Expr, aliases: set[str], clause: str) -> None:
    """Every table a statement reads is ``data``, at the current version."""
    from sqlglot import exp

    ctes = {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}
    for table in node.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes or name in aliases:
            continue
        if name != TABLE_NAME:
            raise _unknown_table(table.name)
        if table.args.get("version"):
            raise QueryError(
                f"time travel inside {clause} is not supported: "
                "read the old version with a query, or use rollback"
            )


def _unqualified(node: exp.Expr, qualifiers: set[str], names: Sequence[str] = ()) -> exp.Expr:
    """Drop ``data.`` / alias qualifiers from column references (delta-rs takes bare names),
    and spell an unquoted name as the table's column it matches (see :func:`_resolved`)."""
    from sqlglot import exp

    node = node.copy()
    for col in list(node.find_all(exp.Column)):
        if col.table and col.table.lower() in qualifiers:
            col.set("table", None)
        ident = col.this
        if col.table or not isinstance(ident, exp.Identifier) or ident.args.get("quoted"):
            continue
        resolved = _resolved(str(ident.this), False, names)
        if resolved != ident.this:
            col.set("this", exp.to_identifier(resolved, quoted=True))
    return node


def _resolved(name: str, quoted: bool, names: Sequence[str]) -> str:
    """Return the table's column an identifier names.

    An unquoted name matches regardless of case when the table has exactly one such
    column, as both engines read unquoted identifiers in queries.
    """
    if name in names or quoted:
        return name
    matches = [n for n in names if n.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else name


def _column_name(node: exp.Expr, qualifiers: set[str], clause: str, names: Sequence[str]) -> str:
    from sqlglot import exp

    if not isinstance(node, exp.Column) or (node.table and node.table.lower() not in qualifiers):
        raise QueryError(f"{clause}: {node.sql()} is not a column of `{TABLE_NAME}`")
    ident = node.this
    quoted = bool(isinstance(ident, exp.Identifier) and ident.args.get("quoted"))
    return _resolved(str(node.name), quoted, names)


def _update(db: SqlTable, tree: exp.Update, engine: str) -> QueryResult:
    from sqlglot import exp

    alias = _target(tree.this, "UPDATE")
    quals = {TABLE_NAME} | ({alias.lower()} if alias else set())
    for part in ("from", "from_", "joins", "order", "limit"):
        if tree.args.get(part):
            raise QueryError(
                f"UPDATE ... {part.strip('_').upper()} is not supported: "
                "use MERGE INTO data USING ... for updates from other rows"
            )
    _check_tables(tree, set(), "UPDATE")
    if not tree.expressions:
        raise QueryError("UPDATE needs SET column = value")
    names = [f.name for f in db.schema.fields]
    sets: dict[str, str] = {}
    for assignment in tree.expressions:
        if not isinstance(assignment, exp.EQ):
            raise QueryError(f"UPDATE ... SET: {assignment.sql()} is not column = value")
        col = _column_name(assignment.this, quals, "UPDATE ... SET", names)
        sets[col] = _sql(_unqualified(assignment.expression, quals, names), engine)
    where = tree.args.get("where")
    predicate = _sql(_unqualified(where.this, quals, names), engine) if where is not None else None
    done = db.update(predicate, expressions=sets)
    return _written("updated", done.rows, done.version)


def _delete(db: SqlTable, tree: exp.Delete, engine: str) -> QueryResult:
    alias = _target(tree.this, "DELETE")
    quals = {TABLE_NAME} | ({alias.lower()} if alias else set())
    if tree.args.get("using"):
        raise QueryError(
            "DELETE ... USING is not supported: use MERGE INTO data USING ... "
            "WHEN MATCHED THEN DELETE"
        )
    _check_tables(tree, set(), "DELETE")
    where = tree.args.get("where")
    names = [f.name for f in db.schema.fields]
    predicate = (
        _sql(_unqualified(where.this, quals, names), engine) if where is not None else "true"
    )
    done = db.delete_rows_where(predicate)
    return _written("deleted", done.rows, done.version)


def _insert(db: SqlTable, tree: exp.Insert, engine: str) -> QueryResult:
    from sqlglot import exp

    if tree.args.get("overwrite"):
        raise QueryError(
            "INSERT OVERWRITE is not supported: DELETE FROM data, then INSERT INTO, "
            "or rollback to a version"
        )
    for part in ("partition", "by_name", "where", "conflict", "returning"):
        if tree.args.get(part):
            raise QueryError(f"INSERT INTO ... {part.upper().replace('_', ' ')} is not supported")
    _target(tree.this, "INSERT INTO")
    schema = db.schema.to_arrow()
    if isinstance(tree.this, exp.Schema):
        columns = [
            _resolved(str(i.name), bool(i.args.get("quoted")), schema.names)
            for i in tree.this.expressions
        ]
        unknown = [c for c in columns if c not in schema.names]
        if unknown:
            raise QueryError(f"INSERT INTO data ({', '.join(columns)}): no column {unknown[0]!r}")
    else:
        columns = list(schema.names)
    source = tree.expression
    if isinstance(source, exp.Values):
        rows = _literal_rows(source, columns, schema)
        if rows is not None:
            done = db.insert(rows)
            return _written("inserted", done.rows, done.version)
        query = exp.select("*").from_(source.copy())
        table = db.query(_sql(query, engine)).arrow()
    elif isinstance(source, exp.Query):
        travels = {_travel_of(v) for v in source.find_all(exp.Version)}
        if len(travels) > 1:
            raise QueryError("INSERT ... SELECT reads one version of the table")
        select = source.copy()
        for v in list(select.find_all(exp.Version)):
            v.pop()
        _check_tables(select, set(), "INSERT INTO ... SELECT")
        travel = travels.pop() if travels else None
        table = db.query(
            _sql(select, engine),
            version=travel.version if travel else None,
            as_of=travel.timestamp if travel else None,
        ).arrow()
    else:
        raise QueryError("INSERT INTO takes VALUES (...) or a SELECT")
    if table.num_columns != len(columns):
        raise QueryError(
            f"INSERT INTO: {table.num_columns} value(s) per row for {len(columns)} column(s) "
            f"({', '.join(columns)})"
        )
    done = db.insert(table.rename_columns(columns))
    return _written("inserted", done.rows, done.version)


def _literal_rows(
    values: exp.Values, columns: list[str], schema: pa.Schema
) -> list[dict[str, Any]] | None:
    """Return VALUES rows as dicts when every value is a literal (None otherwise).

    Literals keep their text until the table's types read them (``1.10`` into a decimal
    column is ``Decimal('1.10')``, into a float column ``1.1``), as ``db.insert`` does.
    """
    from sqlglot import exp

    rows: list[dict[str, Any]] = []
    for n, tup in enumerate(values.expressions, start=1):
        items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        if len(items) != len(columns):
            raise QueryError(
                f"INSERT INTO ... VALUES: row {n} has {len(items)} value(s) for "
                f"{len(columns)} column(s) ({', '.join(columns)})"
            )
        row: dict[str, Any] = {}
        for col, item in zip(columns, items, strict=True):
            ok, value = _literal(item, schema.field(col).type)
            if not ok:
                return None
            row[col] = value
        rows.append(row)
    return rows


def _literal(node: exp.Expr, target: pa.DataType) -> tuple[bool, Any]:
    from sqlglot import exp

    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    negative = False
    if isinstance(node, exp.Neg):
        negative, node = True, node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        text = ("-" if negative else "") + str(node.this)
        if re.fullmatch(r"-?\d+", text) and not pa.types.is_decimal(target):
            return True, int(text)
        try:
            number = Decimal(text)
        except DecimalError:
            return False, None
        if pa.types.is_decimal(target):
            return True, number
        return True, float(number)
    if negative:
        return False, None
    if isinstance(node, exp.Literal) and node.is_string:
        return True, str(node.this)
    if (
        isinstance(node, exp.Cast)
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
        and node.to.this in (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP)
    ):
        # DATE '2024-05-01', TIMESTAMP '2024-05-01 12:00:00' (UTC, as the tables store it)
        text = str(node.this.this)
        if node.to.this == exp.DataType.Type.TIMESTAMP and not re.search(
            r"(Z|[+-]\d\d:?\d\d)$", text
        ):
            text += "Z"
        return True, text
    return False, None


# -- MERGE ---------------------------------------------------------------------------------

_CLAUSE: Final = "__posixlake_clause"
_MERGE_ATTEMPTS: Final = 5


@dataclass(frozen=True)
class _When:
    op: Literal["UPDATE", "DELETE", "INSERT"]
    condition: exp.Expr | None
    assignments: dict[str, exp.Expr]


def _merge(db: SqlTable, tree: exp.Merge, engine: str) -> QueryResult:
    from sqlglot import exp

    target_alias = _target(tree.this, "MERGE INTO")
    target = target_alias or TABLE_NAME
    source = tree.args.get("using")
    source_alias = source.alias if source is not None else ""
    if not isinstance(source, exp.Values | exp.Subquery | exp.Table) or not source_alias:
        raise QueryError(
            "MERGE INTO data USING takes a sub-query or VALUES with an alias, e.g. "
            "USING (SELECT ...) AS s or USING (VALUES (1, 'a')) AS s(id, name)"
        )
    if isinstance(source, exp.Table) and source.name.lower() != TABLE_NAME:
        raise _unknown_table(source.name)
    _check_tables(source, set(), "MERGE ... USING")
    schema = db.schema.to_arrow()
    quals = {target.lower(), TABLE_NAME}
    keys, on = _merge_keys(tree.args.get("on"), target, source_alias, schema.names)
    matched: list[_When] = []
    not_matched: list[_When] = []
    whens = tree.args.get("whens")
    for when in whens.expressions if whens is not None else []:
        if when.args.get("source"):
            raise QueryError("MERGE ... WHEN NOT MATCHED BY SOURCE is not supported")
        parsed = _when(when, keys, schema.names, quals, source_alias)
        (matched if when.args.get("matched") else not_matched).append(parsed)
    if not matched and not not_matched:
        raise QueryError("MERGE needs WHEN MATCHED or WHEN NOT MATCHED clauses")
    src = _source_node(source, engine)
    target_table: exp.Expr = exp.to_table(TABLE_NAME)
    if target_alias:
        target_table = exp.alias_(target_table, target_alias, table=True)

    def source_rows(version: int) -> list[dict[str, Any]]:
        """The ``_op`` rows of the statement, computed on ``version``."""
        rows: list[dict[str, Any]] = []
        if matched:
            outputs = [
                exp.alias_(exp.column(k, table=target), f"__k{i}") for i, k in enumerate(keys)
            ]
            outputs.append(_clause_case(matched))
            for ci, w in enumerate(matched):
                for j, expr in enumerate(w.assignments.values()):
                    outputs.append(exp.alias_(expr.copy(), f"__c{ci}_{j}"))
            query = exp.select(*outputs).from_(target_table.copy()).join(src.copy(), on=on.copy())
            found = db.query(_sql(query, engine), version=version).arrow().to_pylist()
            for rec in found:
                ci = rec[_CLAUSE]
                if ci is None:
                    continue
                w = matched[ci]
                row: dict[str, Any] = {k: rec[f"__k{i}"] for i, k in enumerate(keys)}
                for j, col in enumerate(w.assignments):
                    row[col] = rec[f"__c{ci}_{j}"]
                row["_op"] = w.op
                rows.append(row)
        if not_matched:
            outputs = [_clause_case(not_matched)]
            for ci, w in enumerate(not_matched):
                for j, expr in enumerate(w.assignments.values()):
                    outputs.append(exp.alias_(expr.copy(), f"__c{ci}_{j}"))
            exists = exp.select("1").from_(target_table.copy()).where(on.copy())
            query = exp.select(*outputs).from_(src.copy()).where(exp.not_(exp.Exists(this=exists)))
            for rec in db.query(_sql(query, engine), version=version).arrow().to_pylist():
                ci = rec[_CLAUSE]
                if ci is None:
                    continue
                w = not_matched[ci]
                row = {col: rec[f"__c{ci}_{j}"] for j, col in enumerate(w.assignments)}
                row["_op"] = "INSERT"
                rows.append(row)
        return rows

    # The rows are computed on one version; when another writer commits meanwhile, they
    # are computed again, so that SET values read from the table are those it commits on
    # (db.merge checks the keys again under its write lock).
    for _ in range(_MERGE_ATTEMPTS):
        start = db.version
        rows = source_rows(start)
        if db.version == start:
            break
    metrics = db.merge(rows, keys)
    from posixlake.result import QueryResult

    return QueryResult(
        pa.table(
            {
                "num_affected_rows": pa.array([metrics.total_affected], pa.int64()),
                "num_updated_rows": pa.array([metrics.rows_updated], pa.int64()),
                "num_deleted_rows": pa.array([metrics.rows_deleted], pa.int64()),
                "num_inserted_rows": pa.array([metrics.rows_inserted], pa.int64()),
                "version": pa.array([metrics.version], pa.int64()),
            }
        )
    )


def _source_node(source: exp.Expr, engine: str) -> exp.Expr:
    """The USING source as a FROM item both engines read (VALUES in parentheses)."""
    from sqlglot import exp

    if isinstance(source, exp.Values):
        alias = source.args.get("alias")
        bare = source.copy()
        bare.set("alias", None)
        return exp.Subquery(this=bare, alias=alias.copy() if alias else None)
    return source


def _merge_keys(
    on: exp.Expr | None, target: str, source: str, names: list[str]
) -> tuple[list[str], exp.Expr]:
    """Return the target columns the ON condition matches (``t.k = s.x AND ...``)."""
    from sqlglot import exp

    usage = (
        f"MERGE ... ON must match target columns to source values: "
        f"{target}.id = {source}.id [AND ...]"
    )
    if on is None:
        raise QueryError(usage)
    parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    keys: list[str] = []
    for part in parts:
        if not isinstance(part, exp.EQ):
            raise QueryError(f"{usage}; {part.sql()} is not such an equality")
        sides = [part.this, part.expression]
        tcols = [
            s
            for s in sides
            if isinstance(s, exp.Column) and s.table.lower() in (target.lower(), TABLE_NAME)
        ]
        if len(tcols) != 1:
            raise QueryError(f"{usage}; qualify the target column in {part.sql()}")
        ident = tcols[0].this
        quoted = bool(isinstance(ident, exp.Identifier) and ident.args.get("quoted"))
        name = _resolved(str(tcols[0].name), quoted, names)
        if name not in names:
            raise QueryError(f"MERGE ... ON: `{TABLE_NAME}` has no column {name!r}")
        keys.append(name)
    return keys, on


def _when(when: exp.When, keys: list[str], names: list[str], quals: set[str], source: str) -> _When:
    from sqlglot import exp

    then = when.args.get("then")
    cond = when.args.get("condition")
    matched = bool(when.args.get("matched"))
    label = "WHEN MATCHED" if matched else "WHEN NOT MATCHED"
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE" and matched:
        return _When("DELETE", cond, {})
    if isinstance(then, exp.Update) and matched:
        assignments: dict[str, exp.Expr] = {}
        star = not then.expressions or any(isinstance(e, exp.Star) for e in then.expressions)
        if not star:
            for eq in then.expressions:
                if not isinstance(eq, exp.EQ):
                    raise QueryError(f"{label} THEN UPDATE SET: {eq.sql()} is not column = value")
                assignments[_column_name(eq.this, quals, f"{label} THEN UPDATE SET", names)] = (
                    eq.expression
                )
        else:  # UPDATE SET *
            assignments = {c: exp.column(c, table=source) for c in names if c not in keys}
        changed = sorted(set(assignments) & set(keys))
        if changed:
            raise QueryError(
                f"{label} THEN UPDATE cannot set the column(s) {changed} the ON clause matches"
            )
        return _When("UPDATE", cond, assignments)
    if isinstance(then, exp.Insert) and not matched:
        cols = then.this
        vals = then.expression
        if isinstance(cols, exp.Star) or cols is None:
            return _When("INSERT", cond, {c: exp.column(c, table=source) for c in names})
        targets = [_column_name(c, quals, f"{label} THEN INSERT", names) for c in cols.expressions]
        values = vals.expressions if isinstance(vals, exp.Tuple) else []
        if len(values) != len(targets):
            raise QueryError(
                f"{label} THEN INSERT: {len(targets)} column(s) and {len(values)} value(s)"
            )
        unknown = [c for c in targets if c not in names]
        if unknown:
            raise QueryError(f"{label} THEN INSERT: `{TABLE_NAME}` has no column {unknown[0]!r}")
        return _When("INSERT", cond, dict(zip(targets, values, strict=True)))
    raise QueryError(f"{label} THEN {then.sql() if then is not None else '?'} is not supported")


def _clause_case(clauses: list[_When]) -> exp.Expr:
    """``CASE WHEN cond0 THEN 0 WHEN cond1 THEN 1 ... END``: the first clause that applies."""
    from sqlglot import exp

    case = exp.Case()
    for i, w in enumerate(clauses):
        case = case.when(w.condition.copy() if w.condition is not None else exp.true(), str(i))
    return exp.alias_(case, _CLAUSE)


def split_statements(text: str, *, engine: str = "local") -> tuple[list[str], str]:
    """Split ``text`` at the semicolons that end statements (not those in strings).

    Returns:
        The complete statements (without their ``;``, blank ones dropped) and the text
        after the last ``;`` (a statement still being typed). Text with an unfinished
        string or quoted name is all "rest".
    """
    from sqlglot.errors import TokenError
    from sqlglot.tokenizer_core import TokenType

    try:
        toks = _local_dialect()().tokenize(text) if engine != "spark" else _tokenize_spark(text)
    except TokenError:
        return [], text
    out: list[str] = []
    start = 0
    for tok in toks:
        if tok.token_type == TokenType.SEMICOLON:
            piece = text[start : tok.start].strip()
            if piece:
                out.append(piece)
            start = tok.end + 1
    return out, text[start:]
