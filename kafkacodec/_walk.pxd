# The batch walker (issue 15): one walk from a record set's bytes to its records, under every
# reader.  Modelled on librdkafka's msgset reader (one reader state; a decompressed batch is
# walked by the same steps as an uncompressed one) and asyncpg's pgproto (every codec reads
# from the same buffers).
#
#   entries     walk_entry(): frame the entry at a position (in-memory rules, spec §9.1, or
#               file rules, §9.2: frame_entry()) and parse its header; walk_entries(): frame
#               entries until one does not (valid bytes).
#   a batch     walk_open() checks the header in Kafka's order and says where the records are:
#               in place (walked at once), compressed (the caller decompresses them, see
#               below, and hands the output to walk_decompressed()), or none.
#   records     walk_next() (every check, raises), walk_scan() (the raise-free common v2
#               record) and walk_step() (the one, else the other: what loops call) fill a
#               RecordView: the absolute offset and timestamp (Java long
#               arithmetic, LogAppendTime, LegacyRecord's inner-message rules), the producer
#               sequence, key/value/headers as pointers, and a control record's type and
#               coordinator epoch.  walk_data_record() walks a batch for a loop that keeps
#               the position in its own DataRun (registers), with the same checks.
#   read_committed  abort_filter_*(): the aborted-transaction filter (Kafka's fetch path:
#               the broker's aborted list, then its consumer's algorithm), in its own section
#               at the end.
#
# Decompression policy (one for every walker reader; none owns a Decompressor): the
# decoding thread's Decompressor (_compression.thread_decompressor(), its max_size set by
# the reader before each use) writes a batch into its _Chunk; the reader pins that chunk (pin_output()) while any
# RecordView of the batch is alive and unpins it (unpin_chunk()) when the batch ends.  While
# a chunk is pinned, the Decompressor writes the next batch into another chunk, so views
# never change under their reader; a chunk above RETAINED_CHUNK is freed by its last unpin.
#
# Lifetimes: a RecordView's pointers point into the caller's buffer (in-place batches: valid
# while the caller holds that buffer) or into the pinned chunk (valid until it is unpinned).
# Errors: every function that can fail raises a kafkacodec.errors class naming the byte
# position (in the caller's buffer for the header and in-place records; in the decompressed
# data for decompressed records: BatchWalk.data_position says where that data came from) and
# the batch offset.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t
from kafkacodec._cursor cimport Cursor, cursor_init, load_u64
from kafkacodec._format cimport (BatchHeader, frame_entry, parse_entry_header, FRAME_OK,
                                 V2_HEADER_SIZE, CODEC_NONE, CODEC_ZSTD, CONTROL_FLAG, COMPRESSION_MASK,
                                 NO_SEQUENCE, wrap_add, increment_sequence)
from kafkacodec._v2 cimport (V2Record, read_v2_record, scan_v2_record, scan_v2_at,
                             record_timestamp, read_control_type, read_end_txn_coordinator_epoch)
from kafkacodec._legacy cimport (LegacyMessage, read_legacy_message, next_inner_entry,
                                 inner_base_offset, inner_timestamp, inner_timestamp_type)
from kafkacodec._compression cimport Decompressor, _Chunk
from kafkacodec._prefetch cimport kc_prefetch

# --- entries --------------------------------------------------------------------------------
cdef inline int walk_entry(const unsigned char* data, Py_ssize_t size, Py_ssize_t pos,
                           Py_ssize_t start, bint file_rules, BatchHeader* h) noexcept nogil:
    """Frame the entry at data[pos] (`size` bytes in all; data[0] sits at `start` in the
    caller's buffer) and, when it frames (FRAME_OK), parse its header into h.  Returns the
    frame_entry() code: FRAME_END at the end or a partial tail, negative for a corrupt entry
    (raise_frame_error() raises it)."""
    cdef Py_ssize_t entry_size = 0
    cdef int code = frame_entry(data + pos, size - pos, file_rules, &entry_size)
    if code == FRAME_OK:
        # the next entry's header, loaded while the caller reads this one: the hardware
        # prefetcher stops at page boundaries, and a 16 MB log's walk from memory went 1.3-1.8x
        # slower waiting for each header in turn (CRC walk: Records.validate())
        if entry_size < size - pos:
            kc_prefetch(data + pos + entry_size)
        parse_entry_header(data + pos, entry_size, start + pos, h)
    return code

