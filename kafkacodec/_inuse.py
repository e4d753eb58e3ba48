"""The in-use guard of pure-Python objects that must serve one call at a time (the Python twin
of _guard.pxd): a second call while one runs raises ConcurrentUseError with the same words."""

from __future__ import annotations

import threading
from types import TracebackType

from kafkacodec.errors import ConcurrentUseError


class InUse:
    """`with self._in_use:` around a call; never blocks, never nests."""

    __slots__ = ("name", "_lock", "_owner")

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._owner: int | None = None

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            if self._owner == threading.get_ident():
                raise ConcurrentUseError(
                    f"{self.name} is in use by an unfinished call on this thread (re-entered "
                    "from a callback); make the call after it returns")
            raise ConcurrentUseError(f"{self.name} is in use by another thread: use one per "
                                     "thread")
        self._owner = threading.get_ident()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._owner = None
        self._lock.release()
