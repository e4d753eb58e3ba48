"""Writing Kafka log directories: appending batches to a partition directory, rolling
segments."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafkacodec.errors import CorruptRecordError
from kafkacodec.logdir._read import SEGMENT_RE, PathLike

__all__ = ["write_partition"]


def write_partition(directory: Path, staged_files: Iterable[PathLike], *, base_offset: int = 0,
                    segment_bytes: int = 1 << 30, overwrite: bool = False) -> int:
    """Append staged batches (offsets relative to each file's start) to a partition directory
    with dense offsets, rolling segments; returns the next offset."""
    from kafkacodec._arrow import scan_entries

    directory.mkdir(parents=True, exist_ok=True)
    existing = sorted(p for p in directory.iterdir() if SEGMENT_RE.match(p.name))
    if overwrite:
        for p in existing:
            p.unlink()
        existing = []
    next_offset = base_offset
    current: Any = None                  # the open segment file
    current_size = 0
    if existing:
        last = existing[-1]
        data = last.read_bytes()
        scan = scan_entries(data, source=str(last))
        if len(scan["last_offset"]):
            next_offset = max(next_offset, int(scan["last_offset"][-1]) + 1)
        if scan["stop"] != len(data):
            raise CorruptRecordError(f"{last}: {len(data) - scan['stop']} bytes of a partial batch at the "
                                     "end; cannot append after them (truncate the file or write elsewhere)",
                                     position=int(scan["stop"]))
        current, current_size = open(last, "ab"), len(data)
    try:
        for staged in staged_files:
            batches = bytearray(Path(staged).read_bytes())
            scan = scan_entries(batches, source=str(staged))
            shift = next_offset
            for pos, size, base, last in zip(scan["position"], scan["size"], scan["base_offset"], scan["last_offset"]):
                if current is None or current_size >= segment_bytes:
                    if current:
                        current.close()
                    current = open(directory / f"{int(base) + shift:020d}.log", "wb")
                    current_size = 0
                batches[pos:pos + 8] = int(base + shift).to_bytes(8, "big", signed=True)
                current.write(memoryview(batches)[pos:pos + size])
                current_size += int(size)
                next_offset = int(last) + shift + 1
    finally:
        if current:
            current.close()
    return next_offset
