# Files mapped read-only with a guard against truncation (csrc/kc_mapguard.h): a page past a
# cut made by another process reads zeros instead of raising SIGBUS, and the cut is recorded
# for the reader to raise FileTruncatedError.

cdef extern from "kc_mapguard.h" nogil:
    ctypedef struct kc_guard:
        pass
    size_t KC_INTACT
    # Offset from which the mapping no longer reads the file (KC_INTACT: all of it is intact).
    size_t kc_guard_cut(const kc_guard* guard)


cdef class Guard:
    # The registration of one MappedFile's mapping.  `slot` is NULL where there is no guard
    # (Windows) and once the mapping is unregistered (before it is unmapped).
    cdef kc_guard* slot
    cdef readonly Py_ssize_t length    # bytes mapped
    cdef readonly object path

    cdef int register(self, object mapping) except -1
    cdef void unregister(self) noexcept
    # Raise FileTruncatedError when the mapping cannot be trusted up to `end`: a fault cut it
    # before, or the file (fstat through `mapping`) is now shorter.  `position`: where the read
    # was (None: the cut); `cause`: the failure that made the reader ask, chained.  When the
    # bytes up to `end` are intact, returns how far the mapping reads the file now (the file's
    # size, or the cut; the mapped length where nothing is guarded).
    cdef Py_ssize_t check(self, object mapping, Py_ssize_t end, object position, object offset,
                          object cause) except -1


# Put the guard's SIGBUS handler back in front if something (faulthandler...) replaced it.
cdef int ensure_handler() except -1


# After reading `data` (a FileRecords, a MappedFile, or a memoryview of either; anything else:
# nothing to check) up to byte `end` of it: FileTruncatedError (chained to `cause`) when the
# file behind it was cut before that byte, by a fault or so that its last page read zeros.
# Readers that take any buffer (the converter, the Arrow decoder, the entry scan) call it once
# per call, and on their errors with the error as `cause`.
cpdef int check_read(object data, Py_ssize_t end, object position=*, object offset=*,
                     object cause=*) except -1


# What the memory under a buffer is (csrc/kc_filemem.h), for readers whose results keep pointing
# into their input: MEMORY_ANONYMOUS (no byte has a file behind it), MEMORY_FILE (some byte has:
# a cut of the file would fault a later read, SIGBUS), MEMORY_UNKNOWN (this process cannot tell:
# *error is the errno; a careful caller refuses as for a file).
cdef enum:
    MEMORY_UNKNOWN = -1
    MEMORY_ANONYMOUS = 0
    MEMORY_FILE = 1

# The kind of the `length` bytes at `buf` that `data` exports (the caller holds the export).
# By what the memory is, not by the Python type: bytes, bytearray and numpy arrays that own
# their data from numpy's allocator (and memoryviews and numpy views of them) are anonymous
# without a system call; any other buffer's address range is looked up in the process's
# mappings (Linux: PROCMAP_QUERY, else /proc/self/maps; elsewhere MEMORY_UNKNOWN).
cdef int memory_kind(object data, const void* buf, Py_ssize_t length, int* error) except -2
