"""SQL that DataFusion would evaluate to a wrong value, rewritten to an exact one or an error.

DataFusion (delta-rs' SQL engine) differs from Spark in ANSI mode on two points that
change values silently:

- **integer arithmetic wraps**: ``x + x`` on an Int32 holding 2,000,000,000 gives
  -294,967,296 (Spark: ARITHMETIC_OVERFLOW). :func:`checked_arithmetic` rewrites each
  ``+``, ``-``, ``*`` and unary ``-`` whose result is an integer type into the same
  operation on a wider type (BIGINT for TINYINT to INT, DECIMAL(38, 0) for BIGINT), cast
  back to that integer type: the value is the same when it fits, and the cast fails
  when it does not (the product of two INTs fits in a BIGINT, of two BIGINTs in 38
  digits). Decimal arithmetic is checked by DataFusion already. ``SUM`` of integers
  wraps the same way (three rows of 2**62 sum to -2**62): an integer ``SUM(x)`` becomes
  ``CAST(SUM(CAST(x AS DECIMAL(38, 0))) AS BIGINT)``, exact in 38 digits and an error
  when the total does not fit in a BIGINT (Spark's ANSI ``sum`` raises there too).
- **timestamp literals are nanoseconds**: ``TIMESTAMP '9000-01-01'``, ``CAST('...' AS
  TIMESTAMP)`` and a string compared with a timestamp column become Timestamp(ns),
  which ends in 2262. :func:`microsecond_timestamps` makes them microseconds (the Delta
  unit: years 0001-9999), through ``arrow_cast``.

Both parse with sqlglot and print the SQL again; they return None when there is
nothing to rewrite (or the text does not parse: DataFusion reports it then), so SQL
without such parts reaches DataFusion exactly as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import pyarrow as pa
import sqlglot
from sqlglot import exp

__all__ = [
    "arithmetic_nodes",
    "checked_arithmetic",
    "is_aggregate",
    "microsecond_timestamps",
]

_INTEGER_SQL: Final = {
    "Int8": "TINYINT",
    "Int16": "SMALLINT",
    "Int32": "INT",
    "Int64": "BIGINT",
}
_WIDE: Final = "DECIMAL(38, 0)"
_ARITHMETIC: Final = (exp.Add, exp.Sub, exp.Mul, exp.Neg)


def _parse(sql: str) -> exp.Expr | None:
    try:
        return sqlglot.parse_one(sql)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return None


def _is_literal(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) or (
        isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)
    )


def arithmetic_nodes(sql: str) -> tuple[exp.Expr, list[exp.Expr]] | None:
    """Return the parsed expression and its arithmetic nodes that may overflow (None
    when there are none, or ``sql`` does not parse): ``+ - *``, unary ``-`` and ``SUM``.

    A negated literal (``-5``) is a constant, not an operation.
    """
    tree = _parse(sql)
    if tree is None:
        return None
    nodes: list[exp.Expr] = [
        n
        for n in tree.find_all(*_ARITHMETIC, exp.Sum)
        if not (isinstance(n, exp.Neg) and isinstance(n.this, exp.Literal))
        and not all(_is_literal(c) for c in n.iter_expressions())
    ]
    return (tree, nodes) if nodes else None


def is_aggregate(sql: str) -> bool:
    """Return whether the SQL expression ``sql`` contains an aggregate function (it is
    then typed in an aggregate query, apart from row-level expressions)."""
    tree = _parse(sql)
    return tree is not None and any(True for _ in tree.find_all(exp.AggFunc))


def _widen_sum(node: exp.Sum) -> None:
    """Make ``node`` sum its argument as DECIMAL(38, 0) (in place)."""
    wide = exp.DataType.build(_WIDE)
    arg = node.this
    if isinstance(arg, exp.Distinct):
        arg.set("expressions", [exp.cast(e, wide, copy=False) for e in arg.expressions])
    else:
        node.set("this", exp.cast(arg, wide, copy=False))


def checked_arithmetic(
    texts: Mapping[str, str], typeof: Callable[[Sequence[str]], Sequence[str] | None]
) -> dict[str, str]:
    """Rewrite integer arithmetic in SQL expressions so that an overflow is an error.

    Args:
        texts: name -> SQL expression (a SET expression, or a predicate).
        typeof: given SQL expressions, return DataFusion's type of each (the text of
            ``arrow_typeof``), or None when no row exists to type them on (then nothing
            is evaluated, and nothing is rewritten).

    Returns:
        name -> the rewritten expression, for the expressions that changed.
    """
    parsed = {name: arithmetic_nodes(text) for name, text in texts.items()}
    found = {name: p for name, p in parsed.items() if p is not None}
    if not found:
        return {}
    order = [(name, node) for name, (_, nodes) in found.items() for node in nodes]
    types = typeof([node.sql() for _, node in order])
    if types is None:
        return {}
    integer = {
        id(node): _INTEGER_SQL[t]
        for (_, node), t in zip(order, types, strict=True)
        if t in _INTEGER_SQL
    }
    out: dict[str, str] = {}
    for name, (tree, nodes) in found.items():
        hits = [n for n in nodes if id(n) in integer]
        if not hits:
            continue
        # deepest first: a rewritten child keeps its type (the cast back), so the
        # parent's type, and so its value, stays what DataFusion planned
        for node in sorted(hits, key=_depth, reverse=True):
            target = exp.DataType.build(integer[id(node)])
            # the sum, difference or product of two narrower integers fits in a BIGINT
            # (cheaper than a decimal); of two BIGINTs, in 38 decimal digits
            wide = exp.DataType.build("BIGINT" if integer[id(node)] != "BIGINT" else _WIDE)
            if isinstance(node, exp.Sum):
                _widen_sum(node)
                # SUM(x) OVER (...) is cast as a whole, not inside its window
                window = node.parent
                outer = window if isinstance(window, exp.Window) and window.this is node else node
                cast = exp.Cast(to=target)
                if outer is tree:
                    tree = cast
                else:
                    outer.replace(cast)
                cast.set("this", outer)  # the same node: later rewrites inside it stay
                continue
            if isinstance(node, exp.Neg):
                op: exp.Expr = exp.Neg(this=exp.cast(node.this, wide))
            else:
                op = type(node)(
                    this=exp.cast(node.this, wide), expression=exp.cast(node.expression, wide)
                )
            replacement = exp.Cast(this=exp.Paren(this=op), to=target)
            if node is tree:
                tree = replacement
            else:
                node.replace(replacement)
        out[name] = tree.sql()
    return out


def _depth(node: exp.Expr) -> int:
    depth = 0
    while node.parent is not None:
        node = node.parent
        depth += 1
    return depth


def _arrow_cast(text: str, t: pa.DataType) -> exp.Expr:
    zone = "None" if t.tz is None else f'Some("{t.tz}")'
    return exp.Anonymous(
        this="arrow_cast",
        expressions=[
            exp.Literal.string(text),
            exp.Literal.string(f"Timestamp(Microsecond, {zone})"),
        ],
    )


_COMPARISONS: Final = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _timestamp_text(node: exp.Expr, *, strings: bool) -> str | None:
    """Return the text of ``CAST('text' AS TIMESTAMP)`` (or, with ``strings``, of a plain
    string literal), else None."""
    if strings and isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    to = node.args.get("to") if isinstance(node, exp.Cast) else None
    if (
        isinstance(node, exp.Cast)
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
        and isinstance(to, exp.DataType)
        and to.this in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME)
    ):
        return str(node.this.this)
    return None


def microsecond_timestamps(sql: str, schema: pa.Schema) -> str | None:
    """Return ``sql`` with its timestamp literals in microseconds, or None if it has none.

    ``TIMESTAMP 'text'`` and ``CAST('text' AS TIMESTAMP)`` become a naive microsecond
    timestamp (DataFusion's meaning, in the Delta unit); a string compared with a
    timestamp column of ``schema`` (``ts < '9000-01-01'``, ``BETWEEN``, ``IN``) becomes
    that column's type.
    """
    tree = _parse(sql)
    if tree is None:
        return None
    columns = {
        f.name: f.type.with_unit("us") if f.type.unit != "us" else f.type
        for f in schema
        if pa.types.is_timestamp(f.type)
    }
    changed = False

    def column_type(node: exp.Expr) -> pa.DataType | None:
        if isinstance(node, exp.Column) and node.name in columns:
            return columns[node.name]
        return None

    def to(node: exp.Expr, t: pa.DataType) -> bool:
        """Replace a timestamp text (a string, or one cast to TIMESTAMP) by type ``t``."""
        text = _timestamp_text(node, strings=True)
        if text is None:
            return False
        node.replace(_arrow_cast(text, t))
        return True

    # a timestamp column compared with a text: the text in the column's type
    for node in list(tree.find_all(*_COMPARISONS, exp.Between, exp.In)):
        t = column_type(node.this)
        if isinstance(node, _COMPARISONS):
            if t is not None:
                changed = to(node.expression, t) or changed
            elif (t := column_type(node.expression)) is not None:
                changed = to(node.this, t) or changed
            continue
        if t is None:
            continue
        values = (
            [node.args["low"], node.args["high"]]
            if isinstance(node, exp.Between)
            else list(node.expressions)
        )
        for v in values:
            changed = to(v, t) or changed
    # any other TIMESTAMP 'text': a naive timestamp, as DataFusion means it
    for cast in list(tree.find_all(exp.Cast)):
        text = _timestamp_text(cast, strings=False)
        if text is None:
            continue
        micro = _arrow_cast(text, pa.timestamp("us"))
        if cast is tree:
            tree = micro
        else:
            cast.replace(micro)
        changed = True
    return tree.sql() if changed else None


def null_blanks(sql: str, columns: Sequence[str]) -> str | None:
    """Return ``sql`` reading each of ``columns`` as ``NULLIF(col, '')``, or None when it
    names none of them (or does not parse).

    For a DML that delta-rs evaluates on a table whose log holds ``''`` partition values
    (another writer's): the Delta protocol reads them as NULL, and so must the predicate.
    """
    tree = _parse(sql)
    if tree is None:
        return None
    wanted = set(columns)
    hits = [c for c in tree.find_all(exp.Column) if c.name in wanted and not c.table]
    if not hits:
        return None
    for col in hits:
        blank = exp.Nullif(this=col.copy(), expression=exp.Literal.string(""))
        if col is tree:
            tree = blank
        else:
            col.replace(blank)
    return tree.sql()
