"""A small progress bar on stderr (shown only on a terminal unless forced)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}P"


class Progress:
    """`with Progress(total, "verify", unit="B") as bar: bar.update(n)`; `bar.set(done, total)`."""

    def __init__(self, total: float | None, label: str, *, unit: str = "", enabled: bool | None = None,
                 stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.done = 0.0
        self.label = label
        self.unit = unit
        self.start = time.monotonic()
        self._last = 0.0
        self.note = ""

    def __enter__(self) -> Progress:
        self._draw(force=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._draw(force=True)
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()

    def update(self, n: float = 1, note: str | None = None) -> None:
        self.done += n
        if note is not None:
            self.note = note
        self._draw()

    def set(self, done: float, total: float | None = None, note: str | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if note is not None:
            self.note = note
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        elapsed = max(now - self.start, 1e-9)
        rate = f"{_human(self.done / elapsed)}{self.unit}/s"
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 30)
            line = (f"{self.label} [{bar:<30}] {frac:6.1%} {_human(self.done)}/{_human(self.total)}"
                    f"{self.unit} {rate} {self.note}")
        else:
            line = f"{self.label} {_human(self.done)}{self.unit} {rate} {self.note}"
        self.stream.write("\r" + line[:120].ljust(120))
        self.stream.flush()
