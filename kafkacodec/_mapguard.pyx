# cython: language_level=3
"""Segment files mapped read-only, guarded against truncation by another process.

`map_file(path)` opens the file without blocking (O_NONBLOCK: a FIFO named like a segment
never blocks), refuses anything that is not a regular file (NotRegularFileError, or
IsADirectoryError for a directory, both OSErrors), and maps it read-only as a `MappedFile`: an
`mmap.mmap` (everything that reads an mmap reads it as before) whose address range is
registered with the SIGBUS guard of csrc/kc_mapguard.h.  When another process truncates the
file (Kafka does that to its active segment), a read past the new end reads zeros instead of
killing the process, and the cut is recorded: FileRecords checks it after every read and
raises FileTruncatedError, and `MappedFile.close()` raises it for the other readers (the logdir
reader, `kafkacodec verify`), which close in a `finally:`.

Windows has no SIGBUS: files are mapped the same way, unguarded.

`memory_kind()` tells whether a buffer's memory has a file behind it, for readers whose
results keep pointing into their input (ArrowDecoder's views=True): by what the buffer is, not
by its Python type (csrc/kc_filemem.h: the address range against the process's mappings).
"""

import mmap as _mmap
import os as _os
import stat as _stat
import sys as _sys

from libc.errno cimport errno
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

from kafkacodec.errors import FileTruncatedError, KafkaCodecError, NotRegularFileError

cdef extern from "kc_filemem.h":
    int KC_MEM_LOOKUP_AUTO, KC_MEM_LOOKUP_TEXT, KC_MEM_LOOKUP_NONE
    int kc_memory_kind(const void* start, size_t length, int lookup)

cdef extern from *:
    """
    #define KC_MAPGUARD_IMPLEMENTATION
    #include "kc_mapguard.h"
    """
    const int KC_GUARD_SUPPORTED
    kc_guard* kc_guard_register(const void* start, size_t length)
    void kc_guard_unregister(kc_guard* guard)
    void kc_guard_note(kc_guard* guard, size_t offset)
    int kc_guard_ensure_handler()

# Read-only, never blocking (a FIFO), not inherited by child processes, binary on Windows.
cdef int OPEN_FLAGS = (_os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0)
                       | getattr(_os, "O_BINARY", 0))


cdef int raise_errno() except -1:
    cdef int code = errno
    raise OSError(code, _os.strerror(code))


cdef int ensure_handler() except -1:
    if KC_GUARD_SUPPORTED and kc_guard_ensure_handler() != 0:
        raise_errno()
    return 0


cdef class Guard:
    """The guard registration of one MappedFile (see the .pxd)."""

    def __dealloc__(self):
        self.unregister()

    cdef int register(self, object mapping) except -1:
        cdef Py_buffer view
        PyObject_GetBuffer(mapping, &view, PyBUF_SIMPLE)
        try:
            self.length = view.len
            if KC_GUARD_SUPPORTED:
                self.slot = kc_guard_register(view.buf, <size_t>view.len)
                if self.slot == NULL:
                    raise_errno()
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef void unregister(self) noexcept:
        if self.slot != NULL:
            kc_guard_unregister(self.slot)
            self.slot = NULL

    cdef Py_ssize_t check(self, object mapping, Py_ssize_t end, object position, object offset,
                          object cause) except -1:
        cdef size_t cut
        if self.slot == NULL:
            return self.length
        try:
            size = mapping.size()                     # fstat of the mapped file
        except (OSError, ValueError):                 # closed meanwhile: nothing to tell
            return self.length
        if self.slot == NULL:          # unregistered by a close() while fstat let threads run
            return self.length
        if size < self.length:
            kc_guard_note(self.slot, <size_t>size)    # the new end's page reads zeros too
        cut = kc_guard_cut(self.slot)
        if cut == KC_INTACT:
            return self.length
        if cut >= <size_t>end:
            return <Py_ssize_t>cut
        error = FileTruncatedError(
            f"{self.path}: the file shrank to {size} bytes (from {self.length}) while being read",
            path=self.path, size=size, position=cut if position is None else position,
            offset=offset)
        if cause is not None:
            raise error from cause
        raise error


cdef str special_kind(int mode):
    if _stat.S_ISFIFO(mode):
        return "a FIFO"
    if _stat.S_ISCHR(mode):
        return "a character device"
    if _stat.S_ISBLK(mode):
        return "a block device"
    if _stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


cdef int refuse_special(object path, int mode) except -1:
    if _stat.S_ISREG(mode):
        return 0
    if _stat.S_ISDIR(mode):
        raise IsADirectoryError(21, _os.strerror(21), path)          # EISDIR, as open() says
    raise NotRegularFileError(f"{_os.fsdecode(path)}: {special_kind(mode)}, not a regular file "
                              f"(Kafka segments are regular files)", _os.fsdecode(path))


cdef object open_regular(object path):
    """(fd, size) of a regular file opened read-only, never blocking."""
    refuse_special(path, _os.stat(path).st_mode)  # a device is not even opened (side effects)
    fd = _os.open(path, OPEN_FLAGS)
    try:
        status = _os.fstat(fd)
        refuse_special(path, status.st_mode)       # replaced between the two looks
    except BaseException:
        _os.close(fd)
        raise
    return fd, status.st_size


cpdef int check_read(object data, Py_ssize_t end, object position=None, object offset=None,
                     object cause=None) except -1:
    cdef Py_buffer view
    cdef size_t address
    target = data.obj if isinstance(data, memoryview) else data
    check = getattr(target, "_check_read", None)
    if check is None:
        return 0
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (ValueError, BufferError, KafkaCodecError):   # released or closed: nothing read now
        return 0
    address = <size_t>view.buf
    PyBuffer_Release(&view)
    check(address + <size_t>max(end, 0), position, offset, cause)
    return 0


