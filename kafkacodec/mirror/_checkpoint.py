"""The mirror's state directory: where each source partition continues, written after batches
are acknowledged by the target through kafkacodec._statestore (a temporary file beside it,
fsync, rename: a `kill -9` at any moment leaves the previous or the new checkpoint, never a
torn one; the generation before kept as `checkpoint.json.previous`).

`checkpoint.json` holds the source and target cluster ids (a state directory is refused for
other clusters), the topic mapping, and {"topic/partition": next source offset}.  A damaged
checkpoint is quarantined (renamed aside, logged, counted) and the previous generation read
instead; with none, load() raises CheckpointDamagedError rather than start the topics over.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from kafkacodec._statestore import (
    INT32_MAX,
    INT64_MAX,
    StateFileDamaged,
    StateStore,
    expect_int,
    expect_object,
    expect_str,
)
from kafkacodec._paths import printable
from kafkacodec.errors import DataError

__all__ = ["Checkpoint", "StateMismatchError", "CheckpointDamagedError"]

FORMAT = 1
NAME = "checkpoint.json"
log = logging.getLogger("kafkacodec.mirror")


class StateMismatchError(ValueError):
    """The state directory belongs to another source or target cluster."""


class CheckpointDamagedError(DataError):
    """The checkpoint was damaged (it is moved aside) and no earlier one was good."""


def _parse(content: dict[str, Any]) -> dict[str, Any]:
    positions = {}
    for key, offset in expect_object(content.get("positions"), "positions").items():
        topic, _, partition = key.rpartition("/")
        if not topic or not (partition.isascii() and partition.isdigit()):
            raise StateFileDamaged(f"position key {key!r} is not TOPIC/PARTITION")
        positions[(topic, expect_int(int(partition), f"the partition of {key!r}", 0, INT32_MAX))] = \
            expect_int(offset, f"position {key!r}", 0, INT64_MAX)
    clusters = {f"{side}_cluster": expect_str(content.get(f"{side}_cluster"), f"{side}_cluster", nullable=True)
                for side in ("source", "target")}
    return {"positions": positions, **clusters}


class Checkpoint:
    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.store = StateStore(state_dir, log=log)
        self.path = self.store.path(NAME)
        self.positions: dict[tuple[str, int], int] = {}
        self.written_at = 0.0
        self.writes = 0
        self.source_cluster: str | None = None
        self.target_cluster: str | None = None

    def load(self, source_cluster: str | None, target_cluster: str | None) -> dict[tuple[str, int], int]:
        """The saved positions (empty without a checkpoint).  StateMismatchError when it was
        written for other clusters; CheckpointDamagedError when it is damaged and no earlier
        generation is good (the damaged files are moved aside: the next load finds none)."""
        os.makedirs(self.state_dir, exist_ok=True)     # the user's --state-dir: never moved aside
        self.source_cluster, self.target_cluster = source_cluster, target_cluster
        loaded = self.store.load(NAME, _parse, format=FORMAT)
        if loaded.value is None:
            if loaded.damaged:
                where = "; ".join(f"{printable(q.path)} is damaged ({q.reason}); " + (
                    f"moved to {printable(q.moved_to)}" if q.moved_to else "it could not be moved aside")
                    for q in loaded.damaged)
                raise CheckpointDamagedError(
                    f"{where}; no earlier checkpoint to continue from: choose where each partition "
                    "begins with --start earliest|latest|committed (earliest copies the topics "
                    "again from their start)")
            return {}
        state = loaded.value
        for side, mine in (("source", source_cluster), ("target", target_cluster)):
            saved = state[f"{side}_cluster"]
            if saved and mine and saved != mine:
                raise StateMismatchError(
                    f"{self.path} was written for {side} cluster {saved!r}, not {mine!r}: "
                    f"use another --state-dir")
        self.positions = dict(state["positions"])
        return dict(state["positions"])

    def save(self, positions: dict[tuple[str, int], int], mapping: dict[str, str]) -> None:
        self.store.save(NAME, {
            "source_cluster": self.source_cluster,
            "target_cluster": self.target_cluster,
            "topics": mapping,
            "positions": {f"{t}/{p}": o for (t, p), o in sorted(positions.items())},
            "written_at_ms": int(time.time() * 1000),
        }, format=FORMAT)
        self.positions = dict(positions)
        self.written_at = time.monotonic()
        self.writes += 1
