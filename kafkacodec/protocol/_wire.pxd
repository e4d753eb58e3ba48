# Kafka protocol primitives (spec protocol.md §2) on the shared read cursor and write buffer:
# int16-length strings, compact (unsigned varint + 1) strings/arrays/bytes, tagged-field
# sections, uuids, and the request/response headers.  Every message module cimports these.

from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from cpython.number cimport PyNumber_Index
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_AsUTF8String
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from kafkacodec._cursor cimport (Cursor, cursor_init, need, take, get_int16, get_int32, get_int64,
                                 read_uvarint, raise_corrupt, raise_short, raise_too_many)
from kafkacodec._writer cimport (Writer, WriteBuffer, ensure, put_int16, put_int32, put_bytes,
                                 put_uvarint, store_u32)

# The api keys and first flexible versions the compiled codecs write: ApiKey's numbers and
# messages.FLEXIBLE's (tests/test_protocol_api.py checks the frames they write against both).
cdef enum:
    MAX_FRAME = 0x7FFFFFFF       # every size on the wire is an int32
    API_PRODUCE = 0
    API_FETCH = 1
    API_METADATA = 3
    API_API_VERSIONS = 18
    FETCH_FLEXIBLE = 12          # first flexible version of each message
    PRODUCE_FLEXIBLE = 9
    METADATA_FLEXIBLE = 9
    API_VERSIONS_FLEXIBLE = 3

# --- versions ------------------------------------------------------------------------------------
cdef inline int checked_version(object version, const char* api, int lowest,
                                int highest) except -1:
    """The api version as a C int; UnsupportedVersionError outside lowest..highest, for any
    integer however large (never OverflowError)."""
    cdef object number = PyNumber_Index(version)
    if number < lowest or number > highest:
        from kafkacodec.errors import UnsupportedVersionError
        raise UnsupportedVersionError(f"{api.decode()} version {number} is not supported "
                                      f"(kafkacodec speaks {lowest}-{highest})")
    return <int>number

# --- the buffer a message (a response, or a request body) is decoded from -----------------------
cdef inline int open_message(Py_buffer* view, object data, Py_ssize_t offset, Py_ssize_t size,
                             Cursor* cur) except -1:
    """Borrow the raw bytes of `data` (any C-contiguous buffer, whatever its item format) and
    aim `cur` at data[offset:offset + size] (size -1 or past the end: to the end; positions in
    errors count from the start of `data`).  The caller releases `view`."""
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    if offset < 0 or offset > view.len:
        PyBuffer_Release(view)
        raise ValueError(f"offset {offset} outside a buffer of {view.len} bytes")
    if size < 0 or size > view.len - offset:
        size = view.len - offset       # the cursor reports a truncation with its position
    cursor_init(cur, <const unsigned char*>view.buf + offset, size, offset)
    return 0

# A request body's reader (the broker side): the cursor on the body, its version, whether bytes
# after the last field are refused, and the array entries it may hold in all.
ctypedef object (*BodyReader)(Cursor* cur, int version, bint strict, Py_ssize_t max_entries)

cdef inline object decode_body(object data, Py_ssize_t offset, Py_ssize_t size, BodyReader read,
                               int version, bint strict, Py_ssize_t max_entries):
    """`read` over data[offset:offset + size] (as open_message aims it); the buffer is released
    after, so what `read` returns must not point into it."""
    cdef Py_buffer view
    cdef Cursor cur
    open_message(&view, data, offset, size, &cur)
    try:
        return read(&cur, version, strict, max_entries)
    finally:
        PyBuffer_Release(&view)

