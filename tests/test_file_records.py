"""FileRecords: a memory-mapped log segment, walked with Kafka's file reader rules (spec §9.2),
slices, and what closing does to batches and views."""

import gc
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kafkacodec import (BufferReleasedError, CorruptRecordError, FileRecords, MemoryRecords,
                        Records, UnsupportedVersionError)


def v2(n, base_offset, codec=0):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i in range(n):
        b.append(i, timestamp=1_000 + i, key=b"k%d" % i, value=b"v%d" % (base_offset + i),
                 headers=[])
    return struct.pack(">q", base_offset) + bytes(b.build())[8:]


def v1(offset):
    b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    b.append(offset, timestamp=5, key=None, value=b"legacy")
    return bytes(b.build())


SEGMENT = v2(3, 0) + v1(3) + v2(5, 4) + v2(2, 9)


def summary(records):
    return [(r.offset, r.timestamp, r.key, r.value) for r in records.records()]


@pytest.fixture
def segment(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(SEGMENT)
    return path


def test_reads_like_memory_records(segment):
    with FileRecords.open(segment) as records:
        assert isinstance(records, Records) and records.path == str(segment)
        assert summary(records) == summary(MemoryRecords(SEGMENT))
        assert [r.offset for r in records.records()] == list(range(11))
        assert records.size_in_bytes == len(SEGMENT) and bytes(records) == SEGMENT
        batches = list(records.batches())
        assert [b.position for b in batches] == [b.position for b in MemoryRecords(SEGMENT).batches()]
        assert records.validate() == 4 and all(b.is_valid() for b in batches)
        assert records.index()["base_offset"].tolist() == [0, 3, 4, 9]
    assert records.closed


def test_slice_positions_are_file_positions_and_size_is_clamped(segment):
    sizes = [b.size_in_bytes for b in MemoryRecords(SEGMENT).batches()]
    with FileRecords.open(segment) as records:
        tail = records.slice(sizes[0], 10**9)          # clamped to the end, as Kafka does
        assert tail.size_in_bytes == len(SEGMENT) - sizes[0]
        assert [b.position for b in tail.batches()][0] == sizes[0]
        assert [r.offset for r in tail.records()] == list(range(3, 11))
        middle = tail.slice(sizes[1], sizes[2] + 20)    # relative to the slice; ends mid-batch
        assert [b.base_offset for b in middle.batches()] == [4]
        assert middle.partial_tail_bytes == 20
        assert middle.index()["position"].tolist() == [sizes[0] + sizes[1]]
        assert records.slice(len(SEGMENT), 5).size_in_bytes == 0
        for position, size in [(-1, 1), (len(SEGMENT) + 1, 1), (0, -1)]:
            with pytest.raises(ValueError):
                records.slice(position, size)


def test_file_rules_stop_below_18_bytes_and_skip_the_magic_range_check(tmp_path):
    path = tmp_path / "odd.log"
    tail17 = SEGMENT[-17:]
    path.write_bytes(v2(1, 0) + tail17)
    with FileRecords.open(path) as records:
        assert len(list(records.batches())) == 1 and records.partial_tail_bytes == 17
    # magic 5: the in-memory reader rejects it, the file reader reads it as a v2 batch
    odd = bytearray(v2(2, 7))
    odd[16] = 5
    path.write_bytes(bytes(odd))
    with pytest.raises(CorruptRecordError, match="magic byte 5"):
        list(MemoryRecords(bytes(odd)).batches())
    with FileRecords.open(path) as records:
        (batch,) = records.batches()
        assert batch.magic == 5 and batch.base_offset == 7 and batch.record_count == 2
        with pytest.raises(UnsupportedVersionError, match="magic 5"):   # its records cannot be read
            list(batch)


def test_corrupt_size_raises_with_the_file_position(tmp_path):
    path = tmp_path / "bad.log"
    first = v2(2, 0)
    path.write_bytes(first + struct.pack(">qi", 99, 3) + bytes(10))
    with FileRecords.open(path) as records:
        with pytest.raises(CorruptRecordError, match="entry size 3") as info:
            list(records.batches())
        assert (info.value.position, info.value.offset) == (len(first) + 8, 99)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    with FileRecords.open(path) as records:
        assert list(records.batches()) == [] and records.size_in_bytes == 0
        assert records.partial_tail_bytes == 0 and len(records.index()) == 0


def _mapped(path):
    if not sys.platform.startswith("linux"):
        return None
    with open("/proc/self/maps") as maps:
        return any(str(path) in line for line in maps)


def test_close_makes_batches_and_iterators_raise(segment):
    records = FileRecords.open(segment)
    batch = next(records.batches())
    tail = records.slice(10, 100)
    it = records.records()
    first, _, _ = next(it), next(it), next(it)    # the first batch, decoded before the close
    records.close()
    assert records.closed and tail.closed
    assert batch.base_offset == 0 and first.value == b"v0"   # parsed fields stay readable
    for use in (lambda: batch.raw, lambda: list(batch), batch.is_valid, lambda: next(it),
                records.batches, records.records, records.validate, records.index,
                lambda: records.buffer, lambda: tail.slice(0, 1)):
        with pytest.raises(BufferReleasedError):
            use()
    records.close()                                          # twice is fine
    gc.collect()
    assert _mapped(segment) in (False, None)


def test_views_alive_at_close_keep_the_mapping_until_released(segment):
    records = FileRecords.open(segment)
    raw = next(records.batches()).raw
    whole = records.buffer
    records.close()
    assert bytes(raw) == SEGMENT[:len(raw)] and bytes(whole) == SEGMENT   # no dangling pointer
    assert _mapped(segment) in (True, None)
    del raw
    assert _mapped(segment) in (True, None)
    del whole
    gc.collect()
    assert _mapped(segment) in (False, None)


def _count_records(records):
    return sum(1 for _ in records.records())


@pytest.mark.parametrize("log, work, complete", [
    (v2(500, 0) * 400, Records.validate, 400),
    # decompression runs without the GIL, reading the mapped file
    (b"".join(v2(2000, 2000 * i, codec=1) for i in range(40)), _count_records, 80_000)],
    ids=["validate", "decompress"])
def test_close_while_another_thread_reads_without_the_gil_is_safe(tmp_path, log, work, complete):
    # close() from this thread waits for the other thread's loop to be done with the mapping;
    # the loop then finishes or stops with BufferReleasedError.
    path = tmp_path / "big.log"
    path.write_bytes(log)
    for _ in range(5):
        records = FileRecords.open(path)
        results = []

        def run():
            try:
                results.append(work(records))
            except BufferReleasedError:
                results.append("released")

        thread = threading.Thread(target=run)
        thread.start()
        records.close()
        thread.join()
        assert results in ([complete], ["released"])


def _close_in_a_collection(path):
    """Decode `path` with a gc callback that closes it; runs in a child with no other threads,
    so every collection comes from this thread's own allocations."""
    records = FileRecords.open(path)
    it = records.records()
    assert next(it).headers == (("a", b"1"), ("b", None))
    decoded, armed, closed_after = [], [False], []

    def close_on_collect(phase, info):
        if phase == "start" and armed[0] and not records.closed:
            closed_after.append(len(decoded))
            records.close()

    gc.callbacks.append(close_on_collect)
    gc.set_threshold(1)
    try:
        with pytest.raises(BufferReleasedError):
            for record in it:
                armed[0] = False
                decoded.append((record.value, record.headers))
                armed[0] = True            # the next collection comes from next(it)
    finally:
        gc.callbacks.remove(close_on_collect)
    # closed while decoding record n+1, which still came out whole
    assert records.closed and len(decoded) == closed_after[0] + 1
    assert all(item == (b"v" * 50, (("a", b"1"), ("b", None))) for item in decoded)
    del record
    gc.collect()
    assert _mapped(path) in (False, None)
    print("closed after", closed_after[0])


def test_a_collection_that_closes_the_file_while_a_record_is_decoded_is_safe(tmp_path):
    # Records are decoded in place, one per next().  Header tuples are GC-tracked, so making
    # them can run a collection and with it any finaliser: here one closes the file.  The
    # mapping must outlive the record being decoded, and the next record must raise.
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i in range(200):
        b.append(i, timestamp=i, key=b"k", value=b"v" * 50, headers=[("a", b"1"), ("b", None)])
    path = tmp_path / "headers.log"
    path.write_bytes(bytes(b.build()))
    # In a child: a test runner's own threads (pytest-xdist's channel) collect too.
    child = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "import test_file_records as t; t._close_in_a_collection(sys.argv[2])",
         str(Path(__file__).parent), str(path)],
        capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("closed after ")


