"""One aborted-transaction filter (kafkacodec/_walk.pxd, "the aborted-transaction filter") under
every read_committed reader: ArrowDecoder(aborted=...), the ring's FetchRecords and logdir's
counts give the records Kafka's fetch path gives.

The reference is Kafka's fetch path, built from two independent parts:
- the broker's list for a fetch at offset F: the aborted transactions of the .txnindex whose
  last offset (the ABORT marker) is >= F (TransactionIndex.collectAbortedTxns), as
  (producer id, first offset); it serves the log from the batch that holds F;
- kafka-python's PartitionRecords in read_committed (kafka/consumer/fetcher.py: Kafka's
  CompletedFetch algorithm: consumeAbortedTransactionsUpTo(batch.lastOffset),
  containsAbortMarker, isBatchAborted), driven on the same bytes."""

import collections
import random

import pytest

from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer import IsolationLevel
from kafka.record import MemoryRecords as KpMemoryRecords
from kafka.structs import TopicPartition

from kafkacodec import MemoryRecordsBuilder, TimestampType
from kafkacodec.arrow import ArrowDecoder
from kafkacodec.logdir._counts import COUNT_COLUMNS, RecordCounts
from kafkacodec import ResponseRingBuffer

from fetch_fixtures import build_fetch_response

Aborted = collections.namedtuple("Aborted", "producer_id first_offset")
CODECS = ["none", "gzip", "zstd"]


# --- logs -------------------------------------------------------------------------------------
def data_batch(base, pid, n, compression="none", transactional=True):
    b = MemoryRecordsBuilder(compression=compression, base_offset=base,
                             producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                             base_sequence=0 if pid >= 0 else -1, is_transactional=transactional)
    for i in range(n):
        b.append(1000 + base + i, None, b"v%d" % (base + i))
    return b.build()


def marker(abort, pid, offset, compression="none"):
    if compression == "none":                # as a broker writes it
        return MemoryRecordsBuilder.build_end_txn_marker(not abort, pid, 0, 0, base_offset=offset,
                                                         timestamp=5)
    b = MemoryRecordsBuilder(2, compression, TimestampType.CREATE_TIME, offset, pid, 0, -1, True,
                             None, -1, is_control_batch=True)
    b.append_end_txn_marker(5, not abort, 0)
    return b.build()


class Log:
    """Batches in log order ((base, last, bytes)) and the .txnindex triples a broker keeps."""

    def __init__(self):
        self.batches = []
        self.triples = []
        self.plain_markers = {}     # index: a compressed marker's uncompressed twin

    def add(self, base, last, entry, plain=None):
        if plain is not None:
            self.plain_markers[len(self.batches)] = plain
        self.batches.append((base, last, entry))

    def bytes_from(self, fetch_offset, plain_markers=False):
        """What a broker serves for a fetch at fetch_offset: from the batch holding it on
        (plain_markers: compressed markers uncompressed, for kafka-python 3.0.12, whose
        containsAbortMarker reads a control batch's first record without decompressing it)."""
        i = next((i for i, (_, last, _) in enumerate(self.batches) if last >= fetch_offset),
                 len(self.batches))
        return b"".join(self.plain_markers.get(j, entry) if plain_markers else entry
                        for j, (_, _, entry) in enumerate(self.batches) if j >= i)

    @property
    def all_bytes(self):
        return b"".join(entry for _, _, entry in self.batches)