cdef inline int walk_entries(const unsigned char* data, Py_ssize_t size, bint file_rules,
                             Py_ssize_t* pos) noexcept nogil:
    """Frame entries from data[*pos] on, advancing *pos past each; returns the code of the
    first one that does not frame (*pos at it)."""
    cdef Py_ssize_t entry_size = 0
    cdef int code
    while True:
        code = frame_entry(data + pos[0], size - pos[0], file_rules, &entry_size)
        if code != FRAME_OK:
            return code
        pos[0] += entry_size

# --- a batch --------------------------------------------------------------------------------
cdef enum:
    WALK_DONE = 0            # no record left in the batch
    WALK_V2 = 1              # v2 records at `cur`
    WALK_INNER = 2           # the inner messages of a decompressed v0/v1 wrapper at `cur`
    WALK_ONE = 3             # one uncompressed v0/v1 message (the entry itself)

# walk_open()'s answer: where the batch's records are.
cdef enum:
    OPEN_NONE = 0            # no records to read (a compressed v2 batch with RecordsCount 0)
    OPEN_IN_PLACE = 1        # in the caller's buffer: walk_next() reads them
    OPEN_COMPRESSED = 2      # compressed: decompress (data, size), then walk_decompressed()

# The faults raise_walk_fault() raises (in _walk.pyx).
cdef enum:
    FAULT_NEGATIVE_COUNT = 1     # v2 RecordsCount < 0 (checked before decompressing)
    FAULT_V2_CODEC = 2           # v2 codec id 5-7
    FAULT_MAGIC = 3              # magic not 0, 1 or 2
    FAULT_LEGACY_ZSTD = 4        # zstd below magic 2
    FAULT_LEGACY_CODEC = 5       # v0/v1 codec id 5-7
    FAULT_NULL_WRAPPER = 6       # a compressed wrapper with a null value
    FAULT_NO_INNER = 7           # a decompressed wrapper with no inner message
    FAULT_PREMATURE_END = 8      # fewer records than RecordsCount
    FAULT_LEFT_OVER = 9          # bytes after the last of RecordsCount records
    FAULT_INNER_MAGIC = 10       # an inner message of magic other than 0/1
    FAULT_INNER_COMPRESSED = 11  # an inner message compressed itself

cdef int raise_walk_fault(int fault, const BatchHeader* h, Py_ssize_t position,
                          int64_t a, int64_t b) except -1 nogil
cdef int raise_abort_not_loaded(const char* remedy) except -1 nogil

cdef struct BatchWalk:
    BatchHeader h                # the batch (set by the caller: walk_entry())
    int state                    # WALK_*
    Cursor cur                   # its records, inner messages, or the entry (WALK_ONE)
    int32_t left                 # records still to read (v2 and WALK_ONE)
    int64_t inner_base           # WALK_INNER: added to inner offsets (spec §4.1); before
                                 # walk_decompressed(), the wrapper's offset
    Py_ssize_t data_position     # where the (compressed) records start in the caller's buffer
    LegacyMessage message        # v0/v1: the entry's message (WALK_ONE's record, or the wrapper)

cdef struct RecordView:
    int64_t offset               # absolute
    int64_t timestamp            # as Kafka reports it (LogAppendTime applied; -1 for magic 0)
    int8_t timestamp_type        # -1 none, 0 CreateTime, 1 LogAppendTime
    int32_t sequence             # v2 producer sequence (NO_SEQUENCE without a base)
    int16_t control_type         # -1: not a control record
    int64_t coordinator_epoch    # -1: not an ABORT/COMMIT marker
    V2Record rec                 # as read: key, value (NULL / -1 = null), the raw header
                                 # section (read_v2_header() walks it); legacy: key, value
    Py_ssize_t start             # the record's bytes: [start, end) relative to cur.base
    Py_ssize_t end

