# C-level CRC functions (csrc/kc_crc.h), for every module that checks or writes checksums.
from libc.stdint cimport uint32_t

cdef extern from "kc_crc.h" nogil:
    void kc_crc_init()
    uint32_t kc_crc32c(uint32_t crc, const unsigned char* data, size_t n)
    uint32_t kc_crc32(uint32_t crc, const unsigned char* data, size_t n)
    int kc_crc32c_is_hardware()
