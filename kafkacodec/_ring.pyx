# cython: language_level=3
"""ResponseRingBuffer: KAFKA-2045's single response buffer per connection.

Layout: every Kafka response (int32 size prefix + `size` bytes) is stored contiguously in the
ring behind a one-byte header: 1 = a complete response follows, 0 = skip to the front.  When
the tail of the ring has too little contiguous room for a response whose size is now known,
the writer writes 0 at its position and continues at the front once the reader has freed
enough (the few prefix bytes already received move with it).  Unreleased responses are never
overwritten: `writable()` is 0 until the reader releases.

Network side: `feed(data)` copies from the caller's buffer straight into place, one response
at a time.  `recv_into(sock)` and `get_buffer()/buffer_updated()` (asyncio.BufferedProtocol)
let the kernel write as much as the free contiguous room allows (keeping one byte in five
spare), so one read may hold many responses; one back-to-front pass then moves each later
response right by its index to open its header byte (each byte moves at most once).

Reading side: `next_response()` returns the oldest complete response; its `payload` is a
read-only zero-copy RingView (starts with the correlation id).  `release()` frees the slot;
a RingView or Response touched after release raises BufferReleasedError, and a raw buffer
export (memoryview(view), numpy) keeps the bytes in place until it is dropped: the ring waits
for it instead of overwriting.

Single producer / single consumer, not thread-safe (one connection, one thread), like
KAFKA-2045's design.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo, PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromObject
from cpython.mem cimport PyMem_RawMalloc, PyMem_RawFree, PyMem_RawRealloc
from cpython.ref cimport Py_REFCNT
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.string cimport memcpy, memmove, memcmp
from libc.errno cimport errno, EINTR, EAGAIN

from kafkacodec._cursor cimport (Cursor, cursor_init, need, take, get_int16, get_int32, get_int64,
                                 load_u32, load_u64, read_uvarint, raise_corrupt)
from kafkacodec._format cimport (BatchHeader, next_entry, crc_is_valid, compute_crc,
                                 CONTROL_FLAG, TRANSACTIONAL_FLAG, V2_HEADER_SIZE,
                                 TIMESTAMP_LOG_APPEND)
from kafkacodec._v2 cimport (V2Record, read_v2_record, read_v2_header, record_timestamp,
                             read_control_type)
from kafkacodec._legacy cimport (LegacyMessage, read_legacy_message, next_inner_entry,
                                 inner_base_offset)
from kafkacodec._compression cimport Decompressor, _Chunk
from kafkacodec._crc cimport kc_crc_init
from kafkacodec.protocol._wire cimport (read_array_length, read_bytes_length, read_string,
                                        skip_tagged_fields, read_response_header, FETCH_FLEXIBLE)

from kafkacodec._pool import MemoryPool
from kafkacodec.errors import (BufferReleasedError, CorruptRecordError, InvalidCrcError,
                               MemoryPoolError, RecordTooLargeError, UnsupportedCompressionError,
                               UnsupportedVersionError)


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


cdef extern from *:
    """
    #if defined(_WIN32)
    static Py_ssize_t kc_recv(int fd, void* buf, Py_ssize_t n) { (void)fd; (void)buf; (void)n; return -2; }
    #define KC_EWOULDBLOCK EAGAIN
    #else
    #include <sys/types.h>
    #include <sys/socket.h>
    #include <errno.h>
    static Py_ssize_t kc_recv(int fd, void* buf, Py_ssize_t n) { return (Py_ssize_t)recv(fd, buf, (size_t)n, 0); }
    #define KC_EWOULDBLOCK EWOULDBLOCK
    #endif
    """
    Py_ssize_t kc_recv(int fd, void* buf, Py_ssize_t n) nogil
    int KC_EWOULDBLOCK


kc_crc_init()            # the header-only CRC dispatch is per module

DEF HEADER = 1           # the one-byte slot header
DEF PREFIX = 4           # the int32 size prefix of every response
DEF OVERHEAD = 5


@cython.no_gc_clear
cdef class ResponseRingBuffer:
    """ResponseRingBuffer(capacity, pool=None)

    One ring of `capacity` bytes (taken from `pool` when given, released by close()).
    A response needs size + 5 bytes of it (header + size prefix).
    """

    def __cinit__(self, Py_ssize_t capacity, pool=None):
        self.buf = NULL
        self.slots = NULL
        self.bounds = NULL
        self.has_pool_buffer = False
        self.size = -1
        self.free_responses = []
        if capacity < OVERHEAD:
            raise ValueError(f"ring capacity must be at least {OVERHEAD} bytes, got {capacity}")
        self.capacity = capacity
        if pool is MemoryPool.NONE:
            pool = None                       # MemoryPool.NONE: plain heap memory
        if pool is not None:
            view = pool.try_allocate(capacity)
            if view is None:
                raise MemoryPoolError(
                    f"the pool refused {capacity} bytes for the ring "
                    f"(available {pool.available_memory} of {pool.size})")
            self.pool = pool
            self.pool_view = view
            PyObject_GetBuffer(view, &self.pool_buffer, PyBUF_WRITABLE)
            self.has_pool_buffer = True
            self.buf = <unsigned char*>self.pool_buffer.buf
        else:
            self.buf = <unsigned char*>PyMem_RawMalloc(capacity)
            self.owns_buf = True
            if self.buf == NULL:
                raise MemoryError(f"cannot allocate a {capacity}-byte ring")
        self.slots_cap = 16
        self.slots = <Slot*>PyMem_RawMalloc(self.slots_cap * sizeof(Slot))
        self.bounds_cap = 64
        self.bounds = <Py_ssize_t*>PyMem_RawMalloc(self.bounds_cap * 2 * sizeof(Py_ssize_t))
        if self.slots == NULL or self.bounds == NULL:
            raise MemoryError()

    def __dealloc__(self):
        # Views hold a reference to the ring, so nothing points into it any more.
        if self.has_pool_buffer:
            PyBuffer_Release(&self.pool_buffer)
            self.has_pool_buffer = False
            try:
                self.pool.release(self.pool_view)
            except Exception:
                pass                          # the pool reclaims a dropped buffer itself
        elif self.owns_buf:
            PyMem_RawFree(self.buf)
        self.buf = NULL
        PyMem_RawFree(self.slots)
        self.slots = NULL
        PyMem_RawFree(self.bounds)
        self.bounds = NULL

    # -- placement (writer) -------------------------------------------------------------------
    cdef int try_place(self, Py_ssize_t need) noexcept:
        """Reserve [h, h + need) for the response being received, skipping to the front when
        the tail is too short.  1 = reserved, 0 = wait for the reader."""
        cdef Py_ssize_t cap = self.capacity
        cdef Py_ssize_t h = self.h
        if h > self.r or (h == self.r and self.used == 0):      # writer ahead of the reader
            if h + need <= cap:
                return 1
            if self.nslots == 0:
                # Nothing unfreed anywhere (r == h): the response starts over at the front.
                if h < cap:
                    self.buf[h] = 0
                if self.got:
                    memmove(self.buf + HEADER, self.buf + h + HEADER, self.got)
                self.skips += 1
                self.h = 0
                self.r = 0
                self.used = 0
                return 1
            if need <= self.r:
                if h < cap:
                    self.buf[h] = 0                       # skip ahead to the front
                self.used += cap - h
                if self.got:
                    memmove(self.buf + HEADER, self.buf + h + HEADER, self.got)
                self.skips += 1
                self.h = 0
                return 1
            return 0
        return h + need <= self.r                            # writer behind the reader

    cdef Py_ssize_t window(self, Py_ssize_t* start) except -1:
        """Where the next network bytes go and how many are accepted now (0 = full)."""
        if self.closed:
            raise BufferReleasedError("ring buffer used after close()")
        if self.error is not None:
            raise self.error
        if not self.placed:
            if not self.try_place(OVERHEAD if self.size < 0 else OVERHEAD + self.size):
                return 0
            self.placed = True
        start[0] = self.h + HEADER + self.got
        if self.size < 0:
            return PREFIX - self.got
        return PREFIX + self.size - self.got

    cdef Py_ssize_t limit(self) noexcept:
        """End of the free contiguous room after the writer's position."""
        if self.h > self.r or (self.h == self.r and self.used == 0):
            return self.capacity
        return self.r

    cdef Py_ssize_t greedy_window(self, Py_ssize_t* start) except -1:
        """Like window(), but as far as the free contiguous room allows, keeping one byte per
        response that may start inside it for that response's header (socket reads)."""
        cdef Py_ssize_t n = self.window(start), greedy
        if n == 0:
            return 0
        greedy = (self.limit() - start[0] - 1) * 4 // 5
        return greedy if greedy > n else n

    cdef int landed(self, Py_ssize_t n) except -1:
        """n stream bytes landed at the window's start, possibly spanning several responses:
        make room for each later response's header byte (one pass, back to front), commit
        the complete ones and place the last, partial one."""
        cdef Py_ssize_t s = self.h + HEADER + self.got
        cdef Py_ssize_t end = s + n, pos = s, frame_start = self.h + HEADER
        cdef Py_ssize_t got = self.got, size = self.size, nb = 0, j, seg_end, t
        cdef Py_ssize_t* grown
        cdef int32_t parsed
        cdef object error = None
        if n <= 0:
            return 0
        if self.size >= 0 and n <= PREFIX + self.size - self.got:
            return self.wrote(n)                # within the current response: nothing to move
        # Pass 1: find where each response starts in the raw bytes (bounds[0] = the current).
        while True:
            if size < 0:
                t = PREFIX - got
                if t > end - pos:
                    t = end - pos
                got += t
                pos += t
                if got < PREFIX:
                    break
                parsed = <int32_t>load_u32(self.buf + frame_start)
                if parsed < 0:
                    error = CorruptRecordError(f"invalid response size {parsed}",
                                               position=self.responses + nb)
                elif <Py_ssize_t>parsed + OVERHEAD > self.capacity:
                    error = RecordTooLargeError(
                        f"response of {parsed} bytes (+{OVERHEAD} header and size bytes = "
                        f"{parsed + OVERHEAD}) does not fit a ring of {self.capacity} bytes")
                if error is not None:
                    break
                size = parsed
            t = PREFIX + size - got
            if t > end - pos:
                t = end - pos
            got += t
            pos += t
            if got < PREFIX + size or pos == end:
                break
            # a complete response; the next one starts at pos
            if nb + 1 >= self.bounds_cap:
                grown = <Py_ssize_t*>PyMem_RawRealloc(self.bounds,
                                                      2 * self.bounds_cap * 2 * sizeof(Py_ssize_t))
                if grown == NULL:
                    raise MemoryError()
                self.bounds = grown
                self.bounds_cap *= 2
            self.bounds[2 * nb] = size            # size of the response that just completed
            self.bounds[2 * nb + 1] = pos         # raw start of the next one
            nb += 1
            frame_start = pos
            got = 0
            size = -1
        # Pass 2: move each later response right by its index (back to front: no overlap).
        for j in range(nb, 0, -1):
            seg_end = self.bounds[2 * j + 1] if j < nb else end
            memmove(self.buf + self.bounds[2 * j - 1] + j, self.buf + self.bounds[2 * j - 1],
                    seg_end - self.bounds[2 * j - 1])
        # Pass 3: commit the complete ones.
        for j in range(nb):
            self.size = self.bounds[2 * j]
            self.got = PREFIX + self.size
            self.placed = True
            self.commit()                         # h moves to the next header position
        # The last one: complete (exactly at the end), or partial.
        self.got = got
        self.size = size
        if error is not None:
            self.error = error
            raise error
        if size >= 0 and got == PREFIX + size:
            self.placed = True
            self.commit()
        elif size >= 0:
            self.placed = self.try_place(OVERHEAD + size)
        else:
            self.placed = self.try_place(OVERHEAD)
        return 0

    cdef int wrote(self, Py_ssize_t n) except -1:
        """n bytes landed at the window's start."""
        cdef int32_t size
        self.got += n
        if self.size < 0:
            if self.got < PREFIX:
                return 0
            size = <int32_t>load_u32(self.buf + self.h + HEADER)
            if size < 0:
                self.error = CorruptRecordError(
                    f"invalid response size {size}", position=self.responses)
                raise self.error
            if <Py_ssize_t>size + OVERHEAD > self.capacity:
                self.error = RecordTooLargeError(
                    f"response of {size} bytes (+{OVERHEAD} header and size bytes = "
                    f"{size + OVERHEAD}) does not fit a ring of {self.capacity} bytes")
                raise self.error
            self.size = size
            self.placed = self.try_place(OVERHEAD + size)
        if self.placed and self.got == PREFIX + self.size:
            self.commit()
        return 0

    cdef int commit(self) except -1:
        cdef Slot* slot
        cdef Slot* grown
        cdef Py_ssize_t i, n
        if self.nslots == self.slots_cap:
            grown = <Slot*>PyMem_RawMalloc(2 * self.slots_cap * sizeof(Slot))
            if grown == NULL:
                raise MemoryError()
            for i in range(self.nslots):
                grown[i] = self.slots[(self.slots_head + i) % self.slots_cap]
            PyMem_RawFree(self.slots)
            self.slots = grown
            self.slots_head = 0
            self.slots_cap *= 2
        slot = &self.slots[(self.slots_head + self.nslots) % self.slots_cap]
        slot.pos = self.h
        slot.size = self.size
        slot.exports = 0
        slot.released = 0
        self.nslots += 1
        self.buf[self.h] = 1                           # a complete response follows
        n = OVERHEAD + self.size
        self.used += n
        self.h += n
        self.got = 0
        self.size = -1
        self.placed = False
        self.responses += 1
        return 0

    # -- the reader -----------------------------------------------------------------------------
    cdef Slot* slot_of(self, int64_t seq) noexcept:
        cdef int64_t i = seq - self.first_seq
        if i < 0 or i >= self.nslots:
            return NULL
        return &self.slots[(self.slots_head + i) % self.slots_cap]

    cdef int advance(self) except -1:
        """Free released responses at the front of the queue (in order)."""
        cdef Slot* slot
        cdef Py_ssize_t n
        while self.nslots > 0:
            slot = &self.slots[self.slots_head]
            if not slot.released or slot.exports > 0:
                break
            if self.r == self.capacity or self.buf[self.r] == 0:
                self.used -= self.capacity - self.r          # header 0: skip to the front
                self.r = 0
            if self.r != slot.pos:
                raise AssertionError(f"ring reader at {self.r}, response at {slot.pos}")
            n = OVERHEAD + slot.size
            self.r += n
            self.used -= n
            self.slots_head = (self.slots_head + 1) % self.slots_cap
            self.nslots -= 1
            self.nhanded -= 1
            self.first_seq += 1
        if self.nslots == 0:
            self.r = self.h
            self.used = 0
        return 0

    cdef int release_memory(self) except -1:
        if self.has_pool_buffer:
            PyBuffer_Release(&self.pool_buffer)
            self.has_pool_buffer = False
            self.pool.release(self.pool_view)
            self.pool_view = None
        return 0

    # -- public API -----------------------------------------------------------------------------
    def feed(self, data) -> int:
        """Copy bytes of the response stream into the ring; returns how many were accepted
        now (fewer than given when the ring is full, 0 when nothing fits)."""
        cdef const unsigned char[::1] view = data
        cdef Py_ssize_t total = 0, length = view.shape[0], n, start
        while total < length:
            n = self.window(&start)
            if n == 0:
                break
            if n > length - total:
                n = length - total
            memcpy(self.buf + start, &view[total], n)
            total += n
            self.wrote(n)
        if total == length and length == 0:
            self.window(&start)               # still report a closed ring / stream error
        return total

    def writable(self) -> int:
        """Bytes accepted right now (at least: the response in progress may continue after
        them); 0 means full until responses are released."""
        cdef Py_ssize_t start
        return self.window(&start)

    def recv_into(self, sock) -> int:
        """One recv() from `sock` straight into the ring.  Returns the bytes received; 0 when
        the peer closed the connection (then `eof` is True) or when the ring is full
        (writable() == 0; nothing is read then)."""
        cdef Py_ssize_t start, n, got
        cdef int fd
        n = self.greedy_window(&start)
        if n == 0:
            return 0
        fd = sock.fileno()
        while True:
            with nogil:
                got = kc_recv(fd, self.buf + start, n)
            if got >= 0:
                break
            if got == -1 and errno == EINTR:
                PyErr_CheckSignals()
                continue
            if got == -2 or errno == EAGAIN or errno == KC_EWOULDBLOCK:
                # Non-blocking or timeout socket (or no POSIX recv): let the socket object
                # apply its timeout rules.
                got = sock.recv_into(window_view(self, start, n), n)
                break
            raise OSError(errno, "recv failed")
        if got == 0:
            self.eof = True
            return 0
        self.landed(got)
        return got

    # asyncio.BufferedProtocol support
    def get_buffer(self, Py_ssize_t sizehint=-1):
        """A writable memoryview of the window for the transport to fill (BufferedProtocol).
        Raises BufferError when the ring is full: pause reading until responses are released."""
        cdef Py_ssize_t start, n
        n = self.greedy_window(&start)
        if n == 0:
            raise BufferError("ring buffer full: pause reading until responses are released")
        return window_view(self, start, n)

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef Py_ssize_t start, n
        n = self.greedy_window(&start)
        if nbytes < 0 or nbytes > n:
            raise ValueError(f"buffer_updated({nbytes}) outside the {n}-byte window")
        self.landed(nbytes)

    def next_response(self):
        """The oldest complete response not yet returned, or None."""
        cdef Response resp
        cdef Slot* slot
        if self.closed:
            raise BufferReleasedError("ring buffer used after close()")
        if self.nhanded == self.nslots:
            return None
        slot = &self.slots[(self.slots_head + self.nhanded) % self.slots_cap]
        if self.free_responses and Py_REFCNT(self.free_responses[len(self.free_responses) - 1]) == 2:
            resp = self.free_responses.pop()
        else:
            resp = Response.__new__(Response)
            resp.ring = self
        resp.seq = self.first_seq + self.nhanded
        resp.pos = slot.pos
        resp.size = slot.size
        self.nhanded += 1
        return resp

    cdef Decompressor take_decompressor(self):
        cdef Decompressor d = self.spare_decompressor
        if d is None:
            return Decompressor()
        self.spare_decompressor = None
        return d

    cpdef release_response(self, Response resp):
        cdef Slot* slot = self.slot_of(resp.seq)
        if slot == NULL or slot.released:
            return                              # already released: no-op
        slot.released = 1
        if slot.exports == 0:
            self.advance()
        if len(self.free_responses) < 4:
            self.free_responses.append(resp)

    @property
    def pending(self) -> int:
        """Complete responses not yet returned by next_response()."""
        return self.nslots - self.nhanded

    @property
    def unreleased(self) -> int:
        """Responses in the ring that are not freed yet (returned or not)."""
        return self.nslots

    @property
    def buffered_bytes(self) -> int:
        """Ring bytes in use: complete responses, skipped tail, and the one in progress."""
        return self.used + (HEADER + self.got if self.got or self.placed else 0)

    def close(self):
        """Give the memory back (to the pool when there is one).  Responses and views become
        unusable (BufferReleasedError); raw buffer exports still alive make it refuse."""
        if self.closed:
            return
        if self.exports > 0:
            raise BufferReleasedError(
                f"cannot close the ring while {self.exports} buffer export(s) of it are alive")
        self.closed = True
        self.release_memory()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"ResponseRingBuffer(capacity={self.capacity}, unreleased={self.nslots}, "
                f"pending={self.nslots - self.nhanded}, skips={self.skips})")


