/* Included by the extensions whose decode and conversion loops are built from many small
 * `cdef inline` functions (_arrow, _convert): every one of them is inlined, whatever GCC's -O2
 * size limits say.  Those limits left the v2 record scan, read_v2_header(), walk_next() and the
 * legacy message writer out of line in the loops, which then kept their state in memory around
 * each call (callgrind: 2-5% more instructions a decode than inlined).  Cython defines
 * CYTHON_INLINE before the includes, so this redefinition applies to the module's functions.
 */
#ifndef KC_INLINE_H
#define KC_INLINE_H
#if defined(__GNUC__) || defined(__clang__)
#undef CYTHON_INLINE
#define CYTHON_INLINE __inline__ __attribute__((always_inline, unused))
#endif
#endif
