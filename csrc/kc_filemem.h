/* kc_filemem.h: whether a byte range of this process's memory has a file behind it.
 *
 * A reader that keeps pointing into its caller's buffer after the call (ArrowDecoder's
 * views=True) must not point into a file mapping: when the file is cut (Kafka truncates its
 * active segment), a read of a page past the new end raises SIGBUS and kills the process. The
 * Python type of the buffer cannot say what the memory is (a pyarrow memory map, a numpy memmap,
 * a ctypes array or a foreign buffer over a mapping, a memfd), so this asks the kernel about the
 * address range itself:
 *
 *  - PROCMAP_QUERY (Linux 6.11+): one ioctl on /proc/self/maps for the first file-backed VMA
 *    (vm_file set) at or after the range's start; the range has a file behind it when that VMA
 *    starts before the range's end.  O(log mappings), a few microseconds.
 *  - older kernels (the ioctl answers ENOTTY; any error but ENOENT is remembered): the text
 *    of /proc/self/maps, lines read in address order up to the range's end; a line overlapping
 *    the range with a device or inode (its "maj:min inode" fields) is a file.  Anonymous
 *    memory (the heap, the stacks, anonymous private mappings, named ones such as [anon:...])
 *    shows 00:00 0; every mapping with a file shows the file's device, and no device is 00:00.
 *    O(mappings).
 *
 * "A file" is what the kernel calls one: shared anonymous memory (MAP_SHARED|MAP_ANONYMOUS,
 * Python's mmap.mmap(-1, n)) is a shmem file ("/dev/zero (deleted)"), and memfd, SysV and POSIX
 * shared memory are files: all of them count as file-backed.  Nothing is cached but the ioctl's
 * absence: an address range that was anonymous at one call can be unmapped and a file mapped at
 * the same address by the next, and the descriptor is opened per call (a cached one would be
 * the parent's after fork(), or another file's after a daemon closed every descriptor).
 *
 * Elsewhere (macOS, Windows, no /proc mounted) the answer is KC_MEM_UNKNOWN: a caller that must
 * not point into a file refuses it.  Not async-signal-safe; callers serialise (the GIL).
 */
#ifndef KC_FILEMEM_H
#define KC_FILEMEM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define KC_MEM_ANONYMOUS 0      /* no byte of the range has a file behind it */
#define KC_MEM_FILE 1           /* some byte of it has */
#define KC_MEM_UNKNOWN (-1)     /* this process cannot tell (errno says why) */

#define KC_MEM_LOOKUP_AUTO 0    /* PROCMAP_QUERY where the kernel has it, else the text */
#define KC_MEM_LOOKUP_TEXT 1    /* the text of /proc/self/maps (what kernels before 6.11 get) */
#define KC_MEM_LOOKUP_NONE 2    /* no lookup: KC_MEM_UNKNOWN (a platform that cannot tell) */

#if defined(__linux__)

#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* include/uapi/linux/fs.h (6.11), declared here for older headers: the ABI is fixed by `size`. */
struct kc_procmap_query {
    uint64_t size, query_flags, query_addr;
    uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define KC_PROCMAP_QUERY _IOWR('f', 17, struct kc_procmap_query)
#define KC_PROCMAP_QUERY_COVERING_OR_NEXT_VMA 0x10
#define KC_PROCMAP_QUERY_FILE_BACKED_VMA 0x20

static int kc_procmap_query_absent;  /* the kernel answered ENOTTY: use the text */

/* Hex digits at *p (at least one) into *out; 0 when there are none. */
static int kc_maps_hex(const char** p, const char* end, uint64_t* out) {
    const char* s = *p;
    uint64_t v = 0;
    for (; s < end; s++) {
        int c = (unsigned char)*s, d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else break;
        v = (v << 4) | (uint64_t)d;
    }
    if (s == *p) return 0;
    *p = s;
    *out = v;
    return 1;
}

static int kc_maps_char(const char** p, const char* end, char c) {
    if (*p >= end || **p != c) return 0;
    (*p)++;
    return 1;
}

/* One line of /proc/self/maps, "start-end perms offset maj:min inode [name]", against the range
   [lo, hi): KC_MEM_FILE (it overlaps and has a file), KC_MEM_ANONYMOUS (it does not), 2 (it
   starts at or past hi: no later line can overlap), KC_MEM_UNKNOWN (not of that form). */
static int kc_maps_line(const char* p, const char* end, uint64_t lo, uint64_t hi) {
    uint64_t start, stop, offset, major, minor, inode = 0;
    int digits = 0;
    if (!kc_maps_hex(&p, end, &start) || !kc_maps_char(&p, end, '-')
            || !kc_maps_hex(&p, end, &stop) || !kc_maps_char(&p, end, ' '))
        return KC_MEM_UNKNOWN;
    while (p < end && *p != ' ') p++;                   /* perms */
    if (!kc_maps_char(&p, end, ' ') || !kc_maps_hex(&p, end, &offset)
            || !kc_maps_char(&p, end, ' ') || !kc_maps_hex(&p, end, &major)
            || !kc_maps_char(&p, end, ':') || !kc_maps_hex(&p, end, &minor)
            || !kc_maps_char(&p, end, ' '))
        return KC_MEM_UNKNOWN;
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++)
        inode = inode * 10 + (uint64_t)(*p - '0');
    if (!digits) return KC_MEM_UNKNOWN;
    (void)offset;
    if (start >= hi) return 2;
    if (stop <= lo) return KC_MEM_ANONYMOUS;
    return (major | minor | inode) ? KC_MEM_FILE : KC_MEM_ANONYMOUS;
}