# --- lengths -----------------------------------------------------------------------------------
cdef inline Py_ssize_t read_length(Cursor* cur, bint compact, bint nullable, int width,
                                   const char* what) except -2:
    """A string or bytes length: compact = uvarint(n + 1), else int16 (width 2, strings) or
    int32 (width 4, bytes/records).  -1 for null, only where nullable."""
    cdef uint32_t raw = 0
    cdef Py_ssize_t n
    if compact:
        read_uvarint(cur, &raw, what)
        n = <Py_ssize_t>raw - 1
    else:
        need(cur, width, what)
        n = get_int16(cur) if width == 2 else get_int32(cur)
    if n < 0:
        if n != -1 or not nullable:
            cur.pos -= 1 if compact else width
            raise_corrupt(cur, what)
        return -1
    return n

cdef inline Py_ssize_t read_string_length(Cursor* cur, bint compact, bint nullable,
                                          const char* what) except -2:
    return read_length(cur, compact, nullable, 2, what)

cdef inline Py_ssize_t read_bytes_length(Cursor* cur, bint compact, bint nullable,
                                         const char* what) except -2:
    return read_length(cur, compact, nullable, 4, what)

cdef inline Py_ssize_t read_array_length(Cursor* cur, bint compact, bint nullable,
                                         Py_ssize_t min_item_size, const char* what) except -2:
    """Element count of the next array, -1 for null.  A count that cannot fit in the bytes left
    (each element takes at least `min_item_size`) is refused before anything is allocated."""
    cdef Py_ssize_t n = read_bytes_length(cur, compact, nullable, what)
    if n > 0 and n > (cur.end - cur.pos) // min_item_size:
        raise_short(cur, n * min_item_size, what)
    return n

cdef inline Py_ssize_t read_entries(Cursor* cur, bint compact, Py_ssize_t min_item_size,
                                   Py_ssize_t* left, const char* what) except -2:
    """A (non-nullable) array's element count, taken off `left`, the entries the request may
    still hold (a cost bound, checked before any is built): RecordTooLargeError past it."""
    cdef Py_ssize_t n = read_array_length(cur, compact, False, min_item_size, what)
    if n > left[0]:
        raise_too_many(cur, n, left[0], what)
    left[0] -= n
    return n

cdef inline object read_string(Cursor* cur, bint compact, bint nullable, const char* what):
    """The next string as str (None when null); invalid UTF-8 is a CorruptRecordError."""
    cdef Py_ssize_t n = read_string_length(cur, compact, nullable, what)
    cdef const unsigned char* p
    if n < 0:
        return None
    p = take(cur, n, what)
    try:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        cur.pos -= n
        raise_corrupt(cur, what)

cdef inline int skip_tagged_fields(Cursor* cur) except -1:
    """Skip a tagged-fields section: count, then (tag, size, payload) per field."""
    cdef uint32_t count = 0, tag = 0, size = 0, i
    read_uvarint(cur, &count, b"tagged fields count")
    for i in range(count):
        read_uvarint(cur, &tag, b"tagged field tag")
        read_uvarint(cur, &size, b"tagged field size")
        take(cur, size, b"tagged field payload")
    return 0

# --- writers -------------------------------------------------------------------------------------
cdef inline int put_length(Writer* w, Py_ssize_t n, bint compact, bint wide) except -1:
    """A length or count: compact = uvarint(n + 1) (0 = null); else int32 (wide) or int16."""
    if compact:
        return put_uvarint(w, <uint64_t>(n + 1))
    if wide:
        return put_int32(w, <int32_t>n)
    return put_int16(w, <int16_t>n)

cdef inline bytes utf8_of(object s):
    """The bytes a string field carries: UTF-8 of a str (of its real characters: a str
    subclass's __len__ or encode() are not consulted), else the bytes of a buffer."""
    if isinstance(s, str):
        return PyUnicode_AsUTF8String(s)
    return bytes(s)

cdef inline int put_string(Writer* w, object s, bint compact) except -1:
    """A (nullable) string; None writes null."""
    cdef bytes data
    if s is None:
        return put_length(w, -1, compact, False)
    data = s if type(s) is bytes else utf8_of(s)
    if not compact and len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    put_length(w, len(data), compact, False)
    return put_bytes(w, <const unsigned char*><char*>data, len(data))

