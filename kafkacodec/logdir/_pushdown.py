"""Predicates on offset, partition, topic and timestamp (`where` clauses Spark pushes to the
reader): what they let the planner skip, and the exact row mask that applies them.

Skipping is conservative: offsets, partitions and topics bound what is read exactly;
timestamps only by their lower bound (a batch header holds its largest timestamp, not its
smallest: with CreateTime, later batches may hold older records), through `.timeindex`.
The mask then applies every predicate to the rows with SQL semantics (a null never passes),
so a pushed predicate never changes the result, only the bytes read.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Predicate", "Pushdown", "COLUMNS", "OPS"]

COLUMNS = {"offset": "int", "partition": "int", "topic": "str", "timestamp": "time"}
OPS = ("=", "<", "<=", ">", ">=", "in", "notnull")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def micros(value: Any) -> int:
    """A Spark timestamp literal (an aware datetime) as microseconds since the epoch."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return int((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
    raise TypeError(f"not a timestamp: {value!r}")


@dataclass(frozen=True)
class Predicate:
    column: str          # offset, partition, topic, timestamp
    op: str              # one of OPS
    value: Any = None    # int, str, datetime, or a tuple of them for "in"

    def __str__(self) -> str:
        if self.op == "notnull":
            return f"{self.column} IS NOT NULL"
        shown = (f"({', '.join(map(str, self.value))})" if self.op == "in" else str(self.value))
        return f"{self.column} {self.op.upper() if self.op == 'in' else self.op} {shown}"


@dataclass
class Pushdown:
    predicates: list[Predicate] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.predicates)

    def _range(self, column: str, convert: Any = int) -> tuple[int, int]:
        """[lo, hi) implied by the comparisons on an integer-like column."""
        lo, hi = INT64_MIN, INT64_MAX
        for p in self.predicates:
            if p.column != column or p.op == "notnull":
                continue
            if p.op == "in":
                values = [convert(v) for v in p.value if v is not None]
                if not values:
                    return 0, 0
                lo, hi = max(lo, min(values)), min(hi, max(values) + 1)
                continue
            v = convert(p.value)
            if p.op == "=":
                lo, hi = max(lo, v), min(hi, v + 1)
            elif p.op == ">":
                lo = max(lo, v + 1)
            elif p.op == ">=":
                lo = max(lo, v)
            elif p.op == "<":
                hi = min(hi, v)
            elif p.op == "<=":
                hi = min(hi, v + 1)
        return lo, hi

    def offsets(self) -> tuple[int | None, int | None]:
        """Offsets [start, end) the rows must lie in (None: unbounded)."""
        lo, hi = self._range("offset")
        return (None if lo == INT64_MIN else lo), (None if hi == INT64_MAX else hi)

    def offset_values(self) -> set[int] | None:
        """The only offsets rows may have (from `offset IN (...)` / `offset = x`), or None."""
        allowed: set[int] | None = None
        for p in self.predicates:
            if p.column == "offset" and p.op in ("in", "="):
                values = set(p.value) if p.op == "in" else {p.value}
                allowed = values if allowed is None else allowed & values
        return allowed

    def min_timestamp_ms(self) -> int | None:
        """No row has a timestamp below this (milliseconds, rounded down), or None."""
        lo, _ = self._range("timestamp", micros)
        return None if lo == INT64_MIN else lo // 1000

    def wants(self, topic: str, partition: int) -> bool:
        lo, hi = self._range("partition")
        if not lo <= partition < hi:
            return False
        for p in self.predicates:
            if p.column == "partition" and p.op == "in" and partition not in p.value:
                return False
            if p.column == "topic":
                if p.op == "=" and topic != p.value or p.op == "in" and topic not in p.value:
                    return False
                if p.op in ("<", "<=", ">", ">=") and not _compare(topic, p.op, p.value):
                    return False
        return True

    def mask(self, batch: Any) -> Any:
        """The rows of a pyarrow RecordBatch that pass every predicate (a boolean array), or
        None when there is nothing to apply."""
        import pyarrow as pa
        import pyarrow.compute as pc

        result = None
        for p in self.predicates:
            column = batch.column(p.column)
            if p.op == "notnull":
                test = pc.is_valid(column)
            elif p.op == "in":
                values = [micros(v) if p.column == "timestamp" else v for v in p.value]
                test = pc.is_in(column.cast(pa.int64()) if p.column == "timestamp" else column,
                                value_set=pa.array(values, type=pa.int64() if p.column != "topic" else pa.string()))
                test = pc.and_kleene(test, pc.is_valid(column))
            else:
                value = p.value
                if p.column == "timestamp":
                    column, value = column.cast(pa.int64()), micros(value)
                test = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
                        ">=": pc.greater_equal}[p.op](column, value)
            test = pc.fill_null(test, False)
            result = test if result is None else pc.and_(result, test)
        return result


def _compare(a: Any, op: str, b: Any) -> bool:
    return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op])
