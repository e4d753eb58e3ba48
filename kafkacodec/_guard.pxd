# The in-use guard of objects whose calls work on their own state while other code can run:
# without the GIL (codecs, decode loops) or in Python code the call invokes (a generator, an
# __index__, a finaliser run by a collection).  A second call while one runs raises
# ConcurrentUseError (kafkacodec.errors, the misuse error of every in-use guard) instead of
# racing the first.  Only touched with the GIL held, so the check and the claim cannot interleave.

from cpython.pythread cimport PyThread_get_thread_ident

cdef struct Guard:
    bint busy
    unsigned long owner         # the thread running the call

cdef inline int guard_enter(Guard* g, const char* name) except -1:
    if g.busy:
        return guard_refuse(g, name)
    g.busy = True
    g.owner = <unsigned long>PyThread_get_thread_ident()
    return 0

cdef inline void guard_leave(Guard* g) noexcept:
    g.busy = False

cdef inline int guard_refuse(const Guard* g, const char* name) except -1:
    from kafkacodec.errors import ConcurrentUseError
    if g.owner == <unsigned long>PyThread_get_thread_ident():
        raise ConcurrentUseError(f"{name.decode()} is in use by an unfinished call on this thread "
                              "(re-entered from a callback); make the call after it returns")
    raise ConcurrentUseError(f"{name.decode()} is in use by another thread: use one per thread")
