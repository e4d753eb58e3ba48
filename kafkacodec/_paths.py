"""Names as the file system gives them: a name that is not UTF-8 reaches Python surrogate-
escaped; it is never a Kafka topic, segment or state file, and messages show its bytes as
`\\xNN` (every module that lists a directory uses these two)."""

from __future__ import annotations

import os

__all__ = ["undecodable", "printable"]


def undecodable(name: str) -> bool:
    """Whether a name listed from the file system held bytes that are not UTF-8 (surrogate-
    escaped by Python: it cannot be written out as text, nor be a Kafka topic or segment)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def printable(path: str) -> str:
    """A path for messages and logs: the bytes of a name that is not UTF-8 as `\\xNN`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace") if undecodable(path) else path
