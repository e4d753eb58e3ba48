"""Streams as the `kafkacodec` command's inputs: a FIFO fed by a writer thread (what `mkfifo`
and a shell's `<(zcat seg.log.gz)` give a command), bounded in time whatever the command does
with it, and the command run with bytes on its stdin (`cat seg.log | kafkacodec dump -`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from isolated import child_env

TIMEOUT = 30.0


def _release(path: Path, flags: int) -> None:
    """Open `path` without blocking and close it again: a side waiting in open() for its peer
    (a writer for a reader, a reader for a writer) goes on (and reads EOF, or gets EPIPE)."""
    try:
        os.close(os.open(path, flags | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:    # no reader waiting: nothing to release
            raise


@contextmanager
def fed_fifo(path: Path, data: bytes) -> Iterator[dict[str, object]]:
    """A FIFO at `path` that a thread writes `data` into once a reader opens it.  Yields what
    happened to the writer once the block ends: "opened" (a reader opened the FIFO within the
    block), "written" (bytes written; less than `data` when the reader stopped reading),
    "broken" (the reader closed it first).  On leaving, a writer still waiting for a reader is
    let go, and so is a command left waiting in open() for a second writer by a watchdog after
    TIMEOUT seconds: nothing hangs."""
    os.mkfifo(path)
    state: dict[str, object] = {"opened": False, "written": 0}
    leaving = threading.Event()

    def write() -> None:
        fd = os.open(path, os.O_WRONLY)             # waits for the reader
        state["opened"] = not leaving.is_set()
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                state["written"] = int(state["written"]) + n    # type: ignore[call-overload]
                view = view[n:]
        except BrokenPipeError:                     # the reader stopped reading: as `cat` sees it
            state["broken"] = True
        finally:
            os.close(fd)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    watchdog = threading.Timer(TIMEOUT, _release, (path, os.O_WRONLY))
    watchdog.start()
    try:
        yield state
    finally:
        watchdog.cancel()
        leaving.set()
        if writer.is_alive():
            _release(path, os.O_RDONLY)            # never opened: let the writer finish
        writer.join(TIMEOUT)
        assert not writer.is_alive(), "the FIFO's writer did not finish"


def cli_with_stdin(data: bytes, *argv: object, cwd: Path | None = None,
                   timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """`kafkacodec ARGV...` in a child process with `data` piped into its stdin, run in `cwd`
    (default: a temporary directory, never the checkout: a command that took `-` for a path
    would write there)."""
    with tempfile.TemporaryDirectory() as scratch:
        return subprocess.run([sys.executable, "-m", "kafkacodec.cli", *map(str, argv)], input=data,
                              capture_output=True, timeout=timeout, env=child_env(),
                              cwd=scratch if cwd is None else cwd)