cdef inline int walk_open(BatchWalk* w, const unsigned char* entry, const unsigned char** data,
                          Py_ssize_t* size) except -1 nogil:
    """Check w.h (entry: its bytes) in Kafka's order and set the walk up: OPEN_IN_PLACE (the
    records are ready for walk_next()), OPEN_COMPRESSED (*data, *size: the compressed
    records, for the caller to decompress with w.h.compression and w.h.magic), OPEN_NONE."""
    cdef const BatchHeader* h = &w.h
    w.state = WALK_DONE
    w.left = 0
    if h.magic == 2:
        if h.records_count < 0:
            raise_walk_fault(FAULT_NEGATIVE_COUNT, h, 0, 0, 0)
        w.data_position = h.position + V2_HEADER_SIZE
        data[0] = entry + V2_HEADER_SIZE
        size[0] = h.size - V2_HEADER_SIZE
        if h.compression == CODEC_NONE:
            cursor_init(&w.cur, data[0], size[0], w.data_position)
            w.state = WALK_V2
            w.left = h.records_count
            return OPEN_IN_PLACE
        if h.records_count == 0:     # count 0: the records section is not examined
            return OPEN_NONE
        if h.compression > CODEC_ZSTD:
            raise_walk_fault(FAULT_V2_CODEC, h, 0, 0, 0)
        return OPEN_COMPRESSED
    if h.magic != 0 and h.magic != 1:
        raise_walk_fault(FAULT_MAGIC, h, 0, 0, 0)
    read_legacy_message(entry, h.size, h.position, &w.message)
    w.data_position = h.position
    if h.compression == CODEC_NONE:
        cursor_init(&w.cur, entry, h.size, h.position)
        w.state = WALK_ONE
        w.left = 1
        return OPEN_IN_PLACE
    if h.compression == CODEC_ZSTD:
        raise_walk_fault(FAULT_LEGACY_ZSTD, h, 0, 0, 0)
    if h.compression > CODEC_ZSTD:
        raise_walk_fault(FAULT_LEGACY_CODEC, h, 0, 0, 0)
    if w.message.value == NULL:
        raise_walk_fault(FAULT_NULL_WRAPPER, h, 0, 0, 0)
    w.data_position = h.position + (w.message.value - entry)
    w.inner_base = w.message.offset
    data[0] = w.message.value
    size[0] = w.message.value_length
    return OPEN_COMPRESSED

cdef inline int walk_decompressed(BatchWalk* w, const unsigned char* data,
                                  Py_ssize_t size) except -1 nogil:
    """Walk the decompressed records of an OPEN_COMPRESSED batch (positions in errors and
    views: relative to `data`).  A legacy inner set is framed once first: its base offset
    needs the last inner offset (spec §4.1)."""
    cdef Py_ssize_t entry_size = 0, count = 0
    cdef int64_t last = -1
    cursor_init(&w.cur, data, size, 0)
    if w.h.magic == 2:
        w.state = WALK_V2
        w.left = w.h.records_count
        return 0
    while next_inner_entry(&w.cur, &entry_size):
        last = <int64_t>load_u64(w.cur.data + w.cur.pos)
        w.cur.pos += entry_size
        count += 1
    if count == 0:
        raise_walk_fault(FAULT_NO_INNER, &w.h, 0, 0, 0)
    w.inner_base = inner_base_offset(w.h.magic, w.inner_base, last, &w.cur)
    w.cur.pos = 0
    w.state = WALK_INNER
    return 0

cdef inline void v2_view(const BatchHeader* h, RecordView* v) noexcept nogil:
    # v.rec read: spec §6.1: offset and timestamp are deltas from the batch's (LogAppendTime: MaxTimestamp)
    v.offset = wrap_add(h.base_offset, v.rec.offset_delta)
    v.timestamp = record_timestamp(h, &v.rec)
    v.timestamp_type = h.timestamp_type
    v.sequence = (NO_SEQUENCE if h.base_sequence < 0
                  else increment_sequence(h.base_sequence, v.rec.offset_delta))
    v.control_type = -1
    v.coordinator_epoch = -1

