/* CRC-32C (Castagnoli, v2 batches) and CRC-32 (IEEE, v0/v1 messages).
 *
 * CRC-32C uses the SSE4.2 crc32 instruction (x86-64) or the ARMv8 CRC extension (aarch64)
 * when the CPU has it, chosen once at run time; otherwise slicing-by-8 tables.  Long inputs
 * run three independent instruction streams and merge them with precomputed "append N zero
 * bytes" operators, which hides the instruction's 3-cycle latency.  On x86-64 CPUs with
 * VPCLMULQDQ (AVX2 or AVX-512), inputs of 256 bytes or more are folded with carry-less
 * multiplication instead, as CRC-32 is: that outruns the crc32 instruction (one 8-byte step a
 * cycle) about 2.4x on 512-bit registers (a v2 batch's CRC is the CRC walk's whole cost).
 * CRC-32 folds 64 bytes at a time with carry-less multiplication (PCLMULQDQ, x86-64) when the
 * CPU has it and the input is at least 64 bytes (down-conversion writes v0/v1 messages at
 * memory speed), otherwise slicing-by-8.  Both polynomials share the fold code: only the
 * constants differ.
 * Header-only: every extension that includes it gets its own static copy.
 */
#ifndef KC_CRC_H
#define KC_CRC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_AMD64))
#  include <intrin.h>
#  include <nmmintrin.h>
#  include <wmmintrin.h>
#  include <smmintrin.h>
#  define KC_X86 1
#  if defined(__clang__) /* clang-cl: intrinsics need the target attribute, as with clang */
#    define KC_TARGET_SSE42 __attribute__((target("sse4.2")))
#    define KC_TARGET_PCLMUL __attribute__((target("pclmul,sse4.1")))
#  else
#    define KC_TARGET_SSE42
#    define KC_TARGET_PCLMUL
#  endif
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#  include <nmmintrin.h>
#  include <wmmintrin.h>
#  include <smmintrin.h>
#  include <cpuid.h>
#  define KC_X86 1
#  define KC_TARGET_SSE42 __attribute__((target("sse4.2")))
#  define KC_TARGET_PCLMUL __attribute__((target("pclmul,sse4.1")))
#  if (defined(__GNUC__) && __GNUC__ >= 9) || (defined(__clang__) && __clang_major__ >= 8)
#    include <immintrin.h>
#    define KC_VPCLMUL 1
#    define KC_TARGET_VPCLMUL __attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
#    define KC_TARGET_VPCLMUL512 __attribute__((target("vpclmulqdq,avx512f,avx2,pclmul,sse4.1")))
#  endif
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__) && \
    (defined(__linux__) || defined(__APPLE__))
#  define KC_ARM 1
#  if defined(__linux__)
#    include <sys/auxv.h>
#    ifndef HWCAP_CRC32
#      define HWCAP_CRC32 (1 << 7)
#    endif
#  endif
#  if defined(__clang__)
#    define KC_TARGET_CRC __attribute__((target("crc")))
#  else
#    define KC_TARGET_CRC __attribute__((target("+crc")))
#  endif
#endif
/* Any other compiler/CPU (MSVC on ARM64, 32-bit, big-endian, *BSD on aarch64...) uses the
 * portable slicing-by-8 code below: same results, no special header. */

#if defined(__GNUC__) || defined(__clang__)
#  define KC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#  define KC_UNLIKELY(x) (x)
#endif

#define KC_CRC32C_POLY 0x82F63B78u /* reflected Castagnoli */
#define KC_CRC32_POLY 0xEDB88320u  /* reflected IEEE 802.3 */
#define KC_LANE_LONG 8192
#define KC_LANE_SHORT 256

static uint32_t kc_crc32c_table[8][256];
static uint32_t kc_crc32_table[8][256];
static uint32_t kc_crc32c_long[4][256];  /* shift a CRC over KC_LANE_LONG zero bytes */
static uint32_t kc_crc32c_short[4][256]; /* shift a CRC over KC_LANE_SHORT zero bytes */
static int kc_crc_hw = -1;               /* -1: not initialised, 0: software, 1: hardware */
static int kc_crc32_clmul = 0;           /* 1: PCLMULQDQ, 2: also VPCLMULQDQ on 256-bit lanes,
                                          * 3: also on 512-bit lanes (AVX-512F) */

static void kc_build_slicing_tables(uint32_t table[8][256], uint32_t poly) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ poly : crc >> 1;
        table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = table[0][n];
        for (int k = 1; k < 8; k++) {
            crc = table[0][crc & 0xff] ^ (crc >> 8);
            table[k][n] = crc;
        }
    }
}

