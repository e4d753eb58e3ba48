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
