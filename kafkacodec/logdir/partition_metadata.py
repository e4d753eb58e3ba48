"""`partition.metadata`, the file a broker writes in every partition directory (Kafka 2.8+,
KIP-516): two lines, `version: 0` and `topic_id: <id>`, the id being Kafka's Uuid.toString()
(URL-safe base64 of the 16 bytes, without padding)."""

from __future__ import annotations

import base64
import binascii
import os
import uuid

__all__ = ["PARTITION_METADATA", "parse_partition_metadata", "read_partition_metadata",
           "topic_id_text"]

PARTITION_METADATA = "partition.metadata"


def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_partition_metadata(text: str, source: str) -> uuid.UUID:
    """The topic id of a partition.metadata file's text; ValueError naming the file when it is
    not a version-0 file with a 22-character topic id."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0":
        raise ValueError(f"{source}: not a version-0 partition.metadata file")
    raw = fields.get("topic_id", "")
    try:
        decoded = base64.urlsafe_b64decode(raw + "==") if len(raw) == 22 else b""
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) != 16:
        raise ValueError(f"{source}: topic_id {raw!r} is not a Kafka topic id")
    return uuid.UUID(bytes=decoded)


def read_partition_metadata(partition_dir: str | os.PathLike[str]) -> uuid.UUID | None:
    """The topic id in `<partition_dir>/partition.metadata`, None when the file is absent;
    ValueError when it is malformed, OSError when unreadable."""
    path = os.path.join(partition_dir, PARTITION_METADATA)
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read(4096)
    except FileNotFoundError:
        return None
    return parse_partition_metadata(text, path)
