"""Remote reads a caller does not wait for: a partition log given `DeferredReads` never blocks on
an object store.  Where it would read a remote file (its size, a byte range, an index or snapshot
file), it takes the bytes from this cache, or raises `ReadPending`; the caller has the read done
elsewhere (`read()`, blocking: `kafkacodec serve` runs it on a worker thread) and runs the
operation again, which then finds every byte it needed read so far.  An operation may raise
`ReadPending` more than once, one missing piece each time (an index file, then the range a lookup
walks, then the records); the engine changes none of its state before the bytes it needs are there
(logdir/partition_log.py, logdir/_txn.py keep to that), so a repeat is the same operation.

The cache holds 1 MiB blocks of each file (a read fetches the missing span of blocks in one
ranged read) and whole small files, least recently used first out, within `limit` bytes; a range
larger than a quarter of that is fetched and kept whole.  A read that failed is kept as its
error for `retry_after` seconds: lookups meanwhile raise it (an OSError: the caller's
storage-failure path), the first one after makes the read again.  Remote objects of tiered
storage do not change once written; a file's size is read once.

Thread-safe: lookups on the owner's thread and `read()` on any number of workers share one lock
(held for dictionary work only, never across a read).  What a lookup returns is immutable `bytes`,
so eviction never pulls them from under a sender.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, NoReturn

__all__ = ["DeferredReads", "ReadPending", "RemoteReadError", "BLOCK"]

BLOCK = 1 << 20                     # bytes of a remote file cached as one unit


class RemoteReadError(OSError):
    """A remote read failed (within the last `retry_after` seconds): the store's error."""


class ReadPending(Exception):
    """A remote read the caller does not wait for: hand it to `DeferredReads.read()` (blocking)
    and run the operation that raised it again once that returns.  `key` names the read (equal
    keys are one read).  Not an OSError: nothing between the engine and its caller takes it for a
    storage failure."""

    def __init__(self, reads: DeferredReads, key: tuple[Any, ...], what: str):
        super().__init__(what)
        self.reads = reads
        self.key = key

    def read(self) -> None:
        self.reads.read(self)


