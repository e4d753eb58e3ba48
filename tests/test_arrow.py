"""The columnar decoder (_arrow) against kafka-python on a generated log, plus its options,
offset bookkeeping and error reporting."""

import os
import struct
import sys

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kafka_oracle import kafka_python_rows  # noqa: E402

from kafkacodec.arrow import SCHEMA, ArrowDecoder, encode_v2, scan_entries  # noqa: E402
from kafkacodec.errors import CorruptRecordError, InvalidCrcError, RecordTooLargeError  # noqa: E402
from kafkacodec.logdir import discover, plan  # noqa: E402
from kafkacodec.cli import generate  # noqa: E402


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("log")
    return root, generate(root, batches_per_segment=6)


def segments(root):
    return [(s, open(s.path, "rb").read()) for s in discover(root)]


@pytest.mark.parametrize("keep_control", [False, True])
def test_every_row_matches_kafka_python(log_dir, keep_control):
    root, summary = log_dir
    total = 0
    for seg, data in segments(root):
        ours = ArrowDecoder(seg.topic, seg.partition, keep_control=keep_control).decode(data)[0]
        ours.validate(full=True)
        assert ours.schema == SCHEMA
        theirs = kafka_python_rows(data, seg.topic, seg.partition, keep_control=keep_control)
        assert ours.to_pylist() == theirs
        total += ours.num_rows
    assert total == summary["records"] + (summary["control_records"] if keep_control else 0)


def test_log_covers_every_magic_and_codec(log_dir):
    root, _ = log_dir
    seen = set()
    for _, data in segments(root):
        scan = scan_entries(data)
        seen |= {(int(m), int(a) & 7) for m, a in zip(scan["magic"], scan["attributes"])}
    assert {(m, c) for m in (0, 1) for c in range(4)} | {(2, c) for c in range(5)} <= seen


def test_scan_matches_kafka_python_batches(log_dir):
    from kafka.record.memory_records import MemoryRecords

    root, _ = log_dir
    for _, data in segments(root):
        scan = scan_entries(data)
        mr = MemoryRecords(data)
        i = 0
        while mr.has_next():
            batch = mr.next_batch()
            if batch.magic == 2:
                assert scan["base_offset"][i] == batch.base_offset
                assert scan["last_offset"][i] == batch.base_offset + batch.last_offset_delta
                assert scan["count"][i] == batch._header_data[-1]
                assert scan["max_timestamp"][i] == batch.max_timestamp
                assert scan["producer_id"][i] == batch.producer_id
            i += 1
        assert i == len(scan["position"]) and scan["stop"] == len(data)
        assert np.all(scan["position"][1:] == scan["position"][:-1] + scan["size"][:-1])


def test_chunks_add_up_to_the_whole(log_dir):
    root, _ = log_dir
    seg, data = segments(root)[0]
    whole = ArrowDecoder(seg.topic, seg.partition).decode(data)[0]
    dec = ArrowDecoder(seg.topic, seg.partition, max_rows=7)
    pos, parts = 0, []
    while pos < len(data):
        rb, pos = dec.decode(data, pos)
        assert rb.num_rows <= 7 + 40          # stops at the batch boundary after 7 rows
        parts.append(rb)
    assert len(parts) > 3
    assert pa.Table.from_batches(parts).to_pylist() == whole.to_pylist()


def test_offset_range_and_headers_option(log_dir):
    root, _ = log_dir
    seg, data = [s for s in segments(root) if s[0].topic == "orders"][-1]
    lo, hi = seg.base_offset + 5, seg.base_offset + 40
    rb = ArrowDecoder(start_offset=lo, end_offset=hi, include_headers=False).decode(data)[0]
    offsets = rb.column("offset").to_pylist()
    everything = [o for o in ArrowDecoder().decode(data)[0].column("offset").to_pylist() if lo <= o < hi]
    assert offsets == everything and offsets[0] == lo and len(offsets) > 10
    assert "headers" not in rb.schema.names