/* GF(2) 32x32 matrix helpers used to build the zero-append operators. */
static uint32_t kc_gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void kc_gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = kc_gf2_times(mat, mat[n]);
}

/* Operator that appends `len` zero bytes to a raw (uninverted) CRC-32C register. */
static void kc_zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32];
    uint32_t row = 1;
    odd[0] = KC_CRC32C_POLY; /* one zero bit */
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    kc_gf2_square(even, odd); /* two zero bits */
    kc_gf2_square(odd, even); /* four zero bits */
    do {                      /* then square until len bytes are covered */
        kc_gf2_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        kc_gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void kc_zeros_table(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    kc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        uint64_t v = kc_gf2_times(op, n);
        zeros[0][n] = (uint32_t)v;
        zeros[1][n] = kc_gf2_times(op, n << 8);
        zeros[2][n] = kc_gf2_times(op, n << 16);
        zeros[3][n] = kc_gf2_times(op, n << 24);
    }
}

static inline uint32_t kc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

static int kc_cpu_has_crc(void) {
#if defined(KC_X86) && defined(_MSC_VER)
    int info[4];
    __cpuid(info, 1);
    return (info[2] >> 20) & 1;
#elif defined(KC_X86)
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx >> 20) & 1; /* SSE4.2 */
#elif defined(KC_ARM) && defined(__APPLE__)
    return 1; /* every Apple arm64 CPU has the CRC extension */
#elif defined(KC_ARM) && defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#else
    return 0;
#endif
}

static int kc_cpu_has_clmul(void) {
#if defined(KC_X86) && defined(_MSC_VER)
    int info[4];
    __cpuid(info, 1);
    return ((info[2] >> 1) & 1) && ((info[2] >> 19) & 1);
#elif defined(KC_X86)
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    if (!(((ecx >> 1) & 1) && ((ecx >> 19) & 1))) return 0; /* PCLMULQDQ and SSE4.1 */
#  if defined(KC_VPCLMUL)
    {
        /* VPCLMULQDQ (leaf 7 ECX bit 10) with AVX2 (leaf 7 EBX bit 5), YMM state enabled by the
         * OS (OSXSAVE, XCR0 bits 1 and 2). */
        unsigned int a7, b7, c7, d7, xcr0_lo, xcr0_hi;
        if (((ecx >> 27) & 1) && __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) &&
            ((b7 >> 5) & 1) && ((c7 >> 10) & 1)) {
            __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
            /* AVX-512F (leaf 7 EBX bit 16) with the opmask and ZMM state enabled (XCR0 5-7) */
            if (((b7 >> 16) & 1) && (xcr0_lo & 0xE6) == 0xE6) return 3;
            if ((xcr0_lo & 6) == 6) return 2;
        }
    }
#  endif
    return 1;
#else
    return 0;
#endif
}

static void kc_crc_init(void) {
    if (kc_crc_hw >= 0) return;
    kc_build_slicing_tables(kc_crc32c_table, KC_CRC32C_POLY);
    kc_build_slicing_tables(kc_crc32_table, KC_CRC32_POLY);
    kc_zeros_table(kc_crc32c_long, KC_LANE_LONG);
    kc_zeros_table(kc_crc32c_short, KC_LANE_SHORT);
    kc_crc32_clmul = kc_cpu_has_clmul();
    kc_crc_hw = kc_cpu_has_crc(); /* last: it marks the tables as ready */
}