# How memory_kind() asks the kernel (KC_MEM_LOOKUP_*): _set_memory_lookup() for tests.
cdef int memory_lookup = KC_MEM_LOOKUP_AUTO

try:                                   # numpy >= 2; 1.22 .. 1.26
    from numpy._core.multiarray import get_handler_name as _numpy_handler
except ImportError:
    try:
        from numpy.core.multiarray import get_handler_name as _numpy_handler
    except ImportError:                # numpy < 1.22: no allocator to ask, arrays are looked up
        _numpy_handler = None


cdef bint known_anonymous(object data):
    """Whether `data` exports memory that only Python's or numpy's default allocator hands out
    (malloc: the heap or anonymous mappings), through memoryviews and numpy views of it: bytes,
    bytearray (exactly: a subclass may export other memory), a numpy array that owns its data
    from numpy's default allocator.  No system call: the common inputs cost nothing more."""
    while True:
        kind = type(data)
        if kind is bytes or kind is bytearray:
            return True
        if kind is memoryview:
            data = (<memoryview>data).obj
            continue
        numpy = _sys.modules.get("numpy")  # an ndarray exists only once numpy is imported
        if numpy is None or not isinstance(data, numpy.ndarray):
            return False
        if data.base is not None:
            data = data.base
            continue
        return (kind is numpy.ndarray and data.flags.owndata and _numpy_handler is not None
                and _numpy_handler(data) == "default_allocator")


cdef int memory_kind(object data, const void* buf, Py_ssize_t length, int* error) except -2:
    cdef int kind
    if known_anonymous(data):
        return MEMORY_ANONYMOUS
    kind = kc_memory_kind(buf, <size_t>length, memory_lookup)
    if kind == MEMORY_UNKNOWN:
        error[0] = errno
    return kind


def _set_memory_lookup(str lookup):
    """Test hook: how memory_kind() asks the kernel: "auto" (PROCMAP_QUERY where the kernel has
    it, else the text of /proc/self/maps), "text" (the text only: what kernels before 6.11 get),
    "none" (no lookup: a platform that cannot tell, where only known_anonymous() types pass)."""
    global memory_lookup
    lookups = {"auto": KC_MEM_LOOKUP_AUTO, "text": KC_MEM_LOOKUP_TEXT, "none": KC_MEM_LOOKUP_NONE}
    if lookup not in lookups:
        raise ValueError(f"lookup must be one of {sorted(lookups)}, got {lookup!r}")
    memory_lookup = lookups[lookup]


class MappedFile(_mmap.mmap):
    """A regular file mapped read-only (an mmap.mmap) and registered with the truncation
    guard; made by map_file().  `path` is the file's path."""

    def close(self):
        """Unmap, as mmap.close().  Then raise FileTruncatedError if a read of the mapping met
        a cut made by another process: a page past the new end was touched (and read as
        zeros), or a KafkaCodecError is being handled (the caller closes in `finally:`) and the
        file is now shorter than the mapping (bytes past the new end inside its last page read
        as zeros without any fault)."""
        cdef Guard guard = self._guard
        if self.closed:
            return
        error = None
        pending = _sys.exc_info()[1]
        if guard.slot != NULL and (kc_guard_cut(guard.slot) != KC_INTACT
                                   or isinstance(pending, KafkaCodecError)):
            try:
                guard.check(self, guard.length, None, None, pending)
            except FileTruncatedError as exc:
                error = exc
        self._release()
        if error is not None:
            raise error

    def _check_read(self, size_t end_address, position, offset, cause):
        """check_read() for a view of this mapping read up to `end_address`."""
        cdef Guard guard = self._guard
        cdef Py_buffer view
        if self.closed or guard.slot == NULL:
            return
        PyObject_GetBuffer(self, &view, PyBUF_SIMPLE)
        start = <size_t>view.buf
        PyBuffer_Release(&view)
        guard.check(self, <Py_ssize_t>min(end_address - start, <size_t>guard.length),
                    position, offset, cause)

    def _release(self):
        """Unregister, then unmap (the guard never covers an address range that is unmapped);
        never raises FileTruncatedError."""
        cdef Guard guard = self._guard
        cdef size_t cut
        if self.closed:
            return
        cut = kc_guard_cut(guard.slot) if guard.slot != NULL else KC_INTACT
        guard.unregister()
        try:
            _mmap.mmap.close(self)
        except BaseException:          # BufferError: views of it are alive, it stays mapped
            guard.register(self)
            if cut != KC_INTACT and guard.slot != NULL:
                kc_guard_note(guard.slot, cut)
            raise

    def __del__(self):
        guard = self.__dict__.get("_guard")
        if guard is not None:
            (<Guard>guard).unregister()   # before mmap's own deallocation unmaps it


def map_file(path):
    """Map the regular file at `path` read-only and guarded (a MappedFile), or return None for
    an empty file.  Raises FileNotFoundError, PermissionError, IsADirectoryError or
    NotRegularFileError (all OSErrors) for a path that cannot be read as a segment; never
    blocks on a FIFO."""
    cdef Guard guard
    fd, size = open_regular(path)
    try:
        if size == 0:
            return None
        try:
            mapping = MappedFile(fd, 0, access=_mmap.ACCESS_READ)
        except ValueError:             # emptied since the fstat ("cannot mmap an empty file")
            return None
    finally:
        _os.close(fd)
    guard = Guard.__new__(Guard)
    guard.path = _os.fsdecode(path)
    mapping.path = guard.path
    mapping._guard = guard
    guard.register(mapping)
    return mapping


__all__ = ["MappedFile", "map_file", "check_read"]
