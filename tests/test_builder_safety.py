"""MemoryRecordsBuilder while Python code runs in the middle of a call (issue 14, items 4 and 5):
arguments whose __index__, __len__, __iter__, __buffer__, finaliser or generator body mutates
or frees what the call reads, hostile Arrow arrays, re-entrant calls and a builder shared by
threads.  The call either gives the records its arguments held when it started or raises a
clear error; it never crashes nor writes freed memory.  The dangerous part of each test runs in
a subprocess, so a crash is a failed test, not a dead test runner."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from isolated import run_python
from kafkacodec import MemoryRecords, MemoryRecordsBuilder
from kafkacodec.errors import KafkaCodecError

# The common head of the subprocess snippets: records() of a built batch as tuples.
HEAD = """
import gc
from kafkacodec import MemoryRecords, MemoryRecordsBuilder
from kafkacodec.errors import KafkaCodecError

def records(data):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in MemoryRecords(data).records()]
"""


def isolated(code: str) -> str:
    run = run_python(HEAD + textwrap.dedent(code))
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_a_timestamp_whose_index_clears_the_lists():
    out = isolated("""
        keys = [b"k%d" % i for i in range(100)]
        values = [b"v%d" % i * 100 for i in range(100)]
        timestamps = [1] * 100
        expected = [(i, 7 if i == 50 else 1, b"k%d" % i, b"v%d" % i * 100, ()) for i in range(100)]

        class Clears:
            def __index__(self):
                values.clear()
                keys.clear()
                timestamps.clear()
                gc.collect()
                return 7

        timestamps[50] = Clears()
        builder = MemoryRecordsBuilder()
        builder.append_many(timestamps, keys, values)
        assert records(builder.build()) == expected
        print("as called")
    """)
    assert "as called" in out


def test_a_header_generator_that_drops_the_last_reference_to_a_key():
    out = isolated("""
        keys = [bytes([65 + i]) * 100_000 for i in range(4)]
        values = [b"v%d" % i for i in range(4)]
        expected = [(i, 1, bytes([65 + i]) * 100_000, b"v%d" % i, (("h", b"x"),) if i == 1 else ())
                    for i in range(4)]

        def drop():
            keys[1] = values[1] = None          # the list held the only reference
            gc.collect()
            reuse = [b"Z" * 100_000 for _ in range(10)]
            yield ("h", b"x")

        builder = MemoryRecordsBuilder()
        builder.append_many(1, keys, values, [[], drop(), [], []])
        assert records(builder.build()) == expected
        print("as called")
    """)
    assert "as called" in out


def test_header_sequences_whose_len_and_iter_mutate_the_call():
    out = isolated("""
        keys = [b"k%d" % i * 1000 for i in range(20)]
        values = [b"v%d" % i * 1000 for i in range(20)]
        headers = [[("a", b"1")] for _ in range(20)]
        expected = [(i, 1, b"k%d" % i * 1000, b"v%d" % i * 1000, (("a", b"1"),)) for i in range(20)]

        class Mutates:
            def __len__(self):
                keys.clear()
                return 1
            def __iter__(self):
                values.clear()
                headers.clear()
                gc.collect()
                return iter([("a", b"1")])

        headers[5] = Mutates()
        builder = MemoryRecordsBuilder()
        builder.append_many(1, keys, values, headers)
        assert records(builder.build()) == expected
        print("as called")
    """)
    assert "as called" in out


def test_a_finaliser_that_runs_during_the_call():
    out = isolated("""
        keys = [b"k%d" % i for i in range(10)]
        values = [b"v%d" % i * 100 for i in range(10)]
        expected = [(i, 1, b"k%d" % i, b"v%d" % i * 100, ()) for i in range(10)]
        builder = MemoryRecordsBuilder()
        refused = []

        class Finaliser:
            def __del__(self):
                values.clear()
                keys.clear()
                try:
                    builder.append(1, b"k", b"v")
                except KafkaCodecError as exc:
                    refused.append(str(exc))

        class Collects:
            def __index__(self):
                cycle = Finaliser()
                cycle.self = cycle
                del cycle
                gc.collect()                    # runs the finaliser inside append_many
                return 1

        builder.append_many([Collects()] + [1] * 9, keys, values)
        assert records(builder.build()) == expected
        print(refused)
    """)
    assert "in use by an unfinished call on this thread" in out


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Python classes export buffers from 3.12 (PEP 688)")
def test_a_buffer_whose_export_mutates_the_call():
    out = isolated("""
        keys = [b"k%d" % i for i in range(10)]
        values = [b"v%d" % i for i in range(10)]
        builder = MemoryRecordsBuilder()

        class Exports:
            def __buffer__(self, flags):
                values.clear()
                try:
                    builder.append(1, b"k", b"v")
                except KafkaCodecError:
                    print("refused")
                return memoryview(b"exported")

        keys[3] = Exports()
        expected = [(i, 1, b"exported" if i == 3 else b"k%d" % i, b"v%d" % i, ()) for i in range(10)]
        builder.append_many(1, keys, values)
        assert records(builder.build()) == expected
        print("as called")
    """)
    assert "refused" in out and "as called" in out


def test_bytes_method_is_not_a_buffer():
    class HasBytes:
        def __bytes__(self):
            raise AssertionError("__bytes__ must not be called")

    builder = MemoryRecordsBuilder()
    with pytest.raises(TypeError, match="bytes-like"):
        builder.append(1, HasBytes(), b"v")
    with pytest.raises(TypeError, match="bytes-like"):
        builder.append_many(1, None, [b"v", HasBytes()])
    assert builder.record_count == 0 and builder.build() == b""


def test_arrow_offsets_past_the_data_buffer_are_refused():
    out = isolated("""
        import numpy as np, pyarrow as pa
        for arrow_type, dtype in ((pa.binary(), np.int32), (pa.large_string(), np.int64)):
            offsets = pa.py_buffer(np.array([0, 1 << 30, 4], dtype=dtype))
            bad = pa.Array.from_buffers(arrow_type, 2, [None, offsets, pa.py_buffer(b"abcd")])
            for keys, values in ((None, bad), (bad, pa.array([b"a", b"b"]))):
                builder = MemoryRecordsBuilder()
                try:
                    builder.append_many(1, keys, values)
                except ValueError as exc:
                    print("refused:", exc)
                assert builder.record_count == 0
    """)
    assert out.count("refused:") == 4 and "offsets" in out, out


def test_arrow_offsets_rewritten_during_the_call_are_refused():
    out = isolated("""
        import numpy as np, pyarrow as pa
        offsets = np.array([0, 1, 2, 3, 4], dtype=np.int32)
        values = pa.Array.from_buffers(pa.binary(), 4, [None, pa.py_buffer(offsets), pa.py_buffer(b"abcd")])

        def rewrite():
            offsets[2:] = 1 << 30                # the array's buffer is this numpy array
            yield ("h", b"x")

        builder = MemoryRecordsBuilder()
        try:
            builder.append_many(1, None, values, [[], rewrite(), [], []])
        except ValueError as exc:
            print("refused:", exc)
        assert builder.record_count == 0
    """)
    assert "refused:" in out and "offsets" in out, out


def test_arrow_offsets_rewritten_between_ranged_calls_are_refused():
    """Row ranges of one array parse it once; its offsets are still checked row by row."""
    out = isolated("""
        import numpy as np, pyarrow as pa
        offsets = np.array([0, 1, 2, 3, 4], dtype=np.int32)
        values = pa.Array.from_buffers(pa.binary(), 4, [None, pa.py_buffer(offsets), pa.py_buffer(b"abcd")])
        builder = MemoryRecordsBuilder()
        builder.append_many(1, values, values, None, 0, 2)
        offsets[3] = 1 << 30
        try:
            builder.append_many(1, None, values, None, 2, 4)
        except ValueError as exc:
            print("refused:", exc)
        assert builder.record_count == 2
    """)
    assert "refused: value 2: its Arrow offsets" in out, out


# --- re-entrant calls and threads (the in-use guard) ----------------------------------------

def test_a_header_generator_that_calls_the_builder_is_refused():
    builder = MemoryRecordsBuilder()
    builder.append(1, b"first", b"1")
    refused = []

    def reenters():
        for call in (lambda: builder.append(2, b"inner", b"2"), builder.build,
                     lambda: builder.append_many(3, None, [b"3"]), lambda: builder.__init__()):
            try:
                call()
            except KafkaCodecError as exc:
                refused.append(str(exc))
        yield ("h", b"x")

    builder.append(4, b"outer", b"4", reenters())
    assert refused == ["MemoryRecordsBuilder is in use by an unfinished call on this thread "
                       "(re-entered from a callback); make the call after it returns"] * 4
    assert [(r.offset, r.key, r.headers) for r in MemoryRecords(builder.build()).records()] == [
        (0, b"first", ()), (1, b"outer", (("h", b"x"),))]


def test_a_failed_call_leaves_the_builder_as_it_was():
    builder = MemoryRecordsBuilder()
    builder.append(1, b"first", b"1")
    key = bytearray(b"resized")

    def resizes():
        key.extend(b"!")                         # the key is exported: BufferError
        yield ("h", b"x")

    with pytest.raises(BufferError):
        builder.append(2, key, b"2", resizes())
    builder.append(3, b"last", b"3")
    assert [(r.offset, r.key) for r in MemoryRecords(builder.build()).records()] == [
        (0, b"first"), (1, b"last")]


def test_a_builder_shared_by_threads_refuses_the_second_one():
    out = isolated("""
        import threading
        builder = MemoryRecordsBuilder(compression="zstd")
        lock = threading.Lock()
        appended, built, seen = [], [], {"busy": 0}

        def work(t):
            # until a collision is seen (the GIL is let go only while build() compresses)
            for i in range(3000):
                if i >= 300 and seen["busy"]:
                    break
                value = b"%d-%d;" % (t, i) * 2000
                try:
                    builder.append(1, b"k", value, [("h", b"x")])
                    with lock:
                        appended.append(value)
                    if i % 10 == 9:
                        batch = builder.build()
                        with lock:
                            built.append(batch)
                except KafkaCodecError as exc:
                    assert str(exc) == "MemoryRecordsBuilder is in use by another thread: use one per thread", exc
                    with lock:
                        seen["busy"] += 1

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        built.append(builder.build())
        got = []
        for batch in built:
            for b in MemoryRecords(batch).batches():
                assert b.is_valid(), "CRC"
            got += [r.value for r in MemoryRecords(batch).records()]
        assert sorted(got) == sorted(appended), (len(got), len(appended))
        print("busy", seen["busy"])
    """)
    assert int(out.split()[-1]) > 0, out


# --- project convention: any C-contiguous buffer is read as its raw bytes --------------------

def test_any_contiguous_buffer_is_read_as_bytes():
    raw = bytes(range(16)) * 4
    views = [memoryview(raw).cast("i"), np.frombuffer(raw, dtype=np.int64), bytearray(raw),
             memoryview(raw).cast("B", (8, 8))]
    builder = MemoryRecordsBuilder()
    for view in views:
        builder.append(1, view, view, [("h", view)])
    builder.append_many(1, views, views)
    records = list(MemoryRecords(builder.build()).records())
    assert len(records) == 2 * len(views)
    assert all(r.key == raw and r.value == raw for r in records)
    assert all(r.headers == (("h", raw),) for r in records[:len(views)])