@cython.no_gc_clear
cdef class _Window:
    """Writable exporter of the ring's current write window (socket reads, BufferedProtocol).
    It keeps the ring alive and counts as an export, so close() cannot pull the memory away."""

    cdef ResponseRingBuffer ring
    cdef Py_ssize_t start
    cdef Py_ssize_t length

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.ring.closed:
            raise BufferReleasedError("ring buffer used after close()")
        PyBuffer_FillInfo(view, self, self.ring.buf + self.start, self.length, 0, flags)
        self.ring.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.ring.exports -= 1


cdef object window_view(ResponseRingBuffer ring, Py_ssize_t start, Py_ssize_t n):
    cdef _Window w = _Window.__new__(_Window)
    w.ring = ring
    w.start = start
    w.length = n
    return PyMemoryView_FromObject(w)


@cython.no_gc_clear
cdef class Response:
    """One complete response in the ring (a reusable handle; valid until release())."""

    cdef const unsigned char* check(self) except NULL:
        cdef Slot* slot = self.ring.slot_of(self.seq)
        if slot == NULL or slot.released or self.ring.closed:
            raise BufferReleasedError("response used after release()")
        return self.ring.buf + self.pos + OVERHEAD

    @property
    def correlation_id(self) -> int:
        cdef const unsigned char* p = self.check()
        if self.size < 4:
            raise CorruptRecordError(f"response of {self.size} bytes has no correlation id",
                                     position=self.pos)
        return <int32_t>load_u32(p)

    @property
    def payload(self) -> RingView:
        """Zero-copy read-only view of the bytes after the size prefix (correlation id first)."""
        self.check()
        cdef RingView view = RingView.__new__(RingView)
        view.ring = self.ring
        view.resp = self
        view.seq = self.seq
        view.start = self.pos + OVERHEAD
        view.length = self.size
        return view

    @property
    def size(self) -> int:
        """The response's size prefix (bytes after it)."""
        return self.size

    @property
    def offset(self) -> int:
        """Position of the response's one-byte header in the ring (diagnostics)."""
        return self.pos

    @property
    def released(self) -> bool:
        cdef Slot* slot = self.ring.slot_of(self.seq)
        return slot == NULL or slot.released != 0

    def records(self, int api_version, int isolation_level=0):
        """Iterate the records of this FetchResponse (Fetch `api_version`, 4-16) through one
        reusable FetchRecord flyweight.  isolation_level 1 (read_committed) drops the data of
        the aborted transactions the response lists, as Kafka's consumer does."""
        return fetch_records(self, api_version, isolation_level)

    def copy(self) -> bytes:
        """The payload as a new bytes object (outlives release())."""
        return PyBytes_FromStringAndSize(<const char*>self.check(), self.size)

    def release(self):
        """Free the slot (idempotent).  Bytes under a live raw export stay until it is dropped."""
        self.ring.release_response(self)

    def __dealloc__(self):
        # Dropped without release() (no view or flyweight refers to it either): free the slot,
        # so a forgotten response cannot wedge the ring.
        cdef Slot* slot
        if self.ring is None:
            return
        slot = self.ring.slot_of(self.seq)
        if slot != NULL and not slot.released:
            slot.released = 1
            if slot.exports == 0:
                try:
                    self.ring.advance()
                except Exception:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.ring.release_response(self)

    def __repr__(self):
        if self.released:
            return f"<Response released size={self.size}>"
        return f"<Response correlation_id={self.correlation_id} size={self.size}>"


