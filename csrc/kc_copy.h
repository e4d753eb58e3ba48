/* Copies into large outputs that are written once and not read back soon (the value column of
 * an ArrowDecoder output): the bulk of each copy goes out with non-temporal stores.
 * An ordinary store to a line that is not cached first reads the line from memory (a "read
 * for ownership") and then evicts something useful; a streaming store of a whole 64-byte line
 * does neither, which saves about a third of the memory traffic of a copy whose output
 * outgrows the caches.  Lines are either written whole by streaming stores or by ordinary
 * ones (the unaligned head and tail of each copy), so the write-combining buffers only ever
 * flush full lines.  Streaming stores are weakly ordered: kc_stream_fence() must run before
 * the output is handed to anything else (another thread, or code that publishes it).
 * x86-64 only (SSE2 is part of its baseline); elsewhere both are memcpy and nothing.
 * Header-only: every extension that includes it gets its own static copy.
 */
#ifndef KC_COPY_H
#define KC_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if (defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)) && \
    (defined(__x86_64__) || defined(_M_X64) || defined(_M_AMD64))
#  include <emmintrin.h>
#  define KC_STREAM 1
#endif

/* Below this a copy is ordinary: too few whole lines to pay for the alignment work. */
#define KC_STREAM_MIN 256

#if defined(__GNUC__) || defined(__clang__)
#  define KC_NOINLINE __attribute__((noinline, unused))
#elif defined(_MSC_VER)
#  define KC_NOINLINE __declspec(noinline)
#else
#  define KC_NOINLINE
#endif

/* The streaming part, out of line: callers copying many small values stay small enough to be
 * inlined themselves. */
static KC_NOINLINE void kc_copy_stream_long(unsigned char *dst, const unsigned char *src,
                                            size_t n)
{
#ifdef KC_STREAM
    size_t head = (size_t)(-(uintptr_t)dst) & 63;
    __m128i a, b, c, d;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; n >= 64; n -= 64, dst += 64, src += 64) {
        a = _mm_loadu_si128((const __m128i *)src);
        b = _mm_loadu_si128((const __m128i *)(src + 16));
        c = _mm_loadu_si128((const __m128i *)(src + 32));
        d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
#endif
    memcpy(dst, src, n);
}

static inline void kc_copy_stream(unsigned char *dst, const unsigned char *src, size_t n)
{
    if (n >= KC_STREAM_MIN)
        kc_copy_stream_long(dst, src, n);
    else
        memcpy(dst, src, n);
}

/* Orders the streaming stores before every later store (publishing the output). */
static inline void kc_stream_fence(void)
{
#ifdef KC_STREAM
    _mm_sfence();
#endif
}

#endif
