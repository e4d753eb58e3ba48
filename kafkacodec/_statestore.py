"""The state files of the long-running commands (serve's committed group offsets, the mirror's
checkpoint): one store that writes them without losing data and reads them without ever
failing on what they hold.

- `save(name, value)`: a JSON object with its "format" number, written through
  `_atomic.atomic_output` (a temporary file beside it, fsync, rename, fsync of the directory).
  The file it replaces, when it is a good generation (this store read it without damage or
  wrote it), is kept as `<name>.previous` first (a hard link renamed into place, else a copy).
  A file larger than MAX_STATE_FILE_BYTES is refused (OSError EFBIG) before anything is
  written: the store never writes what it would refuse to read.
- `load(name, parse, format)`: the file, else its previous generation.  A file that cannot be
  opened or read (not a regular file, no permission, an I/O error), that is larger than the
  bound, not UTF-8, not JSON, not an object of the expected "format", or that `parse` rejects
  (StateFileDamaged: a missing field, a wrong type, a number out of its Kafka range) is
  quarantined: renamed aside to `<name>.damaged-<UTC time>` (never deleted), logged (a warning
  naming the file, the reason and where it went) and counted in `quarantined` (a metric of
  serve and of mirror).  Only a failure of the process itself (no descriptors, no memory) is
  raised.

Why a previous generation: damage to the current file then costs the last write only (offsets
committed, or positions acknowledged, since the write before: delivered or mirrored again,
at-least-once), not the whole state; without it a damaged checkpoint leaves the mirror nothing
to continue from.  It costs a hard link and a rename per write.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kafkacodec._atomic import atomic_output, fsync_directory
from kafkacodec._paths import printable, undecodable
from kafkacodec.errors import DataError

__all__ = ["StateStore", "StateFileDamaged", "Loaded", "Quarantined", "MAX_STATE_FILE_BYTES",
           "PREVIOUS", "expect_object", "expect_list", "expect_str", "expect_int", "INT32_MAX",
           "INT64_MIN", "INT64_MAX"]

#: The largest state file written or read (a group's offsets with 4 KiB of metadata for each of
#: 16,000 partitions): a bigger one is refused when written and quarantined when read.
MAX_STATE_FILE_BYTES = 64 << 20
PREVIOUS = ".previous"
DAMAGED = ".damaged-"
INT32_MAX = (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
NAME_MAX = 255
# failures of the process, not of the file: raised, never a reason to move a file aside
_NOT_DAMAGE = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}

T = TypeVar("T")


class StateFileDamaged(DataError):
    """A state file's content is not what its reader expects (raised by `parse` functions)."""


@dataclass
class Quarantined:
    path: str                   # where the damaged file was
    moved_to: str | None        # where it is now (None: it could not be moved)
    reason: str


@dataclass
class Loaded(Generic[T]):
    value: T | None                                # None: no good generation
    generation: str | None = None                  # "current", "previous" or None
    damaged: list[Quarantined] = field(default_factory=list)


