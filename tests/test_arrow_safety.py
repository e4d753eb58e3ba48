"""ArrowDecoder and encode_v2 on extreme and hostile input (issue 14, items 3, 4, 18): every
output is a valid Arrow batch within its byte limits and no row is lost across decode() calls,
a decoder refuses a second thread, and timestamps, header keys and offsets come out as
MemoryRecords reads them."""

from __future__ import annotations

import os
import struct
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from isolated import run_python
from kafkacodec import FileRecords, MemoryRecords, MemoryRecordsBuilder
from kafkacodec.arrow import SCHEMA, ArrowDecoder, encode_v2, scan_entries
from kafkacodec.crc import crc32c
from kafkacodec.errors import CorruptRecordError, RecordTooLargeError

INT64_MAX = 2**63 - 1


def decode_all(dec, data, start=0, end=None):
    """Every output of `dec` over data[start:end], looping as a caller does: a call made
    progress when it moved the position or returned rows (it may stop inside an entry, and
    the next call goes on from there)."""
    end = len(data) if end is None else end
    pos, outputs = start, []
    while pos < end:
        rb, new = dec.decode(data, pos, end)
        rb.validate(full=True)
        outputs.append(rb)
        if dec.trailing_bytes or (new == pos and rb.num_rows == 0):
            break
        pos = new
    return outputs


def rows_of(outputs):
    return [r for rb in outputs for r in rb.to_pylist()]


def variable_bytes(rb):
    """Bytes in the variable-width columns (keys, values, topics, header keys and values),
    counted from the Python values."""
    total = 0
    for r in rb.to_pylist():
        total += len(r["key"] or b"") + len(r["value"] or b"") + len(r["topic"].encode())
        for h in r.get("headers") or ():
            total += len(h["key"].encode()) + len(h["value"] or b"")
    return total


def as_records(rows):
    return [(r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or ()])
            for r in rows]


def expected_records(log):
    return [(r.offset, r.key, r.value, list(r.headers)) for r in MemoryRecords(log).records()]


def header_heavy_log(batches, records, headers, header_size, codec="zstd", magic=2):
    """Batches whose records carry `headers` identical headers of `header_size` bytes each (zstd
    makes each batch a few KiB; the Arrow output is batches * records * headers * header_size).
    One batch is built and repeated at other base offsets (the CRC does not cover them)."""
    builder = MemoryRecordsBuilder(magic=magic, compression=codec)
    for i in range(records):
        builder.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i,
                       [("h", bytes([65 + i % 26]) * header_size)] * headers)
    one = builder.build()
    return b"".join(struct.pack(">q", b * records) + one[8:] for b in range(batches))


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


# --- item 3: every variable-width byte counts; int32 offsets never pass their limit ----------

def test_max_bytes_counts_header_bytes():
    log = header_heavy_log(batches=6, records=4, headers=16, header_size=16 << 10)  # 1 MiB a batch
    assert len(log) < 16 << 10
    outputs = decode_all(ArrowDecoder("t", 0, max_bytes=256 << 10), log)
    # full once it holds max_bytes: every output ends at the first entry boundary past it
    assert [rb.num_rows for rb in outputs] == [4] * 6
    assert as_records(rows_of(outputs)) == expected_records(log)


def test_max_bytes_counts_topic_bytes():
    builder = MemoryRecordsBuilder()
    for i in range(30):
        builder.append(1, None, b"v")
    one = builder.build()
    log = b"".join(struct.pack(">q", 30 * b) + one[8:] for b in range(10))
    topic = "t" * 1000                       # 30 kB of topic strings a batch
    outputs = decode_all(ArrowDecoder(topic, 0, max_bytes=50_000), log)
    assert [rb.num_rows for rb in outputs] == [60] * 5
    assert [r["offset"] for r in rows_of(outputs)] == list(range(300))


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_an_entry_past_the_output_limit_goes_on_in_the_next_call(codec):
    """The limit is 2^31-1 bytes (int32 offsets) and needs > 2 GiB of output to reach; the test
    hook lowers it to 768 KiB.  A batch holding 2 MiB of headers ends outputs inside it."""
    limit = 768 << 10
    log = header_heavy_log(batches=3, records=8, headers=16, header_size=16 << 10, codec=codec)
    dec = ArrowDecoder("t", 0)
    dec._set_output_limit(limit)
    outputs = decode_all(dec, log)
    assert len(outputs) >= 12
    assert all(0 < variable_bytes(rb) <= limit for rb in outputs)
    assert as_records(rows_of(outputs)) == expected_records(log)


