/* kc_mapguard.h: a truncated mapped file reads zeros and says so, instead of killing the process.
 *
 * Reading a page of a file mapping that lies wholly past the file's end raises SIGBUS, and
 * Kafka truncates its active segment in normal operation (follower truncation, recovery), so a
 * reader of a live segment can be killed by the broker.  This header keeps a registry of
 * "guarded" mappings and one process-wide SIGBUS handler (installed when the first mapping is
 * registered, and put back in front whenever a registration finds it replaced, e.g. by
 * faulthandler):
 *
 *  - a fault inside a guarded mapping maps anonymous zero pages (read-only) over the rest of
 *    that mapping, from the faulting page on, and lowers the mapping's `cut` to that page's
 *    offset; the handler returns and the faulting access re-runs, reading zeros.  Readers load
 *    `cut` after reading (kc_guard_cut) and raise a clear error; a later munmap of the whole
 *    mapping removes the zero pages too.
 *  - any other SIGBUS (a fault elsewhere, or one sent with kill/raise) goes to whatever handled
 *    SIGBUS before us: its disposition is put back and the signal re-delivered, so the default
 *    action still kills the process and faulthandler still prints its traceback.  If that
 *    handler hands a second foreign SIGBUS back to us (faulthandler restores the handler it
 *    found, which may be ours), the default action ends it: no loop.
 *
 * Bytes between the new end of the file and the end of its last page read as zeros without
 * any fault: readers that fail on such zeros compare the file size (fstat) with what they read
 * and lower `cut` with kc_guard_note().
 *
 * mmap() is not on POSIX's list of async-signal-safe functions, but on Linux and macOS it is a
 * plain system call that takes no user-space lock; nothing else here allocates or locks.  The
 * registry is lock-free for the handler: fixed blocks of slots that are never freed (more are
 * chained on when all are taken), each slot published with a sequence counter (odd while its
 * bounds are written).  Writers (register, unregister, install) hold a mutex.
 *
 * Windows has no SIGBUS (and no truncation of a mapped file): everything here compiles to
 * "not guarded" there (KC_GUARD_SUPPORTED 0, kc_guard_register returns NULL).
 *
 * The registry and handler are static: exactly one extension module (kafkacodec._mapguard)
 * defines KC_MAPGUARD_IMPLEMENTATION before including this file (again: the implementation
 * has an include guard of its own); the others include it for kc_guard_cut() only.
 */
#ifndef KC_MAPGUARD_H
#define KC_MAPGUARD_H

#include <stddef.h>
#include <stdint.h>

#define KC_INTACT ((size_t)-1)       /* cut of a mapping that reads what the file holds */

typedef struct kc_guard {
    uintptr_t start;                 /* first byte of the mapping (page aligned) */
    uintptr_t end;                   /* past its last page; 0 while the slot is free */
    size_t cut;                      /* KC_INTACT, or the offset from which it is unreliable */
    unsigned long seq;               /* odd while start/end are being written */
    int used;                        /* slot taken (writers only, under the lock) */
} kc_guard;

#if defined(_WIN32)

#define KC_GUARD_SUPPORTED 0
static size_t kc_guard_cut(const kc_guard* guard) { (void)guard; return KC_INTACT; }

#else

#define KC_GUARD_SUPPORTED 1
/* Where the mapping stops reading the file: KC_INTACT until a fault (or a note) lowers it. */
static inline size_t kc_guard_cut(const kc_guard* guard) {
    return __atomic_load_n(&guard->cut, __ATOMIC_ACQUIRE);
}

#endif
#endif /* KC_MAPGUARD_H */

#if defined(KC_MAPGUARD_IMPLEMENTATION) && !defined(KC_MAPGUARD_IMPLEMENTED)
#define KC_MAPGUARD_IMPLEMENTED
#if defined(_WIN32)

static kc_guard* kc_guard_register(const void* start, size_t length) {
    (void)start; (void)length; return NULL;
}
static void kc_guard_unregister(kc_guard* guard) { (void)guard; }
static void kc_guard_note(kc_guard* guard, size_t offset) { (void)guard; (void)offset; }
static int kc_guard_ensure_handler(void) { return 0; }

#else

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(MAP_ANONYMOUS) && defined(MAP_ANON)
#define MAP_ANONYMOUS MAP_ANON
#endif

enum { KC_GUARD_BLOCK = 64 };

typedef struct kc_guard_block {
    kc_guard slots[KC_GUARD_BLOCK];
    struct kc_guard_block* next;     /* published with release order, never freed */
} kc_guard_block;

static kc_guard_block kc_guard_first;
static pthread_mutex_t kc_guard_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction kc_guard_previous;      /* what handled SIGBUS before us */
static volatile sig_atomic_t kc_guard_passed_on; /* a foreign SIGBUS was handed on */
static uintptr_t kc_guard_page;

