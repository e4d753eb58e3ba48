"""Segment files mapped read-only, guarded against truncation by another process: a read past
the cut reads zeros instead of raising SIGBUS, and the cut is reported (FileTruncatedError)."""

import mmap
import os

__all__ = ["MappedFile", "map_file", "check_read"]

class MappedFile(mmap.mmap):
    """A regular file mapped read-only and registered with the truncation guard."""

    path: str
    def close(self) -> None:
        """Unmap; then raise FileTruncatedError if a read of the mapping met a cut."""
    def __del__(self) -> None: ...

def map_file(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> MappedFile | None:
    """The regular file at `path` mapped read-only and guarded, or None when it is empty."""

def check_read(data: object, end: int, position: int | None = None, offset: int | None = None,
               cause: BaseException | None = None) -> int:
    """After reading `data` (a FileRecords, a MappedFile or a memoryview of one; anything else
    is not checked) up to byte `end`: FileTruncatedError, chained to `cause`, when the file
    was cut before that byte.  Returns 0."""

def _set_memory_lookup(lookup: str) -> None:
    """Test hook: how the kind of a buffer's memory is asked of the kernel: "auto", "text"
    (/proc/self/maps only) or "none" (cannot tell)."""
