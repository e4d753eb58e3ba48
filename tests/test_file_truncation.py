"""A mapped segment truncated while it is read (Kafka truncates its active segment on follower
truncation and recovery): every reader ends with FileTruncatedError instead of dying of SIGBUS,
and a SIGBUS that is not ours still kills the process as before.

Each scenario runs in a subprocess (a SIGBUS would kill the test runner), which prints what it
read and the error it ended with; the test compares that with a read of the intact bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from isolated import child_env

import kafkacodec

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="no SIGBUS on this platform")

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
SANITIZED = os.environ.get("KAFKACODEC_SANITIZED") == "1"
ROOT = str(Path(kafkacodec.__file__).resolve().parent.parent)

# Shared by every scenario: a segment writer and the report of how a read ended.
PRELUDE = '''
import json, os, random, sys, threading, time
from kafkacodec import FileRecords, MemoryRecordsBuilder

def write_segment(path, batches, records, value_size, compression="none"):
    rnd = random.Random(7)
    with open(path, "wb") as f:
        for b in range(batches):
            builder = MemoryRecordsBuilder(magic=2, compression=compression,
                                           base_offset=b * records)
            for i in range(records):
                value = b"%d-%d|" % (b, i) + rnd.randbytes(value_size)
                builder.append(1_700_000_000_000 + i, b"k%d" % i, value,
                               headers=[("h", b"%d" % i)] if i % 3 == 0 else [])
            f.write(builder.build())
    return os.path.getsize(path)

def ended(exc, **extra):
    info = {"error": type(exc).__name__, "message": str(exc), **extra}
    for name in ("path", "size", "position", "offset"):
        info[name] = getattr(exc, name, None)
    print(json.dumps(info), flush=True)
'''


def run(body: str, *args: object, timeout: float = 120, options: tuple[str, ...] = ()
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *options, "-c", PRELUDE + textwrap.dedent(body),
                           *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=child_env(), cwd=ROOT)


def outcome(proc: subprocess.CompletedProcess[str]) -> dict:
    """The JSON line the scenario printed last; the process must have exited normally."""
    assert proc.returncode != -signal.SIGBUS, f"killed by SIGBUS\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_truncated(info: dict, path: Path, size: int) -> None:
    assert info["error"] == "FileTruncatedError", info
    assert info["path"] == str(path) and info["size"] == size, info
    assert str(path) in info["message"] and f"{size} bytes" in info["message"], info
    assert info["position"] is not None and info["position"] >= 0, info


@pytest.mark.parametrize("cut", ["page", "batch"])
def test_iterating_batches(tmp_path, cut):
    # "page": the cut is page aligned, so reading past it faults (SIGBUS); "batch": the cut is a
    # batch boundary inside a page, whose tail then reads zeros without any fault.
    path = tmp_path / "00000000000000000000.log"
    proc = run('''
        path, cut = sys.argv[1], sys.argv[2]
        write_segment(path, 64, 10, 4000)
        with FileRecords.open(path) as records:
            it = records.batches()
            seen = [next(it) for _ in range(4)]
            following = seen[3].position + seen[3].size_in_bytes     # where the iterator is
            size = following if cut == "batch" else (following // 4096 + 1) * 4096
            os.truncate(path, size)
            try:
                for batch in it:
                    seen.append(batch)
            except Exception as exc:
                ended(exc, cut=size, seen=[b.position for b in seen])
    ''', path, cut)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])
    # the batches yielded are those whose header lies before the cut, then the error
    assert all(position < info["cut"] for position in info["seen"])
    assert info["position"] >= info["seen"][-1]


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4", "zstd"])
@pytest.mark.parametrize("cut", ["page", "batch"])
def test_iterating_records(tmp_path, compression, cut):
    path = tmp_path / "00000000000000000000.log"
    proc = run('''
        from kafkacodec import MemoryRecords
        path, compression, cut = sys.argv[1], sys.argv[2], sys.argv[3]
        write_segment(path, 12, 60, 1000, compression)
        with open(path, "rb") as f:
            intact = [(r.offset, r.key, r.value, r.headers)
                      for r in MemoryRecords(f.read()).records()]
        with FileRecords.open(path) as records:
            positions = [b.position for b in records.batches()]
            it = records.records()
            out = [next(it) for _ in range(70)]          # into the second batch
            # the cut: the start of the 4th batch, or a page in the middle of it
            middle = (positions[3] + positions[4]) // 2 // 4096 * 4096
            size = positions[3] if cut == "batch" else middle
            os.truncate(path, size)
            try:
                for record in it:
                    out.append(record)
            except Exception as exc:
                out = [(r.offset, r.key, r.value, r.headers) for r in out]
                ended(exc, cut=size, count=len(out), prefix=out == intact[:len(out)])
    ''', path, compression, cut)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])
    # every record yielded is the intact one (none made of zeros), in order, up to the cut
    assert info["prefix"] and info["count"] >= 70
    if compression != "none" or cut == "batch":
        assert info["count"] == 180      # the three batches before the cut, whole


def test_batch_raw_reads_zeros_past_the_cut_and_the_crc_check_raises(tmp_path):
    # a memoryview handed out before the truncation reads zeros past the cut, without a crash
    path = tmp_path / "00000000000000000000.log"
    proc = run('''
        path = sys.argv[1]
        write_segment(path, 4, 100, 1000)
        with FileRecords.open(path) as records:
            last = list(records.batches())[-1]
            raw = last.raw
            size = (last.position // 4096 + 2) * 4096
            os.truncate(path, size)
            tail = bytes(raw[size - last.position:])
            try:
                last.ensure_valid()
            except Exception as exc:
                ended(exc, cut=size, zeros=tail == bytes(len(tail)), tail=len(tail))
    ''', path)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])
    assert info["zeros"] and info["tail"] > 0


@pytest.mark.parametrize("operation", ["validate", "index", "index_no_crc"])
def test_bulk_walk_truncated_from_another_thread(tmp_path, operation):
    # validate() / index() walk the file without the GIL; another thread cuts the file while
    # they run again and again: every call returns the full answer or raises the clear error.
    path = tmp_path / "00000000000000000000.log"
    proc = run('''
        path, operation = sys.argv[1], sys.argv[2]
        total = write_segment(path, 2000, 10, 1500)
        work = {"validate": lambda r: r.validate(), "index": lambda r: len(r.index()),
                "index_no_crc": lambda r: len(r.index(check_crc=False))}[operation]
        size = total // 2 // 4096 * 4096
        with FileRecords.open(path) as records:
            expected = work(records)
            answers = []
            cutter = threading.Thread(target=lambda: (time.sleep(0.02), os.truncate(path, size)))
            cutter.start()
            try:
                while True:
                    answers.append(work(records))
            except Exception as exc:
                cutter.join()
                ended(exc, cut=size, good=all(a == expected for a in answers),
                      calls=len(answers), expected=expected)
    ''', path, operation)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])
    assert info["good"] and info["expected"] == 2000


def test_logdir_read_split(tmp_path):
    # the Spark source's path: plan() then read_split() over a mapped segment (no Spark needed)
    part = tmp_path / "log" / "t-0"
    part.mkdir(parents=True)
    path = part / "00000000000000000000.log"
    proc = run('''
        from kafkacodec.logdir import plan, read_split
        path = sys.argv[1]
        total = write_segment(path, 50, 40, 1000, "lz4")
        splits, corrupt = plan(os.path.dirname(os.path.dirname(path)))
        rows = 0
        batches = read_split(splits[0], max_rows=40)
        rows += next(batches).num_rows
        size = total // 2 // 4096 * 4096
        os.truncate(path, size)
        try:
            for rb in batches:
                rows += rb.num_rows
        except Exception as exc:
            ended(exc, cut=size, rows=rows)
    ''', path)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])
    assert 40 <= info["rows"] < 2000


def test_cli_verify(tmp_path):
    # `kafkacodec verify` (python -m kafkacodec.cli): the segment is cut right after it is
    # mapped, so the scan of its entries reads past the end.
    part = tmp_path / "log" / "t-0"
    part.mkdir(parents=True)
    path = part / "00000000000000000000.log"
    proc = run('''
        import runpy
        import kafkacodec.arrow as arrow
        path, directory = sys.argv[1], sys.argv[2]
        total = write_segment(path, 50, 40, 1000, "zstd")
        scan_entries = arrow.scan_entries

        def scan_after_a_truncation(data, *args, **options):
            os.truncate(path, total // 2 // 4096 * 4096)
            return scan_entries(data, *args, **options)

        arrow.scan_entries = scan_after_a_truncation
        sys.argv = ["kafkacodec", "verify", "--no-progress", directory]
        runpy.run_module("kafkacodec.cli", run_name="__main__")
    ''', path, tmp_path / "log")
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert "kafkacodec: error:" in proc.stderr and "FileTruncatedError" not in proc.stderr
    size = os.path.getsize(path)
    assert f"{path}: the file shrank to {size} bytes" in proc.stderr, proc.stderr


def test_truncation_during_decompression_from_another_thread(tmp_path):
    # big compressed batches: the cut lands while the GIL-free decompressor reads its input
    path = tmp_path / "00000000000000000000.log"
    proc = run('''
        path = sys.argv[1]
        total = write_segment(path, 8, 2000, 1000, "gzip")
        size = total // 2 // 4096 * 4096
        with FileRecords.open(path) as records:
            cutter = threading.Thread(target=lambda: (time.sleep(0.01), os.truncate(path, size)))
            cutter.start()
            count = 0
            try:
                for _ in range(1000):
                    for record in records.records():
                        count += 1
            except Exception as exc:
                cutter.join()
                ended(exc, cut=size, count=count)
    ''', path)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])


# --- SIGBUS that is not ours ------------------------------------------------------------------

FOREIGN = '''
import mmap, signal
path, how = sys.argv[1], sys.argv[2]
write_segment(path, 4, 10, 4000)
if how == "faulthandler_after":
    import faulthandler
records = FileRecords.open(path)            # installs the guard's handler
if how == "faulthandler_after":
    faulthandler.enable()                   # replaces it, keeping ours as its "previous"
    second = FileRecords.open(path)         # puts ours back in front
if how == "kill":
    os.kill(os.getpid(), signal.SIGBUS)
else:
    with open(path, "rb") as f:
        plain = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)   # not guarded
    os.truncate(path, 0)
    if how == "faulthandler_after":         # ours still works...
        try:
            list(records.batches())
        except Exception as exc:
            print(type(exc).__name__, flush=True)
    plain[3 * 4096]                         # ...and a foreign fault still kills
print("survived", flush=True)
'''


@pytest.mark.parametrize("how, options", [
    ("kill", ()), ("fault", ()), ("fault", ("-X", "faulthandler")), ("faulthandler_after", ())],
    ids=["kill", "unguarded-mmap", "faulthandler-first", "faulthandler-after"])
def test_a_foreign_sigbus_still_kills_the_process(tmp_path, how, options):
    proc = run(FOREIGN, tmp_path / "00000000000000000000.log", how, options=options, timeout=60)
    assert "survived" not in proc.stdout
    # (under ASan, whose handler was installed first, it may be ASan that reports and aborts)
    assert proc.returncode == -signal.SIGBUS or (
        SANITIZED and proc.returncode != 0 and "AddressSanitizer" in proc.stderr), (
        f"exit {proc.returncode}\n{proc.stderr[-2000:]}")
    if "faulthandler" in how or options:
        assert "Fatal Python error: Bus error" in proc.stderr or SANITIZED
    if how == "faulthandler_after":
        assert proc.stdout.split() == ["FileTruncatedError"], proc.stdout


# -- readers that take any buffer, over a segment cut inside its last page (no fault at all:
# the bytes past the cut read zeros).  Found by the file-system harness: each of these read
# the zeros as data (a CorruptRecordError, an InvalidCrcError, or worse, records with zeros
# in them and no error), where FileRecords itself said FileTruncatedError.
TORN = '''
path, reader = sys.argv[1], sys.argv[2]
size = write_segment(path, 3, 5, 300)
records = FileRecords.open(path)
last = list(records.batches())[-1]
# inside the last batch's last record value, within the same page: zeros, no SIGBUS
cut = last.position + last.size_in_bytes - 40
os.truncate(path, cut)
'''


@pytest.mark.parametrize("reader", ["records", "down_convert", "lazy", "arrow", "scan_entries",
                                    "lazy_file", "lazy_fd"])
def test_readers_of_a_segment_cut_inside_its_last_page(tmp_path, reader):
    path = tmp_path / "00000000000000000000.log"
    proc = run(TORN + '''
        import io
        from kafkacodec import LazyDownConvertRecords, down_convert
        from kafkacodec.arrow import ArrowDecoder, scan_entries
        try:
            if reader == "records":
                result = [(r.offset, r.value) for r in records.records()]
            elif reader == "down_convert":
                result = bytes(down_convert(records, 1).records.buffer)
            elif reader == "lazy":
                sink = io.BytesIO()
                lazy = LazyDownConvertRecords(records, 0)
                while lazy.write_to(sink):
                    pass
                result = sink.getvalue()
            elif reader in ("lazy_file", "lazy_fd"):   # an open file, read with pread: short
                # lazy_fd: os.fdopen's file is named by its descriptor (an int: TypeError)
                class Sink(io.BytesIO):          # takes 100 bytes, then would block
                    budget = 100
                    def write(self, data):
                        n = min(len(data), self.budget)
                        self.budget -= n
                        return super().write(data[:n])
                with (open(path, "rb") if reader == "lazy_file"
                      else os.fdopen(os.open(path, os.O_RDONLY), "rb")) as f:
                    lazy = LazyDownConvertRecords(f, 0, chunk_size=64)
                    sink = Sink()
                    lazy.write_to(sink)          # the first chunk, before the cut
                    os.truncate(path, 300)
                    sink.budget = 1 << 30
                    while lazy.write_to(sink):
                        pass
                result = sink.getvalue()
            elif reader == "arrow":
                result = ArrowDecoder().decode(records.buffer)[0].num_rows
            else:
                result = scan_entries(records.buffer)["stop"]
        except Exception as exc:
            ended(exc, cut=300 if reader.startswith("lazy_f") else cut)
        else:
            print(json.dumps({"error": None, "result": repr(result)[:200]}))
    '''.replace("\n        ", "\n"), path, reader)
    info = outcome(proc)
    assert info["error"] == "FileTruncatedError", info      # not data with zeros in it
    assert_truncated(info, path, info["cut"])


@pytest.mark.parametrize("magic", [1, 2])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_a_compressed_batch_cut_inside_its_last_page_reads_as_truncated(tmp_path, magic, codec):
    """The compressed bytes past the cut read zeros: what they inflate to is garbage, and the
    error it caused was reported as corrupt data (found by the file-system harness through
    RecordBatch.base_offset of a legacy wrapper, which reads its first inner record)."""
    path = tmp_path / "00000000000000000000.log"
    proc = run('''
        import random
        rnd = random.Random(3)
        with open(sys.argv[1], "wb") as f:
            builder = MemoryRecordsBuilder(magic=int(sys.argv[2]), compression=sys.argv[3])
            for i in range(20):
                builder.append(1_700_000_000_000 + i, b"k", rnd.randbytes(100))
            f.write(builder.build())
        size = os.path.getsize(sys.argv[1])
        records = FileRecords.open(sys.argv[1])
        batch = next(iter(records.batches()))
        cut = size - 200                     # inside the compressed bytes, in the same page
        os.truncate(sys.argv[1], cut)
        try:
            print(json.dumps({"error": None, "result": [r.offset for r in batch]}))
        except Exception as exc:
            ended(exc, cut=cut)
    ''', path, magic, codec)
    info = outcome(proc)
    assert_truncated(info, path, info["cut"])


# -- the log directory reader (describe, read_split; `kafkacodec verify`'s record pass): the
# segment is cut inside its last page (zeros, no fault) between the scan of its entries and
# their decoding, or between the plan and the read.  Found by the file-system harness: the
# zeros were damage (a corrupt entry, a partial one, rows dropped) in DROPMALFORMED and
# PERMISSIVE, or noticed only when the mapping closed.
LOGDIR = '''
import kafkacodec.arrow as arrow
from kafkacodec.logdir import describe, plan, read_split
path, reader, when = sys.argv[1], sys.argv[2], sys.argv[3]
write_segment(path, 3, 5, 300)
with open(path, "rb") as f:
    data = f.read()
positions = [b.position for b in FileRecords.open(path).batches()]
cut = positions[2] + (len(data) - positions[2]) // 2      # inside the last batch, same page
root = os.path.dirname(os.path.dirname(path))
scan_entries = arrow.scan_entries

def scan_then_cut(*args, **options):                      # the scan saw the intact entries
    result = scan_entries(*args, **options)
    os.truncate(path, cut)
    return result

if when == "scan":
    arrow.scan_entries = scan_then_cut
problems = []
try:
    if reader == "describe":
        if when == "plan":
            raise SystemExit("describe plans and reads in one call")
        result = describe(root)
    else:
        splits, _ = plan(root)
        if when == "plan":
            os.truncate(path, cut)
        result = sum(rb.num_rows for rb in read_split(splits[0], mode=reader,
                                                       on_problem=problems.append))
except Exception as exc:
    ended(exc, cut=cut, problems=[p.message for p in problems])
else:
    print(json.dumps({"error": None, "result": repr(result), "problems": [p.message for p in problems]}))
'''


@pytest.mark.parametrize("reader, when", [
    ("describe", "scan"), ("DROPMALFORMED", "scan"), ("PERMISSIVE", "scan"), ("FAILFAST", "scan"),
    ("DROPMALFORMED", "plan"), ("FAILFAST", "plan")])
def test_logdir_segment_cut_inside_its_last_page(tmp_path, reader, when):
    part = tmp_path / "log" / "t-0"
    part.mkdir(parents=True)
    path = part / "00000000000000000000.log"
    info = outcome(run(LOGDIR, path, reader, when))
    assert info["error"] == "FileTruncatedError", info      # not damage, nor rows of zeros
    assert_truncated(info, path, info["cut"])
    assert not info.get("problems"), info                   # and no problem reported before it


def test_a_segment_emptied_before_the_cli_reads_its_head_is_named_truncated(tmp_path):
    """convert and dump read a segment's first bytes to tell a Kafka segment from other files;
    emptied by another process after it was mapped, it read as zeros: "not a Kafka segment"
    (found by the file-system harness).  Now FileTruncatedError, which the CLI reports as an
    unreadable file."""
    from kafkacodec import FileRecords, MemoryRecordsBuilder
    from kafkacodec.cli._files import segment_head
    from kafkacodec.errors import FileTruncatedError

    builder = MemoryRecordsBuilder()
    builder.append(1, b"k", b"v" * 100)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(builder.build())
    with FileRecords.open(path) as segment:
        assert len(segment_head(segment)) == 17
        os.truncate(path, 0)
        with pytest.raises(FileTruncatedError):
            segment_head(segment)
