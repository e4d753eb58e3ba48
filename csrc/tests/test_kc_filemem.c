/* Stand-alone check of csrc/kc_filemem.h (no Python): heap, stack and private anonymous memory
 * have no file behind them; file mappings (shared or private) and shared anonymous memory (a
 * shmem file) have; a range is file-backed when any byte of it is, to the byte at a mapping's
 * edge; the PROCMAP_QUERY ioctl and the text of /proc/self/maps agree; elsewhere (and with no
 * lookup) the answer is "cannot tell".
 * Built and run by tests/test_c_headers.py with every C compiler found.
 * Exit status 0 and "kc_filemem: N checks passed" on success. */
#if !defined(_WIN32)
#define _DEFAULT_SOURCE 1   /* MAP_ANONYMOUS, mkstemp under -std=c99 (glibc) */
#define _DARWIN_C_SOURCE 1
#endif
#include <stdio.h>
#include <stdlib.h>

#include "kc_filemem.h"
#include "kc_check.h"

#if !defined(__linux__)

int main(void) {
    static char page[4096];
    CHECK(kc_memory_kind(page, sizeof page, KC_MEM_LOOKUP_AUTO) == KC_MEM_UNKNOWN,
          "no lookup here: cannot tell");
    CHECK(errno == ENOSYS, "errno ENOSYS");
    if (failures) return 1;
    printf("kc_filemem: %d checks passed\n", checks);
    return 0;
}

#else

#include <sys/mman.h>

static const char* const LOOKUPS[] = {"auto", "text"};

int main(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char path[64], on_stack[256];
    int fd, lookup;
    size_t i;
    unsigned char *heap, *anon, *shared_anon, *file_shared, *file_private, *mixed;

    strcpy(path, "/tmp/kc_filemem_XXXXXX");
    fd = mkstemp(path);
    heap = (unsigned char*)malloc(1000);
    if (fd < 0 || heap == NULL || ftruncate(fd, (off_t)(4 * page)) != 0) {
        perror("setup");
        return 2;
    }
    anon = (unsigned char*)mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    shared_anon = (unsigned char*)mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    file_shared = (unsigned char*)mmap(NULL, 2 * page, PROT_READ, MAP_SHARED, fd, 0);
    file_private = (unsigned char*)mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    /* three anonymous pages with the file mapped over the middle one */
    mixed = (unsigned char*)mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (anon == MAP_FAILED || shared_anon == MAP_FAILED || file_shared == MAP_FAILED
            || file_private == MAP_FAILED || mixed == MAP_FAILED
            || mmap(mixed + page, page, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    file_private[0] = 1;            /* a private page copied on write: still a file's mapping */
    memset(on_stack, 0, sizeof on_stack);

    for (lookup = KC_MEM_LOOKUP_AUTO; lookup <= KC_MEM_LOOKUP_TEXT; lookup++) {
        const char* name = LOOKUPS[lookup];
        CHECK(kc_memory_kind(heap, 1000, lookup) == KC_MEM_ANONYMOUS, "%s: heap", name);
        CHECK(kc_memory_kind(on_stack, sizeof on_stack, lookup) == KC_MEM_ANONYMOUS, "%s: stack", name);
        CHECK(kc_memory_kind(anon, 3 * page, lookup) == KC_MEM_ANONYMOUS, "%s: anonymous", name);
        CHECK(kc_memory_kind(shared_anon, page, lookup) == KC_MEM_FILE, "%s: shared anonymous (shmem)", name);
        CHECK(kc_memory_kind(file_shared, 2 * page, lookup) == KC_MEM_FILE, "%s: shared file", name);
        CHECK(kc_memory_kind(file_shared + page + 7, 1, lookup) == KC_MEM_FILE, "%s: one byte of it", name);
        CHECK(kc_memory_kind(file_private, 2 * page, lookup) == KC_MEM_FILE, "%s: private file", name);
        CHECK(kc_memory_kind(mixed, page, lookup) == KC_MEM_ANONYMOUS, "%s: up to the file", name);
        CHECK(kc_memory_kind(mixed, page + 1, lookup) == KC_MEM_FILE, "%s: one byte into the file", name);
        CHECK(kc_memory_kind(mixed + 2 * page - 1, 1, lookup) == KC_MEM_FILE, "%s: its last byte", name);
        CHECK(kc_memory_kind(mixed + 2 * page, page, lookup) == KC_MEM_ANONYMOUS, "%s: past it", name);
        CHECK(kc_memory_kind(mixed, 3 * page, lookup) == KC_MEM_FILE, "%s: across it", name);
        CHECK(kc_memory_kind(file_shared, 0, lookup) == KC_MEM_ANONYMOUS, "%s: no byte", name);
    }
    errno = 0;
    CHECK(kc_memory_kind(heap, 1000, KC_MEM_LOOKUP_NONE) == KC_MEM_UNKNOWN && errno == ENOSYS,
          "no lookup: cannot tell");

    /* the text's lines, as the kernel prints them */
    {
        static const char* const lines[] = {
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0                          [anon:arena]",
            "7f0000000000-7f0000001000 rw-s 00000000 00:01 1046                       /dev/zero (deleted)",
            "7f0000000000-7f0000001000 r--p 00000000 fe:00 5488802                    /usr/lib/libc.so.6",
            "7f0000000000-7f0000001000 r--s 00000000 00:00 17                         anon_inode:x",
            "7f0000000000-7f0000001000 r--s 00000000 00:2a 0                          /odd",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00",
            "7f0000000000 rw-p 00000000 00:00 0",
            "",
        };
        static const int kinds[] = {KC_MEM_ANONYMOUS, KC_MEM_ANONYMOUS, KC_MEM_FILE, KC_MEM_FILE,
                                    KC_MEM_FILE, KC_MEM_FILE, KC_MEM_UNKNOWN, KC_MEM_UNKNOWN,
                                    KC_MEM_UNKNOWN};
        uint64_t lo = 0x7f0000000800, hi = 0x7f0000000900;
        for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            const char* line = lines[i];
            CHECK(kc_maps_line(line, line + strlen(line), lo, hi) == kinds[i], "line %u: %s",
                  (unsigned)i, line);
        }
        CHECK(kc_maps_line(lines[3], lines[3] + strlen(lines[3]), 0x7f0000001000, 0x7f0000002000)
              == KC_MEM_ANONYMOUS, "a line that ends at the range's start");
        CHECK(kc_maps_line(lines[3], lines[3] + strlen(lines[3]), 0x10, 0x7f0000000000) == 2,
              "a line that starts at the range's end: the last one read");
    }

    printf("kc_filemem: PROCMAP_QUERY %s\n", kc_procmap_query_absent ? "absent (text)" : "used");
    close(fd);
    unlink(path);
    free(heap);
    if (failures) return 1;
    printf("kc_filemem: %d checks passed\n", checks);
    return 0;
}

#endif