def test_a_legacy_wrapper_past_the_output_limit_goes_on_in_the_next_call():
    builder = MemoryRecordsBuilder(magic=1, compression="gzip")
    for i in range(8):
        builder.append(1_700_000_000_000, b"k", bytes([65 + i]) * (256 << 10))
    log = builder.build()
    dec = ArrowDecoder("t", 0)
    dec._set_output_limit(768 << 10)
    outputs = decode_all(dec, log)
    assert [rb.num_rows for rb in outputs] == [2, 2, 2, 2]
    assert as_records(rows_of(outputs)) == expected_records(log)


def test_a_record_larger_than_the_output_limit_raises():
    small = MemoryRecordsBuilder()
    small.append(1, b"a", b"b")
    big = MemoryRecordsBuilder(base_offset=1)
    big.append(1, b"k", b"x" * (512 << 10))
    first = small.build()
    log = first + big.build()
    dec = ArrowDecoder("t", 0)
    dec._set_output_limit(256 << 10)
    rb, pos = dec.decode(log)
    assert rb.num_rows == 1 and pos == len(first)            # ends before the big record
    with pytest.raises(RecordTooLargeError) as info:
        dec.decode(log, pos)
    assert info.value.position == len(first) and info.value.offset == 1


def test_topic_bytes_count_in_the_output_limit():
    builder = MemoryRecordsBuilder(compression="lz4")
    for i in range(300):
        builder.append(1, None, None)
    log = builder.build()
    dec = ArrowDecoder("t" * 1000, 0, include_headers=False)
    dec._set_output_limit(100_000)
    outputs = decode_all(dec, log)
    assert [rb.num_rows for rb in outputs] == [100, 100, 100]
    assert [r["offset"] for r in rows_of(outputs)] == list(range(300))


def test_a_call_elsewhere_does_not_resume_the_stopped_entry():
    log = header_heavy_log(batches=2, records=8, headers=16, header_size=16 << 10)
    second = scan_entries(log)["position"][1]
    dec = ArrowDecoder("t", 0)
    dec._set_output_limit(768 << 10)
    rb, pos = dec.decode(log, second)
    assert pos == second and rb.column("offset").to_pylist() == [8, 9]
    rb, _ = dec.decode(log, 0)                     # not where it stopped: a fresh start
    assert rb.column("offset").to_pylist() == [0, 1]
    rb, pos = dec.decode(log, 0)                   # where it stopped: the entry goes on
    assert rb.column("offset").to_pylist() == [2, 3]


# --- item 4: one decoder, two threads ----------------------------------------------------------