def test_aborted_transactions_are_dropped(log_dir):
    root, summary = log_dir
    splits, corrupt = plan(root, {"topics": "orders", "kafka.isolation.level": "read_committed"})
    assert not corrupt
    aborted = splits[0].aborted
    assert aborted and all(first <= last for _, first, last in aborted)
    kept = dropped = 0
    for s in splits:
        data = open(s.path, "rb").read()
        with_aborted = ArrowDecoder().decode(data)[0]
        without = ArrowDecoder(aborted=s.aborted).decode(data)[0]
        kept += without.num_rows
        dropped += with_aborted.num_rows - without.num_rows
        # only transactional rows disappear
        lost = set(with_aborted.column("offset").to_pylist()) - set(without.column("offset").to_pylist())
        txn = dict(zip(with_aborted.column("offset").to_pylist(), with_aborted.column("isTransactional").to_pylist()))
        assert all(txn[o] for o in lost)
    assert dropped > 0
    assert kept == summary["per_topic"]["orders"] - dropped


def test_crc_error_names_file_and_position(log_dir):
    root, _ = log_dir
    seg, data = segments(root)[0]
    scan = scan_entries(data)
    pos = int(scan["position"][2])
    bad = bytearray(data)
    bad[pos + 70] ^= 0xFF                      # inside the records of the third batch
    with pytest.raises(InvalidCrcError) as info:
        ArrowDecoder(source=seg.path).decode(bad)
    assert info.value.position == pos and info.value.offset == scan["base_offset"][2]
    assert seg.path in str(info.value) and info.value.stored != info.value.computed
    dec = ArrowDecoder(source=seg.path)
    with pytest.raises(InvalidCrcError):
        dec.decode(bad)
    assert dec.failed_entry == pos
    # without CRC checks the flipped byte may still parse (it is in a value) or fail structurally
    try:
        ArrowDecoder(validate_crc=False).decode(bad)
    except CorruptRecordError as exc:
        assert not isinstance(exc, InvalidCrcError)


def test_bad_entry_size_and_partial_tail(log_dir):
    root, _ = log_dir
    seg, data = segments(root)[0]
    scan = scan_entries(data)
    pos = int(scan["position"][1])
    bad = bytearray(data)
    bad[pos + 8:pos + 12] = struct.pack(">i", 3)
    with pytest.raises(CorruptRecordError, match="entry size") as info:
        ArrowDecoder(source="x.log").decode(bad)
    assert info.value.position == pos + 8          # the size field of that entry
    result = scan_entries(bad, strict=False, source="x.log")
    assert result["stop"] == pos and "x.log" in str(result["error"]) and len(result["position"]) == 1
    with pytest.raises(CorruptRecordError):
        scan_entries(bad)
    # a partial trailing batch is ignored as Kafka's file reader does
    cut = data[:int(scan["position"][3]) + 30]
    dec = ArrowDecoder()
    rb, stop = dec.decode(cut)
    assert stop == scan["position"][3] and dec.trailing_bytes == 30
    assert rb.num_rows == int(scan["last_offset"][2] - scan["base_offset"][0] + 1)


@pytest.mark.parametrize("codec", range(5))
def test_encode_v2_read_by_kafka_python(codec):
    n = 500
    key = pa.array([None if i % 5 == 0 else b"k%d" % i for i in range(n)], pa.binary())
    value = pa.array([b"v" * (i % 120) if i % 9 else None for i in range(n)], pa.binary())
    headers = pa.array([[{"key": "h", "value": b"%d" % i}, {"key": "n", "value": None}] if i % 4 == 0 else None
                        for i in range(n)], type=SCHEMA.field("headers").type)
    ts = np.arange(n, dtype=np.int64) * 3 + 1_700_000_000_000
    data, batches = encode_v2(key.slice(1), value.slice(1), ts[1:], headers.slice(1), codec=codec,
                              batch_bytes=4096, base_offset=100)
    assert batches > 1
    rows = kafka_python_rows(data, "t", 0)
    assert [r["offset"] for r in rows] == list(range(100, 100 + n - 1))
    assert [r["key"] for r in rows] == key.slice(1).to_pylist()
    assert [r["value"] for r in rows] == value.slice(1).to_pylist()
    assert [r["headers"] for r in rows] == headers.slice(1).to_pylist()
    assert ArrowDecoder("t", 0).decode(data)[0].to_pylist() == rows


