"""Remote segments read off the network thread.

A partition whose segments live in an object store (tiered storage on S3, GCS, HDFS) is read
through `kafkacodec.logdir.deferred.DeferredReads`: the loop never waits on the store.  Where a
request needs bytes not read yet, the engine raises `ReadPending`; `RemoteReads.defer` hands that
read to a worker thread and runs the waiting step again on the loop once it is done.  A Fetch
parks meanwhile like one waiting for data (and is answered without that partition's records
when its max_wait_ms is up); a ListOffsets answers when its lookup completes; any other request
runs again.  Equal reads wanted by several requests are one read.

Bounds: `threads` workers (each holds one ranged read at a time: at most a fetch's partition
bytes capped at `REMOTE_READ_CAP`, or a 16 MiB header window) and the cache's `memory`.  A read
that fails answers the requests waiting for it with the storage error (KAFKA_STORAGE_ERROR), and
so does one not done within `read_timeout` seconds (a store that holds a connection open and
sends nothing): its requests stop waiting, whatever the store client's own timeouts.

Owned by the server's loop thread (`defer`, `close`); the workers touch only the cache, which is
thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from kafkacodec.logdir.deferred import DeferredReads, ReadPending

__all__ = ["RemoteReads", "ReadPending", "REMOTE_READ_CAP", "MAX_RERUNS", "too_many_reruns"]

log = logging.getLogger("kafkacodec.serve")

#: How many times one step of a request runs again after remote reads before it is failed: a step
#: that needs more of a store at once than the cache holds would otherwise read for ever.
MAX_RERUNS = 256
#: How long requests wait for one remote read before it counts as failed.
READ_TIMEOUT_S = 30.0
#: The most bytes one partition of a Fetch reads from a remote segment (the first entry whole,
#: as KIP-74 asks, even when larger); the rest of a larger fetch comes with the next one.
REMOTE_READ_CAP = 8 << 20


def too_many_reruns(what: str) -> OSError:
    from kafkacodec.logdir.partition_log import StorageError

    return StorageError(f"{what} ran {MAX_RERUNS} times after remote reads and still needs more: it "
                        "needs more of the store at once than the remote read cache holds")


class RemoteReads:
    def __init__(self, loop: Any, memory: int = 64 << 20, threads: int = 4, read_timeout: float = READ_TIMEOUT_S):
        self.loop = loop
        self.cache = DeferredReads(memory)
        self.threads = threads
        self.read_timeout = read_timeout
        self._workers: ThreadPoolExecutor | None = None
        self._waiting: dict[tuple[Any, ...], list[Callable[[], None]]] = {}
        self._deadlines: dict[tuple[Any, ...], Any] = {}      # key -> its timer
        self.closed = False

    @property
    def pending(self) -> int:
        """Reads being made for waiting requests."""
        return len(self._waiting)

    def defer(self, pending: ReadPending, then: Callable[[], None]) -> None:
        """On the loop: make the read `pending` names on a worker, then call `then()` on the
        loop (once per call; a read already under way is not made twice)."""
        if self.closed:
            return
        waiters = self._waiting.get(pending.key)
        if waiters is not None:
            waiters.append(then)
            return
        self._waiting[pending.key] = [then]
        if self._workers is None:
            self._workers = ThreadPoolExecutor(self.threads, thread_name_prefix="kafkacodec-serve-remote")
        future = self._workers.submit(pending.read)
        key = pending.key
        future.add_done_callback(lambda f: self.loop.call_soon_threadsafe(lambda: self._done(key, f)))
        self._deadlines[key] = self.loop.call_later(self.read_timeout, lambda: self._timed_out(pending))

    def _done(self, key: tuple[Any, ...], future: Future[None]) -> None:
        error = future.exception() if not future.cancelled() else None
        if error is not None:                  # (read() keeps its errors for the lookup itself)
            log.error("a remote read failed: %s", error)
        self._wake(key)

    def _timed_out(self, pending: ReadPending) -> None:
        """The read took longer than read_timeout: its requests get the storage error."""
        if pending.key in self._waiting:
            log.warning("no answer from the store in %.0f s: %s", self.read_timeout, pending)
            self.cache.fail(pending.key, f"no answer from the store in {self.read_timeout:.0f} s: {pending}")
            self._wake(pending.key)

    def _wake(self, key: tuple[Any, ...]) -> None:
        timer = self._deadlines.pop(key, None)
        if timer is not None:
            timer.cancel()
        for then in self._waiting.pop(key, []):
            try:
                then()
            except Exception:
                log.exception("a step after a remote read failed")

    def close(self) -> None:
        self.closed = True
        self._waiting.clear()
        for timer in self._deadlines.values():
            timer.cancel()
        self._deadlines.clear()
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)
        self.cache.close()
