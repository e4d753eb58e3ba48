/* xxHash32 (seed given), header-only.
 *
 * The LZ4 frame format uses it for the frame descriptor checksum (HC byte) and the optional
 * block and content checksums.  Written from the public algorithm description
 * (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md): four accumulators over
 * 16-byte stripes, then the 4-byte and 1-byte tails, then the avalanche.  Reads are
 * unaligned-safe little-endian loads.
 */
#ifndef KC_XXHASH32_H
#define KC_XXHASH32_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KC_XXH_P1 0x9E3779B1U
#define KC_XXH_P2 0x85EBCA77U
#define KC_XXH_P3 0xC2B2AE3DU
#define KC_XXH_P4 0x27D4EB2FU
#define KC_XXH_P5 0x165667B1U

static inline uint32_t kc_xxh_rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t kc_xxh_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint32_t kc_xxh_round(uint32_t acc, uint32_t lane) {
    acc += lane * KC_XXH_P2;
    acc = kc_xxh_rotl(acc, 13);
    return acc * KC_XXH_P1;
}

static inline uint32_t kc_xxhash32(const unsigned char *p, size_t n, uint32_t seed) {
    const unsigned char *end = p + n;
    uint32_t h;
    if (n >= 16) {
        const unsigned char *limit = end - 16;
        uint32_t v1 = seed + KC_XXH_P1 + KC_XXH_P2;
        uint32_t v2 = seed + KC_XXH_P2;
        uint32_t v3 = seed;
        uint32_t v4 = seed - KC_XXH_P1;
        do {
            v1 = kc_xxh_round(v1, kc_xxh_le32(p));
            v2 = kc_xxh_round(v2, kc_xxh_le32(p + 4));
            v3 = kc_xxh_round(v3, kc_xxh_le32(p + 8));
            v4 = kc_xxh_round(v4, kc_xxh_le32(p + 12));
            p += 16;
        } while (p <= limit);
        h = kc_xxh_rotl(v1, 1) + kc_xxh_rotl(v2, 7) + kc_xxh_rotl(v3, 12) + kc_xxh_rotl(v4, 18);
    } else {
        h = seed + KC_XXH_P5;
    }
    h += (uint32_t)n;
    while (end - p >= 4) {
        h += kc_xxh_le32(p) * KC_XXH_P3;
        h = kc_xxh_rotl(h, 17) * KC_XXH_P4;
        p += 4;
    }
    while (p < end) {
        h += (uint32_t)(*p) * KC_XXH_P5;
        h = kc_xxh_rotl(h, 11) * KC_XXH_P1;
        p++;
    }
    h ^= h >> 15;
    h *= KC_XXH_P2;
    h ^= h >> 13;
    h *= KC_XXH_P3;
    h ^= h >> 16;
    return h;
}

#endif /* KC_XXHASH32_H */
