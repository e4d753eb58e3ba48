"""What the consumer returns: one FetchedPartition per partition per fetch, its data as raw
batches (zero-copy views into the ring), as Arrow record batches (ArrowDecoder), or, across a
whole response, as the ring's flyweight records.

Lifetimes: the batches are views into a ring response, valid until their FetchedPartition is
released (`release()`, the `with` block, or garbage collection): then each batch's `value`
memoryview is released too (using it raises ValueError), and the response is freed once every
FetchedPartition made from it is released.  Buffers the caller derived from a value and still
holds (`numpy.frombuffer(batch.value)`) keep their bytes in place and the ring waits for them, so
nothing is ever overwritten under a view.  Arrow batches and copies are independent of the ring.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kafkacodec._ring import Response
from kafkacodec.errors import BufferReleasedError

if TYPE_CHECKING:
    from kafkacodec.mirror.shallow import RawBytesBatchRecord

__all__ = ["FetchedPartition", "ResponseLease"]


class ResponseLease:
    """Counts the FetchedPartitions made from one ring response; the last release() frees it.
    `conn.leases` counts the responses of a connection the caller still holds."""

    __slots__ = ("response", "count", "api_version", "conn", "counted")

    def __init__(self, response: Response, api_version: int, conn: Any = None):
        self.response: Response | None = response
        self.count = 0
        self.api_version = api_version
        self.conn = conn
        self.counted = False

    def acquire(self) -> None:
        self.count += 1

    def start(self) -> None:
        """Parsing is done: count it on the connection, or free it when nothing refers to it."""
        if self.count == 0:
            self.count = 1
            self.release()
        elif self.conn is not None:
            self.conn.leases += 1
            self.counted = True

    def release(self) -> None:
        self.count -= 1
        if self.count <= 0 and self.response is not None:
            response, self.response = self.response, None
            response.release()
            if self.counted:
                self.conn.leases -= 1
                self.conn.unmute()                # the ring has room again: read on


class FetchedPartition:
    """The data one fetch returned for one partition, in offset order.

    - ``batches``: RawBytesBatchRecord per kept batch (whole batches, still compressed; the
      first trimmed when the fetch started inside it; control batches, aborted transactions
      and, under read_committed, undecided ones left out).
    - ``next_offset``: where this partition continues (commit it to resume after this data).
    - ``dropped``: (producer id, base offset, last offset) of the aborted batches left out
      (read_committed; with control_batches, they are in ``batches`` and named here).
    - ``high_watermark``, ``last_stable_offset``, ``log_start_offset``: from the broker.
    - ``to_arrow()``: the records as pyarrow RecordBatches (Spark's Kafka schema).

    Valid until ``release()``; not thread-safe (hand it over, don't share it)."""

    __slots__ = ("topic", "partition", "start_offset", "next_offset", "stop_offset",
                 "high_watermark", "last_stable_offset", "log_start_offset", "_batches",
                 "_dropped", "_records", "_lease", "__weakref__")

    def __init__(self, topic: str, partition: int, start_offset: int, next_offset: int,
                 stop_offset: int | None, batches: list[RawBytesBatchRecord],
                 dropped: list[tuple[int, int, int]], records: memoryview | None,
                 lease: ResponseLease | None, high_watermark: int, last_stable_offset: int,
                 log_start_offset: int):
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset        # the fetch position: records before it are not ours
        self.next_offset = next_offset
        self.stop_offset = stop_offset          # read_committed: data stops at an undecided batch
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self._batches: list[RawBytesBatchRecord] | None = batches
        self._dropped = dropped
        self._records = records
        self._lease = lease
        if lease is not None:
            lease.acquire()

    def __repr__(self) -> str:
        state = "released" if self._batches is None else f"{len(self._batches)} batches"
        return (f"<FetchedPartition {self.topic}-{self.partition} [{self.start_offset}, "
                f"{self.next_offset}) {state}>")

    @property
    def batches(self) -> list[RawBytesBatchRecord]:
        if self._batches is None:
            raise BufferReleasedError("FetchedPartition used after release()")
        return self._batches

    @property
    def dropped(self) -> list[tuple[int, int, int]]:
        return self._dropped

    @property
    def released(self) -> bool:
        return self._batches is None

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[RawBytesBatchRecord]:
        return iter(self.batches)

    @property
    def record_count(self) -> int:
        """Records in the kept batches (a trimmed first batch counts what is left)."""
        return sum(b.record_count or 0 for b in self.batches)

    @property
    def size_in_bytes(self) -> int:
        return sum(len(b.value) for b in self.batches)

    def to_arrow(self, *, include_headers: bool = True, validate_crc: bool = True,
                 max_rows: int = 65536) -> list[Any]:
        """The kept records as pyarrow RecordBatches (kafkacodec.arrow.ArrowDecoder; needs
        pyarrow): records before the fetch position, control records, aborted transactions
        and undecided data are left out, exactly as in ``batches``."""
        from kafkacodec.arrow import ArrowDecoder

        self.batches                                   # raises after release()
        out: list[Any] = []                            # pyarrow.RecordBatch (optional dependency)
        if self._records is None or not self._batches:
            return out
        decoder = ArrowDecoder(self.topic, self.partition, validate_crc=validate_crc,
                               include_headers=include_headers, start_offset=self.start_offset,
                               end_offset=self.stop_offset, aborted=self._dropped or None,
                               max_rows=max_rows, source=f"{self.topic}-{self.partition} fetch")
        data = self._records
        position, end = 0, len(data)
        while position < end:
            batch, following = decoder.decode(data, position, end)
            if batch.num_rows:
                out.append(batch)
            if following == position or decoder.trailing_bytes:
                break
            position = following
        return out

    def copy_batches(self) -> list[bytes]:
        """The kept batches as bytes (independent of the ring)."""
        return [bytes(b.value) for b in self.batches]

    def release(self) -> None:
        """Give the ring space back (idempotent).  Batches' views kept elsewhere keep their
        bytes until they are dropped."""
        batches = self._batches
        if batches is None:
            return
        self._batches = None
        # The views die with the FetchedPartition, even where the caller still holds a batch
        # (a loop variable): their exports pin the ring, which could then never drain.
        for view in [b.value for b in batches] + [self._records]:
            if type(view) is memoryview:
                try:
                    view.release()
                except BufferError:
                    pass          # the caller exported it further: those bytes stay pinned
        self._records = None
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def __enter__(self) -> FetchedPartition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


def records_filter(parts: Sequence[FetchedPartition]) -> dict[tuple[str, int], tuple[int, int, list[tuple[int, int]]]]:
    """(topic, partition) -> (first offset, end offset, dropped offset ranges) for filtering a
    response's flyweight records down to what the FetchedPartitions keep."""
    out = {}
    for part in parts:
        if not part.batches:
            continue
        end = part.stop_offset if part.stop_offset is not None else part.next_offset
        out[(part.topic, part.partition)] = (part.start_offset, end,
                                             [(base, last) for _, base, last in part._dropped])
    return out
