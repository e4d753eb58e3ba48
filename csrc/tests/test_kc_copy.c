/* Stand-alone check of csrc/kc_copy.h (no Python): kc_copy_stream copies exactly n bytes at
 * every length around the streaming threshold and the 64-byte lines, from and to every
 * alignment in a line, and writes nothing outside the destination.
 * Built and run by tests/test_c_headers.py with every C compiler found (gcc, clang, MSVC).
 * Exit status 0 and "kc_copy: N checks passed" on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_copy.h"

#define GUARD 80
#define MAX_LEN (KC_STREAM_MIN + 4 * 64 + 3)

int main(void) {
    unsigned char src[MAX_LEN + 64];
    unsigned char dst[GUARD + MAX_LEN + 64 + GUARD];
    int checks = 0, failures = 0;
    size_t n, from, to, i;
    for (i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 7 + 3);
    for (n = 0; n <= MAX_LEN; n++) {
        /* lengths below the threshold only at a few alignments: they are memcpy */
        if (n < KC_STREAM_MIN - 2 && n % 17 != 0) continue;
        for (from = 0; from < 64; from += (n < KC_STREAM_MIN ? 21 : 3)) {
            for (to = 0; to < 64; to++) {
                memset(dst, 0xA5, sizeof dst);
                kc_copy_stream(dst + GUARD + to, src + from, n);
                kc_stream_fence();
                checks++;
                if (memcmp(dst + GUARD + to, src + from, n) != 0) {
                    failures++;
                    fprintf(stderr, "n=%zu from=%zu to=%zu: wrong bytes\n", n, from, to);
                }
                for (i = 0; i < sizeof dst; i++) {
                    if ((i < GUARD + to || i >= GUARD + to + n) && dst[i] != 0xA5) break;
                }
                checks++;
                if (i != sizeof dst) {
                    failures++;
                    fprintf(stderr, "n=%zu from=%zu to=%zu: wrote outside the destination\n", n, from, to);
                }
            }
        }
    }
    if (failures) {
        printf("kc_copy: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("kc_copy: %d checks passed\n", checks);
    return 0;
}
