"""Committed group offsets, kept in memory and persisted in the state directory.

One JSON file per group in `<state dir>/groups/`, written and read through
kafkacodec._statestore (atomic writes, the previous generation kept, a damaged file
quarantined and counted instead of stopping the start): the commit is answered only once the
file is durable, and the offsets are read back at start.  Without a state directory offsets
live in memory only.

A group's file is named by `group_file_name()`: a readable prefix of the id and a hash of all
of it, so any Kafka group id (a leading dot, "/", NUL, thousands of characters, ids that differ
only in case) has a file of its own of at most 102 bytes; the id read back is the one inside
the file.  Files of the earlier layout (the percent-encoded id) are read and moved to the new
names at start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkacodec._statestore import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    StateStore,
    expect_int,
    expect_list,
    expect_object,
    expect_str,
)
from kafkacodec._paths import printable

__all__ = ["OffsetStore", "CommittedOffset", "group_file_name"]

log = logging.getLogger("kafkacodec.serve")
_FORMAT = 1
_SUFFIX = ".json"
_MIGRATED = ".migrated"
_PREFIX_CHARS = 64


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


def group_file_name(group: str) -> str:
    """`<up to 64 characters of the id, others than A-Z a-z 0-9 _ - as _>~<128 bits of its
    SHA-256>.json`: one name per id (the hash is of the exact id, so ids differing only in
    case differ on a case-insensitive file system too), never a hidden or temporary name."""
    digest = hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", group[:_PREFIX_CHARS], flags=re.ASCII)
    return f"{readable}~{digest}{_SUFFIX}"


def _parse(content: dict[str, Any]) -> tuple[str, dict[tuple[str, int], CommittedOffset]]:
    group = expect_str(content.get("group"), "group")
    offsets = {}
    for i, row in enumerate(expect_list(content.get("offsets"), "offsets")):
        row = expect_object(row, f"offsets[{i}]")
        where = f"offsets[{i}]."
        key = (expect_str(row.get("topic"), where + "topic"),
               expect_int(row.get("partition"), where + "partition", 0, INT32_MAX))
        offsets[key] = CommittedOffset(
            expect_int(row.get("offset"), where + "offset", INT64_MIN, INT64_MAX),
            expect_int(row.get("leader_epoch", -1), where + "leader_epoch", -1 - INT32_MAX, INT32_MAX),
            expect_str(row.get("metadata", ""), where + "metadata", nullable=True),
            expect_int(row.get("commit_timestamp", -1), where + "commit_timestamp", INT64_MIN, INT64_MAX))
    return group, offsets


class OffsetStore:
    def __init__(self, state_dir: str | None):
        self.directory = os.path.join(state_dir, "groups") if state_dir else None
        self.store = StateStore(self.directory, log=log) if self.directory else None
        self.groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        if self.store is not None:
            self.store.make_directory()
            self._load()

    def _load(self) -> None:
        assert self.store is not None
        found: dict[str, list[str]] = {}               # group -> the files holding it
        for name in self.store.names(_SUFFIX):
            loaded = self.store.load(name, _parse, format=_FORMAT)
            if loaded.value is None:
                continue
            group, offsets = loaded.value
            canonical = name == group_file_name(group)
            if canonical or group not in self.groups:
                self.groups[group] = offsets
            found.setdefault(group, []).append(name)
        for group, names in found.items():
            self._migrate(group, names)

    def _migrate(self, group: str, names: list[str]) -> None:
        """Files of the earlier layout: the group's offsets written under its name now (unless
        a file there was read), then each old file renamed `<name>.migrated` (kept, not read)."""
        assert self.store is not None
        new = group_file_name(group)
        old = [n for n in names if n != new]
        if not old:
            return
        try:
            if new not in names:
                self._write(group, self.groups[group])
            for name in old:
                os.replace(self.store.path(name), self.store.path(name + _MIGRATED))
        except OSError as exc:
            log.warning("group %r: its offsets could not be moved to %s (%s); they are read from "
                        "%s again at the next start", group, new, exc, ", ".join(old))
            return
        log.info("group %r: offsets moved from %s to %s", group,
                 ", ".join(printable(n) for n in old), new)

    def _write(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        assert self.store is not None
        self.store.save(group_file_name(group), {"group": group, "offsets": [
            {"topic": t, "partition": p, "offset": v.offset, "leader_epoch": v.leader_epoch,
             "metadata": v.metadata, "commit_timestamp": v.commit_timestamp}
            for (t, p), v in sorted(offsets.items())]}, format=_FORMAT)

    def get(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.groups.get(group, {})

    def load(self, group: str, on_done: Callable[[Any, BaseException | None], None]) -> None:
        """The server's interface (serve --upstream's store calls back once the cluster
        answered): `on_done(get(group), None)`, at once."""
        on_done(self.get(group), None)

    def save(self, group: str, offsets: dict[tuple[str, int], CommittedOffset],
              on_done: Callable[[Any, BaseException | None], None]) -> None:
        """The server's interface: commit(), then `on_done(None, None)`, or `on_done(None,
        OSError)` when the state directory refused it; at once."""
        try:
            self.commit(group, offsets)
        except OSError as exc:
            on_done(None, exc)
            return
        on_done(None, None)

    def commit(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Store the offsets (durably when there is a state directory) before returning;
        OSError leaves what was committed before in place, in memory and on disk."""
        merged = dict(self.groups.get(group, {}))
        now = int(time.time() * 1000)
        for key, value in offsets.items():
            if value.commit_timestamp < 0:
                value.commit_timestamp = now
            merged[key] = value
        if self.store is not None:
            self._write(group, merged)
        self.groups[group] = merged
