"""Peak memory growth of down-converting a large log: lazy (KIP-283 chunks) vs eager.

    /work/venv/bin/python bench/downconvert_memory.py [--size-mb 1024] [--chunk-kb 128]

Writes a v2 log of 1 KiB records (uncompressed, as a producer batches them) to a temporary
file, then converts it to magic 1 in a fresh subprocess per mode and reports how much the
process's peak resident memory (VmHWM, reset through /proc/self/clear_refs after setup) grew:

  lazy-file   LazyDownConvertRecords over the open file (pread, one chunk at a time),
              write_to() into /dev/null
  lazy-filerecords  the same over FileRecords.open(path) (a read-only mapping): the pages of
              each converted chunk are handed back (madvise DONTNEED)
  lazy-mmap   over a plain mmap of the file: only the current chunk is touched, but touched
              file pages stay mapped, so they count in RSS (RssFile; RssAnon stays small)
  eager       down_convert() of the FileRecords, then the result written to /dev/null

Linux only (VmHWM, clear_refs).  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import time


def status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def write_log(path: str, size: int) -> int:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    per_batch = 16
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(per_batch):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"key-%08d" % i,
                       value=bytes([i]) * 1000, headers=[])
    template = bytearray(builder.build())
    batches = 0
    with open(path, "wb") as f:
        block = bytearray()
        written = 0
        while written < size:
            struct.pack_into(">q", template, 0, batches * per_batch)
            block += template
            batches += 1
            if len(block) >= 1 << 22:
                f.write(block)
                written += len(block)
                block.clear()
        f.write(block)
    return batches * per_batch


def child(mode: str, path: str, chunk: int) -> None:
    from kafkacodec import FileRecords, LazyDownConvertRecords, down_convert

    sink = open(os.devnull, "wb", buffering=0)
    file = open(path, "rb")
    mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    baseline = status("VmRSS")
    reset_peak()
    start = time.perf_counter()
    if mode == "lazy-file":
        lazy = LazyDownConvertRecords(file, 1, chunk_size=chunk)
    elif mode == "lazy-filerecords":
        lazy = LazyDownConvertRecords(FileRecords.open(path), 1, chunk_size=chunk)
    elif mode == "lazy-mmap":
        lazy = LazyDownConvertRecords(mapped, 1, chunk_size=chunk)
    if mode.startswith("lazy"):
        written = 0
        while not lazy.completed:
            written += lazy.write_to(sink)
        records = lazy.stats.records_converted
    else:
        result = down_convert(FileRecords.open(path), 1)
        written = sink.write(memoryview(result.records))
        records = result.stats.records_converted
    elapsed = time.perf_counter() - start
    peak = status("VmHWM")
    print(f"{mode:16} peak growth {(peak - baseline) / 2**20:8.1f} MiB   "
          f"(RssAnon {status('RssAnon') / 2**20:7.1f} MiB, RssFile {status('RssFile') / 2**20:7.1f} MiB at end)  "
          f"{written / 2**20:7.0f} MiB written, {records} records, {elapsed:5.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--chunk-kb", type=int, default=128)
    parser.add_argument("--modes", default="lazy-file,lazy-filerecords,lazy-mmap,eager")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.chunk_kb << 10)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "00000000000000000000.log")
        records = write_log(path, args.size_mb << 20)
        print(f"log: {os.path.getsize(path) / 2**20:.0f} MiB, {records} records of 1 KiB, "
              f"chunk {args.chunk_kb} KiB")
        for mode in args.modes.split(","):
            subprocess.run([sys.executable, __file__, "--chunk-kb", str(args.chunk_kb),
                            "--child", mode, path], check=True)


if __name__ == "__main__":
    main()
