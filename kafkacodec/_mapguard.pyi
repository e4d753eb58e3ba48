"""Segment files mapped read-only, guarded against truncation by another process: a read past
the cut reads zeros instead of raising SIGBUS, and the cut is reported (FileTruncatedError)."""

import mmap
import os

__all__ = ["MappedFile", "map_file"]

class MappedFile(mmap.mmap):
    """A regular file mapped read-only and registered with the truncation guard."""

    path: str
    def close(self) -> None:
        """Unmap; then raise FileTruncatedError if a read of the mapping met a cut."""
    def __del__(self) -> None: ...

def map_file(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> MappedFile | None:
    """The regular file at `path` mapped read-only and guarded, or None when it is empty."""