@pytest.mark.parametrize("codec", [0, 3])
def test_encode_v2_keeps_given_offsets(codec):
    from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

    rng = np.random.default_rng(7)
    n = 400
    # gaps of every size, one past a v2 offset delta's int32 range
    offsets = np.cumsum(rng.choice([1, 1, 2, 17, 1000], size=n)).astype(np.int64)
    offsets[200:] += 2**31
    key = pa.array([b"k%d" % i for i in range(n)], pa.binary())
    value = pa.array([b"v" * (i % 50) for i in range(n)], pa.binary())
    ts = np.full(n, -1, dtype=np.int64)                       # -1: no timestamp, allowed
    ts[::3] = np.arange(0, n, 3) + 1_700_000_000_000
    data, batches = encode_v2(key, value, ts, codec=codec, batch_bytes=2048, offsets=offsets)
    rows = kafka_python_rows(data, "t", 0)
    assert [r["offset"] for r in rows] == offsets.tolist()
    assert [r["value"] for r in rows] == value.to_pylist()
    assert ArrowDecoder("t", 0).decode(data)[0].to_pylist() == rows
    mr, bounds = KpMemoryRecords(data), []
    while mr.has_next():
        batch = mr.next_batch()
        records = list(batch)
        bounds.append((batch.base_offset, batch.base_offset + batch.last_offset_delta))
        assert (records[0].offset, records[-1].offset) == bounds[-1]    # the gaps stay inside
    assert len(bounds) == batches > 2 and bounds[0][0] == offsets[0]
    assert not any(a <= offsets[199] and offsets[200] <= b for a, b in bounds)   # the 2^31 gap splits


@pytest.mark.parametrize("kwargs,error", [
    (dict(offsets=np.array([5, 5])), "offsets 1: 5 does not follow 5"),
    (dict(offsets=np.array([7, 6])), "offsets 1: 6 does not follow 7"),
    (dict(offsets=np.array([-1, 6])), "offsets 0: -1 is negative"),
    (dict(offsets=np.array([1])), "offsets must be a one-dimensional array of the 2"),
    (dict(offsets=np.array([1, 2]), base_offset=3), "not both"),
    (dict(timestamps=[1, -2]), "timestamp_ms 1: -2 is negative"),
    (dict(timestamps=[-2**63, 5]), "timestamp_ms 0"),
])
def test_encode_v2_refuses_what_kafkas_builder_refuses(kwargs, error):
    ts = np.array(kwargs.pop("timestamps", [1, 2]), dtype=np.int64)
    with pytest.raises(ValueError, match=error):
        encode_v2(pa.array([b"a", b"b"]), pa.array([b"a", b"b"]), ts, **kwargs)


def test_read_split_modes_on_broken_framing(log_dir, tmp_path):
    from kafkacodec.logdir import Split, read_split

    root, _ = log_dir
    seg, data = max(segments(root), key=lambda s: len(scan_entries(s[1])["position"]))
    scan = scan_entries(data)
    pos = int(scan["position"][3])
    bad = bytearray(data)
    bad[pos + 8:pos + 12] = struct.pack(">i", 5)          # entry size below 14: framing lost
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bad)
    split = Split(str(path), "t", 0, 0, len(bad))
    good = ArrowDecoder(keep_control=True).decode(data, 0, pos)[0].num_rows

    with pytest.raises(CorruptRecordError) as info:
        list(read_split(split, keep_control=True))
    assert str(path) in str(info.value) and "mode=DROPMALFORMED" in str(info.value)

    seen = []
    rows = sum(rb.num_rows for rb in read_split(split, keep_control=True, mode="DROPMALFORMED",
                                                on_error=seen.append))
    assert rows == good and len(seen) == 1 and seen[0].position == pos + 8

    batches = list(read_split(split, keep_control=True, mode="PERMISSIVE", on_error=lambda e: None))
    table = pa.Table.from_batches(batches)
    marked = [m for m in table.column("_corrupt_record").to_pylist() if m is not None]
    assert len(marked) == 1 and "entry size" in marked[0]
    assert table.num_rows == good + 1


# --- property: columns == per-record decode, for any records, offset range and row bound -----

import datetime  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

from kafkacodec import MemoryRecords, MemoryRecordsBuilder  # noqa: E402

_maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
_record = st.tuples(st.integers(-1, 10**13), _maybe_bytes, _maybe_bytes,
                    st.lists(st.tuples(st.text(max_size=6), _maybe_bytes), max_size=3))


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from(["none", "lz4", "zstd"]),
                                  st.lists(_record, min_size=1, max_size=30)),
                        min_size=1, max_size=5),
       start=st.integers(0, 60), span=st.integers(0, 160), max_rows=st.integers(1, 200),
       include_headers=st.booleans())
def test_columns_equal_per_record_decode(batches, start, span, max_rows, include_headers):
    log, base = b"", 0
    for codec, records in batches:
        builder = MemoryRecordsBuilder(compression=codec, base_offset=base)
        for timestamp, key, value, headers in records:
            builder.append(timestamp, key, value, headers)
        log += builder.build()
        base += len(records) + 3                        # gaps between batches, as compaction leaves
    end = start + span
    expected = [r for r in MemoryRecords(log).records() if start <= r.offset < end]
    decoder = ArrowDecoder("t", 3, start_offset=start, end_offset=end, max_rows=max_rows,
                           include_headers=include_headers)
    rows, pos = [], 0
    while pos < len(log):
        batch, pos = decoder.decode(log, pos)
        batch.validate(full=True)
        rows += batch.to_pylist()
    assert [(r["offset"], r["key"], r["value"], r["partition"]) for r in rows] == [
        (r.offset, r.key, r.value, 3) for r in expected]
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    assert [(r["timestamp"] - epoch) // datetime.timedelta(milliseconds=1) for r in rows] == [
        r.timestamp for r in expected]
    assert {(r["magic"], r["producerId"], r["timestampType"], r["isControl"]) for r in rows} <= {(2, -1, 0, False)}
    if include_headers:
        assert [[(h["key"], h["value"]) for h in r["headers"] or ()] for r in rows] == [
            list(r.headers) for r in expected]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")
@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="ASan maps terabytes of shadow memory: no address-space limit fits "
                           "(there libFuzzer's malloc limit catches this, see fuzz/)")
def test_hostile_record_count_reserves_nothing_it_cannot_fill(tmp_path):
    """A v2 batch claiming 2^31-1 records in a few bytes: columns are reserved for what the
    records section can hold (7 bytes a record at least), not for the claim (16 GiB a column:
    MemoryError under a 4 GiB address-space limit; a fuzz finding, see fuzz/regressions)."""
    script = tmp_path / "hostile.py"
    script.write_text(
        "import resource, struct\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "from kafkacodec import MemoryRecordsBuilder\n"
        "from kafkacodec.arrow import ArrowDecoder\n"
        "from kafkacodec.crc import crc32c\n"
        "from kafkacodec.errors import CorruptRecordError\n"
        "b = MemoryRecordsBuilder(); b.append(1, b'k', b'v'); data = bytearray(b.build())\n"
        "struct.pack_into('>i', data, 57, 0x7FFFFFFF)\n"
        "struct.pack_into('>I', data, 17, crc32c(bytes(data[21:])))\n"
        "try:\n"
        "    ArrowDecoder('t', 0).decode(bytes(data))\n"
        "except CorruptRecordError as error:\n"
        "    print('corrupt:', error)\n")
    import subprocess
    from isolated import child_env
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=child_env(), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    # the walker's message, MemoryRecords' too (Kafka's "premature end" of the record iterator)
    assert "corrupt: " in run.stdout and "premature end of records" in run.stdout


@pytest.mark.parametrize("columns", [["offset", "timestamp"], ["timestamp", "offset", "partition"],
                                     ["value"], ["headers", "key"], list(SCHEMA.names)])
def test_pruned_columns_match_the_full_decode(log_dir, columns):
    root, _ = log_dir
    for seg, data in segments(root):
        full = ArrowDecoder(seg.topic, seg.partition, keep_control=True).decode(data)[0]
        dec = ArrowDecoder(seg.topic, seg.partition, keep_control=True, columns=columns)
        pruned = dec.decode(data)[0]
        pruned.validate(full=True)
        assert dec.schema.names == pruned.schema.names == columns      # in the order given
        assert pruned.equals(full.select(columns))


