"""read_committed's view of a partition, by one rule for `kafkacodec serve` and the log-dir
reader: the aborted transactions (producer id, first offset, ABORT marker offset) and the ones
still open at the end (the last stable offset is the first offset of the earliest of them).

Segment by segment, oldest first (`follow`):
- a rolled segment is not read at all when its `.index` loads (its first and last entries hold:
  the segment's end is found through it), its `.txnindex` holds for it (`checked_txn_index`
  against the segment's last offset, each entry's marker an ABORT of that producer:
  `check_txn_markers`) and the producer snapshot at the next segment's base offset is valid (the
  transactions open there, which Kafka writes at each roll): its aborted transactions are the
  file's entries and the open ones the snapshot's;
- any other segment, the active one always, has its transactional batch headers walked from the
  state before it (a data batch opens its producer's transaction, a marker closes it, an ABORT
  records it: `collect_aborted`), as Kafka rebuilds a missing index.  Kafka writes no
  `.txnindex` for a segment without aborts, and a missing file cannot be told from a removed
  one, so such a segment is walked too.

The engines differ only in how they reach the bytes (`TxnSource`); serve follows a live log,
resuming where it stopped, the planner reads once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kafkacodec._format import CONTROL_FLAG, TRANSACTIONAL_FLAG

__all__ = ["TxnState", "TxnSource", "follow", "collect_aborted", "control_type_of"]


@dataclass
class TxnState:
    """A partition's transactions up to `segment` (by index) and `position` (a byte in it)."""
    open: dict[int, int] = field(default_factory=dict)        # producer id -> first offset of its open txn
    aborted: list[tuple[int, int, int]] = field(default_factory=list)   # (producer id, first, marker)
    segment: int = 0
    position: int = 0
    from_index: int = 0                   # rolled segments taken from their .txnindex
    walked: int = 0                       # rolled segments walked

    @property
    def last_stable(self) -> int | None:
        """The first offset of the earliest transaction still open, or None."""
        return min(self.open.values()) if self.open else None


class TxnSource(Protocol):
    """A partition's segments as an engine reaches them."""

    def segment_count(self) -> int: ...

    def txn_index(self, i: int) -> list[tuple[int, int, int]] | None:
        """Rolled segment i's `.txnindex` entries when its `.index` loads and the file holds for
        it (checked_txn_index, check_txn_markers); None otherwise (an invalid file noted)."""

    def open_at(self, i: int) -> dict[int, int] | None:
        """The transactions open at segment i's base offset, from the producer snapshot there;
        None without a valid one."""

    def headers(self, i: int, position: int) -> Iterator[Mapping[str, Any]]:
        """Segment i's entry headers from `position` (a batch boundary) to its end, in windows:
        position, size, magic, attributes, producer_id, base_offset, control_type columns."""

    def entry_bytes(self, i: int, position: int, size: int) -> Any:
        """The bytes of one entry of segment i."""


def control_type_of(entry: Any) -> int:
    """The control type of a control batch's first record (0 ABORT, 1 COMMIT), decoding it: for
    a batch whose header rows say -1 (compressed; Kafka writes its markers uncompressed, but a
    consumer decompresses one as any batch)."""
    from kafkacodec._records import MemoryRecords

    batch = next(MemoryRecords(entry).batches(), None)
    record = next(iter(batch), None) if batch is not None else None
    return int(record.control_type) if record is not None and record.control_type is not None else -1


def collect_aborted(rows: Mapping[str, Any], open_txn: dict[int, int], aborted: list[tuple[int, int, int]],
                    control_type: Any = None) -> None:
    """Aborted transactions as a read_committed consumer sees them: a producer's transactional
    data from its first batch after a marker up to an ABORT marker.  `control_type(j)` decodes
    row j's control type where the rows do not know it (-1)."""
    attributes, pids = rows["attributes"], rows["producer_id"]
    for j in np.flatnonzero((rows["magic"] == 2) & ((attributes & TRANSACTIONAL_FLAG) != 0)):
        pid = int(pids[j])
        if attributes[j] & CONTROL_FLAG:
            kind = int(rows["control_type"][j])
            if kind < 0 and control_type is not None:
                kind = control_type(j)
            first = open_txn.pop(pid, None)
            if first is not None and kind == 0:
                aborted.append((pid, first, int(rows["base_offset"][j])))
        else:
            open_txn.setdefault(pid, int(rows["base_offset"][j]))


def follow(state: TxnState, source: TxnSource) -> TxnState:
    """`state` advanced to the end of the last segment (see the module's rule)."""
    count = source.segment_count()
    while state.segment < count:
        i = state.segment
        if state.position == 0 and i < count - 1:
            aborted = source.txn_index(i)
            after = source.open_at(i + 1) if aborted is not None else None
            if aborted is not None and after is not None:
                state.aborted.extend(aborted)
                state.open = dict(after)
                state.segment += 1
                state.from_index += 1
                continue
        for rows in source.headers(i, state.position):
            if not len(rows["position"]):
                continue
            positions, sizes = rows["position"], rows["size"]
            # a window is taken whole or not at all (a read it needs may be pending:
            # logdir/deferred.py), so following again from `position` is the same walk
            opened, found = dict(state.open), list[tuple[int, int, int]]()
            collect_aborted(rows, opened, found, lambda j: control_type_of(
                source.entry_bytes(i, int(positions[j]), int(sizes[j]))))
            state.open = opened
            state.aborted.extend(found)
            state.position = int(positions[-1] + sizes[-1])
        if i == count - 1:
            break
        state.walked += 1
        state.segment += 1
        state.position = 0
    return state
