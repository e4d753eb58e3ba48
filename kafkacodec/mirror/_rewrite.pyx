# cython: language_level=3
"""The mirror's hot path: v2 batches copied once into a ProduceRequest with the target
producer's state (producer id, epoch, base sequence; the transactional flag cleared; base offset
0 and no leader epoch, as a producer sends them) and their CRC-32C updated from the 36 rewritten
header bytes alone.

CRC-32C is affine: for equal lengths, crc(A) xor crc(B) = lin(A xor B), and a difference that is
zero after its first k bytes is its k-byte CRC register shifted over the n zero bytes after it
(multiplication by x^(8n) modulo the polynomial, as zlib's crc32_combine).  So the new CRC is
the stored one xor the shifted difference of the old and new header bytes: O(log n) work per
batch, the records never read.  A batch whose stored CRC was wrong stays wrong by the same
syndrome, so the target broker still refuses it (CORRUPT_MESSAGE): nothing is laundered.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kafkacodec._cursor cimport Cursor, cursor_init, load_u32
from kafkacodec._writer cimport Writer, WriteBuffer, ensure, store_u16, store_u32, store_u64
from kafkacodec._format cimport (BatchHeader, next_entry, V2_CRC_OFFSET, V2_ATTRIBUTES_OFFSET,
                                 V2_PARTITION_LEADER_EPOCH_OFFSET,
                                 V2_PRODUCER_ID_OFFSET, V2_PRODUCER_EPOCH_OFFSET,
                                 V2_BASE_SEQUENCE_OFFSET, V2_RECORDS_COUNT_OFFSET, CODEC_ZSTD,
                                 TRANSACTIONAL_FLAG, CONTROL_FLAG)
from kafkacodec._crc cimport kc_crc32c, kc_crc_init
from kafkacodec.protocol._produce cimport (_PartitionRecords,
                                           write_produce_request as write_produce_request_with)

from kafkacodec.errors import CorruptRecordError, UnsupportedCompressionError, UnsupportedVersionError

kc_crc_init()

cdef extern from "kc_crc.h":
    uint32_t KC_CRC32C_POLY          # 0x82F63B78, reflected Castagnoli

DEF REWRITTEN = 36                   # bytes [21, 57): attributes .. base sequence

cdef uint32_t x2n_table[32]          # x^(2^k) mod P


cdef uint32_t multmodp(uint32_t a, uint32_t b) noexcept nogil:
    """a(x) * b(x) mod P(x), reflected bit order; `a` must not be 0."""
    cdef uint32_t m = (<uint32_t>1) << 31, p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ KC_CRC32C_POLY if b & 1 else b >> 1
    return p


cdef uint32_t x8nmodp(uint64_t n) noexcept nogil:
    """x^(8n) mod P: the operator that appends n zero bytes to a CRC register."""
    cdef uint32_t p = (<uint32_t>1) << 31       # x^0
    cdef unsigned k = 3
    while n:
        if n & 1:
            p = multmodp(x2n_table[k & 31], p)
        n >>= 1
        k += 1
    return p


cdef void init_tables() noexcept:
    cdef uint32_t p = (<uint32_t>1) << 30        # x^1
    cdef int i
    x2n_table[0] = p
    for i in range(1, 32):
        p = multmodp(p, p)
        x2n_table[i] = p


init_tables()


cdef inline uint32_t shifted_crc_delta(const unsigned char* old_header,
                                       const unsigned char* new_header,
                                       uint64_t tail) noexcept nogil:
    cdef uint32_t delta = kc_crc32c(0, old_header, REWRITTEN) ^ kc_crc32c(0, new_header, REWRITTEN)
    if delta == 0:
        return 0
    return multmodp(x8nmodp(tail), delta)


cdef void rewrite_into(unsigned char* dst, const unsigned char* src, Py_ssize_t size,
                       int64_t producer_id, int16_t producer_epoch, int32_t base_sequence) noexcept nogil:
    """Copy a whole v2 batch to `dst` with the new producer state and its CRC updated."""
    cdef uint32_t stored = load_u32(src + V2_CRC_OFFSET)
    memcpy(dst, src, size)
    # As a producer sends it: base offset 0 and no partition leader epoch (both outside the
    # CRC; the broker assigns them, and refuses client batches whose records do not start at
    # offset 0: INVALID_RECORD).
    store_u64(dst, 0)
    store_u32(dst + V2_PARTITION_LEADER_EPOCH_OFFSET, 0xFFFFFFFF)
    dst[V2_ATTRIBUTES_OFFSET + 1] &= <unsigned char>(~TRANSACTIONAL_FLAG & 0xFF)
    store_u64(dst + V2_PRODUCER_ID_OFFSET, <uint64_t>producer_id)
    store_u16(dst + V2_PRODUCER_EPOCH_OFFSET, <uint16_t>producer_epoch)
    store_u32(dst + V2_BASE_SEQUENCE_OFFSET, <uint32_t>base_sequence)
    stored ^= shifted_crc_delta(src + V2_ATTRIBUTES_OFFSET, dst + V2_ATTRIBUTES_OFFSET,
                                <uint64_t>(size - V2_RECORDS_COUNT_OFFSET))
    store_u32(dst + V2_CRC_OFFSET, stored)


cdef Py_ssize_t check_batch(const unsigned char* p, Py_ssize_t n) except -1:
    """One complete v2 data batch, exactly `n` bytes."""
    cdef Cursor cur
    cdef BatchHeader h
    cursor_init(&cur, p, n, 0)
    if not next_entry(&cur, &h) or cur.pos != n:
        raise CorruptRecordError("a mirrored batch must be exactly one complete batch", position=0)
    if h.magic != 2:
        raise UnsupportedVersionError(
            f"a magic {h.magic} batch cannot be sent in ProduceRequest v3+ (only magic 2 is "
            f"mirrored shallowly)", position=0, offset=h.base_offset)
    if h.attributes & CONTROL_FLAG:
        raise CorruptRecordError("control batches are not sent by clients", position=0,
                                 offset=h.base_offset)
    return h.compression


def rewrite_batch(batch, int64_t producer_id, int producer_epoch, int32_t base_sequence) -> bytes:
    """A copy of one v2 batch with a new producer id, epoch and base sequence, the
    transactional flag cleared and the CRC-32C updated from the header alone."""
    cdef Py_buffer view
    cdef bytes out
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        check_batch(<const unsigned char*>view.buf, view.len)
        out = bytes(view.len)
        rewrite_into(<unsigned char*><char*>out, <const unsigned char*>view.buf, view.len,
                     producer_id, <int16_t>producer_epoch, base_sequence)
    finally:
        PyBuffer_Release(&view)
    return out


cdef object checked_batch(object batch, int api_version, object name, object partition):
    """A view of one batch the request may carry (see check_batch; zstd needs Produce v7+)."""
    cdef Py_buffer view
    view_obj = memoryview(batch)
    PyObject_GetBuffer(view_obj, &view, PyBUF_SIMPLE)
    try:
        if check_batch(<const unsigned char*>view.buf, view.len) == CODEC_ZSTD and api_version < 7:
            raise UnsupportedCompressionError(
                f"zstd batches need ProduceRequest v7+ (partition {name}-{partition})", position=0)
    finally:
        PyBuffer_Release(&view)
    return view_obj


cdef class _RewrittenBatches(_PartitionRecords):
    """A partition's records field in the mirror's request: its checked batches [(view,
    producer id, epoch, base sequence), ...] rewritten straight into the frame, where each one
    lands noted in `positions`."""
    cdef list positions

    cdef Py_ssize_t measure(self, object records) except -2:
        cdef Py_ssize_t size = 0
        for entry in <list>records:
            size += (<memoryview>(<tuple>entry)[0]).nbytes
        return size

    cdef int write(self, Writer* w, object records, Py_ssize_t size) except -1:
        cdef Py_buffer view
        for view_obj, producer_id, producer_epoch, base_sequence in <list>records:
            PyObject_GetBuffer(view_obj, &view, PyBUF_SIMPLE)
            try:
                ensure(w, view.len)
                self.positions.append((w.length, view.len))
                rewrite_into(w.buf + w.length, <const unsigned char*>view.buf, view.len,
                             producer_id, <int16_t>producer_epoch, base_sequence)
                w.length += view.len
            finally:
                PyBuffer_Release(&view)
        return 0


def write_produce_request(topics, *, int api_version, int32_t correlation_id,
                          client_id="kafkacodec-mirror", int acks=-1, int32_t timeout_ms=30000,
                          transactional_id=None, WriteBuffer out=None):
    """A framed ProduceRequest (v3-11, written by protocol's ProduceRequest writer) of
    already-fetched v2 batches, each rewritten on the way in (one copy).  `topics`: [(topic,
    [(partition, [(batch, producer_id, producer_epoch, base_sequence), ...]), ...]), ...].
    Returns (WriteBuffer, [(position, size)] of every batch in the frame, in input order): a
    batch can be sent again from there as it is.

    Every batch is checked before anything is written: CorruptRecordError for anything but one
    complete v2 data batch per entry (control batches included); zstd batches need Produce v7+
    (UnsupportedCompressionError)."""
    cdef _RewrittenBatches batches = _RewrittenBatches.__new__(_RewrittenBatches)
    cdef list plan = [], parts, entries
    if api_version < 3 or api_version > 11:
        raise UnsupportedVersionError(f"Produce version {api_version} is not supported (3-11)")
    batches.positions = []
    for name, partitions in topics:
        parts = []
        for partition, given in partitions:
            entries = []
            for batch, producer_id, producer_epoch, base_sequence in given:
                entries.append((checked_batch(batch, api_version, name, partition), producer_id,
                                producer_epoch, base_sequence))
            parts.append((partition, entries))
        plan.append((name, parts))
    out = write_produce_request_with(plan, api_version, correlation_id, client_id, <int16_t>acks,
                                     timeout_ms, transactional_id, out, batches)
    return out, batches.positions
