"""What the commands count, one definition for all (docs/cli.md, "Counts"):

- records: data records, those of aborted transactions included, control records not;
- control_records: the records of control batches (transaction markers);
- aborted_records: data records of aborted transactions, counted in `records` too: what the
  walker's aborted-transaction filter passes over (the reader's read_committed rule, Kafka's
  fetch path: docs/reading.md, "read_committed"), so records - aborted_records is what a
  read_committed read of the same splits gives (less the open transactions at the end of the
  log).

`kafkacodec generate`, `verify`, `read --summary` and logdir.describe() report them so."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RecordCounts", "COUNT_COLUMNS"]

COUNT_COLUMNS = ["offset", "isControl"]


@dataclass
class RecordCounts:
    records: int = 0
    control_records: int = 0
    aborted_records: int = 0

    def add(self, rb: Any) -> None:
        """Count an Arrow batch read with keep_control=True and COUNT_COLUMNS."""
        if not rb.num_rows:
            return
        n_control = rb.column("isControl").true_count      # (to_numpy() would import pandas)
        self.control_records += n_control
        self.records += rb.num_rows - n_control

    def add_aborted(self, n: int) -> None:
        """Count `n` records of aborted transactions the read passed over (read_split's
        on_aborted)."""
        self.records += n
        self.aborted_records += n

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
