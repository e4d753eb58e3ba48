"""A call run in a daemon thread, for tests that make a blocking call while they do something
else, or that must not wait for a call that does not end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start `call()` in a daemon thread: (thread, box); once it ends, box holds "result" (or
    "error", what it raised) and "took" (seconds)."""
    box: dict[str, Any] = {}

    def run() -> None:
        start = time.monotonic()
        try:
            box["result"] = call()
        except BaseException as exc:            # handed to the test
            box["error"] = exc
        box["took"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box