def test_a_decoder_shared_by_threads_refuses_the_second_one():
    run = run_python("""
        import threading
        from kafkacodec import MemoryRecordsBuilder
        from kafkacodec.arrow import ArrowDecoder
        from kafkacodec.errors import KafkaCodecError

        log = b""
        for b in range(100):
            builder = MemoryRecordsBuilder(compression="zstd", base_offset=b * 100)
            for i in range(100):
                builder.append(1, b"k%d" % i, b"v%d" % b * 50, [("h", b"x")])
            log += builder.build()
        expected = ArrowDecoder("t", 0).decode(log)[0]
        dec = ArrowDecoder("t", 0)
        lock = threading.Lock()
        seen = {"ok": 0, "busy": 0, "wrong": 0}

        def work():
            for _ in range(400):
                try:
                    rb, pos = dec.decode(log)
                    rb.validate(full=True)
                    outcome = "ok" if pos == len(log) and rb.equals(expected) else "wrong"
                except KafkaCodecError as exc:
                    assert str(exc) == "ArrowDecoder is in use by another thread: use one per thread", exc
                    outcome = "busy"
                with lock:
                    seen[outcome] += 1
                    if seen["busy"] >= 20 and seen["ok"] >= 20:
                        return

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert dec.decode(log)[0].equals(expected)     # still sound after the refusals
        print(seen)
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = eval(run.stdout.strip().splitlines()[-1])
    assert seen["wrong"] == 0 and seen["ok"] > 0 and seen["busy"] > 0, seen


# --- item 18: timestamps, header keys, the end of the offset range, encode_v2's layouts --------

def micros(ms):
    """Spark's microsecond timestamp of `ms`, None when it does not fit in int64."""
    return ms * 1000 if -2**63 <= ms * 1000 < 2**63 else None


def timestamps_us(rb):
    return rb.column("timestamp").cast(pa.int64()).to_pylist()


def test_timestamps_beyond_microseconds_are_null():
    edge = INT64_MAX // 1000
    stamps = [1_700_000_000_000, edge, edge + 1, 2**62, INT64_MAX, -1, 0]
    builder = MemoryRecordsBuilder()
    for ts in stamps:
        builder.append(ts, None, b"v")
    v2 = builder.build()
    # a hostile BaseTimestamp far below zero (records = base + delta), CRC recomputed
    low = bytearray(v2)
    struct.pack_into(">q", low, 27, -2**62)
    low = with_crc(low)
    legacy = MemoryRecordsBuilder(magic=1)
    for ts in stamps:
        legacy.append(ts, None, b"v")
    append_time = MemoryRecordsBuilder(timestamp_type=1, log_append_time=2**62)
    append_time.append(1, None, b"v")
    for log in (v2, low, legacy.build(), append_time.build()):
        rb = ArrowDecoder().decode(log)[0]
        rb.validate(full=True)
        assert timestamps_us(rb) == [micros(r.timestamp) for r in MemoryRecords(log).records()]
    assert timestamps_us(ArrowDecoder().decode(v2)[0]) == [
        1_700_000_000_000_000, edge * 1000, None, None, None, -1000, 0]


def with_header_key(key: bytes) -> bytes:
    """An uncompressed batch whose one header key is `key` (any bytes), CRC recomputed."""
    placeholder = "K" * len(key)
    builder = MemoryRecordsBuilder()
    builder.append(1, b"k", b"v", [("a", b"1"), (placeholder, b"2")])
    batch = bytearray(builder.build())
    at = bytes(batch).rindex(placeholder.encode())
    batch[at:at + len(key)] = key
    return with_crc(batch)


@pytest.mark.parametrize("key", [b"\xff", b"ab\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                 b"\xe2\x82", b"\xf0\x9f\x98", b"ok \xe2\x82\xac \xf0\x9f\x98\x80"])
def test_header_keys_decode_as_memory_records_does(key):
    log = with_header_key(key)
    rb = ArrowDecoder().decode(log)[0]
    rb.validate(full=True)                           # a string column holds valid UTF-8 only
    keys = [h["key"] for h in rb.column("headers")[0].as_py()]
    assert keys == ["a", key.decode("utf-8", "replace")]
    assert keys == [k for k, _ in next(MemoryRecords(log).records()).headers]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=12))
def test_any_header_key_bytes_decode_as_python_does(key):
    rb = ArrowDecoder().decode(with_header_key(key))[0]
    rb.validate(full=True)
    assert rb.column("headers")[0].as_py()[1]["key"] == key.decode("utf-8", "replace")


def test_the_last_offset_is_read_by_default():
    builder = MemoryRecordsBuilder(base_offset=INT64_MAX - 2)
    for i in range(3):
        builder.append(1, None, b"%d" % i)
    log = builder.build()
    assert ArrowDecoder().decode(log)[0].column("offset").to_pylist() == [INT64_MAX - 2, INT64_MAX - 1, INT64_MAX]
    assert ArrowDecoder(end_offset=INT64_MAX).decode(log)[0].num_rows == 2          # exclusive
    assert ArrowDecoder(start_offset=INT64_MAX).decode(log)[0].column("value").to_pylist() == [b"2"]
    assert ArrowDecoder(end_offset=-2**63).decode(log)[0].num_rows == 0


BINARY_TYPES = [pa.binary(), pa.string(), pa.large_binary(), pa.large_string()]


def column(values, arrow_type, shape, junk):
    """`values` as a plain, sliced (non-zero offset, `junk` around) or chunked Arrow column."""
    if shape == "sliced":
        return pa.array([junk] * 3 + values + [junk], arrow_type).slice(3, len(values))
    if shape == "chunked":
        return pa.chunked_array([pa.array(values[:7], arrow_type), pa.array(values[7:], arrow_type)],
                                arrow_type)
    return pa.array(values, arrow_type)


@pytest.mark.parametrize("shape", ["plain", "sliced", "chunked"])
@pytest.mark.parametrize("arrow_type", BINARY_TYPES, ids=str)
def test_encode_v2_reads_every_binary_layout(arrow_type, shape):
    text = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    n = 40
    raw_keys = [None if i % 5 == 0 else b"key-%d" % i for i in range(n)]
    raw_values = [None if i % 7 == 3 else b"value-%d" % i * (i % 4) for i in range(n)]
    cast = (lambda b: None if b is None else b.decode()) if text else (lambda b: b)
    key = column([cast(k) for k in raw_keys], arrow_type, shape, cast(b"junk"))
    value = column([cast(v) for v in raw_values], arrow_type, shape, cast(b"junk"))
    ts = np.arange(n, dtype=np.int64) + 1_700_000_000_000
    data, batches = encode_v2(key, value, ts, batch_bytes=200)
    assert batches > 1
    records = list(MemoryRecords(data).records())
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (i, 1_700_000_000_000 + i, raw_keys[i], raw_values[i]) for i in range(n)]


