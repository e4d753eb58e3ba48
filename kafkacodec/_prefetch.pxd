# kc_prefetch(p): start loading the cache line holding p (a hint: never faults, no effect on
# results).  For walks whose next address is known (or guessed) before it is needed.
cdef extern from *:
    """
    #if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    /* GCC 12 drops some __builtin_prefetch calls (those after an inlined switch); asm stays */
    #define kc_prefetch(p) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)(p)))
    #elif defined(__GNUC__) || defined(__clang__)
    #define kc_prefetch(p) __builtin_prefetch((const void *)(p), 0, 3)
    #else
    #define kc_prefetch(p) ((void)(p))
    #endif
    """
    void kc_prefetch(const void* p) noexcept nogil
