"""The Fetch path: which bytes answer each partition, the long poll, and the response pieces.

Per partition (Kafka's ReplicaManager.readFromLog and LogSegment.read): the segment holding the
fetch offset, from the entry holding it, at most the partition's bytes and what is left of the
response's `max_bytes`; never an entry at or above the high watermark (read_uncommitted) or the
last stable offset (read_committed, with the aborted transactions of the range).  The first
partition with data gets its whole first batch even when larger (KIP-74), for every version
(Kafka holds Fetch v0-2 to the hard limit, which leaves such a consumer stuck); a later
partition whose first batch does not fit what is left sends nothing rather than a partial batch
(clients fail on a partition holding only a partial batch).

Fetch v4+ gets the stored bytes as they are: a byte range of the segment, sent with sendfile;
Fetch v4-v9, which cannot carry zstd, gets a range holding zstd batches lazily converted to
magic 2 (the same chunked path as below: those batches recompressed with `zstd_codec`, v2 kept,
the rest copied), or UNSUPPORTED_COMPRESSION_TYPE as Kafka answers when that is None.
Fetch v0-3 gets them lazily down-converted (magic 0 for v0-1, magic 1 for v2-3) with KIP-283's
framing (LazyDownConvertRecords), every conversion's memory from one pool
(`max_conversion_memory`).  When the pool cannot hold a partition's first chunk, the partition
waits like one without data.  A range that converts to nothing (transaction markers) is skipped
and the next batches are taken, so an old consumer is never sent only an overflow stub (Kafka
3.8 sends one and kafka-python stops with "Failed to make progress"); at the end of the log it
gets no records until more arrive.

Long poll: a fetch whose data is below `min_bytes` waits up to `max_wait_ms`, looking at the
files every `poll_interval_ms`; it is answered as soon as enough data lands (or memory returns).
A partition in an object store whose bytes are not read yet waits the same way: a worker reads
them (serve/remote.py) and the waiting fetches are looked at again at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkacodec.errors import (FileTruncatedError, KafkaCodecError, RecordTooLargeError,
                               UnsupportedCompressionError, UnsupportedVersionError)
from kafkacodec._types import Compression
from kafkacodec.lazy import LazyDownConvertRecords
from kafkacodec.protocol._fetch_server import FetchRequest, encode_fetch_response
from kafkacodec.protocol.api import Error
from kafkacodec.serve.dispatch import Request
from kafkacodec.serve.logview import Partition, StorageError
from kafkacodec.serve.remote import ReadPending
from kafkacodec.net.connection import FAILED
from kafkacodec.net.pieces import BytesPiece, LazyPiece

if TYPE_CHECKING:
    from kafkacodec.serve.server import Server

__all__ = ["FetchHandler"]

log = logging.getLogger("kafkacodec.serve")

#: A response's int32 size limits everything it carries: the records of all its partitions stay
#: below this (Fetch v0-2 have no max_bytes), the rest of the response (headers, names, aborted
#: transaction lists) in the reserve below it.
MAX_ANSWER_BYTES = (1 << 31) - 1 - (16 << 20)
#: The first Fetch version that may carry zstd batches (KIP-110); older ones get them rebuilt.
ZSTD_FETCH_VERSION = 10


@dataclass
class _PartitionAnswer:
    index: int
    error: int = Error.NONE
    high_watermark: int = -1
    last_stable: int = -1
    log_start: int = -1
    aborted: list[tuple[int, int]] | None = None
    piece: Any = None              # FilePiece / LazyPiece, None for no records
    size: int = 0                  # committed records size

    def row(self) -> tuple[int, int, int, int, int, Any, int]:
        return (self.index, self.error, self.high_watermark, self.last_stable, self.log_start,
                self.aborted, self.size)


@dataclass
class _Pending:
    req: Request
    fetch: FetchRequest
    deadline: float


class FetchHandler:
    def __init__(self, server: Server):
        self.server = server
        self.parked: list[_Pending] = []
        self._timer: Any = None

    # --- entry ---------------------------------------------------------------------------------
    def handle(self, req: Request, fetch: FetchRequest) -> None:
        pending = _Pending(req, fetch, time.monotonic() + max(0, fetch.max_wait_ms) / 1000)
        if not self._try(pending, force=fetch.max_wait_ms <= 0 or not fetch.topics):
            self.parked.append(pending)
            self._schedule()

    def _read_then_poll(self, pending: ReadPending) -> None:
        """A remote read a partition waits for: made on a worker, the waiting fetches looked at
        again when it is done."""
        self.server.remote.defer(pending, self.poll_now)

    def poll_now(self) -> None:
        """Look at the waiting fetches now (their data may have come), not at the next interval."""
        if not self.parked:
            return
        if self._timer is not None:
            self._timer.cancel()
        self.poll()

    def _schedule(self) -> None:
        if self._timer is None and self.parked:
            self._timer = self.server.loop.call_later(self.server.config.poll_interval_ms / 1000, self.poll)

    def poll(self) -> None:
        """Look again at every waiting fetch (new data, memory back, or its time is up)."""
        self._timer = None
        now = time.monotonic()
        parked, self.parked = self.parked, []
        for pending in parked:
            if pending.req.conn.closed:
                continue
            try:
                if not self._try(pending, force=now >= pending.deadline):
                    self.parked.append(pending)
            except Exception:
                log.exception("a waiting fetch failed; closing its connection")
                pending.req.conn.close("fetch failed", FAILED)
        self._schedule()

    def connection_closed(self, conn: Any) -> None:
        self.parked = [p for p in self.parked if p.req.conn is not conn]

    def answer_all_now(self) -> None:
        """Shutting down: answer every waiting fetch with what there is."""
        parked, self.parked = self.parked, []
        for pending in parked:
            if not pending.req.conn.closed:
                self._try(pending, force=True)

    # --- building ------------------------------------------------------------------------------
    def _try(self, pending: _Pending, force: bool) -> bool:
        """Answer the fetch if it may be answered now; False when it waits."""
        fetch = pending.fetch
        if not force and not self._enough(fetch, pending.req.conn.principal):
            return False
        topics, total, errors = self._build(pending.req, fetch)
        if not force and not errors and total < max(fetch.min_bytes, 1):
            # e.g. the conversion pool refused every first chunk: wait for memory like for data
            _release(topics)
            return False
        self._send(pending.req, topics)
        return True

    def _enough(self, fetch: FetchRequest, principal: str) -> bool:
        """Cheap look before building: enough bytes at the fetch offsets, or an error to report."""
        view = self.server.view
        total = 0
        for name, topic_id, partitions in fetch.topics:
            topic = view.topics.get(name) if name is not None else view.by_id.get(topic_id)
            if topic is None or not self.server.may_read(principal, topic.name):
                return True
            for p in partitions:
                part = topic.partitions.get(p.partition)
                if part is None:
                    return True
                try:
                    part.refresh()
                    in_range = part.in_range(p.fetch_offset)
                    if in_range is None:
                        continue
                    if not in_range:
                        return True
                    upper = part.last_stable_offset() if fetch.isolation_level == 1 else part.log_end
                    if p.fetch_offset >= upper:
                        continue
                    found = part.read(p.fetch_offset, p.partition_max_bytes, True, upper)
                except ReadPending as pending:
                    self._read_then_poll(pending)
                    continue
                except (OSError, FileTruncatedError):      # StorageError, a remote read that failed
                    return True
                if found is not None:
                    total += found.size
                if total >= max(fetch.min_bytes, 1):
                    return True
        return False

    def _build(self, req: Request, fetch: FetchRequest
               ) -> tuple[list[tuple[str | None, uuid.UUID | None, list[_PartitionAnswer]]], int, bool]:
        """Every partition's answer.  The pieces made are the caller's to send or release;
        if building fails half-way, those made so far are released here."""
        topics: list[tuple[str | None, uuid.UUID | None, list[_PartitionAnswer]]] = []
        try:
            total, errors = self._build_into(topics, fetch, req.conn.principal)
        except BaseException:
            _release(topics)
            raise
        return topics, total, errors

    def _build_into(self, topics: list[Any], fetch: FetchRequest, principal: str) -> tuple[int, bool]:
        view = self.server.view
        version = fetch.api_version
        budget = min(fetch.max_bytes if version >= 3 else MAX_ANSWER_BYTES, MAX_ANSWER_BYTES)
        room = MAX_ANSWER_BYTES                   # what the int32 frame still holds
        have_data = False
        total = 0
        errors = False
        for name, topic_id, partitions in fetch.topics:
            answers: list[_PartitionAnswer] = []
            topics.append((name, topic_id, answers))
            topic = view.topics.get(name) if name is not None else view.by_id.get(topic_id)
            if topic is not None:
                topics[-1] = (topic.name if version < 13 else name, topic.topic_id, answers)
            allowed = self.server.may_read(principal, topic.name if topic is not None else name)
            for p in partitions:
                answer = _PartitionAnswer(p.partition)
                answers.append(answer)
                if not allowed:                   # Kafka checks READ before anything else
                    answer.error = Error.TOPIC_AUTHORIZATION_FAILED
                    errors = True
                    continue
                part = topic.partitions.get(p.partition) if topic is not None else None
                if part is None:
                    answer.error = (Error.UNKNOWN_TOPIC_ID if topic is None and version >= 13
                                    else Error.UNKNOWN_TOPIC_OR_PARTITION)
                    errors = True
                    continue
                try:
                    self._partition(part, p, fetch, answer, min(p.partition_max_bytes, budget), not have_data)
                    if answer.size > room:
                        # a first batch no response can carry (KIP-74 lets it exceed max_bytes)
                        raise StorageError(f"the entry at offset {p.fetch_offset} is {answer.size} bytes: "
                                           "larger than a response can carry")
                except ReadPending as pending:      # no records from it in this answer
                    self._read_then_poll(pending)
                    if answer.piece is not None:
                        answer.piece.release()
                    answer.piece, answer.size, answer.aborted = None, 0, [] if fetch.isolation_level == 1 else None
                    continue
                except (OSError, FileTruncatedError) as exc:   # StorageError, a remote read that failed
                    log.warning("fetch from %s-%d: %s", part.topic, part.index, exc)
                    if isinstance(exc, FileTruncatedError):
                        try:
                            part.reload()
                        except StorageError:
                            pass
                    answer.error = (Error.KAFKA_STORAGE_ERROR if version >= 6
                                    else Error.NOT_LEADER_OR_FOLLOWER)
                    if answer.piece is not None:
                        answer.piece.release()
                    answer.piece, answer.size, answer.aborted = None, 0, None
                    errors = True
                    continue
                if answer.error != Error.NONE:
                    errors = True
                if answer.size > 0:
                    have_data = True
                    budget = max(0, budget - answer.size)
                    total += answer.size
                room -= answer.size + 16 * len(answer.aborted or ())
                budget = min(budget, max(0, room))
        return total, errors

    def _partition(self, part: Partition, p: Any, fetch: FetchRequest, answer: _PartitionAnswer,
                   max_bytes: int, first: bool) -> None:
        """Fill `answer` for one partition: an error, no records, or a piece and its size."""
        part.refresh()
        answer.high_watermark = hw = part.log_end
        answer.log_start = part.log_start
        committed = fetch.isolation_level == 1
        # The last stable offset needs every transactional batch header of the partition: a
        # read_committed fetch pays for that scan once; read_uncommitted ones (which ignore the
        # field) report it once known, else the high watermark.
        answer.last_stable = lso = part.last_stable_offset() if committed or part.txn is not None else hw
        offset = p.fetch_offset
        in_range = part.in_range(offset)
        if in_range is None:                    # not known yet (serve --upstream): no records
            return
        if not in_range:
            answer.error = Error.OFFSET_OUT_OF_RANGE
            return
        upper = lso if committed else hw
        if committed:
            answer.aborted = []
        if offset >= upper:
            return
        if fetch.api_version >= 4:
            found = part.read(offset, max_bytes, first, upper)
            if found is None or (not first and found.size < found.first_size):
                return
            if fetch.api_version < ZSTD_FETCH_VERSION:
                error, zstd = self._holds_zstd(found)
                if error:
                    answer.error = error
                    return
                if zstd:                        # recompressed in chunks, v2 kept
                    self._lazy_answer(part, found, 2, 0, offset, fetch, answer)
                    return
            answer.piece = part.stored_piece(found, self.server.metrics.bytes_out_counter(part.topic))
            answer.size = found.size
            if committed:
                end = self._end_offset(found)
                answer.aborted = part.aborted_between(offset, end)
            return
        # Fetch v0-3: lazy down-conversion, skipping ranges that convert to nothing
        to_magic = 0 if fetch.api_version <= 1 else 1
        start = offset
        while True:
            found = part.read(start, max_bytes, first, upper)
            if found is None or (not first and found.size < found.first_size):
                return
            # The first batch's records below the offset are dropped: a wider source makes up
            # for them with the records that follow (at most found.size bytes are sent).
            wider = part.read(start, found.size + 2 * found.first_size, first, upper)
            if wider is None or wider.segment is not found.segment or wider.position != found.position:
                wider = None
            lazy = self._lazy_answer(part, found, to_magic, offset, offset, fetch, answer, wider)
            if lazy is None or not (lazy.size_in_bytes == 12 and lazy.converts):
                return
            # nothing in the range converts (markers): take the batches after it
            answer.piece, answer.size, answer.aborted = None, 0, [] if committed else None
            lazy.close()
            rows = found.segment.slice(found.position, found.size).index(check_crc=False)
            if not len(rows):
                return
            start = int(rows["last_offset"][-1]) + 1
            if start >= upper:
                return

    def _lazy_answer(self, part: Partition, found: Any, to_magic: int, first_offset: int,
                     fetch_offset: int, fetch: FetchRequest, answer: _PartitionAnswer,
                     wider: Any = None) -> LazyDownConvertRecords | None:
        """Answer with `found` converted lazily to `to_magic` (KIP-283 chunks from the conversion
        pool; records below `first_offset` dropped from rebuilt v2 batches, zstd rebuilt with
        zstd_codec), converted from `wider` when given (found.size bytes of it sent); an error
        in `answer` and None when it cannot be."""
        config = self.server.config
        enabled = to_magic == 2 or config.downconversion_enabled(part.topic)
        # (without conversion nothing is dropped, and a batch past `found` must not refuse it)
        source = wider if wider is not None and enabled else found
        records = source.segment.slice(source.position, source.size)
        try:
            lazy = LazyDownConvertRecords(
                records, to_magic, first_offset, config.chunk_size, enabled=enabled,
                pool=self.server.conversion_pool, recompress=config.zstd_codec,
                crc_checked=source.crc_checked, max_size=found.size)
        except UnsupportedVersionError:
            answer.error = Error.UNSUPPORTED_VERSION
            return None
        except UnsupportedCompressionError:
            answer.error = Error.UNSUPPORTED_COMPRESSION_TYPE
            return None
        except RecordTooLargeError:
            answer.error = Error.MESSAGE_TOO_LARGE
            return None
        except FileTruncatedError:
            raise
        except KafkaCodecError as exc:
            log.warning("cannot convert %s-%d at position %d to magic %d: %s", part.topic, part.index,
                        found.position, to_magic, exc)
            answer.error = (Error.KAFKA_STORAGE_ERROR if fetch.api_version >= 6
                            else Error.NOT_LEADER_OR_FOLLOWER)
            return None
        if lazy.refused:
            self.server.metrics.conversion_refused()
            return None
        answer.piece = LazyPiece(lazy, self._converted(part.topic),
                                 self.server.metrics.bytes_out_counter(part.topic))
        answer.size = lazy.size_in_bytes
        if fetch.isolation_level == 1:
            answer.aborted = part.aborted_between(fetch_offset, self._end_offset(found))
        return lazy

    def _holds_zstd(self, found: Any) -> tuple[int, bool]:
        """Whether the range holds a zstd batch (the entry headers, walked in C): (0, answer),
        or (UNSUPPORTED_COMPRESSION_TYPE, False) when it does and zstd_codec is None (Kafka's
        answer to Fetch v4-v9); a damaged range is sent as stored, as Kafka sends it."""
        records = found.segment.slice(found.position, found.size)
        try:
            zstd = bool((records.index(check_crc=False)["compression"] == Compression.ZSTD).any())
        except FileTruncatedError:
            raise
        except KafkaCodecError:
            return 0, False
        if zstd and self.server.config.zstd_codec is None:
            return Error.UNSUPPORTED_COMPRESSION_TYPE, False
        return 0, zstd

    @staticmethod
    def _end_offset(found: Any) -> int:
        """The offset after the last entry that starts inside the range sent."""
        rows = found.segment.slice(found.position, found.size).index(check_crc=False)
        if len(rows):
            return int(rows["last_offset"][-1]) + 1
        return int(found.segment.last_offset) + 1

    def _converted(self, topic: str) -> Any:
        metrics = self.server.metrics

        def done(lazy: LazyDownConvertRecords) -> None:
            metrics.conversion_done(topic, lazy.stats, lazy.pool_refusals)
        return done

    # --- sending -------------------------------------------------------------------------------
    def _send(self, req: Request, topics: list[tuple[str | None, uuid.UUID | None, list[_PartitionAnswer]]]) -> None:
        """Frame the answer and hand its pieces to the connection (which owns them from then
        on); if framing fails, the pieces are released here."""
        try:
            head, cuts, _ = encode_fetch_response(
                req.api_version, req.correlation_id,
                [(name, topic_id, [a.row() for a in answers]) for name, topic_id, answers in topics])
        except BaseException:
            _release(topics)
            raise
        pieces: list[Any] = []
        view = memoryview(head)
        at = 0
        answers = [a for _, _, items in topics for a in items]
        for cut, answer in zip(cuts, answers):
            if answer.piece is None:
                continue
            pieces.append(BytesPiece(view[at:cut]))
            pieces.append(answer.piece)
            at = cut
        pieces.append(BytesPiece(view[at:]))
        req.send(pieces)


def _release(topics: list[tuple[Any, Any, list[_PartitionAnswer]]]) -> None:
    """Give back the pieces of answers that will not be sent."""
    for _, _, answers in topics:
        for answer in answers:
            if answer.piece is not None:
                piece, answer.piece = answer.piece, None
                piece.release()