/* Slicing-by-8 over a raw register (no pre/post inversion). */
static uint32_t kc_slice8(uint32_t table[8][256], uint32_t crc, const unsigned char *p, size_t n) {
    /* No alignment prologue: memcpy loads are unaligned-safe, and the short tails the folds
     * leave (under 16 bytes, at any alignment) would go byte by byte through it. */
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
              table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
              table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(KC_X86) || defined(KC_ARM)
#  if defined(KC_X86)
#    define KC_CRC_TARGET KC_TARGET_SSE42
#    define KC_CRC_U8(c, v) _mm_crc32_u8((c), (v))
#    define KC_CRC_U64(c, v) ((uint32_t)_mm_crc32_u64((c), (v)))
#  else
#    define KC_CRC_TARGET KC_TARGET_CRC
#    if defined(__clang__)
#      define KC_CRC_U8(c, v) __builtin_arm_crc32cb((c), (v))
#      define KC_CRC_U64(c, v) __builtin_arm_crc32cd((c), (v))
#    else
#      define KC_CRC_U8(c, v) __builtin_aarch64_crc32cb((c), (v))
#      define KC_CRC_U64(c, v) __builtin_aarch64_crc32cx((c), (v))
#    endif
#  endif

/* Three lanes of `lane` bytes each, merged with the matching zero-append operator. */
#  define KC_LANES(lane, zeros)                                                 \
    while (n >= 3 * (lane)) {                                                   \
        uint64_t crc0 = crc, crc1 = 0, crc2 = 0;                                \
        const unsigned char *end = p + (lane);                                  \
        do {                                                                    \
            uint64_t w0, w1, w2;                                                \
            memcpy(&w0, p, 8);                                                  \
            memcpy(&w1, p + (lane), 8);                                         \
            memcpy(&w2, p + 2 * (lane), 8);                                     \
            crc0 = KC_CRC_U64((uint32_t)crc0, w0);                              \
            crc1 = KC_CRC_U64((uint32_t)crc1, w1);                              \
            crc2 = KC_CRC_U64((uint32_t)crc2, w2);                              \
            p += 8;                                                             \
        } while (p < end);                                                      \
        crc0 = kc_shift(zeros, (uint32_t)crc0) ^ crc1;                          \
        crc0 = kc_shift(zeros, (uint32_t)crc0) ^ crc2;                          \
        crc = (uint32_t)crc0;                                                   \
        p += 2 * (lane);                                                        \
        n -= 3 * (lane);                                                        \
    }

KC_CRC_TARGET static uint32_t kc_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = KC_CRC_U8(crc, *p++);
        n--;
    }
    KC_LANES(KC_LANE_LONG, kc_crc32c_long)
    KC_LANES(KC_LANE_SHORT, kc_crc32c_short)
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = KC_CRC_U64(crc, w);
        p += 8;
        n -= 8;
    }
    while (n--) crc = KC_CRC_U8(crc, *p++);
    return crc;
}
#endif

/* Every extension module that includes this header has its own copy of the tables, so they
 * are filled when the module is loaded (a constructor, GCC/clang: single-threaded, before any
 * call), and lazily on first use otherwise (MSVC; a module that forgot kc_crc_init()): a CRC
 * can never be computed from empty tables. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor)) static void kc_crc_ctor(void) { kc_crc_init(); }
#endif

#if defined(KC_X86)
/* Carry-less folding (Gopal et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ", Intel 2009), for any reflected 32-bit CRC: lanes of 128 bits are folded forward
 * over a distance d by multiplying with x^(d+32) and x^(d-32) mod P, reduced to one lane, then
 * 128 -> 64 -> 32 bits and a Barrett reduction.  Constants are bit-reflected and shifted left
 * by one (33 bits), as in the paper; `poly` is P with x^32 and mu = floor(x^64 / P).  Each
 * pair is {x^(d+32), x^(d-32)} mod P for the fold distance d in bits. */
typedef struct {
    int64_t k2048[2], k1024[2], k512[2], k256[2], k128[2], k64, poly[2];
} kc_fold_constants;

static const kc_fold_constants kc_fold_crc32 = { /* IEEE 0x04C11DB7 */
    {0x11542778aLL, 0x1322d1430LL}, {0x1e88ef372LL, 0x14a7fe880LL},
    {0x154442bd4LL, 0x1c6e41596LL}, {0x0f1da05aaLL, 0x15a546366LL},
    {0x1751997d0LL, 0x0ccaa009eLL}, 0x163cd6124LL, {0x1db710641LL, 0x1f7011641LL}};
static const kc_fold_constants kc_fold_crc32c = { /* Castagnoli 0x1EDC6F41 */
    {0x0dcb17aa4LL, 0x0b9e02b86LL}, {0x06992cea2LL, 0x00d3b6092LL},
    {0x0740eef02LL, 0x09e4addf8LL}, {0x1384aa63aLL, 0x0ba4fc28eLL},
    {0x0f20c0dfeLL, 0x14cd00bd6LL}, 0x0dd45aab8LL, {0x105ec76f1LL, 0x0dea713f1LL}};

#  define KC_PAIR(k) _mm_set_epi64x((k)[1], (k)[0])

/* The end of every fold: one 128-bit lane folds in the remaining 16-byte blocks, then
 * 128 -> 64 -> 32 bits and the Barrett reduction. */
