"""Progress bars on stderr, drawn by tqdm: as wide as the terminal (each redraw overwrites the
line, so nothing scrolls), with the rate and, when the total is known, the time left.  Nothing
is drawn when the stream is not a terminal (a pipe, a file, CI) unless forced."""

from __future__ import annotations

import sys
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """`with Progress(total, "verify", unit="B") as bar: bar.update(n)`; `bar.set(done, total)`.

    `total` None: a count and a rate, no bar.  `unit` "B" scales to kB/MB/GB; other units
    scale with k/M.  `enabled` None: only when `stream` (stderr) is a terminal.  Not for
    concurrent use from several threads."""

    def __init__(self, total: float | None, label: str, *, unit: str = "", enabled: bool | None = None,
                 stream: TextIO | None = None):
        from tqdm import tqdm

        self.stream = stream or sys.stderr
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self.note = ""
        self.done = 0.0
        self._bar: Any = tqdm(total=total or None, desc=label, unit=unit or "it", unit_scale=unit == "B",
                              file=self.stream,
                              disable=not self.enabled, dynamic_ncols=True, leave=True,
                              smoothing=0.1)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()

    def update(self, n: float = 1, note: str | None = None) -> None:
        """`n` more done."""
        self._set_note(note)
        self.done += n
        if not self._bar.disable:
            self._bar.update(n)

    def set(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """`done` in all (and a new total, when it is known now)."""
        self._set_note(note)
        self.done = done
        if self._bar.disable:
            return
        if total is not None and total != self._bar.total:
            self._bar.total = total
            self._bar.refresh()
        if done >= self._bar.n:
            self._bar.update(done - self._bar.n)      # keeps the rate and the redraw interval
        else:                                          # went back (new work was counted)
            self._bar.n = done
            self._bar.refresh()

    def _set_note(self, note: str | None) -> None:
        if note is not None and note != self.note:
            self.note = note
            if not self._bar.disable:
                self._bar.set_postfix_str(note, refresh=False)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):          # closed or not a real stream
        return False
