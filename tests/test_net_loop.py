"""kafkacodec.net's Loop: one run at a time (a blocking call from one of its callbacks is refused,
not a stall of every other callback), and cancelled timers do not pile up."""

from __future__ import annotations

import threading
import time

import pytest

from kafkacodec.errors import ConcurrentUseError
from kafkacodec.net.loop import CANCELLED_TIMERS_KEPT, Loop


def test_a_callback_that_runs_the_loop_is_refused_and_the_loop_goes_on():
    """A callback that makes a blocking call (which runs the loop inside itself, as the consumer
    core's blocking calls do) gets ConcurrentUseError: the other callbacks are not held up
    behind it, and the loop goes on.  (Before: the nested run took the loop over.)"""
    loop = Loop()
    seen = []

    def blocking() -> None:
        try:
            loop.run_once(5)
        except ConcurrentUseError as exc:
            seen.append(str(exc))
            raise

    loop.call_soon(blocking)
    loop.call_soon(lambda: seen.append("next"))
    start = time.monotonic()
    loop.run_once(0)
    assert time.monotonic() - start < 1
    assert len(seen) == 2 and "the event loop is in use" in seen[0] and seen[1] == "next", seen
    loop.close()


def test_a_second_thread_cannot_run_a_running_loop():
    loop = Loop()
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(5)

    loop.call_soon(hold)
    runner = threading.Thread(target=loop.run_once, args=(0,))
    runner.start()
    assert entered.wait(5)
    try:
        with pytest.raises(ConcurrentUseError, match="another thread"):
            loop.run_once(0)
    finally:
        release.set()
        runner.join(5)
    loop.run_once(0)                      # free again
    loop.close()


def test_cancelled_timers_do_not_pile_up():
    """Every asynchronous call arms a timer for its deadline and cancels it when it ends: the
    heap keeps at most CANCELLED_TIMERS_KEPT of them, or half of it (before: each stayed until
    its deadline, 10 000 here)."""
    loop = Loop()
    ran = []
    live = loop.call_later(60, lambda: ran.append("live"))
    for _ in range(10_000):
        loop.call_later(60, lambda: ran.append("cancelled")).cancel()
    loop.call_soon(lambda: ran.append("soon"))
    loop.run_once(0)
    assert len(loop._timers) <= 2 * CANCELLED_TIMERS_KEPT + 1, len(loop._timers)
    assert ran == ["soon"]
    live.cancel()
    again = []
    for i in range(3):
        loop.call_at(time.monotonic() - 1, lambda i=i: again.append(i))
    loop.run_once(0)
    assert again == [0, 1, 2]             # timers due together run in the order they were made
    loop.close()