KC_TARGET_PCLMUL static uint32_t kc_fold_tail(const kc_fold_constants *k, __m128i x0,
                                              const unsigned char *p, size_t n) {
    const __m128i k128 = KC_PAIR(k->k128);
    const __m128i k64 = _mm_set_epi64x(0, k->k64);
    const __m128i poly = KC_PAIR(k->poly);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i t;
    while (n >= 16) {
        t = _mm_clmulepi64_si128(x0, k128, 0x00);
        x0 = _mm_clmulepi64_si128(x0, k128, 0x11);
        x0 = _mm_xor_si128(_mm_xor_si128(x0, t), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    t = _mm_srli_si128(x0, 8);
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(x0, k128, 0x10), t);
    t = _mm_srli_si128(x0, 4);
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x0, mask32), k64, 0x00), t);
    t = x0;
    x0 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly, 0x10), mask32);
    x0 = _mm_xor_si128(_mm_clmulepi64_si128(x0, poly, 0x00), t);
    return (uint32_t)_mm_extract_epi32(x0, 1);
}

/* n >= 64 bytes, a multiple of 16, over a raw register: four 128-bit lanes folded by 512 bits. */
KC_TARGET_PCLMUL static uint32_t kc_fold128(const kc_fold_constants *k, uint32_t crc,
                                            const unsigned char *p, size_t n) {
    const __m128i k512 = KC_PAIR(k->k512);
    const __m128i k128 = KC_PAIR(k->k128);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    __m128i t;
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)crc));
    p += 64;
    n -= 64;
#  define KC_FOLD(x, k, next)                                                       \
    t = _mm_clmulepi64_si128((x), (k), 0x00);                                       \
    (x) = _mm_clmulepi64_si128((x), (k), 0x11);                                     \
    (x) = _mm_xor_si128(_mm_xor_si128((x), t), (next));
    while (n >= 64) {
        KC_FOLD(x0, k512, _mm_loadu_si128((const __m128i *)p))
        KC_FOLD(x1, k512, _mm_loadu_si128((const __m128i *)(p + 16)))
        KC_FOLD(x2, k512, _mm_loadu_si128((const __m128i *)(p + 32)))
        KC_FOLD(x3, k512, _mm_loadu_si128((const __m128i *)(p + 48)))
        p += 64;
        n -= 64;
    }
    KC_FOLD(x0, k128, x1)
    KC_FOLD(x0, k128, x2)
    KC_FOLD(x0, k128, x3)
    return kc_fold_tail(k, x0, p, n);
}
#endif

#if defined(KC_VPCLMUL)
/* The same on 256-bit registers (two lanes each, VPCLMULQDQ): n >= 128 bytes, a multiple of
 * 16.  Four registers fold by 1024 bits, then into each other by 256 bits, and the last
 * register's two lanes by 128 bits. */
KC_TARGET_VPCLMUL static uint32_t kc_fold256(const kc_fold_constants *k, uint32_t crc,
                                             const unsigned char *p, size_t n) {
    const __m256i k1024 = _mm256_broadcastsi128_si256(KC_PAIR(k->k1024));
    const __m256i k256 = _mm256_broadcastsi128_si256(KC_PAIR(k->k256));
    const __m128i k128 = KC_PAIR(k->k128);
    __m256i y0 = _mm256_loadu_si256((const __m256i *)p);
    __m256i y1 = _mm256_loadu_si256((const __m256i *)(p + 32));
    __m256i y2 = _mm256_loadu_si256((const __m256i *)(p + 64));
    __m256i y3 = _mm256_loadu_si256((const __m256i *)(p + 96));
    __m256i u;
    __m128i x0, t;
    y0 = _mm256_xor_si256(y0, _mm256_castsi128_si256(_mm_cvtsi32_si128((int)crc)));
    p += 128;
    n -= 128;
#  define KC_FOLD256(y, k, next)                                                    \
    u = _mm256_clmulepi64_epi128((y), (k), 0x00);                                   \
    (y) = _mm256_clmulepi64_epi128((y), (k), 0x11);                                 \
    (y) = _mm256_xor_si256(_mm256_xor_si256((y), u), (next));
    while (n >= 128) {
        KC_FOLD256(y0, k1024, _mm256_loadu_si256((const __m256i *)p))
        KC_FOLD256(y1, k1024, _mm256_loadu_si256((const __m256i *)(p + 32)))
        KC_FOLD256(y2, k1024, _mm256_loadu_si256((const __m256i *)(p + 64)))
        KC_FOLD256(y3, k1024, _mm256_loadu_si256((const __m256i *)(p + 96)))
        p += 128;
        n -= 128;
    }
    KC_FOLD256(y0, k256, y1)
    KC_FOLD256(y0, k256, y2)
    KC_FOLD256(y0, k256, y3)
    x0 = _mm256_castsi256_si128(y0);
    KC_FOLD(x0, k128, _mm256_extracti128_si256(y0, 1))
    _mm256_zeroupper();
    return kc_fold_tail(k, x0, p, n);
}