cdef inline void legacy_view(const LegacyMessage* m, int64_t offset, int8_t timestamp_type,
                             int64_t timestamp, RecordView* v) noexcept nogil:
    v.offset = offset
    v.timestamp = timestamp
    v.timestamp_type = timestamp_type
    v.sequence = NO_SEQUENCE
    v.control_type = -1
    v.coordinator_epoch = -1
    v.rec.key = m.key
    v.rec.key_length = m.key_length
    v.rec.value = m.value
    v.rec.value_length = m.value_length
    v.rec.headers = NULL
    v.rec.headers_size = 0
    v.rec.header_count = 0

cdef inline bint walk_scan(BatchWalk* w, RecordView* v) noexcept nogil:
    """The common case of walk_next() with nothing that can raise: a v2 data record that is
    not the batch's last (the left-over check is walk_next()'s), every varint of one or two
    bytes.  False (nothing moved) for anything else: call walk_next()."""
    v.start = w.cur.pos
    if (w.state != WALK_V2 or w.left <= 1 or w.h.attributes & CONTROL_FLAG
            or not scan_v2_record(&w.cur, &v.rec)):
        return False
    w.left -= 1
    v2_view(&w.h, v)
    v.end = w.cur.pos
    return True

cdef inline int walk_step(BatchWalk* w, RecordView* v) except -1 nogil:
    """walk_next(), the common v2 record the short way (walk_scan()): what loops call."""
    if walk_scan(w, v):
        return 1
    return walk_next(w, v)

cdef inline int walk_next(BatchWalk* w, RecordView* v) except -1 nogil:
    """The batch's next record into v: 1, or 0 when the batch has no more (state WALK_DONE).
    Raises for a corrupt record (Kafka's iterators: the records before it were returned)."""
    if w.state == WALK_V2:
        return walk_next_v2(w, v)
    if w.state == WALK_INNER:
        return walk_next_inner(w, v)
    if w.state == WALK_ONE:          # the entry is its only record (read by walk_open)
        w.state = WALK_DONE
        w.left = 0
        v.start = 0
        v.end = w.cur.end
        legacy_view(&w.message, w.h.base_offset, w.h.timestamp_type, w.h.max_timestamp, v)
        return 1
    return 0

cdef inline int walk_next_v2(BatchWalk* w, RecordView* v) except -1 nogil:
    cdef int control
    cdef const BatchHeader* h = &w.h
    v.start = w.cur.pos
    if not walk_v2_record(w, &v.rec):
        return 0
    v2_view(h, v)
    if h.attributes & CONTROL_FLAG:     # spec §7: key (version, type); marker value
        control = read_control_type(&v.rec, w.cur.base + v.start)
        v.control_type = <int16_t>control
        if control == 0 or control == 1:        # ABORT / COMMIT
            v.coordinator_epoch = read_end_txn_coordinator_epoch(&v.rec, w.cur.base + v.start)
    v.end = w.cur.pos
    return 1

cdef inline int walk_next_inner(BatchWalk* w, RecordView* v) except -1 nogil:
    cdef LegacyMessage m
    cdef Py_ssize_t entry_size = 0
    cdef const BatchHeader* h = &w.h
    v.start = w.cur.pos
    if not next_inner_entry(&w.cur, &entry_size):
        w.state = WALK_DONE
        return 0
    read_legacy_message(w.cur.data + w.cur.pos, entry_size, w.cur.base + w.cur.pos, &m)
    if m.magic != 0 and m.magic != 1:
        raise_walk_fault(FAULT_INNER_MAGIC, h, w.cur.base + w.cur.pos, m.magic, 0)
    if m.attributes & COMPRESSION_MASK:
        raise_walk_fault(FAULT_INNER_COMPRESSED, h, w.cur.base + w.cur.pos, 0, 0)
    w.cur.pos += entry_size
    legacy_view(&m, wrap_add(w.inner_base, m.offset), inner_timestamp_type(&m, h.timestamp_type),
                inner_timestamp(&m, h.timestamp_type, h.max_timestamp), v)
    v.end = w.cur.pos
    return 1

# --- decompression (the policy above) -------------------------------------------------------
cdef inline void pin_chunk(_Chunk chunk) noexcept:
    # A reader (or a view handed out) holds pointers into the chunk: the Decompressor writes
    # elsewhere meanwhile.
    chunk.exports += 1