class StateStore:
    """The state files of one directory (created on the first write).  Not thread-safe: one
    owner reads and writes them."""

    def __init__(self, directory: str, *, log: logging.Logger):
        self.directory = directory
        self.log = log
        self.quarantined = 0                       # files moved aside since start
        self._good: set[str] = set()               # names whose current file is a good generation

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def names(self, suffix: str) -> list[str]:
        """The state files present whose names end in `suffix` (also those of which only the
        previous generation is left), sorted; temporary and quarantined files are not."""
        try:
            entries = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = set()
        for entry in entries:
            if undecodable(entry):            # not a name this store writes (they are ASCII)
                self.log.warning("%s: its name is not UTF-8, not a state file; skipped",
                                 printable(os.path.join(self.directory, entry)))
                continue
            if entry.endswith(suffix):
                found.add(entry)
            elif entry.endswith(suffix + PREVIOUS):
                found.add(entry[:-len(PREVIOUS)])
        return sorted(found)

    # -- reading -------------------------------------------------------------------------------
    def load(self, name: str, parse: Callable[[dict[str, Any]], T], *, format: int) -> Loaded[T]:
        """`parse(content)` of the file `name`, else of its previous generation; each damaged
        one on the way is quarantined (module docstring)."""
        loaded: Loaded[T] = Loaded(None)
        for generation, entry in (("current", name), ("previous", name + PREVIOUS)):
            path = self.path(entry)
            if not os.path.lexists(path):
                continue
            try:
                value = parse(self._read_object(path, format))
            except (StateFileDamaged, LookupError, TypeError, ValueError, AttributeError) as exc:
                loaded.damaged.append(self.quarantine(entry, str(exc)))
                continue
            if generation == "current":
                self._good.add(name)
            elif loaded.damaged:
                self.log.warning("state file %s: using its previous generation %s instead (written "
                                 "one write earlier)", printable(self.path(name)), printable(path))
            loaded.value, loaded.generation = value, generation
            return loaded
        return loaded

    def _read_object(self, path: str, format: int) -> dict[str, Any]:
        content = _parse_json(self._read_bytes(path))
        if not isinstance(content, dict):
            raise StateFileDamaged(f"holds {_kind(content)}, not a JSON object")
        if content.get("format") != format or isinstance(content.get("format"), bool):
            raise StateFileDamaged(f"format {content.get('format')!r} is not {format}, the one "
                                   "this version reads")
        return content

    @staticmethod
    def _read_bytes(path: str) -> bytes:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(path, flags)       # O_NONBLOCK: a FIFO there must not block the start
        except OSError as exc:
            if exc.errno in _NOT_DAMAGE:
                raise
            raise StateFileDamaged(f"cannot be opened: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise StateFileDamaged("is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise StateFileDamaged("is not a regular file")
            if st.st_size > MAX_STATE_FILE_BYTES:
                raise StateFileDamaged(f"is larger than {MAX_STATE_FILE_BYTES} bytes ({st.st_size})")
            chunks = []
            size = 0
            while size <= MAX_STATE_FILE_BYTES:
                chunk = os.read(fd, MAX_STATE_FILE_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_STATE_FILE_BYTES:
                raise StateFileDamaged(f"is larger than {MAX_STATE_FILE_BYTES} bytes")
            return b"".join(chunks)
        except OSError as exc:
            if exc.errno in _NOT_DAMAGE:
                raise
            raise StateFileDamaged(f"cannot be read: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def quarantine(self, name: str, reason: str) -> Quarantined:
        """Move the file `name` aside as damaged (never deleted), log it and count it."""
        self._good.discard(name[:-len(PREVIOUS)] if name.endswith(PREVIOUS) else name)
        return self._move_aside(self.directory, name, reason)

    def make_directory(self) -> None:
        """Create the directory; anything else in its place is quarantined first."""
        if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
            parent, name = os.path.split(os.path.abspath(self.directory))
            self._move_aside(parent, name, "is not a directory")
        os.makedirs(self.directory, exist_ok=True)

    def _move_aside(self, directory: str, name: str, reason: str) -> Quarantined:
        path = os.path.join(directory, name)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        moved_to: str | None = None
        for attempt in range(100):
            suffix = f"{DAMAGED}{stamp}" + (f"-{attempt}" if attempt else "")
            aside = os.path.join(directory, _fit(name, suffix))
            if os.path.lexists(aside):
                continue
            try:
                os.rename(path, aside)
            except OSError as exc:
                self.log.warning("state file %s is damaged (%s) and cannot be moved aside (%s): it "
                                 "is not read", printable(path), reason, exc.strerror or exc)
            else:
                fsync_directory(directory)
                moved_to = aside
                self.log.warning("state file %s is damaged (%s); moved to %s", printable(path), reason,
                                 printable(aside))
            break
        self.quarantined += 1
        return Quarantined(path, moved_to, reason)

    # -- writing -------------------------------------------------------------------------------
    def save(self, name: str, value: dict[str, Any], *, format: int) -> None:
        """Write `value` (with "format": `format`) as the file `name`, durably, keeping the good
        generation it replaces as `<name>.previous`; OSError leaves both files as they were."""
        data = json.dumps({"format": format, **value}, separators=(",", ":"),
                          sort_keys=True).encode("utf-8", "surrogatepass")
        path = self.path(name)
        if len(data) > MAX_STATE_FILE_BYTES:
            raise OSError(errno.EFBIG, f"the state would be larger than {MAX_STATE_FILE_BYTES} "
                          f"bytes ({len(data)}); not written", path)
        self.make_directory()
        with atomic_output(path) as out:
            out.write(data)
            if name in self._good:
                # after the write, before the rename: a failed write leaves `.previous` too
                self._keep_previous(name)
        self._good.add(name)

    def _keep_previous(self, name: str) -> None:
        current, previous = self.path(name), self.path(name + PREVIOUS)
        while True:
            link = self.path(f".{name}{PREVIOUS}.{secrets.token_hex(4)}.tmp")
            try:
                os.link(current, link)
            except FileExistsError:
                continue
            except FileNotFoundError:
                return                                   # nothing to keep
            except OSError:                              # no hard links here: a copy
                with open(current, "rb") as src, atomic_output(previous) as out:
                    out.write(src.read())
                return
            break
        try:
            os.replace(link, previous)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(link)
            raise


def _fit(name: str, suffix: str) -> str:
    """`name + suffix`, the name shortened (never the suffix) to fit NAME_MAX bytes."""
    room = NAME_MAX - len(suffix.encode())
    raw = os.fsencode(name)
    if len(raw) > room:
        name = os.fsdecode(raw[:room].decode("utf-8", "ignore").encode())
    return name + suffix


def _parse_json(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateFileDamaged(f"is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise StateFileDamaged("is not JSON: nested too deep") from None
    except ValueError as exc:         # JSONDecodeError; an integer of thousands of digits
        raise StateFileDamaged(f"is not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


# -- what `parse` functions check with ---------------------------------------------------------
def expect_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StateFileDamaged(f"{what} is {_kind(value)}, not an object")
    return value


def expect_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise StateFileDamaged(f"{what} is {_kind(value)}, not a list")
    return value


def expect_str(value: Any, what: str, *, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise StateFileDamaged(f"{what} is {_kind(value)}, not a string")
    return value


def expect_int(value: Any, what: str, low: int, high: int) -> int:
    """An integer in [low, high] (JSON booleans and fractions are not integers)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise StateFileDamaged(f"{what} is {_kind(value)}, not an integer")
    if not low <= value <= high:
        raise StateFileDamaged(f"{what} {value} is outside [{low}, {high}]")
    return value