@cython.no_gc_clear
cdef class RingView:
    """A read-only, zero-copy view into a response in the ring.  Every access checks that the
    response is still unreleased (BufferReleasedError otherwise)."""

    cdef const unsigned char* check(self) except NULL:
        cdef Slot* slot = self.ring.slot_of(self.seq)
        if slot == NULL or slot.released or self.ring.closed:
            raise BufferReleasedError("view of a ring response used after release()")
        return self.ring.buf + self.start

    def __getbuffer__(self, Py_buffer* view, int flags):
        cdef const unsigned char* p = self.check()
        if flags & PyBUF_WRITABLE:
            raise BufferError("ring views are read-only")
        PyBuffer_FillInfo(view, self, <void*>p, self.length, 1, flags)
        self.ring.slot_of(self.seq).exports += 1
        self.ring.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        cdef Slot* slot = self.ring.slot_of(self.seq)
        self.ring.exports -= 1
        if slot != NULL:
            slot.exports -= 1
            if slot.released and slot.exports == 0:
                try:
                    self.ring.advance()
                except Exception:
                    pass

    def __len__(self):
        return self.length

    @property
    def nbytes(self) -> int:
        return self.length

    @property
    def released(self) -> bool:
        cdef Slot* slot = self.ring.slot_of(self.seq)
        return slot == NULL or slot.released != 0 or self.ring.closed

    def __getitem__(self, key):
        cdef const unsigned char* p = self.check()
        cdef Py_ssize_t i, start, stop, step
        cdef RingView sub
        if isinstance(key, slice):
            start, stop, step = key.indices(self.length)
            if step != 1:
                return PyBytes_FromStringAndSize(<const char*>p, self.length)[key]
            sub = RingView.__new__(RingView)
            sub.ring = self.ring
            sub.resp = self.resp
            sub.seq = self.seq
            sub.start = self.start + start
            sub.length = stop - start if stop > start else 0
            return sub
        i = key
        if i < 0:
            i += self.length
        if i < 0 or i >= self.length:
            raise IndexError("ring view index out of range")
        return p[i]

    def tobytes(self) -> bytes:
        return PyBytes_FromStringAndSize(<const char*>self.check(), self.length)

    copy = tobytes

    def __bytes__(self):
        return PyBytes_FromStringAndSize(<const char*>self.check(), self.length)

    def hex(self) -> str:
        return self.tobytes().hex()

    def __eq__(self, other):
        cdef const unsigned char* p = self.check()
        cdef const unsigned char[::1] o
        try:
            o = other
        except (TypeError, ValueError, BufferError):
            return NotImplemented
        if o.shape[0] != self.length:
            return False
        return self.length == 0 or memcmp(p, &o[0], self.length) == 0

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None

    def __repr__(self):
        if self.released:
            return "<RingView released>"
        return f"<RingView {self.length} bytes>"