cdef inline void unpin_chunk(_Chunk chunk) noexcept:
    chunk.unpin()                    # a big chunk is freed once nobody reads it

cdef inline _Chunk pin_output(Decompressor d):
    """Pin the chunk `d` just decompressed into: the reader reads it until unpin_chunk()."""
    pin_chunk(d._chunk)
    return d._chunk

# --- a v2 record without a view (walk_next_v2()'s reading; the mirror's trim) -----------------
cdef inline int walk_v2_record(BatchWalk* w, V2Record* rec) except -1 nogil:
    """The batch's next v2 record into rec as stored (offset and timestamp deltas, key, value,
    headers; its bytes end at w.cur.pos), every framing check made: 1, or 0 when the batch has
    no more (state WALK_DONE).  No RecordView: for a loop that needs only the deltas and the
    bytes (the mirror's trim); a control record is not told apart (walk_next_v2() does)."""
    if w.left <= 0:
        w.state = WALK_DONE
        return 0
    if w.cur.pos >= w.cur.end:
        raise_walk_fault(FAULT_PREMATURE_END, &w.h, w.cur.base + w.cur.pos,
                         w.h.records_count, w.h.records_count - w.left)
    read_v2_record(&w.cur, rec)
    w.left -= 1
    if w.left == 0 and w.cur.pos != w.cur.end:
        # Kafka's RecordIterator checks this while reading the last record, which it then
        # never returns.
        raise_walk_fault(FAULT_LEFT_OVER, &w.h, w.cur.base + w.cur.pos,
                         w.cur.end - w.cur.pos, w.h.records_count)
    return 1

# --- a batch's records as a run in the caller's locals (ArrowDecoder's columns) -----------------
# A loop that writes every record into output memory through char* cannot keep BatchWalk's
# cursor and count in registers: each store might alias them, so both are read back and
# written again per record.  A DataRun holds them in the caller's frame instead, its address
# never passed out of line, so the compiler keeps it in registers for the whole batch.
cdef struct DataRun:
    const unsigned char* at      # the next record (w.cur.pos while the run lasts)
    const unsigned char* end     # where the short way stops: the records' end; a control
                                 # batch, its start (every record goes through walk_next())
    int32_t left                 # w.left while the run lasts

cdef inline void walk_data_begin(const BatchWalk* w, DataRun* r) noexcept nogil:
    """Start a run over the records w walks (after walk_open() / walk_decompressed())."""
    r.at = w.cur.data + w.cur.pos
    r.end = w.cur.data if w.h.attributes & CONTROL_FLAG else w.cur.data + w.cur.end
    r.left = w.left

cdef inline void walk_data_end(BatchWalk* w, const DataRun* r) noexcept nogil:
    """Hand the run's position back to w (a loop that stops early; walk_next() goes on)."""
    w.cur.pos = r.at - w.cur.data
    w.left = r.left

cdef inline int walk_data_record(BatchWalk* w, DataRun* r, RecordView* v) except -1 nogil:
    """The batch's next record, for a reader that takes the record as stored (v.rec) and
    works out its absolute offset and timestamp itself (wrap_add(base_offset, offset_delta),
    record_timestamp()), not the rest of a RecordView: 1, or 0 at the batch's end.  A data
    batch's common record (not the last; one- or two-byte varints) the short way,
    scan_v2_at(); any other, and every control record, through w with all of walk_next()'s
    checks (walk_v2_record(); a control batch's, walk_next(): its key, spec §7)."""
    cdef int got
    if r.left > 1 and scan_v2_at(&r.at, r.end, &v.rec):
        r.left -= 1
        return 1
    walk_data_end(w, r)
    got = walk_next(w, v) if w.h.attributes & CONTROL_FLAG else walk_v2_record(w, &v.rec)
    r.at = w.cur.data + w.cur.pos
    r.left = w.left
    return got

