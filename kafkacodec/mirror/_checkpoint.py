"""The mirror's state directory: where each source partition continues, written atomically
(kafkacodec._atomic: a temporary file beside the target, fsync, rename) after batches are
acknowledged by the target, so a `kill -9` at any moment leaves the previous or the new
checkpoint, never a torn one.

`checkpoint.json` holds the source and target cluster ids (a state directory is refused for
other clusters), the topic mapping, and {"topic/partition": next source offset}.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from kafkacodec._atomic import atomic_output

__all__ = ["Checkpoint", "StateMismatchError"]

FORMAT = 1
NAME = "checkpoint.json"


class StateMismatchError(ValueError):
    """The state directory belongs to another source or target cluster."""


class Checkpoint:
    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, NAME)
        self.positions: dict[tuple[str, int], int] = {}
        self.written_at = 0.0
        self.writes = 0
        self.source_cluster: str | None = None
        self.target_cluster: str | None = None

    def load(self, source_cluster: str | None, target_cluster: str | None) -> dict[tuple[str, int], int]:
        """The saved positions (empty without a checkpoint).  StateMismatchError when it was
        written for other clusters."""
        os.makedirs(self.state_dir, exist_ok=True)
        self.source_cluster, self.target_cluster = source_cluster, target_cluster
        try:
            with open(self.path, encoding="utf-8") as f:
                state = json.load(f)
        except FileNotFoundError:
            return {}
        if state.get("format") != FORMAT:
            raise StateMismatchError(f"{self.path}: unknown checkpoint format {state.get('format')!r}")
        for side, mine in (("source", source_cluster), ("target", target_cluster)):
            saved = state.get(f"{side}_cluster")
            if saved and mine and saved != mine:
                raise StateMismatchError(
                    f"{self.path} was written for {side} cluster {saved!r}, not {mine!r}: "
                    f"use another --state-dir")
        positions = {}
        for key, offset in state.get("positions", {}).items():
            topic, _, partition = key.rpartition("/")
            positions[(topic, int(partition))] = int(offset)
        self.positions = dict(positions)
        return positions

    def save(self, positions: dict[tuple[str, int], int], mapping: dict[str, str]) -> None:
        state: dict[str, Any] = {
            "format": FORMAT,
            "source_cluster": self.source_cluster,
            "target_cluster": self.target_cluster,
            "topics": mapping,
            "positions": {f"{t}/{p}": o for (t, p), o in sorted(positions.items())},
            "written_at_ms": int(time.time() * 1000),
        }
        with atomic_output(self.path, overwrite=True) as f:
            f.write(json.dumps(state, indent=1, sort_keys=True).encode())
        self.positions = dict(positions)
        self.written_at = time.monotonic()
        self.writes += 1
