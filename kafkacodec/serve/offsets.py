"""Committed group offsets, kept in memory and persisted in the state directory.

One JSON file per group, `<state dir>/groups/<group id, percent-encoded>.json`, rewritten on
every commit through `_atomic.atomic_output` (temporary file beside it, fsync, rename): a crash
leaves the old or the new content, never a torn file, and the commit is answered only once
the file is durable.  Read back at start, so offsets survive a restart.  Without a state
directory offsets live in memory only.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.parse
from dataclasses import dataclass

from kafkacodec._atomic import atomic_output
from kafkacodec.logdir.storage import printable, undecodable

__all__ = ["OffsetStore", "CommittedOffset"]

log = logging.getLogger("kafkacodec.serve")
_FORMAT = 1


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


class OffsetStore:
    def __init__(self, state_dir: str | None):
        self.directory = os.path.join(state_dir, "groups") if state_dir else None
        self.groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        if self.directory:
            os.makedirs(self.directory, exist_ok=True)
            self._load()

    def _path(self, group: str) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, urllib.parse.quote(group, safe="") + ".json")

    def _load(self) -> None:
        assert self.directory is not None
        for name in sorted(os.listdir(self.directory)):
            if not name.endswith(".json") or name.startswith("."):
                continue                      # temporary files of an interrupted write
            path = os.path.join(self.directory, name)
            if undecodable(name):             # group files are named in ASCII (percent-encoded)
                log.warning("%s: its name is not UTF-8, not a group file serve writes; skipped", printable(path))
                continue
            try:
                with open(path, encoding="utf-8") as file:
                    data = json.load(file)
                if data.get("format") != _FORMAT:
                    raise ValueError(f"unknown format {data.get('format')!r}")
                offsets = {(o["topic"], int(o["partition"])): CommittedOffset(
                    int(o["offset"]), int(o.get("leader_epoch", -1)), o.get("metadata", ""),
                    int(o.get("commit_timestamp", -1))) for o in data["offsets"]}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("%s: %s; that group's offsets are not loaded (the file is left as it is)",
                            path, exc)
                continue
            self.groups[str(data["group"])] = offsets

    def get(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.groups.get(group, {})

    def commit(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Store the offsets (durably when there is a state directory) before returning;
        OSError leaves what was committed before in place, in memory and on disk."""
        merged = dict(self.groups.get(group, {}))
        now = int(time.time() * 1000)
        for key, value in offsets.items():
            if value.commit_timestamp < 0:
                value.commit_timestamp = now
            merged[key] = value
        if self.directory:
            data = {"format": _FORMAT, "group": group, "offsets": [
                {"topic": t, "partition": p, "offset": v.offset, "leader_epoch": v.leader_epoch,
                 "metadata": v.metadata, "commit_timestamp": v.commit_timestamp}
                for (t, p), v in sorted(merged.items())]}
            with atomic_output(self._path(group)) as out:
                out.write(json.dumps(data, separators=(",", ":")).encode("utf-8"))
        self.groups[group] = merged