class DeferredReads:
    """The bytes of remote files the owner may use without waiting (see the module)."""

    def __init__(self, limit: int = 64 << 20, open_files: int = 32, retry_after: float = 1.0):
        self.limit = limit
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {}                      # uri -> size (one int a segment)
        self._data: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()   # LRU: blocks, spans, files
        self._bytes = 0
        self._failed: dict[tuple[Any, ...], tuple[str, float]] = {}   # key -> (why, until)
        self._jobs: dict[tuple[Any, ...], tuple[Any, str, int, int]] = {}  # key -> (storage, path, start, end)
        self._files: OrderedDict[str, Any] = OrderedDict()    # uri -> open pyarrow file (read_at is thread-safe)
        self._open_files = open_files
        self.reads = 0                                        # ranged reads and file reads made
        self.bytes_read = 0

    # --- lookups (the owner's thread) ---------------------------------------------------------
    def size(self, storage: Any, path: str) -> int:
        uri = storage.uri(path)
        with self._lock:
            size = self._sizes.get(uri)
        if size is not None:
            return size
        self._miss(("size", uri), storage, path, 0, 0, f"the size of {uri}")

    def range(self, storage: Any, path: str, start: int, end: int) -> tuple[bytes, int]:
        """(buffer, file position of its first byte) holding bytes [start, end) of the file
        (`end` at most its size)."""
        uri = storage.uri(path)
        if end - start > self.limit // 4:
            key: tuple[Any, ...] = ("span", uri, start, end)
            with self._lock:
                data = self._take(key)
            if data is not None:
                return data, start
            self._miss(key, storage, path, start, end, f"bytes {start}-{end} of {uri}")
        first, last = start // BLOCK, max(start, end - 1) // BLOCK
        with self._lock:
            blocks = [self._take(("block", uri, n)) for n in range(first, last + 1)]
        have = [b for b in blocks if b is not None]
        if len(have) == len(blocks):
            return (have[0] if len(have) == 1 else b"".join(have)), first * BLOCK
        missing = [first + i for i, b in enumerate(blocks) if b is None]
        lo, hi = missing[0], missing[-1]                 # (a read past the file's end reads less)
        self._miss(("blocks", uri, lo, hi), storage, path, lo * BLOCK, (hi + 1) * BLOCK,
                   f"bytes {start}-{end} of {uri}")

    def whole(self, storage: Any, path: str, limit: int = 64 << 20) -> bytes:
        """A small file whole (an index or snapshot file); ValueError past `limit`."""
        uri = storage.uri(path)
        key = ("file", uri)
        with self._lock:
            data = self._take(key)
        if data is not None:
            return data
        self._miss(key, storage, path, 0, limit, uri)

    def _take(self, key: tuple[Any, ...]) -> bytes | None:
        """The kept bytes of `key` (None when not kept); its kept error raised.  Under the lock."""
        self._raise_failure(key)
        data = self._data.get(key)
        if data is not None:
            self._data.move_to_end(key)
        return data

    def _miss(self, key: tuple[Any, ...], storage: Any, path: str, start: int, end: int,
              what: str) -> NoReturn:
        """Raise the read's kept error, else ReadPending (the read recorded for `read()`)."""
        with self._lock:
            self._raise_failure(key)
            self._jobs[key] = (storage, path, start, end)
        raise ReadPending(self, key, what)

    def _raise_failure(self, key: tuple[Any, ...]) -> None:
        failed = self._failed.get(key)
        if failed is not None:
            if time.monotonic() < failed[1]:
                raise RemoteReadError(failed[0])
            del self._failed[key]

    # --- reads (any thread, blocking) ----------------------------------------------------------
    def read(self, pending: ReadPending) -> None:
        """Do the read `pending` names and keep what it read (or its error, for the next lookup)."""
        key = pending.key
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is None:
            return                                             # done by an earlier call
        storage, path, start, end = job
        try:
            self._read(key, storage, path, start, end)
        except Exception as exc:                 # kept: lookups raise it until retry_after
            self.fail(key, f"reading {pending}: {exc}")

    def fail(self, key: tuple[Any, ...], why: str) -> None:
        """Lookups of `key` raise RemoteReadError(why) for the next `retry_after` seconds (a
        read that failed, or that its owner stopped waiting for)."""
        with self._lock:
            self._failed[key] = (why, time.monotonic() + self.retry_after)

    def _read(self, key: tuple[Any, ...], storage: Any, path: str, start: int, end: int) -> None:
        uri = storage.uri(path)
        kind = key[0]
        if kind == "file":
            data = storage.read_bytes(path, end)
            self._keep([(key, data)], uri)
            return
        file = self._file(storage, path, uri)
        if kind == "size":
            with self._lock:
                self._sizes[uri] = int(file.size())
            return
        data = bytes(file.read_at(end - start, start))        # (bytes already: no copy)
        if kind == "span":
            self._keep([(key, data)], uri)
            return
        first = start // BLOCK
        self._keep([(("block", uri, first + i), data[i * BLOCK:(i + 1) * BLOCK])
                    for i in range((len(data) + BLOCK - 1) // BLOCK)], uri)

    def _file(self, storage: Any, path: str, uri: str) -> Any:
        with self._lock:
            file = self._files.get(uri)
            if file is not None:
                self._files.move_to_end(uri)
                return file
        file = storage.fs.open_input_file(path)
        with self._lock:
            self._sizes.setdefault(uri, int(file.size()))
            self._files[uri] = file
            while len(self._files) > self._open_files:
                self._files.popitem(last=False)   # (closed when no read holds it any more)
        return file

    def _keep(self, items: list[tuple[tuple[Any, ...], bytes]], uri: str) -> None:
        with self._lock:
            for key, data in items:
                old = self._data.pop(key, None)
                self._bytes += len(data) - (len(old) if old is not None else 0)
                self._data[key] = data
                self.bytes_read += len(data)
            self.reads += 1
            while self._bytes > self.limit and len(self._data) > len(items):
                _, dropped = self._data.popitem(last=False)
                self._bytes -= len(dropped)

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        with self._lock:
            files, self._files = list(self._files.values()), OrderedDict()
            self._data.clear()
            self._bytes = 0
        for file in files:
            file.close()