def test_sample_segments_read_like_memory_records(tmp_path):
    from kafkacodec.sample import write_sample_log

    paths = write_sample_log(tmp_path, partitions=1, batches_per_segment=7)
    assert len(paths) > 1
    offsets = []
    for path in paths:
        data = path.read_bytes()
        with FileRecords.open(path) as segment:
            assert summary(segment) == summary(MemoryRecords(data))
            assert segment.validate() == len(segment.index()) and segment.partial_tail_bytes == 0
            first = next(segment.batches())
            assert int(path.stem) == first.base_offset     # segments are named by base offset
            offsets += [r.offset for r in segment.records()]
    assert offsets == sorted(offsets)


# Python code can run in the middle of a read: any allocation of a GC-tracked object (a header
# tuple, a RecordBatch, an exception) may run a collection and
# with it a finaliser.  Here the finaliser closes the file: nothing may read the mapping after
# such a point unless the read counted itself a user first.  Crash-type: in a subprocess.
CLOSE_DURING_READ = '''
import gc, json, struct, sys
from kafkacodec import BufferReleasedError, FileRecords, MemoryRecordsBuilder
from kafkacodec.crc import crc32c

path, case = sys.argv[1], sys.argv[2]
if case == "control-with-headers":
    # COMMIT markers carrying headers: the control key/value are decoded after the headers.
    # 25 headers: a tuple that big never comes from the free list, so it always counts
    # towards a collection.
    b = MemoryRecordsBuilder(magic=2, producer_id=7, producer_epoch=0, base_sequence=0,
                             is_transactional=True)
    for i in range(300):
        b.append(i, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, i),
                 headers=[("h%d" % j, b"%d" % i) for j in range(25)])
    batch = bytearray(b.build())
    batch[22] |= 0x20                                   # attributes (int16): the control bit
    batch[17:21] = struct.pack(">I", crc32c(bytes(batch[21:])))
    data = bytes(batch)
elif case == "batches":
    b = MemoryRecordsBuilder()
    parts = []
    for i in range(300):
        b.append(0, b"k", b"v" * 100)
        parts.append(b.build())
    data = b"".join(parts)
with open(path, "wb") as f:
    f.write(data)

records = FileRecords.open(path)
items = (records.batches() if case == "batches" else records.records())
armed = [False]

def close_on_collect(phase, info):
    if phase == "start" and armed[0]:
        armed[0] = False
        records.close()

def read():
    out = []
    armed[0] = True
    try:
        for item in items:
            out.append((item.base_offset, item.size_in_bytes) if case == "batches"
                       else (item.offset, item.key, item.value, item.headers, item.control_type))
            armed[0] = True          # the next collection comes from inside next()
    except BufferReleasedError as exc:
        result.append(("BufferReleasedError", out))
        return
    result.append((None, out))

result = []
gc.callbacks.append(close_on_collect)
gc.set_threshold(1)
read()
gc.set_threshold(700)
error, out = result[0]
from kafkacodec import MemoryRecords
source = MemoryRecords(data)
expected = ([(b.base_offset, b.size_in_bytes) for b in source.batches()] if case == "batches"
            else [(r.offset, r.key, r.value, r.headers, r.control_type) for r in source.records()])
print(json.dumps({"error": error, "count": len(out), "total": len(expected),
                  "prefix": out == expected[:len(out)]}))
'''


