/* Stand-alone check of csrc/kc_crc.h (no Python): known check values, hardware path equal to
 * the portable path at every length and alignment around the lane boundaries, and chaining.
 * Built and run by tests/test_c_headers.py with every C compiler found (gcc, clang, MSVC).
 * Exit status 0 and "kc_crc: N checks passed" on success. */
#include <stdio.h>
#include <stdlib.h>

#include "kc_crc.h"
#include "kc_check.h"

/* Bit-at-a-time reference, independent of the tables. */
static uint32_t ref_crc(uint32_t poly, const unsigned char *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ poly : crc >> 1;
    }
    return ~crc;
}

int main(void) {
    static const unsigned char check[] = "123456789";
    const size_t big = 3 * KC_LANE_LONG + 3 * KC_LANE_SHORT + 64;
    unsigned char *buf = (unsigned char *)malloc(big + 16);
    uint32_t seed = 12345;
    int hardware;
    if (!buf) return 2;
    for (size_t i = 0; i < big + 16; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (unsigned char)(seed >> 16);
    }

    /* Lazy initialisation: the first call works without an explicit kc_crc_init(). */
    CHECK(kc_crc32c(0, check, 9) == 0xE3069283u, "crc32c check value: %08x",
          (unsigned)kc_crc32c(0, check, 9));
    CHECK(kc_crc32(0, check, 9) == 0xCBF43926u, "crc32 check value: %08x",
          (unsigned)kc_crc32(0, check, 9));
    CHECK(kc_crc32c(0, NULL, 0) == 0 && kc_crc32(0, NULL, 0) == 0, "empty input");
    hardware = kc_crc32c_is_hardware();

    static const size_t sizes[] = {1, 7, 8, 9, 15, 16, 63, 64, 65, 127, 128, 129, 255, 256,
                                   257, 271, 272, 511, 512, 513, 767, 768, 769, 16387, 24575,
                                   24576, 24577};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (size_t align = 0; align < 8; align++) {
            size_t n = sizes[s];
            uint32_t want_c = ref_crc(KC_CRC32C_POLY, buf + align, n);
            uint32_t want_z = ref_crc(KC_CRC32_POLY, buf + align, n);
            uint32_t got_default = kc_crc32c(0, buf + align, n);
            uint32_t got_soft;
#if defined(KC_X86)
            {
                /* every fold width the CPU has (3: 512-bit, 2: 256-bit, 1: 128-bit), then none */
                int clmul = kc_crc32_clmul;
                for (int level = clmul; level >= 0; level--) {
                    kc_crc32_clmul = level;
                    CHECK(kc_crc32(0, buf + align, n) == want_z, "crc32 clmul=%d n=%zu align=%zu",
                          level, n, align);
                    CHECK(kc_crc32c(0, buf + align, n) == want_c, "crc32c clmul=%d n=%zu align=%zu",
                          level, n, align);
                }
                kc_crc_hw = 0; /* force the portable paths */
                got_soft = kc_crc32c(0, buf + align, n);
                kc_crc_hw = hardware;
                kc_crc32_clmul = clmul;
            }
#else
            kc_crc_hw = 0; /* force the portable path */
            got_soft = kc_crc32c(0, buf + align, n);
            kc_crc_hw = hardware;
#endif
            CHECK(got_default == want_c, "crc32c n=%zu align=%zu: %08x != %08x", n, align,
                  (unsigned)got_default, (unsigned)want_c);
            CHECK(got_soft == want_c, "crc32c soft n=%zu align=%zu", n, align);
            CHECK(kc_crc32(0, buf + align, n) == want_z, "crc32 n=%zu align=%zu", n, align);
            /* Chaining: split anywhere, same result. */
            size_t cut = n / 3;
            CHECK(kc_crc32c(kc_crc32c(0, buf + align, cut), buf + align + cut, n - cut) == want_c,
                  "crc32c chained n=%zu", n);
            CHECK(kc_crc32(kc_crc32(0, buf + align, cut), buf + align + cut, n - cut) == want_z,
                  "crc32 chained n=%zu", n);
        }
    }
    /* One input long enough for both lane sizes. */
    CHECK(kc_crc32c(0, buf, big) == ref_crc(KC_CRC32C_POLY, buf, big), "crc32c long input");
    free(buf);
    if (failures) {
        fprintf(stderr, "kc_crc: %d of %d checks failed (hardware=%d)\n", failures, checks,
                hardware);
        return 1;
    }
#if defined(KC_X86)
    printf("kc_crc: %d checks passed (hardware=%d, clmul=%d)\n", checks, hardware, kc_crc32_clmul);
#else
    printf("kc_crc: %d checks passed (hardware=%d)\n", checks, hardware);
#endif
    return 0;
}