# --- the aborted-transaction filter (read_committed) ----------------------------------------
# One rule for every reader: Kafka's consumer (CompletedFetch.nextFetchedRecord) over the
# aborted list its broker would send for this read (docs/reading.md, "read_committed").
#   - the list: (producer id, first offset, last offset) of aborted transactions, last being
#     the ABORT marker's offset (a .txnindex gives it; a FetchResponse does not: INT64_MAX).
#     The broker lists a transaction only when its last offset >= the fetch offset
#     (TransactionIndex.collectAbortedTxns): here the read's start, the base offset of the
#     first batch the filter sees or the reader's start offset, whichever is later (a reader
#     that resumes at a batch, as logdir's windows and Spark splits do, reads as a consumer
#     that fetched there; the offset its first fetch asked for could only matter for a
#     transaction whose ABORT marker is missing in the gap before that batch).
#   - for each v2 batch with a producer id, in log order: every listed transaction whose first
#     offset <= the batch's last offset joins the aborted producers (consumeAbortedTransactionsUpTo);
#     a control batch whose first record is an ABORT marker removes its producer
#     (containsAbortMarker); a transactional data batch of an aborted producer is skipped
#     (isBatchAborted).  Control batches are never skipped (readers drop their records anyway).
# A batch handed twice in a row (a resumed read) gets the same answer.  Memory: the list and a
# producer set of at most twice its size, allocated once (abort_filter_ready()).

cdef extern from "stdlib.h":
    void abort_qsort "qsort"(void* base, size_t n, size_t size,
                             int (*cmp)(const void*, const void*) noexcept nogil) nogil
from cpython.mem cimport PyMem_RawRealloc, PyMem_RawFree
from libc.stdint cimport INT64_MIN, INT64_MAX, uint64_t
from kafkacodec._format cimport TRANSACTIONAL_FLAG

cdef enum:
    ABORT_KEEP = 0
    ABORT_SKIP = 1
    ABORT_NOT_LOADED = 2
    CONTROL_TYPE_ABORT = 0       # spec §7: control record type 0 is ABORT
    PID_FREE = -1                # producer set slots: producer ids are >= 0
    PID_REMOVED = -2

cdef struct AbortedTxn:
    int64_t producer_id
    int64_t first_offset
    int64_t last_offset          # the ABORT marker's offset (INT64_MAX: not known)

cdef struct AbortFilter:
    AbortedTxn* txns             # sorted by first offset once ready
    Py_ssize_t n
    Py_ssize_t cap
    Py_ssize_t next              # the first not yet consumed
    int64_t start                # the read's start (transactions ending before it are not listed)
    bint started                 # a batch was seen: start is final
    int64_t* pids                # open addressing: PID_FREE, PID_REMOVED or a producer id
    Py_ssize_t pid_mask          # slots - 1 (a power of two); 0: no set
    Py_ssize_t pid_used          # slots written since the set was cleared
    bint ready                   # abort_filter_ready() succeeded after the last add

cdef inline void abort_filter_init(AbortFilter* f, int64_t start) noexcept nogil:
    """An empty filter for a read that starts at `start` (INT64_MIN: at its first batch)."""
    f.txns = NULL
    f.n = f.cap = f.next = 0
    f.start = start
    f.started = False
    f.pids = NULL
    f.pid_mask = f.pid_used = 0
    f.ready = True               # an empty list filters nothing

cdef inline void abort_filter_free(AbortFilter* f) noexcept nogil:
    PyMem_RawFree(f.txns)
    PyMem_RawFree(f.pids)
    abort_filter_init(f, INT64_MIN)

cdef inline void abort_filter_restart(AbortFilter* f, int64_t start) noexcept nogil:
    """Empty the list and the producer set, keeping the memory (the ring: a new partition)."""
    cdef Py_ssize_t i
    f.n = f.next = 0
    f.start = start
    f.started = False
    f.ready = True
    if f.pid_used:
        for i in range(f.pid_mask + 1):
            f.pids[i] = PID_FREE
        f.pid_used = 0

