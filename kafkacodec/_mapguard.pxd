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
    # was (None: the cut); `cause`: the failure that made the reader ask, chained.  Returns 0
    # when the bytes up to `end` are intact.
    cdef int check(self, object mapping, Py_ssize_t end, object position, object offset,
                   object cause) except -1


# Put the guard's SIGBUS handler back in front if something (faulthandler...) replaced it.
cdef int ensure_handler() except -1