# -- FetchResponse records through a reusable flyweight ----------------------------------------
# A resumable C-level walk over a FetchResponse body (versions 4 to 16; flexible from 12), on
# the protocol package's wire primitives (kafkacodec/protocol/_wire.pxd):
# topics -> partitions -> record batches -> records, with one FetchRecord object refilled for
# every record.  Nothing is copied and no Python object is made per record; `key`/`value`
# copy only when asked.  Control batches are skipped (as Kafka's consumer does); a trailing
# partial batch ends the partition.  Batch CRCs are checked (Kafka's check.crcs=true).

DEF CONTROL_ABORT = 0

cdef extern from "stdlib.h":
    void qsort(void* base, size_t n, size_t size, int (*cmp)(const void*, const void*) noexcept nogil) nogil


cdef int compare_first_offset(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[1], y = (<const int64_t*>b)[1]
    return (x > y) - (x < y)

@cython.final
@cython.no_gc_clear
cdef class FetchRecords:
    """Iterator over every record of a FetchResponse held in the ring; yields the same
    FetchRecord object each time, refilled (copy it with `record.copy()` to keep one)."""

    cdef Response resp
    cdef FetchRecord rec
    cdef int version
    cdef bint flexible
    cdef Cursor top                 # the response body
    cdef Py_ssize_t topics_left
    cdef Py_ssize_t parts_left
    cdef Cursor records             # the current partition's records
    cdef bint in_partition
    cdef Cursor inner               # the current batch's records (or one legacy message)
    cdef int32_t batch_left         # records of the current batch still to yield
    cdef BatchHeader batch
    cdef bint legacy_inner          # walking the decompressed inner set of a v0/v1 wrapper
    cdef int64_t legacy_base        # added to inner offsets (v1 relative offsets)
    cdef Decompressor decompressor  # borrowed from the ring while a compressed batch is read
    cdef bint read_committed
    cdef int64_t* aborted           # (producer_id, first_offset) pairs, sorted by first_offset
    cdef Py_ssize_t naborted
    cdef Py_ssize_t aborted_cap
    cdef Py_ssize_t next_aborted    # the first not yet consumed
    cdef int64_t* aborted_pids      # producers whose open transaction was aborted
    cdef Py_ssize_t npids
    cdef Py_ssize_t pids_cap

    def __dealloc__(self):
        PyMem_RawFree(self.aborted)
        PyMem_RawFree(self.aborted_pids)

    cdef int check(self) except -1:
        self.resp.check()
        return 0

    def __iter__(self):
        return self

    cdef int add_aborted(self, int64_t producer_id, int64_t first_offset) except -1:
        cdef int64_t* grown
        if self.naborted == self.aborted_cap:
            grown = <int64_t*>PyMem_RawRealloc(self.aborted,
                                              (2 * self.aborted_cap + 8) * 2 * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self.aborted = grown
            self.aborted_cap = 2 * self.aborted_cap + 8
        self.aborted[2 * self.naborted] = producer_id
        self.aborted[2 * self.naborted + 1] = first_offset
        self.naborted += 1
        return 0

    cdef Py_ssize_t find_pid(self, int64_t producer_id) noexcept:
        cdef Py_ssize_t i
        for i in range(self.npids):
            if self.aborted_pids[i] == producer_id:
                return i
        return -1

    cdef int batch_is_skipped(self, const unsigned char* entry) except -1:
        """Kafka's read_committed rule (CompletedFetch): 1 when the batch's records must not
        be returned: an aborted transaction's data, or a control batch."""
        cdef int64_t pid = self.batch.producer_id
        cdef Py_ssize_t i
        cdef int64_t* grown
        cdef bint control = self.batch.attributes & CONTROL_FLAG
        if self.read_committed and pid >= 0:
            # aborted transactions that began at or before this batch's last offset
            while (self.next_aborted < self.naborted
                   and self.aborted[2 * self.next_aborted + 1] <= self.batch.last_offset):
                if self.find_pid(self.aborted[2 * self.next_aborted]) < 0:
                    if self.npids == self.pids_cap:
                        grown = <int64_t*>PyMem_RawRealloc(
                            self.aborted_pids, (2 * self.pids_cap + 8) * sizeof(int64_t))
                        if grown == NULL:
                            raise MemoryError()
                        self.aborted_pids = grown
                        self.pids_cap = 2 * self.pids_cap + 8
                    self.aborted_pids[self.npids] = self.aborted[2 * self.next_aborted]
                    self.npids += 1
                self.next_aborted += 1
            if control:
                if self.first_control_type(entry) == CONTROL_ABORT:
                    i = self.find_pid(pid)
                    if i >= 0:                  # the aborted transaction ends here
                        self.npids -= 1
                        self.aborted_pids[i] = self.aborted_pids[self.npids]
                return 1
            if self.batch.attributes & TRANSACTIONAL_FLAG and self.find_pid(pid) >= 0:
                return 1
        return 1 if control else 0

    cdef int first_control_type(self, const unsigned char* entry) except -2:
        """The control type of a control batch's first record (-1 when it has none)."""
        cdef Cursor c
        cdef V2Record r
        cdef const unsigned char* data
        cdef Py_ssize_t size
        if self.batch.records_count <= 0:
            return -1
        if self.batch.compression != 0:
            if self.decompressor is None:
                self.decompressor = self.resp.ring.take_decompressor()
            data = self.decompressor.decompress_into(
                self.batch.compression, 2, entry + V2_HEADER_SIZE,
                self.batch.size - V2_HEADER_SIZE, &size)
            cursor_init(&c, data, size, self.batch.position + V2_HEADER_SIZE)
        else:
            cursor_init(&c, entry + V2_HEADER_SIZE, self.batch.size - V2_HEADER_SIZE,
                        self.batch.position + V2_HEADER_SIZE)
        if c.end == 0:
            return -1
        read_v2_record(&c, &r)
        return read_control_type(&r, self.batch.position)

    cdef int next_partition(self) except -1:
        cdef Cursor* cur = &self.top
        cdef const unsigned char* entry
        cdef Py_ssize_t n, length
        cdef FetchRecord rec = self.rec
        need(cur, 4 + 2 + 8 + 8, b"fetch partition")
        rec.partition = get_int32(cur)
        rec.error_code = get_int16(cur)
        rec.high_watermark = get_int64(cur)
        rec.last_stable_offset = get_int64(cur)
        if self.version >= 5:
            need(cur, 8, b"fetch partition log start offset")
            rec.log_start_offset = get_int64(cur)
        n = read_array_length(cur, self.flexible, True, 16, b"fetch aborted transactions")
        self.naborted = 0
        self.next_aborted = 0
        self.npids = 0
        while n > 0:
            entry = take(cur, 16, b"fetch aborted transaction")
            if self.read_committed:
                self.add_aborted(<int64_t>load_u64(entry), <int64_t>load_u64(entry + 8))
            if self.flexible:
                skip_tagged_fields(cur)
            n -= 1
        if self.naborted > 1:
            qsort(self.aborted, self.naborted, 2 * sizeof(int64_t), compare_first_offset)
        if self.version >= 11:
            need(cur, 4, b"fetch preferred read replica")
            get_int32(cur)
        length = read_bytes_length(cur, self.flexible, True, b"fetch records")
        if length < 0:
            length = 0                      # null records
        need(cur, length, b"fetch records")
        cursor_init(&self.records, cur.data + cur.pos, length, cur.base + cur.pos)
        cur.pos += length
        if self.flexible:
            skip_tagged_fields(cur)
        self.in_partition = True
        return 0

    cdef int next_topic(self) except -1:
        cdef Cursor* cur = &self.top
        cdef Py_ssize_t n
        cdef const unsigned char* name
        if self.version >= 13:
            name = take(cur, 16, b"fetch topic id")
            self.rec.topic = None
            self.rec.topic_id = PyBytes_FromStringAndSize(<const char*>name, 16)
        else:
            self.rec.topic = read_string(cur, self.flexible, False, b"fetch topic name")
        self.parts_left = read_array_length(cur, self.flexible, False, 8, b"fetch partitions")
        if self.parts_left < 0:
            self.parts_left = 0
        return 0

    cdef int end_topic(self) except -1:
        if self.flexible:
            skip_tagged_fields(&self.top)
        return 0

    cdef int next_batch(self) except -1:
        """Frame the next entry of the partition; 1 = records to yield, 0 = partition done."""
        cdef Cursor* cur = &self.records
        cdef const unsigned char* entry
        cdef uint32_t computed
        cdef LegacyMessage msg
        while True:
            entry = cur.data + cur.pos
            if not next_entry(cur, &self.batch):
                return 0                    # end, or a trailing partial batch
            if not crc_is_valid(entry, &self.batch):
                computed = compute_crc(entry, &self.batch)
                raise InvalidCrcError("record batch crc mismatch", stored=self.batch.crc,
                                      computed=computed, position=self.batch.position,
                                      offset=self.batch.base_offset)
            if self.batch.magic >= 2:
                if self.batch_is_skipped(entry):
                    continue                # markers, and aborted data under read_committed
                if self.batch.compression != 0:
                    self.decompress(entry)
                else:
                    self.rec.chunk = None
                    cursor_init(&self.inner, entry + V2_HEADER_SIZE,
                                self.batch.size - V2_HEADER_SIZE,
                                self.batch.position + V2_HEADER_SIZE)
                if self.batch.records_count < 0:
                    raise_corrupt(cur, b"record batch count (negative)")
                self.batch_left = self.batch.records_count
            elif self.batch.compression != 0:
                self.decompress(entry)          # sets batch_left to the inner message count
                if self.batch_left == 0:
                    continue
            else:
                self.legacy_inner = False
                self.rec.chunk = None
                cursor_init(&self.inner, entry, self.batch.size, self.batch.position)
                self.batch_left = 1
            self.rec.batch = self.batch
            return 1

    cdef int decompress(self, const unsigned char* entry) except -1:
        """Decompress the current batch (v2 records section, or a v0/v1 wrapper's value) into
        the reusable buffer of the ring's Decompressor (KAFKA-2045's one extra buffer)."""
        cdef const unsigned char* out
        cdef Py_ssize_t out_size, size
        cdef int64_t last = 0
        cdef int32_t count = 0
        cdef LegacyMessage wrapper
        cdef Cursor scan
        if self.decompressor is None:
            self.decompressor = self.resp.ring.take_decompressor()
        if self.batch.magic >= 2:
            out = self.decompressor.decompress_into(
                self.batch.compression, 2, entry + V2_HEADER_SIZE,
                self.batch.size - V2_HEADER_SIZE, &out_size)
            cursor_init(&self.inner, out, out_size, self.batch.position + V2_HEADER_SIZE)
            self.rec.chunk = self.decompressor._chunk
            return 0
        read_legacy_message(entry, self.batch.size, self.batch.position, &wrapper)
        if wrapper.value == NULL:
            self.batch_left = 0
            return 0
        out = self.decompressor.decompress_into(
            self.batch.compression, self.batch.magic, wrapper.value, wrapper.value_length,
            &out_size)
        cursor_init(&self.inner, out, out_size, self.batch.position)
        self.rec.chunk = self.decompressor._chunk
        scan = self.inner
        while next_inner_entry(&scan, &size):
            last = <int64_t>load_u64(scan.data + scan.pos)
            scan.pos += size
            count += 1
        self.legacy_base = inner_base_offset(self.batch.magic, wrapper.offset, last, &scan)
        self.legacy_inner = True
        self.batch_left = count
        return 0

    cdef int next_record(self) except -1:
        cdef FetchRecord rec = self.rec
        cdef V2Record r
        cdef LegacyMessage m
        cdef Py_ssize_t size = 0
        if self.batch.magic >= 2:
            read_v2_record(&self.inner, &r)
            rec.offset_ = self.batch.base_offset + r.offset_delta
            rec.timestamp_ = record_timestamp(&self.batch, &r)
            rec.key_ptr = r.key
            rec.key_length_ = r.key_length
            rec.value_ptr = r.value
            rec.value_length_ = r.value_length
            rec.headers_ptr = r.headers
            rec.headers_size = r.headers_size
            rec.header_count = r.header_count
            self.batch_left -= 1
            if self.batch_left == 0 and self.inner.pos != self.inner.end:
                raise_corrupt(&self.inner,
                              b"record batch (bytes left after its declared record count)")
        elif self.legacy_inner:
            next_inner_entry(&self.inner, &size)
            read_legacy_message(self.inner.data + self.inner.pos, size,
                                self.inner.base + self.inner.pos, &m)
            self.inner.pos += size
            rec.offset_ = m.offset + self.legacy_base
            if self.batch.magic == 1 and self.batch.timestamp_type == TIMESTAMP_LOG_APPEND:
                rec.timestamp_ = self.batch.max_timestamp     # the wrapper's time wins
            else:
                rec.timestamp_ = m.timestamp
            rec.key_ptr = m.key
            rec.key_length_ = m.key_length
            rec.value_ptr = m.value
            rec.value_length_ = m.value_length
            rec.headers_ptr = NULL
            rec.headers_size = 0
            rec.header_count = 0
            self.batch_left -= 1
        else:
            read_legacy_message(self.inner.data, self.batch.size, self.batch.position, &m)
            rec.offset_ = m.offset
            rec.timestamp_ = m.timestamp
            rec.key_ptr = m.key
            rec.key_length_ = m.key_length
            rec.value_ptr = m.value
            rec.value_length_ = m.value_length
            rec.headers_ptr = NULL
            rec.headers_size = 0
            rec.header_count = 0
            self.batch_left = 0
        return 0

    def __next__(self):
        self.resp.check()
        while True:
            if self.batch_left > 0:
                self.next_record()
                return self.rec
            if self.in_partition:
                if self.next_batch():
                    continue
                self.in_partition = False
            if self.parts_left > 0:
                self.parts_left -= 1
                self.next_partition()
                continue
            if self.parts_left == 0 and self.topics_left >= 0:
                if self.topics_left < self.topics_total:
                    self.end_topic()
                if self.topics_left > 0:
                    self.topics_left -= 1
                    self.next_topic()
                    continue
                self.topics_left = -1
                if self.flexible:
                    skip_tagged_fields(&self.top)
            if self.decompressor is not None:     # hand the buffer back for the next response
                self.resp.ring.spare_decompressor = self.decompressor
                self.decompressor = None
            raise StopIteration

    cdef Py_ssize_t topics_total


@cython.final
@cython.no_gc_clear
cdef class FetchRecord:
    """The flyweight: one object per iterator, refilled for every record.  Fields are valid
    until the iterator moves on; touching it after the response's release raises
    BufferReleasedError."""

    cdef Response resp
    cdef readonly object topic
    cdef readonly object topic_id
    cdef readonly int32_t partition
    cdef readonly int16_t error_code
    cdef readonly int64_t high_watermark
    cdef readonly int64_t last_stable_offset
    cdef readonly int64_t log_start_offset
    cdef int64_t offset_
    cdef int64_t timestamp_
    cdef BatchHeader batch
    cdef const unsigned char* key_ptr
    cdef int32_t key_length_
    cdef const unsigned char* value_ptr
    cdef int32_t value_length_
    cdef const unsigned char* headers_ptr
    cdef Py_ssize_t headers_size
    cdef int32_t header_count
    cdef _Chunk chunk               # decompressed data of the current batch (None: in the ring)

    cdef object view_of(self, const unsigned char* p, Py_ssize_t n):
        cdef RingView view
        cdef ResponseRingBuffer ring = self.resp.ring
        self.resp.check()
        if p == NULL:
            return None
        if self.chunk is not None:
            # The Decompressor never reuses a buffer while a view of it is alive.
            return memoryview(self.chunk)[p - self.chunk.buf:p - self.chunk.buf + n]
        view = RingView.__new__(RingView)
        view.ring = ring
        view.resp = self.resp
        view.seq = self.resp.seq
        view.start = p - ring.buf
        view.length = n
        return view

    @property
    def key_view(self):
        """Zero-copy view of the key (None when null): a RingView into the response (raises
        after release), or a read-only memoryview of the decompressed batch, which stays
        valid on its own."""
        return self.view_of(self.key_ptr, self.key_length_)

    @property
    def value_view(self):
        """Zero-copy view of the value (None when null); see key_view."""
        return self.view_of(self.value_ptr, self.value_length_)

    @property
    def offset(self) -> int:
        self.resp.check()
        return self.offset_

    @property
    def timestamp(self) -> int:
        self.resp.check()
        return self.timestamp_

    @property
    def timestamp_type(self) -> int:
        return self.batch.timestamp_type

    @property
    def leader_epoch(self) -> int:
        return self.batch.partition_leader_epoch

    @property
    def base_offset(self) -> int:
        """The batch's base offset."""
        return self.batch.base_offset

    @property
    def magic(self) -> int:
        return self.batch.magic

    @property
    def compression(self) -> int:
        return self.batch.compression

    @property
    def key_length(self) -> int:
        self.resp.check()
        return self.key_length_

    @property
    def value_length(self) -> int:
        self.resp.check()
        return self.value_length_

    @property
    def key(self):
        """The key as bytes (a copy) or None."""
        self.resp.check()
        if self.key_ptr == NULL:
            return None
        return PyBytes_FromStringAndSize(<const char*>self.key_ptr, self.key_length_)

    @property
    def value(self):
        """The value as bytes (a copy) or None."""
        self.resp.check()
        if self.value_ptr == NULL:
            return None
        return PyBytes_FromStringAndSize(<const char*>self.value_ptr, self.value_length_)

    @property
    def headers(self) -> list:
        """[(key str, value bytes or None)], parsed on request."""
        cdef Cursor cur
        cdef const unsigned char* k
        cdef const unsigned char* v
        cdef int32_t kl, vl, i
        self.resp.check()
        out = []
        cursor_init(&cur, self.headers_ptr, self.headers_size, 0)
        for i in range(self.header_count):
            read_v2_header(&cur, &k, &kl, &v, &vl)
            try:
                key = k[:kl].decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError("record header key is not UTF-8",
                                         offset=self.offset_) from None
            out.append((key,
                        None if v == NULL else PyBytes_FromStringAndSize(<const char*>v, vl)))
        return out

    def copy(self) -> tuple:
        """(topic, partition, offset, timestamp, key, value, headers) as new Python objects."""
        return (self.topic, self.partition, self.offset, self.timestamp, self.key, self.value,
                self.headers)

    def __repr__(self):
        return (f"<FetchRecord {self.topic}-{self.partition}@{self.offset_} "
                f"key={self.key_length_} value={self.value_length_} bytes>")


cdef FetchRecords fetch_records(Response resp, int api_version, int isolation_level):
    cdef FetchRecords it
    cdef const unsigned char* p = resp.check()
    if api_version < 4 or api_version > 16:
        raise UnsupportedVersionError(
            f"Fetch version {api_version} is not supported by the ring iterator (4-16)")
    if isolation_level not in (0, 1):
        raise ValueError(f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), "
                         f"got {isolation_level}")
    it = FetchRecords.__new__(FetchRecords)
    it.resp = resp
    it.version = api_version
    it.read_committed = isolation_level == 1
    it.flexible = api_version >= FETCH_FLEXIBLE
    it.rec = FetchRecord.__new__(FetchRecord)
    it.rec.resp = resp
    it.rec.log_start_offset = -1
    cursor_init(&it.top, p, resp.size, 0)
    read_response_header(&it.top, it.flexible)     # v1 (flexible) adds a tagged section
    need(&it.top, 4, b"fetch throttle time")
    get_int32(&it.top)
    if api_version >= 7:
        need(&it.top, 6, b"fetch error code and session id")
        get_int16(&it.top)
        get_int32(&it.top)
    it.topics_total = read_array_length(&it.top, it.flexible, False, 2, b"fetch topics")
    if it.topics_total < 0:
        it.topics_total = 0
    it.topics_left = it.topics_total
    return it