@pytest.mark.parametrize("shape", ["plain", "sliced", "chunked"])
@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
@pytest.mark.parametrize("key_type,value_type", [(pa.string(), pa.binary()),
                                                 (pa.large_string(), pa.large_binary())], ids=str)
def test_encode_v2_reads_every_header_layout(list_type, key_type, value_type, shape):
    n = 30
    entry = pa.struct([pa.field("key", key_type), pa.field("value", value_type)])
    rows = [None if i % 4 == 1 else [{"key": "h%d" % j, "value": None if j == 1 else b"%d.%d" % (i, j)}
                                     for j in range(i % 3)] for i in range(n)]
    headers = column(rows, list_type(entry), shape, [{"key": "junk", "value": b"junk"}])
    value = pa.array([b"v%d" % i for i in range(n)], pa.binary())
    data, _ = encode_v2(value, value, np.zeros(n, dtype=np.int64), headers, batch_bytes=300)
    got = [list(r.headers) for r in MemoryRecords(data).records()]
    assert got == [[(h["key"], h["value"]) for h in row or ()] for row in rows]


def test_encode_v2_refuses_offsets_past_the_data_buffer():
    run = run_python("""
        import numpy as np, pyarrow as pa
        from kafkacodec.arrow import SCHEMA, encode_v2
        offsets = pa.py_buffer(np.array([0, 1 << 30, 4], dtype=np.int32))
        bad = pa.Array.from_buffers(pa.binary(), 2, [None, offsets, pa.py_buffer(b"abcd")])
        good = pa.array([b"a", b"b"])
        for args in ((bad, good), (good, bad)):
            try:
                encode_v2(*args, np.zeros(2, dtype=np.int64))
            except ValueError as exc:
                print("refused:", exc)
        # list offsets past the header entries
        entries = pa.array([{"key": "k", "value": b"v"}], SCHEMA.field("headers").type.value_type)
        list_offsets = pa.py_buffer(np.array([0, 1 << 20, 1], dtype=np.int32))
        headers = pa.ListArray.from_buffers(SCHEMA.field("headers").type, 2, [None, list_offsets],
                                            children=[entries])
        try:
            encode_v2(good, good, np.zeros(2, dtype=np.int64), headers)
        except ValueError as exc:
            print("refused:", exc)
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("refused:") == 3 and "offsets" in run.stdout, run.stdout


# --- project convention: any C-contiguous buffer is read as its raw bytes --------------------

def test_any_contiguous_buffer_is_read_as_bytes():
    for pad in range(8):                        # int32/int64 views need whole items
        builder = MemoryRecordsBuilder()
        for i in range(10):
            builder.append(1, b"k", b"v" * i)
        builder.append(1, None, b"p" * pad)
        log = builder.build()
        if len(log) % 8 == 0:
            break
    expected = ArrowDecoder().decode(log)[0]
    for view in (memoryview(log).cast("i"), np.frombuffer(log, dtype=np.int64), pa.py_buffer(log),
                 memoryview(bytearray(log)).cast("q").cast("B").cast("h")):
        rb, pos = ArrowDecoder().decode(view)
        assert rb.equals(expected) and pos == len(log)
        assert scan_entries(view)["stop"] == len(log)
    strided = np.frombuffer(log * 2, dtype=np.uint8)[::2]
    with pytest.raises(Exception) as ours:
        ArrowDecoder().decode(strided)
    with pytest.raises(Exception) as theirs:
        MemoryRecords(strided)
    assert type(ours.value) is type(theirs.value)



def test_a_start_outside_the_buffer_is_refused():
    """decode() always checked `start`; scan_entries walked from it unchecked (a read before
    or past the buffer)."""
    run = run_python("""
        from kafkacodec import MemoryRecordsBuilder
        from kafkacodec.arrow import ArrowDecoder, scan_entries
        builder = MemoryRecordsBuilder()
        builder.append(1, b"k", b"v")
        log = builder.build()
        for start in (-(1 << 40), -1, len(log) + 1, 1 << 40):
            for call in (lambda: scan_entries(log, start), lambda: ArrowDecoder().decode(log, start)):
                try:
                    call()
                except ValueError as exc:
                    print("refused:", exc)
    """)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("refused: start") == 8, run.stdout


# --- issue 15: the walker's decompression policy (the thread's Decompressor) -------------------

def test_a_decoder_shares_the_threads_decompressor_without_disturbing_an_iterator():
    """ArrowDecoder decompresses into the decoding thread's Decompressor, as the record
    iterators do: a MemoryRecords iterator stopped inside a compressed batch (its records in
    that thread's chunk, pinned) reads on unchanged after decodes of other compressed data."""
    def log(codec, base, value):
        builder = MemoryRecordsBuilder(compression=codec, base_offset=base)
        for i in range(50):
            builder.append(1, b"k%d" % i, value * (i + 1), [("h", b"%d" % i)])
        return builder.build()

    first = log("gzip", 0, b"a")
    other = log("zstd", 0, b"b") + log("lz4", 50, b"c")
    records = MemoryRecords(first).records()
    head = [next(records) for _ in range(10)]
    decoded = rows_of(decode_all(ArrowDecoder("t", 0, max_rows=7), other))
    rest = list(records)
    assert [(r.offset, r.value) for r in head + rest] == [(i, b"a" * (i + 1)) for i in range(50)]
    assert [(r["offset"], r["value"]) for r in decoded] == (
        [(i, b"b" * (i + 1)) for i in range(50)] + [(50 + i, b"c" * (i + 1)) for i in range(50)])


@pytest.mark.parametrize("start_offset", [None, 10])
def test_a_null_compressed_wrapper_is_refused_also_before_start_offset(start_offset):
    """walk_open() checks a wrapper's header (codec, null value) before the decoder filters
    the entry by offset, as it does a v2 batch's: a null gzip wrapper at offset 3 raises also
    when start_offset skips it (before: it was skipped silently, an unknown codec raised)."""
    import zlib
    body = struct.pack(">bbqii", 1, 1, 5, -1, -1)        # magic 1, gzip, timestamp, null key, null value
    message = struct.pack(">I", zlib.crc32(body)) + body
    entry = struct.pack(">qi", 3, len(message)) + message
    with pytest.raises(CorruptRecordError, match="null value") as info:
        ArrowDecoder("t", 0, start_offset=start_offset).decode(entry)
    assert info.value.offset == 3 and info.value.position == 0
    with pytest.raises(CorruptRecordError):
        list(MemoryRecords(entry).records())


# --- a decoder whose aborted list failed to load ------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")
@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="ASan maps terabytes of shadow memory: no address-space limit fits")
def test_a_decoder_whose_aborted_list_failed_to_load_refuses_to_decode():
    # Re-initialising a decoder with an aborted list it cannot hold (address space capped so the
    # walker's copy of the list fails) raises MemoryError; decoding with it afterwards must not
    # read the half-built producer set (a NULL table: SIGSEGV before the fix) or pass aborted
    # data as committed: it refuses with MisuseError until a successful __init__.
    run = run_python("""
        import resource
        import numpy as np
        from kafkacodec import MemoryRecordsBuilder
        from kafkacodec.arrow import ArrowDecoder
        from kafkacodec.errors import MisuseError

        b = MemoryRecordsBuilder(base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0,
                                 is_transactional=True)
        b.append(1, None, b"aborted")
        log = b.build()
        dec = ArrowDecoder("t", 0)
        n = 4_000_000
        listed = np.zeros((n, 3), dtype=np.int64)
        listed[:, 0] = 7
        listed[:, 2] = 1
        def vm_bytes():
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmSize:"):
                        return int(line.split()[1]) * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + listed.nbytes // 2, hard))
        try:
            dec.__init__("t", 0, aborted=listed)
        except MemoryError:
            print("init: MemoryError")
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        for _ in range(2):
            try:
                dec.decode(log)
                print("decode: no error")
            except MisuseError as exc:
                print("decode:", exc)
        dec.__init__("t", 0, aborted=[(7, 0, 1)])
        print("after init:", dec.decode(log)[0].num_rows)
    """)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "init: MemoryError" and lines[3] == "after init: 0", run.stdout
    for refused in lines[1:3]:
        assert refused.startswith("decode: <buffer>: the aborted-transaction list failed to "
                                  "load: call __init__ again"), run.stdout


def test_aborted_transactions_given_as_a_numpy_array_filter_as_a_list_does():
    # (producer id, first offset, last offset) rows as logdir's .txnindex reader holds them; the
    # truth test of a numpy array raised ValueError before
    log = b""
    for base, pid in ((0, 7), (2, 8)):
        b = MemoryRecordsBuilder(base_offset=base, producer_id=pid, producer_epoch=0,
                                 base_sequence=0, is_transactional=True)
        b.append(1, None, b"a")
        b.append(1, None, b"b")
        log += b.build()
    listed = [(7, 0, 5)]
    as_list = ArrowDecoder("t", 0, aborted=listed).decode(log)[0]
    as_array = ArrowDecoder("t", 0, aborted=np.array(listed, dtype=np.int64)).decode(log)[0]
    assert as_list.column("offset").to_pylist() == [2, 3]
    assert as_array.equals(as_list)
    assert ArrowDecoder("t", 0, aborted=np.empty((0, 3), dtype=np.int64)).decode(log)[0].num_rows == 4


# --- views=True: zero-copy keys and values, and the lifetime of what they point into ------------

def views_log(codec="none", records=20):
    builder = MemoryRecordsBuilder(compression=codec)
    for i in range(records):
        builder.append(i, b"key-%d" % i if i % 3 else None, b"value-%d-" % i * (i % 4) or None)
    return builder.build()


def values_of(rb):
    return rb.column("value").cast(pa.binary()).to_pylist()


def test_views_export_their_input_while_any_array_of_them_lives():
    data = bytearray(views_log())
    expected = values_of(ArrowDecoder().decode(data)[0])
    assert any(v and len(v) > 12 for v in expected) and any(v and len(v) <= 12 for v in expected)
    rb, _ = ArrowDecoder(views=True).decode(data)
    value = rb.column("value")
    del rb
    with pytest.raises(BufferError):            # the views point into it: no resize
        data.extend(b"x")
    assert value.cast(pa.binary()).to_pylist() == expected
    assert value.buffers()[2].size == 0         # buffer 0 (copies): nothing copied, nothing kept
    del value
    data.extend(b"x")                           # the last array is gone: so is the export


def test_views_of_compressed_entries_hold_no_export():
    data = bytearray(views_log("lz4"))
    expected = values_of(ArrowDecoder().decode(data)[0])
    rb, _ = ArrowDecoder(views=True).decode(data)
    data[:] = bytes(len(data))                  # copied out: neither export nor shared bytes
    data.extend(b"x")
    assert values_of(rb) == expected
    assert rb.column("value").buffers()[2].size == sum(len(v) for v in expected if v and len(v) > 12)


def test_views_keep_their_input_alive():
    size = len(views_log())
    rb, _ = ArrowDecoder(views=True).decode(bytes(views_log()))   # the batch holds the only reference
    junk = [b"\xee" * size for _ in range(100)]                    # would take its memory if freed
    assert values_of(rb) == values_of(ArrowDecoder().decode(views_log())[0]) and junk


def test_views_refuse_file_mappings(tmp_path):
    # A batch of views reads its input for as long as it lives: over a mapping, a cut of the file
    # (Kafka truncates its active segment) would turn its values into zeros, or kill the process
    # through an unguarded mmap.  Every known form of a mapping is refused; the bytes are not.
    import mmap
    from kafkacodec._mapguard import map_file
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(views_log())
    expected = values_of(ArrowDecoder().decode(views_log())[0])
    mapped = map_file(str(path))
    segment = FileRecords.open(str(path))
    with open(path, "rb") as f:
        plain = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    for data in (mapped, segment, plain, memoryview(plain), memoryview(segment),
                 np.frombuffer(plain, dtype=np.uint8)):
        with pytest.raises(ValueError, match="file mapping"):
            ArrowDecoder(views=True).decode(data)
        assert values_of(ArrowDecoder().decode(data)[0]) == expected      # copies: read as ever
    rb, _ = ArrowDecoder(views=True).decode(path.read_bytes())
    assert values_of(rb) == expected
    del data
    for closing in (mapped, segment, plain):    # nothing of them is held
        closing.close()


# What the memory is decides, not the Python type that hands it over: each factory makes one
# object over the views log (`path`, or its bytes) and registers what closes it in `opened`.

def _mapping(path, opened, access=None, **kwargs):
    import mmap
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=access or mmap.ACCESS_READ, **kwargs)
    opened.append(m)
    return m