def test_unselected_bytes_are_neither_copied_nor_counted():
    big = b"v" * 100_000
    log = encode_v2(pa.array([big]), pa.array([big]), np.array([5], dtype=np.int64),
                    pa.array([[{"key": "h", "value": big}]], type=SCHEMA.field("headers").type))[0]
    full = ArrowDecoder("t", 0)
    full._set_output_limit(1000)            # a record's key, value and headers pass the limit
    with pytest.raises(RecordTooLargeError):
        full.decode(log)
    for columns in (["offset", "timestamp", "topic"], ["key", "offset"], ["value"], ["headers"]):
        dec = ArrowDecoder("t", 0, columns=columns)
        dec._set_output_limit(150_000)      # one of the three fits, never two
        assert dec.decode(log)[0].num_rows == 1
        dec._set_output_limit(1000)
        if columns[0] == "offset":
            assert dec.decode(log)[0].column("offset").to_pylist() == [0]
        else:
            with pytest.raises(RecordTooLargeError):
                dec.decode(log)


@pytest.mark.parametrize("columns,error", [
    (["offset", "nope"], "unknown column 'nope'"),
    (["offset", "offset"], "selected twice"),
    ([], "no column"),
])
def test_bad_column_selections_are_refused(columns, error):
    with pytest.raises(ValueError, match=error):
        ArrowDecoder(columns=columns)
    with pytest.raises(ValueError, match="include_headers is False"):
        ArrowDecoder(include_headers=False, columns=["offset", "headers"])
    with pytest.raises(TypeError):
        ArrowDecoder(columns="offset")


def test_read_split_decodes_only_the_columns_it_needs(log_dir):
    from kafkacodec.logdir._problems import Reporter
    from kafkacodec.logdir._pushdown import Pushdown, Predicate
    from kafkacodec.logdir._read import _SplitReader

    root, _ = log_dir
    split = plan(root)[0][0]
    reader = _SplitReader(split, Reporter(), validate_crc=True, include_headers=True, keep_control=False,
                          max_rows=100, corrupt_column="_corrupt_record", columns=["timestamp"],
                          pushdown=Pushdown([Predicate("partition", ">=", 0)]))
    assert reader.decoder().schema.names == ["partition", "offset", "timestamp"]


def test_long_values_at_every_output_alignment():
    # values of 256 bytes and more are copied with streaming stores (csrc/kc_copy.h) from their
    # first whole 64-byte line of the output: every length around the threshold and the line
    # size, after every amount of data already in the column (its alignment), with and
    # without the other columns
    import random

    rng = random.Random(20)
    lengths = [n for n in range(240, 420)] + [rng.randrange(0, 3000) for _ in range(300)]
    rng.shuffle(lengths)
    values = [rng.randbytes(n) if n % 97 else None for n in lengths]
    builder = MemoryRecordsBuilder()
    log = b""
    for i, value in enumerate(values):
        builder.append(1_700_000_000_000 + i, b"k%d" % i if i % 3 else None, value)
        if i % 37 == 36:
            log += builder.build()
    log += builder.build()
    expected = [(r.key, r.value) for r in MemoryRecords(log).records()]
    for columns in (None, ["value"], ["key", "value"]):
        decoder = ArrowDecoder("t", 0, columns=columns, max_rows=150)
        got, pos = [], 0
        while pos < len(log):
            batch, pos = decoder.decode(log, pos)
            batch.validate(full=True)
            keys = batch.column("key").to_pylist() if "key" in batch.schema.names else None
            got += zip(keys or [None] * batch.num_rows, batch.column("value").to_pylist())
        assert [v for _, v in got] == values
        if columns != ["value"]:
            assert got == expected


def test_topic_and_partition_columns_of_large_outputs_in_reused_memory():
    # the topic and partition columns of an output of many rows are written into pooled
    # memory that a previous output used: every row must hold this decoder's values
    builder = MemoryRecordsBuilder()
    builder.append_many(1_700_000_000_000, None, [b"v"] * 70_000)
    log = builder.build()
    for topic, partition in (("alpha", 5), ("b", 7), ("", 0), ("\u00e9t\u00e9", 2**31 - 1)):
        for _ in range(2):
            batch, pos = ArrowDecoder(topic, partition).decode(log)
            assert pos == len(log) and batch.num_rows == 70_000
            batch.validate(full=True)
            assert batch.column("topic").to_pylist() == [topic] * 70_000
            assert batch.column("partition").to_pylist() == [partition] * 70_000
            del batch
