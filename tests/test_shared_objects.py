"""Objects that are not safe to share refuse a second thread with ConcurrentUseError, instead of
mixing two calls' state (found by the concurrency harness, fuzz/concurrency.py): DownConverter
and ChunkReader (conversion releases the GIL while decompressing), LazyDownConvertRecords
(write_to() resumes a shared send), the tests' BlockingClient (a request and its response
are two socket calls). Each runs in a subprocess: the failure before the guards was wrong data,
or a crash."""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest

from isolated import run_python

SHARED_CONVERTER = r"""
import json, sys, threading
from kafkacodec import (ConcurrentUseError, KafkaCodecError, MemoryRecords, MemoryRecordsBuilder,
                        down_convert)
from kafkacodec._convert import DownConverter

def batch(base, n, size):
    builder = MemoryRecordsBuilder(compression="gzip", base_offset=base)
    for i in range(n):
        builder.append(i, b"k%d" % (base + i), bytes([(base + i) % 251]) * size)
    return builder.build()

def plain(base):
    builder = MemoryRecordsBuilder(base_offset=base)
    builder.append(1, b"k%d" % base, b"v")
    return builder.build()

# 16 MB to inflate without the GIL, then an entry that fails the call: before the guard, its
# rollback also erased what other threads converted meanwhile (or exposed stale bytes)
big = batch(0, 40, 400_000) + plain(10_000)[:-1] + b"\xff"
smalls = [plain(1000 + i) for i in range(2000)]
conv = DownConverter(1)
outputs, converted, busy, other = [], [], set(), []
done = threading.Event()

def keep(call):
    try:
        return call()
    except ConcurrentUseError as exc:
        busy.add(str(exc))
    except BaseException as exc:
        other.append(repr(exc))

def slow():
    for _ in range(3):
        try:
            conv.convert(big)
        except ConcurrentUseError as exc:
            busy.add(str(exc))
        except KafkaCodecError:
            pass                            # the last entry: expected
    done.set()

def fast():
    for i, s in enumerate(smalls):
        if done.is_set():
            break
        if keep(lambda: conv.convert(s)) is not None:
            converted.append(s)
        if i % 7 == 0:
            taken = keep(conv.take)
            if taken is not None:
                outputs.append(bytes(memoryview(taken[0])))

threads = [threading.Thread(target=slow), threading.Thread(target=fast)]
for t in threads: t.start()
for t in threads: t.join()
outputs.append(bytes(memoryview(conv.take()[0])))
got = sorted((r.offset, r.key, r.value) for o in outputs for r in MemoryRecords(o).records())
want = sorted((r.offset, r.key, r.value) for c in converted
              for r in MemoryRecords(bytes(down_convert(c, 1).records.buffer)).records())
print(json.dumps({"same": got == want, "records": len(got), "busy": sorted(busy),
                  "other": other}))
"""

SHARED_CHUNK_READER = r"""
import json, threading
from kafkacodec import ConcurrentUseError, MemoryRecords, MemoryRecordsBuilder
from kafkacodec._convert import ChunkReader, DownConverter

log = b""
for b in range(60):
    builder = MemoryRecordsBuilder(compression="gzip", base_offset=b * 5)
    for i in range(5):
        builder.append(i, b"k", bytes([(b * 5 + i) % 251]) * 200_000)
    log += builder.build()
reader = ChunkReader(log, DownConverter(1))
outputs, busy, other = [], set(), []

def work():
    while True:
        try:
            step = reader.step(0)
        except ConcurrentUseError as exc:
            busy.add(str(exc))
            continue
        except BaseException as exc:
            other.append(repr(exc))
            return
        if step is None:
            return
        outputs.append(bytes(memoryview(step[0])))

threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
offsets = sorted(r.offset for o in outputs for r in MemoryRecords(o).records())
print(json.dumps({"offsets_ok": offsets == list(range(300)), "records": len(offsets),
                  "busy": sorted(busy), "other": other}))
"""


@pytest.mark.parametrize("script", [SHARED_CONVERTER, SHARED_CHUNK_READER],
                         ids=["DownConverter", "ChunkReader"])
def test_a_converter_shared_by_threads_works_or_says_it_is_in_use(script):
    proc = run_python(script)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["other"] == [], info
    assert info.get("same", info.get("offsets_ok")), info
    assert info["busy"], "the threads never overlapped: the test proves nothing"
    assert all("in use by another thread" in message for message in info["busy"]), info


