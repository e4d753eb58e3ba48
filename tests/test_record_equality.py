"""Record value equality (issue 19): two Records are equal when every field a reader sees is
(offset, timestamp and its type, sequence, key, value, headers, control type and coordinator
epoch), whichever buffer or batch they came from; equal Records hash alike (a Record is an
immutable value).  Records.index() has no `_pad` field."""

from kafkacodec import MemoryRecords, MemoryRecordsBuilder


def build(*values, base=0, codec="none", headers=()):
    b = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=base)
    for i, v in enumerate(values):
        b.append(1_700_000_000_000 + i, b"k%d" % i, v, headers=list(headers))
    return b.build()


def test_equal_records_from_different_buffers_and_codecs():
    a = list(MemoryRecords(build(b"x", b"y", headers=[("h", b"1")])).records())
    b = list(MemoryRecords(bytearray(build(b"x", b"y", codec="lz4", headers=[("h", b"1")]))).records())
    assert a == b and a[0] is not b[0]
    assert {hash(r) for r in a} == {hash(r) for r in b} and len(set(a + b)) == 2


def test_any_field_makes_records_differ():
    base = next(MemoryRecords(build(b"x", headers=[("h", b"1")])).records())
    others = [build(b"y", headers=[("h", b"1")]),                  # value
              build(b"x", base=1, headers=[("h", b"1")]),          # offset
              build(b"x", headers=[("h", None)]),                  # header value
              build(b"x")]                                         # no headers
    for other in others:
        record = next(MemoryRecords(other).records())
        assert record != base and not (record == base)
    assert base != (base.offset, base.key, base.value) and base != None  # noqa: E711


def test_control_records_compare_their_marker():
    commit = MemoryRecordsBuilder.build_end_txn_marker(commit=True, producer_id=1, producer_epoch=0,
                                                       coordinator_epoch=3, base_offset=5)
    other_epoch = MemoryRecordsBuilder.build_end_txn_marker(commit=True, producer_id=1, producer_epoch=0,
                                                            coordinator_epoch=4, base_offset=5)
    a, b = (next(MemoryRecords(m).records()) for m in (commit, other_epoch))
    assert a == next(MemoryRecords(commit).records()) and a != b


def test_index_has_no_padding_field():
    index = MemoryRecords(build(b"x", b"y")).index()
    assert "_pad" not in index.dtype.names and not any(n.startswith("_") for n in index.dtype.names)
    assert index.dtype.names == ("position", "size_in_bytes", "base_offset", "last_offset", "max_timestamp",
                                 "producer_id", "records_count", "crc", "attributes", "magic", "compression",
                                 "timestamp_type", "control_type", "crc_valid")
    assert index["records_count"][0] == 2 and index["crc_valid"][0]
