"""read_committed for one partition, whether or not the broker lists aborted transactions.

Kafka's consumer drops a producer's transactional batches when the FetchResponse lists an
aborted transaction of that producer starting at or before them (until its ABORT marker), and
trusts the broker to send nothing past the last stable offset.  librdkafka's mock cluster lists
no aborted transactions (and its read_committed view still shows them), so a transactional batch
cannot be judged by the list alone: it is decided by its producer's next transaction marker
(COMMIT keeps it, ABORT drops it).  A batch whose marker is not known yet stops the partition:

- nothing at or after it is returned (order is kept: a partition's batches leave in offset order);
- the partition *scans* ahead from the end of what was fetched, reading only markers (data is
  dropped unread), until every producer with an undecided batch since the stop has its marker;
- then it fetches again from the stop, now knowing every decision.

So a transaction that fits one fetch response costs nothing extra; one that spans responses is
fetched twice (once for its marker, once for its data).  No batch is copied or held: memory
stays within the rings.  The broker's aborted list, when there is one, drops aborted batches
without waiting for their marker.  Markers are kept as (offset, committed) per producer and
pruned once the position passes them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

from kafkacodec._records import MemoryRecords
from kafkacodec.errors import CorruptRecordError

__all__ = ["TransactionFilter", "control_type", "ABORT", "COMMIT"]

ABORT, COMMIT = 0, 1


def control_type(batch: Any) -> int:
    """The type of a control batch's marker (0 ABORT, 1 COMMIT, others: not a transaction
    marker).  `batch` is a RawBytesBatchRecord of a control batch."""
    for record in MemoryRecords(batch.value).records():
        kind = record.control_type
        if kind is None:
            break
        return int(kind)
    raise CorruptRecordError("control batch without a control record",
                             position=0, offset=batch.base_offset)


class TransactionFilter:
    """Per-partition read_committed state.  `walk()` decides the batches of one fetch."""

    __slots__ = ("markers", "scan_from", "waiting", "scanned_to")

    def __init__(self) -> None:
        self.markers: dict[int, list[tuple[int, bool]]] = {}   # producer -> [(offset, committed)]
        self.scan_from: int | None = None     # the stop to return to once decisions are known
        self.waiting: dict[int, int] = {}     # producer -> first undecided batch offset (scan)
        self.scanned_to = -1                  # markers are known below this offset

    @property
    def scanning(self) -> bool:
        return self.scan_from is not None

    def learn(self, batch: Any) -> None:
        kind = control_type(batch)
        if kind not in (ABORT, COMMIT):
            return
        offsets = self.markers.setdefault(batch.producer_id, [])
        entry = (batch.offset, kind == COMMIT)
        if not offsets or offsets[-1][0] < batch.offset:
            offsets.append(entry)
        elif entry not in offsets:
            bisect.insort(offsets, entry)

    def decision(self, producer_id: int, offset: int) -> bool | None:
        """True (committed) / False (aborted) by the producer's first marker after `offset`,
        None while it is not known."""
        markers = self.markers.get(producer_id)
        if not markers:
            return None
        i = bisect.bisect_right(markers, (offset, True))
        return markers[i][1] if i < len(markers) else None

    def prune(self, position: int) -> None:
        """Forget markers below the position (no batch at or after it can need them)."""
        for pid in list(self.markers):
            markers = self.markers[pid]
            i = bisect.bisect_left(markers, (position, False))
            if i:
                del markers[:i]
            if not markers:
                del self.markers[pid]

    def walk(self, batches: Sequence[Any], position: int,
             aborted: Iterable[tuple[int, int]] | None) -> tuple[list[Any], list[tuple[int, int, int]], int, int | None]:
        """Decide the batches of one fetch of this partition (complete batches from
        `position`, in order).  Returns (kept data batches, dropped transactional batches as
        (producer id, base offset, last offset), the next offset to fetch, and the offset
        where returned data stops when a batch is undecided (else None))."""
        for batch in batches:
            if batch.is_control:
                self.learn(batch)
        if not batches:
            return [], [], position, None
        end = batches[-1].offset + 1
        if self.scan_from is not None:
            return self._scan(batches, end)
        broker_aborted = sorted((first, pid) for pid, first in (aborted or ()))
        open_aborted: set[int] = set()
        next_aborted = 0
        kept: list[Any] = []
        dropped: list[tuple[int, int, int]] = []
        for i, batch in enumerate(batches):
            base = batch.base_offset
            # Kafka's rule: a listed transaction is aborted from its first offset on.
            while next_aborted < len(broker_aborted) and broker_aborted[next_aborted][0] <= base:
                open_aborted.add(broker_aborted[next_aborted][1])
                next_aborted += 1
            if batch.is_control:
                open_aborted.discard(batch.producer_id)
                continue
            if not batch.is_transactional:
                kept.append(batch)
                continue
            outcome = self.decision(batch.producer_id, batch.offset)
            if outcome is None and batch.producer_id in open_aborted:
                outcome = False
            if outcome is None:
                # Stop here; scan ahead from the end of this fetch for the markers.
                self.scan_from = base
                self.waiting = {}
                for later in batches[i:]:
                    if later.is_transactional and not later.is_control and \
                            self.decision(later.producer_id, later.offset) is None:
                        self.waiting.setdefault(later.producer_id, later.base_offset)
                self.scanned_to = end
                self.prune(position)
                return kept, dropped, end, base
            if outcome:
                kept.append(batch)
            else:
                dropped.append((batch.producer_id, base, batch.offset))
        self.prune(end)
        return kept, dropped, end, None

    def _scan(self, batches: Sequence[Any], end: int) -> tuple[list[Any], list[tuple[int, int, int]], int, int | None]:
        for batch in batches:
            if batch.is_transactional and not batch.is_control and \
                    self.decision(batch.producer_id, batch.offset) is None:
                self.waiting.setdefault(batch.producer_id, batch.base_offset)
        for pid, first in list(self.waiting.items()):
            if self.decision(pid, first) is not None:
                del self.waiting[pid]
        self.scanned_to = max(self.scanned_to, end)
        if self.waiting:
            return [], [], end, self.scan_from
        stop = self.scan_from
        assert stop is not None
        self.scan_from = None
        return [], [], stop, stop          # every decision is known: fetch the stop again