/* On 512-bit registers (four lanes each, AVX-512F + VPCLMULQDQ): n >= 256 bytes, a multiple of
 * 16.  Four registers fold by 2048 bits, then into each other by 512 bits, and the last
 * register's four lanes by 128 bits. */
KC_TARGET_VPCLMUL512 static uint32_t kc_fold512(const kc_fold_constants *k, uint32_t crc,
                                                const unsigned char *p, size_t n) {
    const __m512i k2048 = _mm512_broadcast_i32x4(KC_PAIR(k->k2048));
    const __m512i k512 = _mm512_broadcast_i32x4(KC_PAIR(k->k512));
    const __m128i k128 = KC_PAIR(k->k128);
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    __m512i u;
    __m128i x0, t;
    z0 = _mm512_xor_si512(z0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)crc)));
    p += 256;
    n -= 256;
#  define KC_FOLD512(z, k, next)                                                    \
    u = _mm512_clmulepi64_epi128((z), (k), 0x00);                                   \
    (z) = _mm512_clmulepi64_epi128((z), (k), 0x11);                                 \
    (z) = _mm512_ternarylogic_epi64((z), u, (next), 0x96); /* z ^ u ^ next */
    while (n >= 256) {
        KC_FOLD512(z0, k2048, _mm512_loadu_si512((const void *)p))
        KC_FOLD512(z1, k2048, _mm512_loadu_si512((const void *)(p + 64)))
        KC_FOLD512(z2, k2048, _mm512_loadu_si512((const void *)(p + 128)))
        KC_FOLD512(z3, k2048, _mm512_loadu_si512((const void *)(p + 192)))
        p += 256;
        n -= 256;
    }
    KC_FOLD512(z0, k512, z1)
    KC_FOLD512(z0, k512, z2)
    KC_FOLD512(z0, k512, z3)
#  undef KC_FOLD512
    x0 = _mm512_castsi512_si128(z0);
    KC_FOLD(x0, k128, _mm512_extracti32x4_epi32(z0, 1))
    KC_FOLD(x0, k128, _mm512_extracti32x4_epi32(z0, 2))
    KC_FOLD(x0, k128, _mm512_extracti32x4_epi32(z0, 3))
    _mm256_zeroupper();
    return kc_fold_tail(k, x0, p, n);
}
#endif

#if defined(KC_X86)
/* Fold the longest multiple of 16 bytes of p[0:*n] (the widest registers the CPU has) and
 * advance p and *n past it; `min` is the shortest input worth folding. */
static inline uint32_t kc_fold(const kc_fold_constants *k, uint32_t crc, const unsigned char **p,
                               size_t *n, size_t min) {
    size_t head = *n & ~(size_t)15;
    if (*n < min || !kc_crc32_clmul) return crc;
#  if defined(KC_VPCLMUL)
    if (kc_crc32_clmul == 3 && head >= 256)
        crc = kc_fold512(k, crc, *p, head);
    else if (kc_crc32_clmul >= 2 && head >= 128)
        crc = kc_fold256(k, crc, *p, head);
    else
#  endif
        if (head >= 64)
            crc = kc_fold128(k, crc, *p, head);
        else
            return crc;
    *p += head;
    *n -= head;
    return crc;
}
#  undef KC_FOLD
#endif

/* CRC-32C of n bytes, continuing from `crc` (0 to start); safe without the GIL. */
static inline uint32_t kc_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    if (KC_UNLIKELY(kc_crc_hw < 0)) kc_crc_init();
    crc = ~crc;
#if defined(KC_X86)
    /* Folding beats the crc32 instruction only on VPCLMULQDQ's wide registers. */
    if (kc_crc32_clmul >= 2) crc = kc_fold(&kc_fold_crc32c, crc, &p, &n, 256);
#endif
#if defined(KC_X86) || defined(KC_ARM)
    if (kc_crc_hw == 1) return ~kc_crc32c_hw(crc, p, n);
#endif
    return ~kc_slice8(kc_crc32c_table, crc, p, n);
}

/* CRC-32 (zlib's crc32) of n bytes, continuing from `crc` (0 to start). */
static inline uint32_t kc_crc32(uint32_t crc, const unsigned char *p, size_t n) {
    if (KC_UNLIKELY(kc_crc_hw < 0)) kc_crc_init();
    crc = ~crc;
#if defined(KC_X86)
    crc = kc_fold(&kc_fold_crc32, crc, &p, &n, 64);
#endif
    return ~kc_slice8(kc_crc32_table, crc, p, n);
}

static inline int kc_crc32c_is_hardware(void) {
    if (KC_UNLIKELY(kc_crc_hw < 0)) kc_crc_init();
    return kc_crc_hw == 1;
}

#endif /* KC_CRC_H */
