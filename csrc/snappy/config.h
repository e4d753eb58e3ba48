// kafkacodec's stand-in for the config.h that snappy's CMake generates (cmake/config.h.in):
// only what snappy.cc and snappy-stubs-internal.h read.  The compiler builtins are what
// snappy-java's Linux build (lib/inc_linux/config.h) enables; without them snappy falls back
// to portable bit loops and compresses about 35% slower.  The SIMD switches stay off
// (snappy-java's build leaves them off too; they only speed up decompression, which
// kafkacodec does not use this copy for).
#ifndef THIRD_PARTY_SNAPPY_OPENSOURCE_CMAKE_CONFIG_H_
#define THIRD_PARTY_SNAPPY_OPENSOURCE_CMAKE_CONFIG_H_

#if defined(__GNUC__) || defined(__clang__)
#define HAVE_ATTRIBUTE_ALWAYS_INLINE 1
#define HAVE_BUILTIN_CTZ 1
#define HAVE_BUILTIN_EXPECT 1
#endif

#endif  // THIRD_PARTY_SNAPPY_OPENSOURCE_CMAKE_CONFIG_H_
