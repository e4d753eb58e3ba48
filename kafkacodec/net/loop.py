"""The event loop every network part runs on: one selector, timers, and a thread-safe way in.

`kafkacodec serve` runs it on its own thread (`run_once()` until stopped); the consumer core
and `kafkacodec mirror` run it from the caller's thread (`run_once(timeout)` while a blocking call
waits for its answer); `serve --upstream` puts the upstream cluster's connections on the server's
loop, so an upstream answer is a callback, never a wait.  Every callback runs on the thread
running the loop; `call_soon_threadsafe` is the only entry from others.

The loop runs one `run_once` at a time: a callback that makes a blocking call (which would run
the loop inside itself and hold up every other callback until its answer), or a second thread
running it, gets ConcurrentUseError instead of a stall.

A callback that raises is logged and the loop goes on (the callbacks that own a connection
close it themselves).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kafkacodec._inuse import InUse

__all__ = ["Loop", "Timer"]

log = logging.getLogger("kafkacodec.net")

#: Cancelled timers wait in the heap until they are due; once there are more than this many
#: and they are over half of it, the heap is rebuilt without them (asyncio's rule).  Every
#: asynchronous call arms a timer for its deadline and cancels it when it ends early, so this
#: bounds what finished calls leave behind.
CANCELLED_TIMERS_KEPT = 100


class Timer:
    """A callback due at `when` (time.monotonic()); `cancel()` before it runs drops it."""

    __slots__ = ("when", "callback", "cancelled", "_loop")

    def __init__(self, when: float, callback: Callable[[], None], loop: Loop | None = None):
        self.when = when
        self.callback = callback
        self.cancelled = False
        self._loop = loop               # while it waits in that loop's heap

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self._loop is not None:
                self._loop._cancelled += 1


class Loop:
    """A selector loop with timers and a wake-up socket pair.

    `fairness`, when set, is asked before each batch of events: True shuffles them, so no
    connection is always served last (KIP-72, while request memory is scarce)."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Timer]] = []
        self._cancelled = 0                   # cancelled timers still in the heap
        self._seq = itertools.count()
        self._pending: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        self.fairness: Callable[[], bool] | None = None
        self.thread: threading.Thread | None = None
        self.closed = False
        self._running = InUse("the event loop")     # run_once neither nests nor runs twice

    # --- scheduling ---------------------------------------------------------------------------
    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run `callback` at `when` (time.monotonic()); timers due at the same time run in the
        order they were made."""
        timer = Timer(when, callback, self)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def _pop_timer(self) -> Timer:
        _, _, timer = heapq.heappop(self._timers)
        timer._loop = None
        if timer.cancelled:
            self._cancelled -= 1
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return self.call_at(time.monotonic() + max(0.0, delay), callback)

    def call_soon(self, callback: Callable[[], None]) -> Timer:
        return self.call_later(0.0, callback)

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(callback)
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass                                  # already awake (buffer full), or closing

    def _drain_wake(self, mask: int) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    # --- sockets ------------------------------------------------------------------------------
    def watch(self, sock: Any, events: int, handler: Callable[[int], None], current: int) -> int:
        """Set the events `sock` is watched for (0: none) from `current`; returns `events`."""
        if events == current:
            return events
        if current == 0:
            self.selector.register(sock, events, handler)
        elif events == 0:
            self.selector.unregister(sock)
        else:
            self.selector.modify(sock, events, handler)
        return events

    def forget(self, sock: Any) -> None:
        """Stop watching `sock` (closed, or about to be)."""
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass

    # --- running ------------------------------------------------------------------------------
    def next_timeout(self) -> float | None:
        """Seconds until the next timer (None: no timer), 0 when callbacks are pending."""
        if self._cancelled > CANCELLED_TIMERS_KEPT and 2 * self._cancelled > len(self._timers):
            for _, _, timer in self._timers:
                if timer.cancelled:
                    timer._loop = None
            self._timers = [entry for entry in self._timers if not entry[2].cancelled]
            heapq.heapify(self._timers)
            self._cancelled = 0
        while self._timers and self._timers[0][2].cancelled:
            self._pop_timer()
        if self._pending:
            return 0.0
        if self._timers:
            return max(0.0, self._timers[0][0] - time.monotonic())
        return None

    def run_once(self, timeout: float | None = None) -> None:
        """Wait up to `timeout` seconds (None: until the next timer or event) and run what is
        due: socket events, callbacks from other threads, timers.  ConcurrentUseError from one of
        its own callbacks (a blocking call where only callbacks may run) or while another thread
        runs it."""
        with self._running:
            self._run_once(timeout)

    def _run_once(self, timeout: float | None) -> None:
        due = self.next_timeout()
        if due is not None:
            timeout = due if timeout is None else min(timeout, due)
        events = self.selector.select(timeout)
        if len(events) > 1 and self.fairness is not None and self.fairness():
            random.shuffle(events)
        for key, mask in events:
            _guarded(key.data, mask)
        while True:
            with self._lock:
                if not self._pending:
                    break
                callback = self._pending.popleft()
            _guarded(callback)
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            timer = self._pop_timer()
            if not timer.cancelled:
                _guarded(timer.callback)

    def run_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Run until `done()` or `timeout` seconds passed; returns done()."""
        end = time.monotonic() + timeout
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                return done()
            self.run_once(left)
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _guarded(callback: Callable[..., None], *args: Any) -> None:
    """Run a loop callback; a failure is logged, never the end of the loop."""
    try:
        callback(*args)
    except Exception:
        log.exception("a loop callback failed")