cdef inline int abort_filter_add(AbortFilter* f, int64_t producer_id, int64_t first_offset,
                                 int64_t last_offset) except -1 nogil:
    """List an aborted transaction (any order; abort_filter_ready() sorts).  MemoryError."""
    cdef AbortedTxn* grown
    if producer_id < 0:          # no batch has it (hasProducerId): it can never match
        return 0
    f.ready = False              # until abort_filter_ready() sorts and sizes the set
    if f.n == f.cap:
        grown = <AbortedTxn*>PyMem_RawRealloc(f.txns, (2 * f.cap + 8) * sizeof(AbortedTxn))
        if grown == NULL:
            with gil:
                raise MemoryError()
        f.txns = grown
        f.cap = 2 * f.cap + 8
    f.txns[f.n].producer_id = producer_id
    f.txns[f.n].first_offset = first_offset
    f.txns[f.n].last_offset = last_offset
    f.n += 1
    return 0

cdef inline int compare_aborted_first(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const AbortedTxn*>a).first_offset, y = (<const AbortedTxn*>b).first_offset
    return (x > y) - (x < y)

cdef inline int abort_filter_ready(AbortFilter* f) except -1 nogil:
    """Sort the list by first offset (Kafka's priority queue) and size the producer set: at
    most n producers are ever in it, so 2n slots (a power of two) never fill.  MemoryError."""
    cdef Py_ssize_t slots = 8, i
    cdef int64_t* grown
    if f.n > 1:
        abort_qsort(f.txns, f.n, sizeof(AbortedTxn), compare_aborted_first)
    while slots < 2 * f.n:
        slots *= 2
    if f.n and slots > f.pid_mask + 1:
        grown = <int64_t*>PyMem_RawRealloc(f.pids, slots * sizeof(int64_t))
        if grown == NULL:
            with gil:
                raise MemoryError()
        f.pids = grown
        f.pid_mask = slots - 1
        for i in range(slots):
            f.pids[i] = PID_FREE
        f.pid_used = 0
    f.ready = True
    return 0

cdef inline Py_ssize_t abort_pid_slot(const AbortFilter* f, int64_t pid, bint for_insert) noexcept nogil:
    """The slot holding pid, else -1 (for_insert: the first reusable slot on its probe path)."""
    cdef Py_ssize_t i = <Py_ssize_t>((<uint64_t>pid * 0x9E3779B97F4A7C15ULL) >> 32) & f.pid_mask
    cdef Py_ssize_t reuse = -1
    while True:
        if f.pids[i] == pid:
            return i
        if f.pids[i] == PID_FREE:
            if not for_insert:
                return -1
            return i if reuse < 0 else reuse
        if f.pids[i] == PID_REMOVED and reuse < 0:
            reuse = i
        i = (i + 1) & f.pid_mask

cdef inline int abort_filter_batch(AbortFilter* f, const BatchHeader* h,
                                   int control_type_of_first_record) noexcept nogil:
    """ABORT_SKIP when the batch is aborted data, else ABORT_KEEP; moves the filter past the
    batch.  control_type_of_first_record: of a control batch (-1: none or not read).
    ABORT_NOT_LOADED: the list's loading stopped (an exception between abort_filter_add() and
    abort_filter_ready()): no answer, the reader raises (raise_abort_not_loaded())."""
    cdef Py_ssize_t i
    cdef const AbortedTxn* t
    if f.n == 0:
        return ABORT_KEEP
    if not f.ready:
        return ABORT_NOT_LOADED
    if not f.started:            # the fetch offset: where this read's batches start
        f.started = True
        if h.base_offset > f.start:
            f.start = h.base_offset
    if h.magic < 2 or h.producer_id < 0:
        return ABORT_KEEP
    while f.next < f.n and f.txns[f.next].first_offset <= h.last_offset:
        t = &f.txns[f.next]
        f.next += 1
        if t.last_offset >= f.start:                    # the broker lists it
            i = abort_pid_slot(f, t.producer_id, True)
            if f.pids[i] != t.producer_id:
                f.pid_used += f.pids[i] == PID_FREE
                f.pids[i] = t.producer_id
    if h.attributes & CONTROL_FLAG:
        if control_type_of_first_record == CONTROL_TYPE_ABORT:
            i = abort_pid_slot(f, h.producer_id, False)
            if i >= 0:
                f.pids[i] = PID_REMOVED
        return ABORT_KEEP
    if h.attributes & TRANSACTIONAL_FLAG and abort_pid_slot(f, h.producer_id, False) >= 0:
        return ABORT_SKIP
    return ABORT_KEEP