def _ctypes_over(buffer, opened):
    import ctypes
    array = (ctypes.c_char * len(buffer)).from_buffer(buffer)
    opened.append(array)
    return memoryview(array)


def _memfd(path, opened):
    import mmap
    fd = os.memfd_create("kafkacodec-views")
    try:
        os.write(fd, path.read_bytes())
        m = mmap.mmap(fd, 0)
    finally:
        os.close(fd)
    opened.append(m)
    return pa.foreign_buffer(_address(m), len(m), base=m)


def _address(buffer):
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def _anonymous_mmap(path, opened, flags):
    import mmap
    data = path.read_bytes()
    m = mmap.mmap(-1, len(data), flags=flags)
    m.write(data)
    opened.append(m)
    return m


FILE_BACKED = {
    "pyarrow memory_map": lambda path, opened: pa.memory_map(str(path)).read_buffer(),
    "numpy memmap": lambda path, opened: np.memmap(path, dtype=np.uint8, mode="r"),
    "py_buffer of an mmap": lambda path, opened: pa.py_buffer(_mapping(path, opened)),
    "foreign_buffer of an mmap": lambda path, opened: pa.foreign_buffer(
        _address(_mapping(path, opened, access=__import__("mmap").ACCESS_COPY)),
        path.stat().st_size, base=opened[-1]),
    "memoryview of a ctypes array over a private mapping": lambda path, opened: _ctypes_over(
        _mapping(path, opened, access=__import__("mmap").ACCESS_COPY), opened),
    "memfd mapping": _memfd,
    # MAP_SHARED|MAP_ANONYMOUS is a shmem file to the kernel: refused too (what mmap(-1) makes)
    "shared anonymous mmap": lambda path, opened: _anonymous_mmap(
        path, opened, __import__("mmap").MAP_SHARED),
}

