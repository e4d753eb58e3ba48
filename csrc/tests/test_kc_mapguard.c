/* Stand-alone check of csrc/kc_mapguard.h (no Python): a guarded mapping of a file truncated
 * under it reads zeros past the cut and records the cut; an unregistered or unguarded mapping
 * still dies of SIGBUS (checked in a child process); so does a SIGBUS sent with kill().
 * Built and run by tests/test_c_headers.py with every C compiler found (gcc, clang, MSVC: on
 * Windows there is no guard, and kc_guard_register must say so with NULL).
 * Exit status 0 and "kc_mapguard: N checks passed" on success. */
#if !defined(_WIN32)
#define _DEFAULT_SOURCE 1   /* MAP_ANONYMOUS, ftruncate, mkstemp under -std=c99 (glibc) */
#define _DARWIN_C_SOURCE 1
#endif
#include <stdio.h>
#include <stdlib.h>

#define KC_MAPGUARD_IMPLEMENTATION
#include "kc_mapguard.h"
#include "kc_check.h"

#if defined(_WIN32)

int main(void) {
    static char page[4096];
    CHECK(!KC_GUARD_SUPPORTED, "no guard on Windows");
    CHECK(kc_guard_register(page, sizeof page) == NULL, "register says 'not guarded'");
    CHECK(kc_guard_ensure_handler() == 0, "ensure_handler is a no-op");
    if (failures) return 1;
    printf("kc_mapguard: %d checks passed\n", checks);
    return 0;
}

#else

#include <sys/wait.h>

#define PAGES 8

static size_t page_size;

/* A temporary file of PAGES pages (byte i holds i % 251 + 1, never 0), mapped read-only. */
static unsigned char* map_file(char* path, int* fd) {
    unsigned char* data;
    unsigned char* p;
    size_t i, size = PAGES * page_size;
    strcpy(path, "/tmp/kc_mapguard_XXXXXX");
    *fd = mkstemp(path);
    if (*fd < 0) return NULL;
    p = (unsigned char*)malloc(size);
    if (p == NULL) return NULL;
    for (i = 0; i < size; i++) p[i] = (unsigned char)(i % 251 + 1);
    if (write(*fd, p, size) != (ssize_t)size) return NULL;
    free(p);
    data = (unsigned char*)mmap(NULL, size, PROT_READ, MAP_SHARED, *fd, 0);
    return data == MAP_FAILED ? NULL : data;
}

/* Run `body` in a child; its termination signal (0 when it exits normally). */
static int child_signal(void (*body)(void)) {
    int status = 0;
    pid_t pid = fork();
    if (pid == 0) {
        body();
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static volatile unsigned char sink;
static unsigned char* unguarded;

static void read_unguarded(void) { sink = unguarded[3 * page_size]; }
static void send_sigbus(void) { kill(getpid(), SIGBUS); }

int main(void) {
    char path[64], other_path[64];
    int fd, other_fd;
    size_t i, size, cut;
    unsigned char* data;
    kc_guard* guard;
    int zeros, intact;
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    size = PAGES * page_size;

    data = map_file(path, &fd);
    unguarded = map_file(other_path, &other_fd);
    if (data == NULL || unguarded == NULL) {
        perror("setup");
        return 2;
    }
    guard = kc_guard_register(data, size);
    CHECK(KC_GUARD_SUPPORTED && guard != NULL, "register");
    CHECK(kc_guard_cut(guard) == KC_INTACT, "intact after register");

    /* Truncate in the middle of page 3: page 3 still reads the file (zeros past its end),
       pages 4.. fault and read zeros from then on. */
    cut = 3 * page_size + 100;
    CHECK(ftruncate(fd, (off_t)cut) == 0, "ftruncate");
    zeros = intact = 1;
    for (i = 0; i < size; i++) {
        if (i < cut && data[i] != (unsigned char)(i % 251 + 1)) intact = 0;
        if (i >= cut && data[i] != 0) zeros = 0;
    }
    CHECK(intact, "bytes before the cut read the file");
    CHECK(zeros, "bytes past the cut read zeros");
    CHECK(kc_guard_cut(guard) == 4 * page_size, "cut at the first faulting page: %zu",
          kc_guard_cut(guard));
    kc_guard_note(guard, cut);
    CHECK(kc_guard_cut(guard) == cut, "note lowers the cut");
    kc_guard_note(guard, size);
    CHECK(kc_guard_cut(guard) == cut, "note never raises it");

    /* Someone else's handler in front: ensure_handler puts ours back. */
    signal(SIGBUS, SIG_DFL);
    CHECK(kc_guard_ensure_handler() == 0, "ensure_handler");

    /* A fault in a mapping that is not ours, or a sent SIGBUS: the default action, as before. */
    CHECK(ftruncate(other_fd, 0) == 0, "ftruncate other");
    CHECK(child_signal(read_unguarded) == SIGBUS, "a foreign fault still kills");
    CHECK(child_signal(send_sigbus) == SIGBUS, "a sent SIGBUS still kills");

    /* Unregistered (about to be unmapped): no longer absorbed. */
    kc_guard_unregister(guard);
    CHECK(ftruncate(fd, 0) == 0, "ftruncate to 0");
    munmap(data, size);
    data = (unsigned char*)mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    unguarded = data;
    CHECK(data != MAP_FAILED && child_signal(read_unguarded) == SIGBUS,
          "an unregistered mapping is not guarded");

    munmap(data, size);
    close(fd);
    close(other_fd);
    unlink(path);
    unlink(other_path);
    if (failures) return 1;
    printf("kc_mapguard: %d checks passed\n", checks);
    return 0;
}

#endif
