"""Kafka's offset checkpoint files at the top of a log directory (`log-start-offset-checkpoint`,
`cleaner-offset-checkpoint`, `recovery-point-offset-checkpoint`...): a version line (0), a count
line, then one `topic partition offset` line per partition; an empty file (a broker creates each
one empty at startup) holds no entries."""

from __future__ import annotations

__all__ = ["parse_checkpoint", "LOG_START", "CLEANER"]

LOG_START = "log-start-offset-checkpoint"      # records below it are deleted (retention, DeleteRecords)
CLEANER = "cleaner-offset-checkpoint"          # compacted partitions, cleaned up to this offset


def parse_checkpoint(text: str, source: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset}; ValueError naming the line when the file is malformed."""
    lines = text.splitlines()
    if not lines:
        return {}        # Kafka creates the file empty (OffsetCheckpointFile) and reads no entries
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"{source}: not a version-0 Kafka checkpoint file")
    try:
        count = int(lines[1])
    except ValueError:
        raise ValueError(f"{source}: line 2 is not an entry count") from None
    entries = [line for line in lines[2:] if line.strip()]
    if count != len(entries):
        raise ValueError(f"{source}: says {count} entries but holds {len(entries)}")
    result = {}
    for number, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"{source}: line {number} is not `topic partition offset`")
        result[(parts[0], int(parts[1]))] = int(parts[2])
    return result