ANONYMOUS = {
    "bytes": lambda path, opened: path.read_bytes(),
    "bytearray": lambda path, opened: bytearray(path.read_bytes()),
    "memoryview of bytes": lambda path, opened: memoryview(path.read_bytes())[:],
    "numpy array": lambda path, opened: np.fromfile(path, dtype=np.uint8),
    "numpy view of a bytearray": lambda path, opened: np.frombuffer(
        bytearray(path.read_bytes()), dtype=np.uint8),
    "pyarrow buffer read into pyarrow's pool": lambda path, opened: pa.OSFile(str(path)).read_buffer(),
    "py_buffer of bytes": lambda path, opened: pa.py_buffer(path.read_bytes()),
    "ctypes array": lambda path, opened: memoryview(
        (__import__("ctypes").c_char * path.stat().st_size).from_buffer_copy(path.read_bytes())),
    # a private anonymous mapping has no file behind it, whatever its Python type
    "private anonymous mmap": lambda path, opened: _anonymous_mmap(
        path, opened, __import__("mmap").MAP_PRIVATE),
}


@pytest.fixture
def views_file(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(views_log())
    return path


def _close_all(opened):
    while opened:                               # the last opened first: it may export the others
        thing = opened.pop()
        if hasattr(thing, "close"):
            thing.close()
        del thing


@pytest.fixture(params=["auto", "text"])
def memory_lookup(request):
    """Each lookup of the process's mappings: PROCMAP_QUERY where the kernel has it (else the
    text), and the text of /proc/self/maps alone (what kernels before 6.11 get); an internal's
    test hook."""
    from kafkacodec._mapguard import _set_memory_lookup
    _set_memory_lookup(request.param)
    yield request.param
    _set_memory_lookup("auto")


LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the mappings are read from /proc/self/maps (Linux)")


@LINUX_ONLY
@pytest.mark.parametrize("form", sorted(FILE_BACKED))
def test_views_refuse_file_backed_memory_whatever_its_type(form, views_file, memory_lookup):
    opened = []
    data = FILE_BACKED[form](views_file, opened)
    expected = values_of(ArrowDecoder().decode(views_log())[0])
    with pytest.raises(ValueError, match="file mapping"):
        ArrowDecoder(views=True).decode(data)
    assert values_of(ArrowDecoder().decode(data)[0]) == expected         # copies: read as ever
    del data
    _close_all(opened)                          # nothing of them is held


@LINUX_ONLY
@pytest.mark.parametrize("form", sorted(ANONYMOUS))
def test_views_accept_anonymous_memory_whatever_its_type(form, views_file, memory_lookup):
    opened = []
    data = ANONYMOUS[form](views_file, opened)
    expected = values_of(ArrowDecoder().decode(views_log())[0])
    rb, _ = ArrowDecoder(views=True).decode(data)
    assert rb.column("value").type == pa.binary_view()
    assert values_of(rb) == expected
    del rb, data
    _close_all(opened)


KNOWN_ANONYMOUS = {"bytes", "bytearray", "memoryview of bytes", "numpy array",
                   "numpy view of a bytearray"}


def test_views_refuse_what_cannot_be_told_apart(views_file):
    # Where the process's mappings cannot be read (macOS, Windows, no /proc), only the types
    # whose memory comes from Python's or numpy's allocator are taken; the rest is refused as
    # a possible file mapping, not trusted.
    from kafkacodec._mapguard import _set_memory_lookup
    _set_memory_lookup("none")
    try:
        for form, make in sorted(ANONYMOUS.items()):
            if form == "private anonymous mmap" and not hasattr(__import__("mmap"), "MAP_PRIVATE"):
                continue
            opened = []
            data = make(views_file, opened)
            if form in KNOWN_ANONYMOUS:
                assert ArrowDecoder(views=True).decode(data)[0].num_rows == 20, form
            else:
                with pytest.raises(ValueError, match="cannot tell whether this .* is a file mapping"):
                    ArrowDecoder(views=True).decode(data)
            del data
            _close_all(opened)
    finally:
        _set_memory_lookup("auto")


@LINUX_ONLY
def test_views_over_a_file_that_is_cut_do_not_kill_the_process():
    # pyarrow's own memory map (no truncation guard): before, views=True took it, and reading a
    # value after the file was cut was a SIGBUS that ended the process.  It is refused before
    # any view exists.
    run = run_python("""
        import os, tempfile
        import pyarrow as pa
        from kafkacodec import MemoryRecordsBuilder
        from kafkacodec.arrow import ArrowDecoder

        builder = MemoryRecordsBuilder()
        for i in range(200):
            builder.append(i, b"k%d" % i, b"value-%d-" % i * 40)
        path = os.path.join(tempfile.mkdtemp(), "00000000000000000000.log")
        with open(path, "wb") as f:
            f.write(builder.build())
        mapped = pa.memory_map(path)
        try:
            rb, _ = ArrowDecoder(views=True).decode(mapped.read_buffer())
        except ValueError as exc:
            print("refused:", exc)
        else:
            os.truncate(path, 0)                # Kafka cuts its active segment
            print("read:", sum(len(v) for v in rb.column("value").cast(pa.binary()).to_pylist()))
        """, timeout=60)
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
    assert "refused:" in run.stdout and "file mapping" in run.stdout, run.stdout


def test_views_need_pyarrow_with_binary_view(monkeypatch):
    monkeypatch.delattr(pa, "binary_view")
    with pytest.raises(ValueError, match="pyarrow >= 16"):
        ArrowDecoder(views=True)
    ArrowDecoder()                              # the default mode does not


def test_views_release_every_reference_they_take():
    data = views_log()
    mixed = data + views_log("zstd")
    refs = sys.getrefcount(data), sys.getrefcount(mixed)
    dec = ArrowDecoder(views=True)
    for _ in range(200):
        for log in (data, mixed):
            rb, _ = dec.decode(log)
            key = rb.column("key")
            del rb
            assert key.cast(pa.binary()).to_pylist()[1] == b"key-1"
            del key
    del log
    assert (sys.getrefcount(data), sys.getrefcount(mixed)) == refs
