"""Input and output files of the commands, and streams given as inputs.

A file is read by name: inputs found inside a directory must be regular files (a FIFO there
would block, a device never ends; logdir reports them, never opens them).  An input named on
the command line may be a stream: `-` (stdin), a FIFO (`<(zcat seg.log.gz)`, `mkfifo`), a
character device.  Commands that read one segment's bytes (dump, read, verify, convert) read
such a stream through `spooled()`: its bytes are copied into a regular file of a temporary
directory (removed at the end), at most STREAM_LIMIT bytes, and the command reads that file as
it would read the input (`local()` gives its path; `shown()` puts the name the user gave back
into every message).  Commands that need the file or directory itself (spark convert, serve,
generate's and mirror's directories) refuse a stream with `refuse_stream()`: one line saying
what it is and what they need, exit 3.  A write error names the output."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from kafkacodec.cli._exit import EXIT_INPUT, CliError

if TYPE_CHECKING:
    from kafkacodec._records import FileRecords
    from kafkacodec.logdir import Problem

__all__ = ["file_kind", "check_regular", "open_segment", "segment_head", "name_output", "STREAM_LIMIT",
           "stream_kind", "spooled", "local", "shown", "shown_problem", "refuse_stream"]

# The most a stream input may carry: a Kafka segment is at most 2 GiB - 1 bytes (log.segment.bytes
# is an int).  More is refused with exit 3, and nothing beyond it is read.
STREAM_LIMIT = (1 << 31) - 1
_CHUNK = 1 << 20

_SPOOLED: dict[str, str] = {}   # a stream input as given -> the regular file holding its bytes
_SHOWN: dict[str, str] = {}     # that file and its directory -> what the user gave (for messages)


def stream_kind(path: str | Path) -> str | None:
    """What `path` is when it can only be read as a stream ("stdin" for `-`, "a FIFO",
    "a character device"), else None (a regular file, a directory, a missing path...: the
    command's own checks)."""
    if str(path) == "-":
        return "stdin"
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    return None


def refuse_stream(path: str | Path | None, command: str, needs: str, *, dash: str = "stdin",
                  advice: str = "") -> None:
    """CliError (exit 3) when `path` is a stream (`-`: `dash`, what it stands for there):
    `command` needs `needs`, a file or directory it opens by name; `advice` ends the line."""
    kind = None if path is None else stream_kind(path)
    if kind is not None:
        what = f"- is {dash}" if kind == "stdin" else f"{path} is {kind}"
        raise CliError(f"{what}; {command} needs {needs}, not a stream{advice}", EXIT_INPUT)


def local(path: str | Path) -> str:
    """The file to open for the input `path`: its spooled copy while `spooled()` holds one."""
    return _SPOOLED.get(str(path), str(path))


def shown(text: str) -> str:
    """`text` with the spooled copies' paths replaced by the inputs' names (every message that
    may name an input goes through it)."""
    for copy in sorted(_SHOWN, key=len, reverse=True) if _SHOWN else ():
        text = text.replace(copy, _SHOWN[copy])
    return text


def shown_problem(problem: Problem) -> Problem:
    """A logdir problem with the inputs' names in its path and message (shown())."""
    if not _SHOWN:
        return problem
    return replace(problem, path=shown(problem.path), message=shown(problem.message))


def _open_stream(path: str, command: str) -> BinaryIO:
    """The stream's reader; a terminal is refused (binary data is not typed in: gzip's rule)."""
    if path == "-":
        if sys.stdin is None:
            raise CliError("- is stdin, and this process has none; pipe a segment into it "
                           f"(cat seg.log | kafkacodec {command} -)", EXIT_INPUT)
        reader: BinaryIO = sys.stdin.buffer
    else:
        reader = open(path, "rb")   # a FIFO waits for its writer, as `cat` does
    try:
        if reader.isatty():
            raise CliError(f"{'- is stdin, a terminal' if path == '-' else f'{path} is a terminal'}; "
                           f"pipe a segment into it (cat seg.log | kafkacodec {command} -)", EXIT_INPUT)
    except BaseException:
        if path != "-":
            reader.close()
        raise
    return reader


def _spool(path: str, into: str, keep: int | None, command: str) -> str:
    """Copy the stream `path` into a regular file under `into`, named and placed as `path` is
    (the directory's name gives a segment's topic and partition, the file's its base offset;
    stdin: topic "stdin", partition 0); at most `keep` bytes when given, else all of them up to
    STREAM_LIMIT."""
    given = os.path.abspath(path) if path != "-" else None
    directory = os.path.join(into, os.path.basename(os.path.dirname(given)) if given else "stdin")
    copy = os.path.join(directory, os.path.basename(given) if given else "-")
    os.makedirs(directory)
    _SHOWN[copy] = path
    _SHOWN[directory] = os.path.dirname(given) if given else "-"
    quiet = keep is not None and keep <= STREAM_LIMIT      # the command examines no more
    limit = keep if keep is not None and quiet else STREAM_LIMIT
    reader = _open_stream(path, command)
    try:
        with open(copy, "wb") as out:
            total = 0
            while True:
                chunk = reader.read(min(_CHUNK, limit + 1 - total))
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    if quiet:
                        out.write(chunk[:len(chunk) - (total - limit)])
                        break
                    raise CliError(f"{path}: the stream carries more than {STREAM_LIMIT} bytes, "
                                   "more than a Kafka segment holds (log.segment.bytes is an int); "
                                   "it was not read further", EXIT_INPUT)
                try:
                    out.write(chunk)
                except OSError as exc:
                    raise CliError(f"{path}: cannot keep the stream's bytes to read them: "
                                   f"{exc.strerror} in {into} (set TMPDIR to a larger place)",
                                   EXIT_INPUT) from None
    finally:
        if path != "-":
            reader.close()
    return copy


@contextmanager
def spooled(paths: Sequence[str | Path], command: str, keep: int | None = None) -> Iterator[list[str]]:
    """`paths` with every stream among them (`-`, a FIFO, a character device) read into a
    regular file of a temporary directory, removed at the end; yields the paths to read (a
    stream's copy, any other path as given) and makes `local()` give the copies.  A stream
    named twice is read once.  `keep`: read at most this many bytes of each (the command
    examines no more); without it a stream longer than STREAM_LIMIT is refused (exit 3)."""
    streams = [p for p in dict.fromkeys(map(str, paths)) if stream_kind(p) is not None]
    if not streams:
        yield [str(p) for p in paths]
        return
    into = tempfile.mkdtemp(prefix=f"kafkacodec-{command}-")
    try:
        copies = {p: _spool(p, os.path.join(into, str(i)), keep, command) for i, p in enumerate(streams)}
        _SPOOLED.update(copies)
        yield [copies.get(str(p), str(p)) for p in paths]
    finally:
        for p in streams:
            _SPOOLED.pop(p, None)
        shutil.rmtree(into, ignore_errors=True)    # ours: made above


def file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def check_regular(path: str | Path, command: str) -> None:
    """CliError (exit 3) unless `path` (a spooled stream: its copy) is a regular file, before
    anything opens it."""
    try:
        mode = os.stat(local(path)).st_mode
    except FileNotFoundError:
        raise CliError(f"{path}: no such file; give a Kafka segment such as "
                       "my-topic-0/00000000000000000000.log", EXIT_INPUT) from None
    if not stat.S_ISREG(mode):
        hint = " (`kafkacodec verify DIR` checks a whole directory)" if stat.S_ISDIR(mode) else ""
        raise CliError(f"{path} is a {file_kind(mode)}, not a regular file; {command} takes "
                       f"segment files{hint}", EXIT_INPUT)


def open_segment(path: str | Path, command: str) -> FileRecords:
    """A segment file, mapped (FileRecords); anything but a regular file is refused first."""
    from kafkacodec import FileRecords

    check_regular(path, command)
    return FileRecords.open(local(path))


def segment_head(segment: FileRecords) -> bytes:
    """The first 17 bytes of a mapped segment (offset, size, CRC or epoch, magic: what tells a
    Kafka segment), or FileTruncatedError when another process cut the file under them (the
    mapping then reads zeros, which would look like "not a Kafka segment")."""
    from kafkacodec._mapguard import check_read

    head = bytes(segment.buffer[:17])
    check_read(segment.buffer, len(head))
    return head


def name_output(error: OSError, path: str | Path) -> OSError:
    """An OSError from writing, with the output's name when the system gave none."""
    if error.filename is None:
        error.filename = os.fspath(path)
    return error
