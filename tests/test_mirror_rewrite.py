"""The mirror's batch rewriting: producer id, epoch and base sequence replaced, the
transactional flag cleared, the CRC-32C updated from the header alone.  Checked against a full
recomputation with the crc32c package, Kafka's own rules through kafka-python's reader, and a
corrupt batch that must stay corrupt."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest
from hypothesis import given, settings, strategies as st
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
from kafka.record.memory_records import MemoryRecords as KMemoryRecords

from kafkacodec import CorruptRecordError, MemoryRecords, MemoryRecordsBuilder, UnsupportedVersionError
from kafkacodec.errors import UnsupportedCompressionError
from kafkacodec.mirror._rewrite import rewrite_batch, write_produce_request

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def batch(codec="lz4", count=20, *, producer=(77, 3, 10), transactional=True, size=100, seed=0):
    b = MemoryRecordsBuilder(2, codec, producer_id=producer[0], producer_epoch=producer[1],
                             base_sequence=producer[2], is_transactional=transactional,
                             base_offset=1000)
    rnd = __import__("random").Random(seed)
    for i in range(count):
        b.append(1_700_000_000_000 + i, b"k%d" % i, rnd.randbytes(size), [("h", b"%d" % i)])
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS)
def test_rewritten_batches_are_valid_and_equal_to_a_full_rebuild(codec):
    source = batch(codec)
    out = rewrite_batch(source, 123456789012, 7, 2147483000)
    assert struct.unpack(">I", out[17:21])[0] == crc32c.crc32c(out[21:])
    (b,) = MemoryRecords(out).batches()
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (123456789012, 7, 2147483000)
    assert not b.is_transactional and b.compression.name.lower() == codec
    assert b.is_valid()
    # as a producer sends it: base offset 0, no partition leader epoch (both outside the CRC)
    assert out[:8] == bytes(8) and out[12:16] == b"\xff" * 4
    # everything else byte for byte: length, magic, offset delta, timestamps, records
    assert out[8:12] == source[8:12] and out[16] == source[16]
    assert out[23:43] == source[23:43] and out[57:] == source[57:]
    assert out[21] == source[21] and out[22] == source[22] & ~0x10
    # kafka-python (an independent reader) agrees
    kbatch = KMemoryRecords(out).next_batch()
    assert kbatch.producer_id == 123456789012 and kbatch.validate_crc()


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 40), size=st.integers(0, 300), pid=st.integers(-1, 2**63 - 1),
       epoch=st.integers(-1, 32767), seq=st.integers(-1, 2**31 - 1), seed=st.integers(0, 99))
def test_header_only_crc_matches_a_full_crc(count, size, pid, epoch, seq, seed):
    source = batch("none", count, size=size, seed=seed)
    out = rewrite_batch(source, pid, epoch, seq)
    assert struct.unpack(">I", out[17:21])[0] == crc32c.crc32c(out[21:])


def test_a_corrupt_batch_stays_corrupt():
    """Recomputing the CRC from the records would launder corruption; the header-only update
    keeps the difference, so the target broker still refuses the batch."""
    source = bytearray(batch("none"))
    source[-3] ^= 0x40
    out = rewrite_batch(bytes(source), 1, 0, 0)
    assert struct.unpack(">I", out[17:21])[0] != crc32c.crc32c(out[21:])
    (b,) = MemoryRecords(out).batches()
    assert not b.is_valid()


def test_refuses_what_cannot_be_mirrored():
    legacy = MemoryRecordsBuilder(1, "gzip")
    legacy.append(5, b"k", b"v")
    with pytest.raises(UnsupportedVersionError):
        rewrite_batch(bytes(legacy.build()), 1, 0, 0)
    marker = MemoryRecordsBuilder.build_end_txn_marker(True, 5, 0, 0)
    with pytest.raises(CorruptRecordError, match="control"):
        rewrite_batch(bytes(marker), 1, 0, 0)
    with pytest.raises(CorruptRecordError):
        rewrite_batch(batch() + batch(), 1, 0, 0)       # exactly one batch
    with pytest.raises(CorruptRecordError):
        rewrite_batch(batch()[:-1], 1, 0, 0)


@pytest.mark.parametrize("version", [3, 7, 9, 11])
def test_produce_request_as_kafka_python_reads_it(version):
    a, b, c = batch("lz4", seed=1), batch("gzip", seed=2), batch("none", seed=3)
    frame, positions = write_produce_request(
        [("t1", [(0, [(a, 9, 1, 0)]), (3, [(b, 9, 1, 20)])]), ("t2", [(1, [(c, 9, 1, 40)])])],
        api_version=version, correlation_id=42, client_id="m", acks=-1, timeout_ms=1234)
    raw = bytes(frame)
    decoded = KProduceRequest.decode(raw[4:], version=version, header=True)
    assert decoded.header.correlation_id == 42 and decoded.acks == -1 and decoded.timeout_ms == 1234
    parts = {(t.name, p.index): bytes(p.records) for t in decoded.topic_data for p in t.partition_data}
    assert parts.keys() == {("t1", 0), ("t1", 3), ("t2", 1)}
    assert parts[("t1", 3)] == rewrite_batch(b, 9, 1, 20)
    for (position, size), source, seq in zip(positions, (a, b, c), (0, 20, 40)):
        assert raw[position:position + size] == rewrite_batch(source, 9, 1, seq)
    # sent again from the frame as it is: the same bytes
    position, size = positions[0]
    again, [(position2, size2)] = write_produce_request(
        [("t1", [(0, [(raw[position:position + size], 9, 1, 0)])])], api_version=version,
        correlation_id=43)
    assert bytes(again)[position2:position2 + size2] == rewrite_batch(a, 9, 1, 0)


def test_produce_request_two_batches_of_a_partition_a_transactional_id_and_a_given_buffer():
    from kafkacodec import WriteBuffer

    a, b = batch("snappy", seed=4), batch("none", seed=5)
    out = WriteBuffer()
    for version in (3, 11):
        frame, positions = write_produce_request([("t", [(2, [(a, 5, 0, 0), (b, 5, 0, 20)])])], api_version=version,
                                                 correlation_id=7, transactional_id="tx", out=out)
        assert frame is out
        raw = bytes(frame)
        decoded = KProduceRequest.decode(raw[4:], version=version, header=True)
        assert decoded.transactional_id == "tx" and decoded.header.client_id == "kafkacodec-mirror"
        (topic,) = decoded.topic_data
        assert [(p.index, bytes(p.records)) for p in topic.partition_data] == [
            (2, rewrite_batch(a, 5, 0, 0) + rewrite_batch(b, 5, 0, 20))]
        assert [raw[p:p + n] for p, n in positions] == [rewrite_batch(a, 5, 0, 0), rewrite_batch(b, 5, 0, 20)]
        assert positions[1][0] == positions[0][0] + positions[0][1]
    # every batch is checked before the frame is begun: a refused one leaves `out` as it was
    with pytest.raises(CorruptRecordError):
        write_produce_request([("t", [(2, [(a, 5, 0, 0)]), (3, [(b[:-1], 5, 0, 0)])])], api_version=11,
                              correlation_id=8, out=out)
    assert bytes(out) == raw


def test_zstd_needs_produce_v7():
    with pytest.raises(UnsupportedCompressionError):
        write_produce_request([("t", [(0, [(batch("zstd"), 1, 0, 0)])])], api_version=6, correlation_id=1)
    write_produce_request([("t", [(0, [(batch("zstd"), 1, 0, 0)])])], api_version=7, correlation_id=1)


def test_random_bytes_never_crash():
    for n in (0, 1, 11, 12, 60, 61, 62, 200):
        with pytest.raises((CorruptRecordError, UnsupportedVersionError)):
            rewrite_batch(os.urandom(n), 1, 0, 0)


from lying_str import LyingName as _LyingName  # noqa: E402


@pytest.mark.parametrize("claim", [0, 1 << 40])
def test_produce_request_sizes_topic_names_by_their_utf8_bytes(claim):
    # 4 * __len__ asked for 4 TiB (MemoryError), as fetch_to_produce did before the same fix
    name = _LyingName("töpic-ü" * 40)
    name.claim = claim
    frame, _ = write_produce_request([(name, [(0, [(batch("lz4"), 9, 1, 0)])])], api_version=9,
                                     correlation_id=1)
    decoded = KProduceRequest.decode(bytes(frame)[4:], version=9, header=True)
    assert [t.name for t in decoded.topic_data] == [str.__str__(name)]
