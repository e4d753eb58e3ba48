"""What the commands count, one definition for all (docs/cli.md, "Counts"):

- records: data records, those of aborted transactions included, control records not;
- control_records: the records of control batches (transaction markers);
- aborted_records: data records of aborted transactions (a producer's transactional records
  from its first batch after a marker up to an ABORT marker), counted in `records` too;
  a read_committed consumer gets records - aborted_records (less the open transactions at the
  end of the log).  Counted by the transactions' offset ranges: on logs a broker writes this is
  what the readers' filter drops (docs/reading.md, "read_committed";
  tests/test_aborted_filter.py); on a damaged log (an ABORT marker missing, offsets out of
  order) the readers follow Kafka's consumer and the two may differ.

`kafkacodec generate`, `verify`, `read --summary` and logdir.describe() report them so."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RecordCounts", "COUNT_COLUMNS"]

COUNT_COLUMNS = ["offset", "producerId", "isControl"]


@dataclass
class RecordCounts:
    records: int = 0
    control_records: int = 0
    aborted_records: int = 0

    def add(self, rb: Any, aborted: list[tuple[int, int, int]]) -> None:
        """Count an Arrow batch read with keep_control=True and COUNT_COLUMNS (read_uncommitted);
        `aborted`: its partition's aborted transactions (producer id, first offset, marker
        offset), as the planner finds them."""
        import numpy as np

        if not rb.num_rows:
            return
        control = rb.column("isControl").to_numpy(zero_copy_only=False)
        n_control = int(np.count_nonzero(control))
        self.control_records += n_control
        self.records += rb.num_rows - n_control
        if aborted:
            offsets = rb.column("offset").to_numpy()
            producers = rb.column("producerId").to_numpy()
            hit = np.zeros(rb.num_rows, dtype=bool)
            for producer, first, last in aborted:
                hit |= (producers == producer) & (offsets >= first) & (offsets < last)
            self.aborted_records += int(np.count_nonzero(hit & ~control))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