/* The text lookup: lines in address order until one overlaps with a file or starts past hi. */
static int kc_maps_text(uint64_t lo, uint64_t hi) {
    char buf[16384];                /* a line is at most a path (PATH_MAX) and ~100 bytes more */
    size_t have = 0;
    int kind = KC_MEM_ANONYMOUS, saved;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KC_MEM_UNKNOWN;
    for (;;) {
        const char *line = buf, *nl, *end;
        ssize_t got = read(fd, buf + have, sizeof buf - have);
        if (got < 0) {
            if (errno == EINTR) continue;
            kind = KC_MEM_UNKNOWN;
            break;
        }
        if (got == 0) {             /* the end: every line ends with '\n', none is left over */
            if (have) { kind = KC_MEM_UNKNOWN; errno = EPROTO; }
            break;
        }
        have += (size_t)got;
        end = buf + have;
        while ((nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            int r = kc_maps_line(line, nl, lo, hi);
            if (r != KC_MEM_ANONYMOUS) {
                kind = r == 2 ? KC_MEM_ANONYMOUS : r;
                if (r == KC_MEM_UNKNOWN) errno = EPROTO;
                goto done;
            }
            line = nl + 1;
        }
        have = (size_t)(end - line);
        if (have == sizeof buf) {   /* no line is that long */
            kind = KC_MEM_UNKNOWN;
            errno = EPROTO;
            break;
        }
        memmove(buf, line, have);
    }
done:
    saved = errno;
    close(fd);
    errno = saved;
    return kind;
}

/* KC_MEM_ANONYMOUS, KC_MEM_FILE, or KC_MEM_UNKNOWN (errno set) for the `length` bytes at `start`,
   as `lookup` (KC_MEM_LOOKUP_*) asks. */
static int kc_memory_kind(const void* start, size_t length, int lookup) {
    uint64_t lo = (uint64_t)(uintptr_t)start, hi = lo + length;
    if (lookup == KC_MEM_LOOKUP_NONE) {
        errno = ENOSYS;
        return KC_MEM_UNKNOWN;
    }
    if (length == 0) return KC_MEM_ANONYMOUS;   /* no byte: nothing to read */
    if (lookup == KC_MEM_LOOKUP_AUTO && !kc_procmap_query_absent) {
        struct kc_procmap_query q;
        int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), r, saved;
        if (fd < 0) return KC_MEM_UNKNOWN;
        memset(&q, 0, sizeof q);
        q.size = sizeof q;
        q.query_flags = KC_PROCMAP_QUERY_COVERING_OR_NEXT_VMA | KC_PROCMAP_QUERY_FILE_BACKED_VMA;
        q.query_addr = lo;
        r = ioctl(fd, KC_PROCMAP_QUERY, &q);
        saved = errno;
        close(fd);
        if (r == 0) return q.vma_start < hi ? KC_MEM_FILE : KC_MEM_ANONYMOUS;
        if (saved == ENOENT) return KC_MEM_ANONYMOUS;   /* no file-backed VMA from lo on */
        kc_procmap_query_absent = 1;    /* ENOTTY before 6.11 (or a sandbox's refusal): the text */
    }
    return kc_maps_text(lo, hi);
}

#else

static int kc_memory_kind(const void* start, size_t length, int lookup) {
    (void)start; (void)length; (void)lookup;
    errno = ENOSYS;
    return KC_MEM_UNKNOWN;
}

#endif
#endif /* KC_FILEMEM_H */