/* Lower guard->cut to `offset` (never raise it). Async-signal-safe. */
static void kc_guard_note(kc_guard* guard, size_t offset) {
    size_t old = __atomic_load_n(&guard->cut, __ATOMIC_RELAXED);
    while (offset < old && !__atomic_compare_exchange_n(&guard->cut, &old, offset, 0,
                                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
}

/* A synchronous fault (re-running the instruction faults again), as opposed to a SIGBUS that
   was sent (kill, raise, sigqueue) or reported asynchronously. */
static int kc_guard_is_fault(const siginfo_t* info) {
    if (info == NULL || info->si_code <= 0)
        return 0;
#if defined(BUS_MCEERR_AO)
    if (info->si_code == BUS_MCEERR_AO)
        return 0;
#endif
    return 1;
}

/* If the fault lies in a guarded mapping: zero pages over the rest of it, note the cut. */
static int kc_guard_absorb(const siginfo_t* info) {
    uintptr_t address, page, start, end;
    unsigned long seq;
    kc_guard_block* block;
    kc_guard* guard;
    int i;
    if (!kc_guard_is_fault(info))
        return 0;
#if defined(__linux__) && defined(BUS_ADRERR)
    if (info->si_code != BUS_ADRERR)     /* past the end of the file; not a hardware error */
        return 0;
#endif
    address = (uintptr_t)info->si_addr;
    for (block = &kc_guard_first; block != NULL;
         block = __atomic_load_n(&block->next, __ATOMIC_ACQUIRE)) {
        for (i = 0; i < KC_GUARD_BLOCK; i++) {
            guard = &block->slots[i];
            seq = __atomic_load_n(&guard->seq, __ATOMIC_ACQUIRE);
            if (seq & 1)
                continue;                /* being written: not a mapping in use by a reader */
            start = __atomic_load_n(&guard->start, __ATOMIC_RELAXED);
            end = __atomic_load_n(&guard->end, __ATOMIC_RELAXED);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&guard->seq, __ATOMIC_RELAXED) != seq)
                continue;
            if (address < start || address >= end)
                continue;
            page = address & ~(kc_guard_page - 1);
            if (mmap((void*)page, end - page, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0) == MAP_FAILED)
                return 0;                /* cannot absorb it: let it be fatal, as before */
            kc_guard_note(guard, page - start);
            return 1;
        }
    }
    return 0;
}

static void kc_guard_handler(int signum, siginfo_t* info, void* context) {
    int saved_errno = errno;
    struct sigaction next;
    (void)context;
    if (kc_guard_absorb(info)) {
        errno = saved_errno;
        return;                          /* the access re-runs and reads zeros */
    }
    next = kc_guard_previous;
    if (kc_guard_passed_on) {
        memset(&next, 0, sizeof next);   /* it came back to us: the default action */
        next.sa_handler = SIG_DFL;
        sigemptyset(&next.sa_mask);
    }
    kc_guard_passed_on = 1;
    sigaction(signum, &next, NULL);
    /* A fault is re-delivered by re-running the access; anything else is raised again (it
       stays pending until this handler returns). */
    if (!kc_guard_is_fault(info))
        raise(signum);
    errno = saved_errno;
}

/* Our handler in front (again); caller holds kc_guard_lock.  0, or -1 with errno set. */
static int kc_guard_install_locked(void) {
    struct sigaction current, ours;
    if (sigaction(SIGBUS, NULL, &current) != 0)
        return -1;
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == kc_guard_handler)
        return 0;
    if (kc_guard_page == 0)
        kc_guard_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = kc_guard_handler;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&ours.sa_mask);
    kc_guard_previous = current;
    kc_guard_passed_on = 0;
    return sigaction(SIGBUS, &ours, NULL);
}

/* Put our handler back in front if someone replaced it.  0, or -1 with errno set. */
static int kc_guard_ensure_handler(void) {
    int result;
    pthread_mutex_lock(&kc_guard_lock);
    result = kc_guard_install_locked();
    pthread_mutex_unlock(&kc_guard_lock);
    return result;
}

/* Guard [start, start + length) (start page aligned, as mmap returns it).  NULL with errno
   set when the handler cannot be installed or no slot can be allocated. */
static kc_guard* kc_guard_register(const void* start, size_t length) {
    kc_guard_block* block;
    kc_guard* guard = NULL;
    int i;
    pthread_mutex_lock(&kc_guard_lock);
    if (kc_guard_install_locked() != 0)
        goto done;
    for (block = &kc_guard_first; guard == NULL; block = block->next) {
        for (i = 0; i < KC_GUARD_BLOCK; i++) {
            if (!block->slots[i].used) {
                guard = &block->slots[i];
                break;
            }
        }
        if (guard == NULL && block->next == NULL) {
            kc_guard_block* more = (kc_guard_block*)calloc(1, sizeof *more);
            if (more == NULL) {
                errno = ENOMEM;
                goto done;
            }
            __atomic_store_n(&block->next, more, __ATOMIC_RELEASE);
        }
    }
    guard->used = 1;
    __atomic_store_n(&guard->cut, KC_INTACT, __ATOMIC_RELAXED);
    __atomic_store_n(&guard->seq, guard->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&guard->start, (uintptr_t)start, __ATOMIC_RELAXED);
    __atomic_store_n(&guard->end, ((uintptr_t)start + length + kc_guard_page - 1)
                                  & ~(kc_guard_page - 1), __ATOMIC_RELAXED);
    __atomic_store_n(&guard->seq, guard->seq + 1, __ATOMIC_RELEASE);
done:
    pthread_mutex_unlock(&kc_guard_lock);
    return guard;
}

/* Forget a mapping (before it is unmapped: its address range may be reused afterwards). */
static void kc_guard_unregister(kc_guard* guard) {
    pthread_mutex_lock(&kc_guard_lock);
    __atomic_store_n(&guard->seq, guard->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&guard->start, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&guard->end, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&guard->seq, guard->seq + 1, __ATOMIC_RELEASE);
    guard->used = 0;
    pthread_mutex_unlock(&kc_guard_lock);
}

#endif /* _WIN32 */
#endif /* KC_MAPGUARD_IMPLEMENTATION */
