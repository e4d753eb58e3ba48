/* kc_check.h: the counting CHECK of the stand-alone C tests (test_*.c beside it). A failed
 * check prints its message to stderr and the test goes on; main() ends with `failures` and
 * `checks` (the exit status and the "N checks passed" line tests/test_c_headers.py reads). */
#ifndef KC_CHECK_H
#define KC_CHECK_H

#include <stdio.h>

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                       \
    do {                                       \
        checks++;                              \
        if (!(cond)) {                         \
            failures++;                        \
            fprintf(stderr, __VA_ARGS__);      \
            fputc('\n', stderr);               \
        }                                      \
    } while (0)

#endif /* KC_CHECK_H */