SHARED_LAZY = r"""
import io, json, threading
from kafkacodec import ConcurrentUseError, LazyDownConvertRecords, MemoryRecords, MemoryRecordsBuilder

log = b""
for b in range(40):
    builder = MemoryRecordsBuilder(compression="gzip", base_offset=b * 5)
    for i in range(5):
        builder.append(i, b"k", bytes([(b * 5 + i) % 251]) * 100_000)
    log += builder.build()
alone = io.BytesIO()
lazy = LazyDownConvertRecords(MemoryRecords(log), 1, chunk_size=0)
while lazy.write_to(alone):
    pass
shared = LazyDownConvertRecords(MemoryRecords(log), 1, chunk_size=0)
sink, lock, busy, other = io.BytesIO(), threading.Lock(), set(), []

class Sink:
    def write(self, data):
        with lock:
            return sink.write(data[:100_000])

def work():
    while not shared.completed:
        try:
            shared.write_to(Sink())
        except ConcurrentUseError as exc:
            busy.add(str(exc))
        except BaseException as exc:
            other.append(repr(exc))
            return

threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"same": sink.getvalue() == alone.getvalue(), "busy": sorted(busy),
                  "other": other}))
"""


def test_lazy_conversion_shared_by_threads_works_or_says_it_is_in_use():
    proc = run_python(SHARED_LAZY)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["other"] == [] and info["same"], info
    assert info["busy"] and all("in use by another thread" in m for m in info["busy"]), info


def test_lazy_iteration_during_a_send_is_refused_and_the_send_goes_on():
    from kafkacodec import ConcurrentUseError, LazyDownConvertRecords, MemoryRecordsBuilder
    import io

    builder = MemoryRecordsBuilder(magic=2, compression="gzip")
    for i in range(20):
        builder.append(i, None, b"v%d" % i * 100)
    log = builder.build() * 3
    lazy = LazyDownConvertRecords(log, 0, chunk_size=0)
    seen = []

    class ReEntering:
        def write(self, data):
            try:
                list(lazy)                      # a callback using the same object
            except ConcurrentUseError as exc:
                seen.append(str(exc))
            return len(data)

    assert lazy.write_to(ReEntering()) == lazy.size_in_bytes
    assert seen and "unfinished call on this thread" in seen[0]
    assert len(list(lazy)) == 3                 # usable again once the call returned


def echo_server():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                body = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                conn.sendall(head + body)

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_blocking_client_shared_by_threads_gives_each_request_its_own_response():
    from kafkacodec import ConcurrentUseError
    from blocking_client import BlockingClient

    server = echo_server()
    client = BlockingClient("127.0.0.1", server.getsockname()[1], timeout=30)
    wrong, busy = [], set()

    def work(i):
        for j in range(200):
            payload = struct.pack(">ii", i, j) + bytes([i]) * (j * 50)
            try:
                got = client.request(struct.pack(">i", len(payload)) + payload)
            except ConcurrentUseError as exc:
                busy.add(str(exc))
                continue
            if bytes(got) != payload:
                wrong.append((i, j))
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    server.close()
    assert wrong == []
    assert busy and all("in use by another thread" in m for m in busy), busy


CLOSED_DURING_TRUNCATION_CHECK = r"""
import mmap, os, tempfile
from kafkacodec import BufferReleasedError, FileRecords, MemoryRecordsBuilder
from kafkacodec._mapguard import MappedFile

builder = MemoryRecordsBuilder()
for i in range(3):
    builder.append(i, b"k", b"v")
fd, path = tempfile.mkstemp(suffix=".log")
os.write(fd, builder.build())
os.close(fd)
os.truncate(path, os.path.getsize(path) - 1)   # shorter than mapped: the check looks closer
records = FileRecords.open(path)
os.truncate(path, os.path.getsize(path) + 1)

def size_then_close(self):
    # the truncation check's fstat lets other threads run: one closes the FileRecords there
    size = mmap.mmap.size(self)
    records.close()
    return size - 1

MappedFile.size = size_then_close
try:
    print(sum(1 for _ in records.records()))
except BufferReleasedError as exc:
    print("released:", exc)
os.unlink(path)
"""


def test_a_file_records_closed_during_its_truncation_check_raises_released():
    """The check's fstat releases the GIL; a FileRecords closed there unregistered the guard the
    check went on to read (SIGSEGV; found by the concurrency harness)."""
    proc = run_python(CLOSED_DURING_TRUNCATION_CHECK)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "released:" in proc.stdout or proc.stdout.strip().isdigit(), proc.stdout