cdef inline int put_empty_tags(Writer* w) except -1:
    return put_uvarint(w, 0)

# --- headers (protocol.md §1) -------------------------------------------------------------------
cdef inline Py_ssize_t begin_request(Writer* w, int16_t api_key, int16_t api_version,
                                     int32_t correlation_id, object client_id,
                                     bint flexible) except -1:
    """Reserve the int32 frame size and write request header v1 (v2 when flexible: the same
    fields, client_id still int16-length, then an empty tagged section).  Returns the frame
    start for end_frame()."""
    cdef Py_ssize_t start = w.length
    ensure(w, 4)
    w.length += 4
    put_int16(w, api_key)
    put_int16(w, api_version)
    put_int32(w, correlation_id)
    put_string(w, client_id, False)
    if flexible:
        put_empty_tags(w)
    return start

cdef inline WriteBuffer produce_output(WriteBuffer out, Py_ssize_t estimate, object client_id,
                                       object transactional_id):
    """The buffer a ProduceRequest is written into: `out` emptied (a new one when None), with
    room for `estimate` bytes plus the two ids (their real UTF-8 sizes)."""
    if client_id is not None:
        estimate += len(utf8_of(client_id))
    if transactional_id is not None:
        estimate += len(utf8_of(transactional_id))
    if out is None:
        out = WriteBuffer(estimate)
    else:
        out.clear()
    ensure(&out.w, estimate)
    return out

cdef inline Py_ssize_t begin_produce_request(Writer* w, int16_t api_version,
                                             int32_t correlation_id, object client_id,
                                             object transactional_id, int16_t acks,
                                             int32_t timeout_ms, Py_ssize_t topic_count) except -1:
    """Frame and header of a ProduceRequest up to its TopicData count (v3+: TransactionalId,
    Acks, TimeoutMs); the caller writes the topics, then end_frame()."""
    cdef bint flexible = api_version >= PRODUCE_FLEXIBLE
    cdef Py_ssize_t frame = begin_request(w, API_PRODUCE, api_version, correlation_id,
                                          client_id, flexible)
    put_string(w, transactional_id, flexible)
    put_int16(w, acks)
    put_int32(w, timeout_ms)
    put_length(w, topic_count, flexible, True)
    return frame

cdef inline int end_frame(Writer* w, Py_ssize_t start) noexcept:
    store_u32(w.buf + start, <uint32_t>(w.length - start - 4))
    return 0

cdef inline int32_t read_response_header(Cursor* cur, bint flexible) except? -1:
    """Response header v0 (correlation id) or v1 (+ tagged section); returns the id."""
    cdef int32_t correlation_id
    need(cur, 4, b"response header correlation id")
    correlation_id = get_int32(cur)
    if flexible:
        skip_tagged_fields(cur)
    return correlation_id

cdef inline object read_uuid(Cursor* cur, const char* what):
    cdef const unsigned char* p = take(cur, 16, what)
    return (<bytes>(<char*>p)[:16])

cdef inline int put_topic_id(Writer* w, object topic_id) except -1:
    """A topic named by its id (Fetch v13+): a uuid.UUID (its .bytes) or the 16 bytes."""
    cdef object raw = getattr(topic_id, "bytes", None)
    cdef bytes value = raw if type(raw) is bytes else bytes(topic_id)
    if len(value) != 16:
        raise ValueError("Fetch v13+ names topics by a 16-byte topic id")
    return put_bytes(w, <const unsigned char*><char*>value, 16)

# --- fields some versions lack: read when `present`, else Kafka's default `absent` ---------------

cdef inline int32_t read_int32_if(Cursor* cur, bint present, int32_t absent,
                                     const char* what) except? -1:
    if not present:
        return absent
    need(cur, 4, what)
    return get_int32(cur)

cdef inline int64_t read_int64_if(Cursor* cur, bint present, int64_t absent,
                                     const char* what) except? -1:
    if not present:
        return absent
    need(cur, 8, what)
    return get_int64(cur)