@pytest.mark.parametrize("case", ["control-with-headers", "batches"])
def test_a_finaliser_closing_the_file_mid_read_never_reads_the_unmapped_segment(tmp_path, case):
    import json
    import subprocess

    from isolated import child_env
    env = child_env()
    proc = subprocess.run([sys.executable, "-c", CLOSE_DURING_READ, str(tmp_path / "s.log"), case],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    # what came out is correct; the close ends the read with BufferReleasedError
    assert info["prefix"] and info["error"] == "BufferReleasedError", info
    assert 0 < info["count"] < info["total"], info


NOT_REGULAR = '''
import json, sys
from kafkacodec import FileRecords
from kafkacodec.logdir.storage import mapped as _mapped

out = {}
for name, open_ in (("FileRecords.open", FileRecords.open), ("logdir _mapped", _mapped)):
    try:
        open_(sys.argv[1])
        out[name] = None
    except OSError as exc:
        out[name] = [type(exc).__name__, str(exc), [c.__name__ for c in type(exc).__mro__]]
print(json.dumps(out))
'''


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file types")
@pytest.mark.parametrize("kind, error", [
    ("fifo", "NotRegularFileError"), ("char-device", "NotRegularFileError"),
    ("directory", "IsADirectoryError"), ("dangling-symlink", "FileNotFoundError")])
def test_open_refuses_what_is_not_a_regular_file_without_blocking(tmp_path, kind, error):
    # A FIFO named like a segment used to block open() forever (nobody writes to it).
    import json
    import os
    import subprocess


    path = tmp_path / "00000000000000000000.log"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "char-device":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "gone.log")
    from isolated import child_env
    env = child_env()
    proc = subprocess.run([sys.executable, "-c", NOT_REGULAR, str(path)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, (cls, message, mro) in json.loads(proc.stdout).items():
        assert cls == error and "OSError" in mro, (name, cls, message)
        assert str(path) in message, message
        if error == "NotRegularFileError":
            assert "not a regular file" in message and ("FIFO" if kind == "fifo" else
                                                        "character device") in message


@pytest.mark.parametrize("reader", ["arrow", "down_convert"])
def test_a_close_from_an_argument_keeps_the_error_of_the_call(tmp_path, reader):
    # An argument's __index__ closes the FileRecords while its only memoryview is the call's
    # own argument: when the failed call drops that view, the release unmaps the file, and
    # the unmapping (Python code) ran with the call's error pending and cleared it: the caller
    # got "SystemError: error return without exception set" (found by the re-entrancy harness).
    from kafkacodec.crc import crc32c

    batch = bytearray(v2(3, 0))
    struct.pack_into(">i", batch, 57, 4)                # one record more than there is
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(batch))
    records = FileRecords.open(path)

    class Closes:
        def __index__(self):
            records.close()
            return 0

        __int__ = __index__

    if reader == "arrow":
        from kafkacodec.arrow import ArrowDecoder

        with pytest.raises(CorruptRecordError):
            ArrowDecoder().decode(records.buffer, Closes())
    else:
        from kafkacodec import down_convert

        with pytest.raises(CorruptRecordError):
            down_convert(records.buffer, 1, Closes())
    assert records.closed