def generated_log(rng, hostile=False):
    """Producers 1-3 with interleaved transactions (committed, aborted, left open), plain
    batches, compressed batches.  hostile: markers dropped, duplicate, unsorted and stray list
    entries, wrong last offsets."""
    log, offset, open_txn = Log(), 0, {}
    for _ in range(rng.randint(5, 30)):
        pid = rng.choice([1, 2, 3, -1])
        if pid >= 0 and pid in open_txn and rng.random() < 0.35:
            abort = rng.random() < 0.6
            if abort:
                log.triples.append((pid, open_txn[pid], offset))
            if not (hostile and rng.random() < 0.2):         # the marker missing
                codec = rng.choice(CODECS) if hostile else "none"  # a compressed marker
                log.add(offset, offset, marker(abort, pid, offset, codec),
                        None if codec == "none" else marker(abort, pid, offset))
            del open_txn[pid]
            offset += 1
            continue
        n = rng.randint(1, 3)
        if pid >= 0:
            open_txn.setdefault(pid, offset)
        log.add(offset, offset + n - 1, data_batch(offset, pid, n, rng.choice(CODECS), pid >= 0))
        offset += n + (rng.random() < 0.1)                  # now and then a gap (compaction)
    if hostile:
        triples = log.triples
        triples += [rng.choice(triples) for _ in range(len(triples) // 2)] if triples else []
        if triples and rng.random() < 0.5:
            p, f, last = rng.choice(triples)
            triples.append((p, f, last + rng.randint(-3, 3)))
        triples.append((rng.choice([1, 2, 3, 9]), rng.randint(0, offset), rng.randint(0, offset)))
        rng.shuffle(triples)
    return log


# --- the readers ------------------------------------------------------------------------------
def broker_list(log, fetch_offset):
    """The broker's list for the read that starts at the first batch served (a reader cannot
    tell a fetch at 9 from one at 11 when offsets 9-10 are gone: the fetch offset is the
    first batch's base offset when that is later)."""
    served = [base for base, last, _ in log.batches if last >= fetch_offset][:1]
    start = max([fetch_offset] + served)
    return [(p, f) for p, f, last in log.triples if last >= start]


def kafka_read(log, fetch_offset, listed=None):
    """Kafka's fetch path (module docstring); listed: the aborted list to hand the consumer
    (None: the broker's)."""
    if listed is None:
        listed = broker_list(log, fetch_offset)
    records = Fetcher.PartitionRecords(
        fetch_offset, TopicPartition("t", 0), KpMemoryRecords(log.bytes_from(fetch_offset, True)),
        isolation_level=IsolationLevel.READ_COMMITTED,
        aborted_transactions=[Aborted(p, f) for p, f in listed])
    return [r.offset for r in records.take()]


def arrow_read(log, fetch_offset, data=None, **kwargs):
    data = log.all_bytes if data is None else data
    dec = ArrowDecoder(aborted=log.triples, start_offset=fetch_offset, **kwargs)
    out, pos = [], 0
    while pos < len(data):
        rb, pos = dec.decode(data, pos)
        out += rb.column("offset").to_pylist()
    return out


def ring_read(log, fetch_offset):
    frame = build_fetch_response(12, 1, [("t", [(0, log.bytes_from(fetch_offset))])],
                                 aborted=broker_list(log, fetch_offset))
    ring = ResponseRingBuffer(len(frame) + 64)
    ring.feed(frame)
    resp = ring.next_response()
    try:
        # Kafka's consumer drops the records of the first batch before the fetch offset
        return [r.offset for r in resp.records(12, isolation_level=1) if r.offset >= fetch_offset]
    finally:
        resp.release()


def ranges_read(log):
    """The rule ArrowDecoder had: drop a producer's transactional batch whose base offset lies
    in one of its transactions' [first, last] (kept here to show where it is not Kafka's)."""
    out = []
    for base, last, entry in log.batches:
        for batch in KpMemoryRecords(entry).next_batch(), :
            if batch.is_control_batch:
                continue
            if batch.is_transactional and any(p == batch.producer_id and f <= base <= l
                                              for p, f, l in log.triples):
                continue
            out += [r.offset for r in batch]
    return out


def fetch_offsets(rng, log):
    ends = [b[0] for b in log.batches] + [b[1] + 1 for b in log.batches]
    return sorted({0, *rng.sample(ends, min(4, len(ends)))})


# --- the rule -------------------------------------------------------------------------------
def test_a_read_that_starts_after_an_abort_marker_keeps_the_producers_later_data():
    # pid 7 aborts [0, 2) (marker at 2), then commits [3, 5) (marker at 5)
    log = Log()
    log.add(0, 1, data_batch(0, 7, 2))
    log.add(2, 2, marker(True, 7, 2))
    log.add(3, 4, data_batch(3, 7, 2))
    log.add(5, 5, marker(False, 7, 5))
    log.triples = [(7, 0, 2)]
    assert kafka_read(log, 0) == [3, 4]
    assert kafka_read(log, 3) == [3, 4]
    # Kafka's consumer over the list without the broker's last-offset rule drops a committed
    # transaction: the naive algorithm over triples is wrong for a read that starts after a marker
    assert kafka_read(log, 3, listed=[(7, 0)]) == []
    for start in (0, 3):
        assert arrow_read(log, start) == ring_read(log, start) == [3, 4]
    # a decoder that starts without start_offset at the batch after the marker (a resumed read)
    tail = log.bytes_from(3)
    assert arrow_read(log, None, data=tail) == [3, 4]


def test_a_batch_after_its_marker_but_inside_the_triples_range_is_kept_as_kafka_does():
    # offsets out of order (a hostile log): pid 7's ABORT marker at 5, then its new
    # transaction's batch at 3, committed at 6.  The triple (7, 0, 5) covers offset 3, but
    # Kafka's consumer has seen the marker and keeps the batch: a range rule would drop it.
    log = Log()
    log.add(0, 1, data_batch(0, 7, 2))
    log.add(5, 5, marker(True, 7, 5))
    log.add(3, 4, data_batch(3, 7, 2))
    log.add(6, 6, marker(False, 7, 6))
    log.triples = [(7, 0, 5)]
    assert kafka_read(log, 0) == [3, 4]
    assert ranges_read(log) == []
    assert arrow_read(log, 0) == ring_read(log, 0) == [3, 4]


def test_a_missing_marker_leaves_the_producer_aborted_as_kafka_does():
    log = Log()
    log.add(0, 0, data_batch(0, 4, 1))
    log.add(2, 2, data_batch(2, 4, 1))                  # no marker at 1: pid 4 stays aborted
    log.add(3, 3, data_batch(3, 5, 1))
    log.triples = [(4, 0, 1)]
    assert kafka_read(log, 0) == [3]
    assert ranges_read(log) == [2, 3]
    assert arrow_read(log, 0) == ring_read(log, 0) == [3]


def test_mid_transaction_start_ring_and_arrow_agree():
    # pid 2's aborted transaction spans [0, 6) with a marker at 6; reads start inside it
    log = Log()
    log.add(0, 1, data_batch(0, 2, 2, "zstd"))
    log.add(2, 3, data_batch(2, 3, 2))                  # pid 3: committed at 7
    log.add(4, 5, data_batch(4, 2, 2, "gzip"))
    log.add(6, 6, marker(True, 2, 6))
    log.add(7, 7, marker(False, 3, 7))
    log.add(8, 8, data_batch(8, 2, 1))
    log.add(9, 9, marker(False, 2, 9))
    log.triples = [(2, 0, 6)]
    for start in range(0, 10):
        expected = kafka_read(log, start)
        assert expected == [o for o in (2, 3, 8) if o >= start]
        assert arrow_read(log, start) == ring_read(log, start) == expected, start


# --- differential ---------------------------------------------------------------------------
@pytest.mark.parametrize("hostile", [False, True])
def test_readers_give_kafkas_records(hostile):
    rng = random.Random(15 + hostile)
    for _ in range(60):
        log = generated_log(rng, hostile)
        for start in fetch_offsets(rng, log):
            expected = kafka_read(log, start)
            assert arrow_read(log, start) == expected, (log.triples, start)
            assert arrow_read(log, start, max_rows=2) == expected   # resumed between outputs
            assert ring_read(log, start) == expected, (log.triples, start)


@pytest.mark.parametrize("hostile", [False, True])
def test_logdir_counts_are_the_filters(hostile):
    """logdir's counts (describe, verify): records less aborted_records is what the walker's
    filter keeps, also on hostile logs, where the old count by transaction ranges was not
    (no transaction is left open here)."""
    rng = random.Random(7 + hostile)
    differs = 0
    for _ in range(40):
        log = generated_log(rng, hostile)
        # close every open transaction with a COMMIT so the read_committed answer is complete
        last = max((b[1] for b in log.batches), default=-1)
        for pid in (1, 2, 3):
            last += 1
            log.add(last, last, marker(False, pid, last))
        counts = RecordCounts()
        dec = ArrowDecoder(keep_control=True, columns=COUNT_COLUMNS, aborted=log.triples)
        data, pos = log.all_bytes, 0
        while pos < len(data):
            before = dec.aborted_records
            rb, pos = dec.decode(data, pos)
            counts.add(rb)
            counts.add_aborted(dec.aborted_records - before)
        committed = kafka_read(log, 0)
        assert arrow_read(log, None) == committed
        assert counts.records - counts.aborted_records == len(committed)
        batches = [KpMemoryRecords(entry).next_batch() for _, _, entry in log.batches]
        assert counts.records == sum(len(list(b)) for b in batches if not b.is_control_batch)
        differs += len(ranges_read(log)) != len(committed)
    assert differs > 0 or not hostile       # the hostile logs reach where ranges were wrong


def test_many_listed_producers_aborted_again_after_their_markers():
    """A list of thousands of producers (the filter's producer set: removals, then the same
    producers aborted again in a second round) gives Kafka's records in every reader."""
    log, offset = Log(), 0
    pids = list(range(100, 2100))
    for round_ in range(2):
        firsts = {}
        for pid in pids:
            firsts[pid] = offset
            log.add(offset, offset, data_batch(offset, pid, 1))
            offset += 1
        for pid in pids:
            abort = (pid + round_) % 3 != 0
            if abort:
                log.triples.append((pid, firsts[pid], offset))
            log.add(offset, offset, marker(abort, pid, offset))
            offset += 1
    log.triples.reverse()
    expected = kafka_read(log, 0)
    assert len(expected) == sum((pid + r) % 3 == 0 for r in range(2) for pid in pids)
    assert arrow_read(log, 0) == ring_read(log, 0) == expected
    start = log.batches[len(pids) * 2][0]      # the second round: the first round's markers before it
    assert arrow_read(log, start) == ring_read(log, start) == kafka_read(log, start)
