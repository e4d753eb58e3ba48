"""Input and output files of the commands: inputs must be regular files (a FIFO would block, a
device never ends), and a write error names the output."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from kafkacodec.cli._exit import EXIT_INPUT, CliError

if TYPE_CHECKING:
    from kafkacodec._records import FileRecords

__all__ = ["file_kind", "check_regular", "open_segment", "segment_head", "name_output"]


def file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def check_regular(path: str | Path, command: str) -> None:
    """CliError (exit 3) unless `path` is a regular file, before anything opens it."""
    try:
        mode = os.stat(path).st_mode
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
    return FileRecords.open(path)


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
