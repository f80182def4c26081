"""Data-skipping statistics: which active files a predicate can rule out by min/max stats.

The predicate is a SQL boolean expression over columns and literals: comparisons
(= != <> < <= > >=), IN (...), BETWEEN ... AND ..., IS [NOT] NULL, joined with AND / OR
and parentheses. Parts the file statistics cannot decide (NOT, expressions over two
columns) are kept conservatively: such files count as "to scan".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.errors import QueryError
from posixlake.types import DataSkippingStats

__all__ = ["skipping_stats"]

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<str>'(?:[^']|'')*')
    | (?P<qid>"(?:[^"]|"")*")
    | (?P<op><=|>=|<>|!=|=|<|>|\(|\)|,)
    | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)

Mask: TypeAlias = pa.Array  # a boolean array, one value per active file


class _Parser:
    def __init__(
        self,
        text: str,
        stats: Callable[[str], tuple[pa.Array, pa.Array, pa.Array, pa.Array]],
        n: int,
    ):
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise QueryError(f"cannot parse predicate near {text[pos : pos + 20]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.stats = stats
        self.n = n

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def word(self, *words: str) -> bool:
        tok = self.peek()
        if tok and tok[0] == "word" and tok[1].upper() in words:
            self.i += 1
            return True
        return False

    def expect(self, value: str) -> None:
        tok = self.peek()
        if not tok or tok[1].upper() != value:
            raise QueryError(
                f"predicate: expected {value!r}, got {tok[1] if tok else 'end of input'!r}"
            )
        self.i += 1

    def all_true(self) -> Mask:
        return pa.array([True] * self.n)

    def parse(self) -> Mask:
        mask = self.or_()
        if self.peek() is not None:
            raise QueryError(f"predicate: unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return mask

    def or_(self) -> Mask:
        mask = self.and_()
        while self.word("OR"):
            mask = pc.or_(mask, self.and_())
        return mask

    def and_(self) -> Mask:
        mask = self.not_()
        while self.word("AND"):
            mask = pc.and_(mask, self.not_())
        return mask

    def not_(self) -> Mask:
        if self.word("NOT"):
            self.not_()
            return self.all_true()
        tok = self.peek()
        if tok and tok[1] == "(":
            self.i += 1
            mask = self.or_()
            self.expect(")")
            return mask
        return self.comparison()

    def literal(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise QueryError("predicate: expected a value")
        self.i += 1
        kind, text = tok
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "word" and text.upper() in ("TRUE", "FALSE"):
            return text.upper() == "TRUE"
        if kind == "word" and text.upper() in ("DATE", "TIMESTAMP"):
            return self.literal()
        raise QueryError(f"predicate: expected a value, got {text!r}")

    def column(self) -> str | None:
        tok = self.peek()
        if tok and tok[0] == "qid":
            self.i += 1
            return tok[1][1:-1].replace('""', '"')
        if (
            tok
            and tok[0] == "word"
            and tok[1].upper() not in ("TRUE", "FALSE", "DATE", "TIMESTAMP", "NULL")
        ):
            self.i += 1
            return tok[1]
        return None

    def comparison(self) -> Mask:
        col = self.column()
        if col is None:
            left = self.literal()
            op = self.op()
            col = self.column()
            if col is None:
                raise QueryError("predicate: a comparison needs a column")
            flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            return self.compare(col, flipped, left)
        if self.word("IS"):
            negate = self.word("NOT")
            if not self.word("NULL"):
                raise QueryError("predicate: expected NULL after IS")
            _, _, nulls, rows = self.stats(col)
            if negate:
                return pc.fill_null(pc.less(nulls, rows), True)
            return pc.fill_null(pc.greater(nulls, 0), True)
        negate = self.word("NOT")
        if self.word("IN"):
            self.expect("(")
            values = [self.literal()]
            while self.peek() and self.peek()[1] == ",":  # type: ignore[index]
                self.i += 1
                values.append(self.literal())
            self.expect(")")
            if negate:
                return self.all_true()
            mask = self.compare(col, "=", values[0])
            for v in values[1:]:
                mask = pc.or_(mask, self.compare(col, "=", v))
            return mask
        if self.word("BETWEEN"):
            low = self.literal()
            self.expect("AND")
            high = self.literal()
            if negate:
                return self.all_true()
            return pc.and_(self.compare(col, ">=", low), self.compare(col, "<=", high))
        if negate:
            raise QueryError("predicate: expected IN or BETWEEN after NOT")
        op = self.op()
        if self.column() is not None:
            return self.all_true()  # column vs column: statistics cannot decide
        return self.compare(col, op, self.literal())

    def op(self) -> str:
        tok = self.peek()
        if not tok or tok[0] != "op" or tok[1] in "(),":
            raise QueryError(
                f"predicate: expected a comparison operator, got {tok[1] if tok else 'end of input'!r}"
            )
        self.i += 1
        return "!=" if tok[1] == "<>" else tok[1]

    def compare(self, col: str, op: str, value: Any) -> Mask:
        mins, maxs, _, _ = self.stats(col)
        if mins is None:
            return self.all_true()
        try:
            lit = pa.scalar(value).cast(mins.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
            raise QueryError(
                f"predicate: {value!r} cannot be compared with column {col!r} ({mins.type})"
            ) from err
        if op == "=":
            mask = pc.and_(pc.less_equal(mins, lit), pc.greater_equal(maxs, lit))
        elif op == "!=":
            mask = pc.invert(pc.and_(pc.equal(mins, lit), pc.equal(maxs, lit)))
        elif op == "<":
            mask = pc.less(mins, lit)
        elif op == "<=":
            mask = pc.less_equal(mins, lit)
        elif op == ">":
            mask = pc.greater(maxs, lit)
        elif op == ">=":
            mask = pc.greater_equal(maxs, lit)
        else:
            raise QueryError(f"predicate: unknown operator {op!r}")
        return pc.fill_null(mask, True)


def skipping_stats(
    actions: pa.Table, schema: pa.Schema, predicate: str | None
) -> DataSkippingStats:
    """Compute file counts (total, to scan, skipped) for ``predicate`` from add actions.

    Raises:
        QueryError: the predicate does not parse or names an unknown column.
    """
    n = actions.num_rows
    sizes = actions["size_bytes"] if n else pa.array([], pa.int64())
    rows = (
        actions["num_records"] if "num_records" in actions.column_names else pa.nulls(n, pa.int64())
    )
    total_bytes = int(pc.sum(sizes).as_py() or 0)
    total_rows = int(pc.sum(rows).as_py() or 0)
    if predicate is None or not predicate.strip():
        return DataSkippingStats(n, total_bytes, total_rows, n, 0, total_bytes, None)
    names = {name.lower(): name for name in schema.names}

    def stats(col: str) -> tuple[Any, Any, Any, Any]:
        name = names.get(col.lower())
        if name is None:
            raise QueryError(f"predicate: unknown column {col!r}")
        part = f"partition.{name}"
        if part in actions.column_names:
            values = actions[part].cast(schema.field(name).type)
            nulls = pc.if_else(pc.is_null(values), rows, 0)
            return values, values, nulls, rows
        lo, hi, nc = f"min.{name}", f"max.{name}", f"null_count.{name}"
        if lo not in actions.column_names:
            return None, None, pa.nulls(n, pa.int64()), rows
        nulls = actions[nc] if nc in actions.column_names else pa.nulls(n, pa.int64())
        return actions[lo], actions[hi], nulls, rows

    mask = _Parser(predicate, stats, n).parse() if n else pa.array([], pa.bool_())
    scan = actions.filter(mask) if n else actions
    scan_bytes = int(pc.sum(scan["size_bytes"]).as_py() or 0) if n else 0
    return DataSkippingStats(
        n, total_bytes, total_rows, scan.num_rows, n - scan.num_rows, scan_bytes, predicate
    )
