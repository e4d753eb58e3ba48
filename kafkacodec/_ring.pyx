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

Threads (KAFKA-2045's design is one connection, one thread; the ring checks what it cannot
make safe): every method holds the GIL except recv() inside recv_into() and the decompression
inside a records() iterator, so the state they change cannot tear.  The writer side is one at
a time: feed(), writable(), get_buffer(), buffer_updated() and a second recv_into() called
while a recv_into() waits for the socket raise ConcurrentUseError ("in use by another thread"),
and feed()/recv_into() refuse while a get_buffer() window is alive.  The reader side
(next_response(), release()) may run in any thread meanwhile.  close() while a recv or a
decompression runs without the GIL marks the ring closed at once and leaves the memory (the
pool block) in place until that call returns; the interrupted recv_into() then raises
BufferReleasedError and drops what it received.  One records() iterator is for one thread.
"""

cimport cython
from cpython.buffer cimport (PyBuffer_FillInfo, PyObject_GetBuffer, PyBuffer_Release,
                             PyBUF_WRITABLE, PyBUF_SIMPLE, PyBUF_WRITE)
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromObject, PyMemoryView_FromMemory
from cpython.mem cimport PyMem_RawMalloc, PyMem_RawFree, PyMem_RawRealloc
from cpython.ref cimport Py_REFCNT, Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t, INT64_MIN, INT64_MAX
from libc.string cimport memcpy, memmove, memcmp
from libc.errno cimport errno, EINTR, EAGAIN

from kafkacodec._cursor cimport Cursor, cursor_init, load_u32, raise_corrupt
from kafkacodec._format cimport (BatchHeader, next_entry, crc_is_valid, compute_crc,
                                 CONTROL_FLAG, CODEC_ZSTD)
from kafkacodec._v2 cimport read_v2_header
from kafkacodec._compression cimport (Decompressor, _Chunk, DEFAULT_MAX_DECOMPRESSED,
                                      thread_decompressor)
from kafkacodec._walk cimport (BatchWalk, RecordView, walk_open, walk_decompressed, walk_next,
                               walk_step,
                               raise_walk_fault, pin_output, pin_chunk, unpin_chunk, WALK_DONE,
                               OPEN_COMPRESSED, FAULT_NEGATIVE_COUNT,
                               AbortFilter, abort_filter_restart, abort_filter_add,
                               abort_filter_ready, abort_filter_batch, abort_filter_free,
                               ABORT_SKIP, ABORT_NOT_LOADED, raise_abort_not_loaded)
from kafkacodec._crc cimport kc_crc_init
from kafkacodec.protocol._wire cimport skip_tagged_fields, checked_version, FETCH_FLEXIBLE
from kafkacodec.protocol._fetch cimport (FetchPartitionHeader, read_fetch_start, read_fetch_topic,
                                         read_fetch_partition, read_aborted_transaction,
                                         FETCH_MIN_VERSION, FETCH_MAX_VERSION, FETCH_TOPIC_IDS)

import uuid as _uuid

from kafkacodec._pool import MemoryPool
import kafkacodec._types as _types
from kafkacodec.errors import (BufferReleasedError, ConcurrentUseError, CorruptRecordError,
                               InvalidCrcError, KafkaCodecError, MemoryPoolError,
                               RecordTooLargeError, UnsupportedCompressionError)

cdef tuple _TIMESTAMP_TYPES = _types.TIMESTAMP_TYPES      # TimestampType by id + 1
cdef tuple _COMPRESSIONS = _types.COMPRESSIONS            # Compression by id
cdef tuple _NO_HEADERS = ()


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


# Misuse by threads: the class Decompressor's guard raises, with its wording.
InUseError = ConcurrentUseError


cdef int not_from_a_ring(object obj) except -1:
    raise TypeError(f"{type(obj).__name__} objects come from a ResponseRingBuffer "
                    f"(next_response(), payload, records()), not from their constructor")

DEF HEADER = 1           # the one-byte slot header
DEF PREFIX = 4           # the int32 size prefix of every response
DEF OVERHEAD = 5


@cython.no_gc_clear
cdef class ResponseRingBuffer:
    """ResponseRingBuffer(capacity, pool=None)

    One ring of `capacity` bytes (taken from `pool` when given, released by close()).
    A response needs size + 5 bytes of it (header + size prefix).

    Threads: the writer side (feed, recv_into, writable, get_buffer, buffer_updated) refuses a
    second thread while recv_into() waits for the socket (KafkaCodecError, "in use by another
    thread"); the reader side may run meanwhile; close() during a recv or a decompression
    returns the memory only once that call is done.  See the module docstring.
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
            Py_INCREF(view)
            self.pool_view = <PyObject*>view
            # Not a Py_buffer member: Cython's tp_traverse would show its memoryview to the
            # collector, which clears an exported memoryview left in a cycle with the ring (and
            # CPython crashes when it is then freed).  Unseen, it lives until we release it.
            self.pool_buffer = <Py_buffer*>PyMem_RawMalloc(sizeof(Py_buffer))
            if self.pool_buffer == NULL:
                raise MemoryError()
            PyObject_GetBuffer(view, self.pool_buffer, PyBUF_WRITABLE)
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
            PyBuffer_Release(self.pool_buffer)
            self.has_pool_buffer = False
            try:
                self.pool.release(<object>self.pool_view)
            except Exception:
                pass                          # the pool reclaims a dropped buffer itself
        elif self.owns_buf:
            PyMem_RawFree(self.buf)
        PyMem_RawFree(self.pool_buffer)
        self.pool_buffer = NULL
        self.buf = NULL
        Py_XDECREF(self.pool_view)
        self.pool_view = NULL
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

    cdef int check_writer(self) except -1:
        if self.closed:
            raise BufferReleasedError("ring buffer used after close()")
        if self.writing:
            raise InUseError("ResponseRingBuffer is in use by another thread: one writer at a "
                             "time (feed, recv_into, buffer_updated)")
        return 0

    cdef int begin_write(self, bint through_window) except -1:
        """Take the writer side for one call (feed, recv_into; buffer_updated comes
        `through_window`, which get_buffer() exported and may still be alive)."""
        self.check_writer()
        if self.window_exports > 0 and not through_window:
            raise InUseError("ResponseRingBuffer is in use by another writer: a get_buffer() "
                             "window is alive; finish it with buffer_updated()")
        self.writing = True
        return 0

    cdef Py_ssize_t window(self, Py_ssize_t* start) except -1:
        """Where the next network bytes go and how many are accepted now (0 = full).  The
        caller holds the writer side (begin_write) or checked it is free (check_writer)."""
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
                    f"{<Py_ssize_t>size + OVERHEAD}) does not fit a ring of {self.capacity} bytes")
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

    cdef bint is_released(self, int64_t seq) noexcept:
        """Response seq's bytes are gone or going: released, passed over, or the ring closed."""
        cdef Slot* slot = self.slot_of(seq)
        return slot == NULL or slot.released != 0 or self.closed

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

    cdef int enter_reader(self, int64_t seq) except -1:
        """Pin response `seq`'s bytes while they are read without the GIL (or while code that
        may run a finaliser reads them): release() leaves them in place, close() leaves the
        memory until leave_reader()."""
        cdef Slot* slot = self.slot_of(seq)
        if slot == NULL or slot.released or self.closed:
            raise BufferReleasedError("response used after release()")
        slot.exports += 1
        self.nogil_users += 1
        return 0

    cdef void leave_reader(self, int64_t seq) noexcept:
        cdef Slot* slot = self.slot_of(seq)
        if slot != NULL:
            slot.exports -= 1
            if slot.released and slot.exports == 0 and not self.closed:
                try:
                    self.advance()
                except Exception:
                    pass
        self.leave_nogil()

    cdef void leave_nogil(self) noexcept:
        """The end of a GIL-free use of the memory: the last one after close() returns it."""
        self.nogil_users -= 1
        if self.closed and self.nogil_users == 0 and self.exports == 0:
            try:
                self.release_memory()
            except Exception:
                pass                          # the pool reclaims a dropped buffer itself

    cdef int release_memory(self) except -1:
        if self.has_pool_buffer:
            PyBuffer_Release(self.pool_buffer)
            self.has_pool_buffer = False
            view = <object>self.pool_view
            Py_XDECREF(self.pool_view)
            self.pool_view = NULL
            self.pool.release(view)
        return 0

    # -- public API -----------------------------------------------------------------------------
    def feed(self, data) -> int:
        """Copy bytes of the response stream (the raw bytes of any C-contiguous buffer) into
        the ring; returns how many were accepted now (fewer than given when the ring is full,
        0 when nothing fits)."""
        cdef Py_buffer view
        cdef Py_ssize_t total = 0, n, start
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self.begin_write(False)
        except BaseException:
            PyBuffer_Release(&view)
            raise
        try:
            while total < view.len:
                n = self.window(&start)
                if n == 0:
                    break
                if n > view.len - total:
                    n = view.len - total
                memcpy(self.buf + start, <const unsigned char*>view.buf + total, n)
                total += n
                self.wrote(n)
            if view.len == 0:
                self.window(&start)           # still report a closed ring / stream error
        finally:
            self.writing = False
            PyBuffer_Release(&view)
        return total

    def writable(self) -> int:
        """Bytes accepted right now (at least: the response in progress may continue after
        them); 0 means full until responses are released."""
        cdef Py_ssize_t start
        self.check_writer()
        return self.window(&start)

    def recv_into(self, sock) -> int:
        """One recv() from `sock` straight into the ring.  Returns the bytes received; 0 when
        the peer closed the connection (then `eof` is True) or when the ring is full
        (writable() == 0; nothing is read then).  The GIL is released while recv() waits."""
        cdef Py_ssize_t start, n, got
        cdef int fd
        self.begin_write(False)
        try:
            n = self.greedy_window(&start)
            if n == 0:
                return 0
            fd = sock.fileno()
            self.nogil_users += 1
            try:
                got = self.receive(sock, fd, start, n)
            finally:
                self.leave_nogil()              # returns the memory if close() came meanwhile
            if self.closed:
                raise BufferReleasedError("the ring was closed during recv_into(): the bytes "
                                          "received are dropped")
            if got == 0:
                self.eof = True
                return 0
            self.landed(got)
            return got
        finally:
            self.writing = False

    cdef Py_ssize_t receive(self, sock, int fd, Py_ssize_t start, Py_ssize_t n) except -1:
        cdef Py_ssize_t got
        while True:
            with nogil:
                got = kc_recv(fd, self.buf + start, n)
            if got >= 0:
                return got
            if got == -1 and errno == EINTR:
                PyErr_CheckSignals()
                continue
            if got == -2 or errno == EAGAIN or errno == KC_EWOULDBLOCK:
                # Non-blocking or timeout socket (or no POSIX recv): let the socket object
                # apply its timeout rules, on a plain view of the window (released after).
                window = PyMemoryView_FromMemory(<char*>self.buf + start, n, PyBUF_WRITE)
                try:
                    return sock.recv_into(window, n)
                finally:
                    window.release()
            raise OSError(errno, "recv failed")

    # asyncio.BufferedProtocol support
    def get_buffer(self, Py_ssize_t sizehint=-1):
        """A writable memoryview of the window for the transport to fill (BufferedProtocol).
        Raises BufferError when the ring is full: pause reading until responses are released."""
        cdef Py_ssize_t start, n
        self.check_writer()
        n = self.greedy_window(&start)
        if n == 0:
            raise BufferError("ring buffer full: pause reading until responses are released")
        return window_view(self, start, n)

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef Py_ssize_t start, n
        self.begin_write(True)
        try:
            n = self.greedy_window(&start)
            if nbytes < 0 or nbytes > n:
                raise ValueError(f"buffer_updated({nbytes}) outside the {n}-byte window")
            self.landed(nbytes)
        finally:
            self.writing = False

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

    cpdef release_response(self, Response resp):
        cdef Slot* slot
        if resp is None or resp.ring is not self:
            raise ValueError("release_response() takes a response of this ring")
        slot = self.slot_of(resp.seq)
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
        unusable (BufferReleasedError); raw buffer exports still alive make it refuse.  A
        recv_into() or a decompression running without the GIL in another thread keeps the
        memory until it returns (the ring is closed at once; the memory goes back then)."""
        if self.closed:
            return
        if self.exports > 0:
            raise BufferReleasedError(
                f"cannot close the ring while {self.exports} buffer export(s) of it are alive")
        self.closed = True
        if self.nogil_users == 0:
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

    def __init__(self, *args, **kwargs):
        not_from_a_ring(self)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.ring is None:
            not_from_a_ring(self)
        if self.ring.closed:
            raise BufferReleasedError("ring buffer used after close()")
        PyBuffer_FillInfo(view, self, self.ring.buf + self.start, self.length, 0, flags)
        self.ring.exports += 1
        self.ring.window_exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.ring.exports -= 1
        self.ring.window_exports -= 1


cdef object window_view(ResponseRingBuffer ring, Py_ssize_t start, Py_ssize_t n):
    cdef _Window w = _Window.__new__(_Window)
    w.ring = ring
    w.start = start
    w.length = n
    return PyMemoryView_FromObject(w)


@cython.no_gc_clear
cdef class Response:
    """One complete response in the ring (a reusable handle; valid until release())."""

    def __init__(self, *args, **kwargs):
        not_from_a_ring(self)

    cdef const unsigned char* check(self) except NULL:
        cdef Slot* slot
        if self.ring is None:
            not_from_a_ring(self)
        slot = self.ring.slot_of(self.seq)
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
        return self.ring is None or self.ring.is_released(self.seq)

    def records(self, api_version, isolation_level=0):
        """Iterate the records of this FetchResponse (Fetch `api_version`, 4-16) through one
        reusable FetchRecord flyweight.  isolation_level 1 (read_committed) drops the data of
        the aborted transactions the response lists, as Kafka's consumer does."""
        return fetch_records(self, api_version, isolation_level)

    def copy(self) -> bytes:
        """The payload as a new bytes object (outlives release())."""
        return PyBytes_FromStringAndSize(<const char*>self.check(), self.size)

    def release(self):
        """Free the slot (idempotent).  Bytes under a live raw export stay until it is dropped."""
        if self.ring is not None:
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
        self.release()

    def __repr__(self):
        # Never raises (error handlers log responses): nothing is read from a response that
        # is released, closed or too short to hold a correlation id.
        if self.released:
            return f"<Response released size={self.size}>"
        if self.size < 4:
            return f"<Response without correlation id size={self.size}>"
        return (f"<Response correlation_id={<int32_t>load_u32(self.ring.buf + self.pos + OVERHEAD)} "
                f"size={self.size}>")


@cython.no_gc_clear
cdef class RingView:
    """A read-only, zero-copy view into a response in the ring.  Every access checks that the
    response is still unreleased (BufferReleasedError otherwise)."""

    def __init__(self, *args, **kwargs):
        not_from_a_ring(self)

    cdef const unsigned char* check(self) except NULL:
        cdef Slot* slot
        if self.ring is None:
            not_from_a_ring(self)
        slot = self.ring.slot_of(self.seq)
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
        return self.ring is None or self.ring.is_released(self.seq)

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
        """Byte equality with any C-contiguous buffer (compared as raw bytes)."""
        cdef const unsigned char* p
        cdef Py_buffer o
        try:
            PyObject_GetBuffer(other, &o, PyBUF_SIMPLE)
        except (TypeError, BufferError):
            return NotImplemented
        try:
            p = self.check()
            return o.len == self.length and (self.length == 0
                                             or memcmp(p, o.buf, self.length) == 0)
        finally:
            PyBuffer_Release(&o)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None

    def __repr__(self):
        if self.released:
            return "<RingView released>"
        return f"<RingView {self.length} bytes>"


# -- FetchResponse records through a reusable flyweight ----------------------------------------
# A resumable C-level walk over a FetchResponse body (versions 4 to 16; flexible from 12) with
# the protocol package's FetchResponse readers (kafkacodec/protocol/_fetch.pxd): topics ->
# partitions -> record batches -> records, with one FetchRecord object refilled for every
# record.  Nothing is copied and no Python object is made per record; `key`/`value` copy only
# when asked.  Batch CRCs are checked (Kafka's check.crcs=true).  Batches and records follow
# MemoryRecords' rules exactly (kafkacodec/_records.pyx, _RecordIterator): the same records,
# or an error of the same class, for the same bytes; control batches are read and checked the
# same way but their records are not returned (as Kafka's consumer does).  A trailing partial
# batch ends the partition; an error ends the iteration.

@cython.final
@cython.no_gc_clear
cdef class FetchRecords:
    """Iterator over every record of a FetchResponse held in the ring; yields the same
    FetchRecord object each time, refilled (copy it with `record.copy()` to keep one).

    Each next() first invalidates the record it returned before (touching it then raises
    BufferReleasedError), also when next() raises or ends the iteration.  An error ends the
    iteration.  Not for concurrent use: a second thread calling next() while one runs (it
    releases the GIL to decompress) gets ConcurrentUseError ("in use by another thread")."""

    cdef Response resp
    cdef FetchRecord rec
    cdef int version
    cdef bint flexible
    cdef bint done
    cdef bint busy
    cdef Cursor top                 # the response body
    cdef Py_ssize_t topics_total
    cdef Py_ssize_t topics_left
    cdef Py_ssize_t parts_left
    cdef Cursor records             # the current partition's records
    cdef bint in_partition
    cdef bint control               # the batch is a control batch: checked, not returned
    cdef BatchWalk w                # the current batch (w.h) and the walk of its records
    cdef _Chunk chunk               # the decompressed batch being read, pinned (exports)
    cdef bint read_committed
    cdef AbortFilter aborted        # the partition's aborted transactions (the walker's filter)

    def __dealloc__(self):
        if self.chunk is not None:
            unpin_chunk(self.chunk)
            self.chunk = None
        abort_filter_free(&self.aborted)

    def __iter__(self):
        return self

    def __init__(self, *args, **kwargs):
        not_from_a_ring(self)

    def __next__(self):
        if self.resp is None:
            not_from_a_ring(self)
        if self.busy:
            raise InUseError("FetchRecords is in use by another thread: one next() at a time; "
                             "iterate each response's records in one thread")
        self.busy = True
        try:
            self.rec.invalidate()
            if self.done:
                raise StopIteration
            try:
                self.resp.check()
                return self.advance()
            except BaseException:
                self.finish()                   # the end, or an error: nothing more
                raise
        finally:
            self.busy = False

    cdef void finish(self) noexcept:
        self.done = True
        self.end_batch()

    cdef void end_batch(self) noexcept:
        self.w.state = WALK_DONE
        if self.chunk is not None:
            unpin_chunk(self.chunk)
            self.chunk = None

    cdef FetchRecord advance(self):
        while True:
            if self.w.state != WALK_DONE:
                if self.next_record():
                    return self.rec
                continue
            self.end_batch()
            if self.in_partition:
                if self.next_batch():
                    continue
                self.in_partition = False
            if self.parts_left > 0:
                self.parts_left -= 1
                self.next_partition()
                continue
            if self.topics_left >= 0:
                if self.topics_left < self.topics_total and self.flexible:
                    skip_tagged_fields(&self.top)     # the previous topic's tagged fields
                if self.topics_left > 0:
                    self.topics_left -= 1
                    self.next_topic()
                    continue
                self.topics_left = -1
                if self.flexible:
                    skip_tagged_fields(&self.top)
            raise StopIteration

    # -- the response walk ----------------------------------------------------------------
    cdef int next_topic(self) except -1:
        cdef const unsigned char* name
        cdef Py_ssize_t length
        self.parts_left = read_fetch_topic(&self.top, self.version, self.flexible, &name, &length)
        if self.version >= FETCH_TOPIC_IDS:
            self.rec.topic_ = None
            # once per topic, as the protocol decoder gives it (KIP-516: a UUID)
            self.rec.topic_id_ = _uuid.UUID(bytes=PyBytes_FromStringAndSize(<const char*>name, 16))
        else:
            try:
                self.rec.topic_ = PyUnicode_DecodeUTF8(<const char*>name, length, NULL)
            except UnicodeDecodeError:
                self.top.pos = name - self.top.data
                raise_corrupt(&self.top, b"fetch response topic name (not UTF-8)")
            self.rec.topic_id_ = None
        return 0

    cdef int next_partition(self) except -1:
        cdef FetchPartitionHeader p
        cdef FetchRecord rec = self.rec
        cdef Cursor aborted
        cdef int64_t producer_id, first_offset
        cdef Py_ssize_t i
        read_fetch_partition(&self.top, self.version, self.flexible, &p)
        rec.partition_ = p.partition_index
        rec.error_code_ = p.error_code
        rec.high_watermark_ = p.high_watermark
        rec.last_stable_offset_ = p.last_stable_offset
        rec.log_start_offset_ = p.log_start_offset
        abort_filter_restart(&self.aborted, INT64_MIN)
        if self.read_committed and p.aborted_count > 0:
            aborted = self.top
            aborted.pos = p.aborted_pos
            for i in range(p.aborted_count):
                read_aborted_transaction(&aborted, self.flexible, &producer_id, &first_offset)
                # a Fetch's list does not carry the marker's offset
                abort_filter_add(&self.aborted, producer_id, first_offset, INT64_MAX)
            abort_filter_ready(&self.aborted)
        if p.records_pos < 0:
            cursor_init(&self.records, self.top.data, 0, 0)          # null records
        else:
            cursor_init(&self.records, self.top.data + p.records_pos, p.records_size,
                        self.top.base + p.records_pos)
        self.in_partition = True
        return 0

    # -- batches ----------------------------------------------------------------------------
    cdef int next_batch(self) except -1:
        """Frame and open the partition's next batch; 1 = opened, 0 = partition done."""
        cdef Cursor* cur = &self.records
        cdef const unsigned char* entry
        cdef uint32_t computed
        cdef BatchHeader* h = &self.w.h
        cdef bint opened
        cdef int control_type, answer
        while True:
            opened = False
            entry = cur.data + cur.pos
            if not next_entry(cur, h):
                return 0                    # end, or a trailing partial batch
            if not crc_is_valid(entry, h):
                computed = compute_crc(entry, h)
                raise InvalidCrcError("record batch crc mismatch", stored=h.crc,
                                      computed=computed, position=h.position,
                                      offset=h.base_offset)
            self.control = h.magic >= 2 and h.attributes & CONTROL_FLAG
            if h.magic >= 2 and self.aborted.n > 0 and h.producer_id >= 0:
                if h.records_count < 0:     # checked before decompressing, as Kafka does
                    raise_walk_fault(FAULT_NEGATIVE_COUNT, h, 0, 0, 0)
                control_type = -1
                if self.control and h.records_count > 0:
                    self.open_batch(entry)  # its first record: an ABORT marker?
                    opened = True
                    control_type = self.first_control_type()
                answer = abort_filter_batch(&self.aborted, h, control_type)
                if answer == ABORT_SKIP:
                    continue                # aborted data: skipped unread
                if answer == ABORT_NOT_LOADED:
                    raise_abort_not_loaded(b"the partition's header raised: read another response")
            if not opened:
                self.open_batch(entry)
            self.rec.batch = self.w.h
            return 1

    cdef int open_batch(self, const unsigned char* entry) except -1:
        """Open the walk of the framed batch: in place, or decompressed into a pinned chunk.
        The response's bytes are read without the GIL: the ring keeps them (and its memory,
        should close() come meanwhile) until the decompressor is done."""
        cdef const unsigned char* data
        cdef const unsigned char* out
        cdef Py_ssize_t size = 0
        cdef Decompressor decompressor
        cdef ResponseRingBuffer ring = self.resp.ring
        if walk_open(&self.w, entry, &data, &size) != OPEN_COMPRESSED:
            return 0
        decompressor = thread_decompressor()
        decompressor.max_size = DEFAULT_MAX_DECOMPRESSED
        ring.enter_reader(self.resp.seq)
        try:
            out = decompressor.decompress_into(self.w.h.compression, self.w.h.magic, data, size,
                                               &size)
        finally:
            ring.leave_reader(self.resp.seq)
        self.resp.check()                   # released or closed meanwhile
        self.chunk = pin_output(decompressor)
        walk_decompressed(&self.w, out, size)
        return 0

    # -- records --------------------------------------------------------------------------
    cdef bint next_record(self) except -1:
        """Walk the batch's next record into the flyweight; True when it is one to return
        (False: a control record, checked by the walker and passed over, or the batch's
        end)."""
        cdef FetchRecord rec = self.rec
        cdef RecordView v
        if not walk_step(&self.w, &v) or self.control:
            return False
        rec.offset_ = v.offset
        rec.timestamp_ = v.timestamp
        rec.timestamp_type_ = v.timestamp_type
        rec.fill(v.rec.key, v.rec.key_length, v.rec.value, v.rec.value_length, v.rec.headers,
                 v.rec.headers_size, v.rec.header_count)
        rec.chunk = self.chunk
        rec.valid = True
        return True

    # -- read_committed ---------------------------------------------------------------------
    cdef int first_control_type(self) except -2:
        """The control type of the open control batch's first record (-1 when it has none),
        read without moving the batch's walk."""
        cdef BatchWalk peek = self.w
        cdef RecordView v
        if not walk_next(&peek, &v):
            return -1
        return v.control_type


@cython.final
@cython.no_gc_clear
cdef class FetchRecord:
    """The flyweight: one object per iterator, refilled for every record.

    It holds the record the iterator's last next() returned, and only that: the next call to
    next() (also one that raises or ends the iteration), release() of the response and
    close() of the ring make every field raise BufferReleasedError.  `copy()` what you keep.
    Reading it needs no lock (the GIL is held throughout); the iterator is the part that must
    stay in one thread."""

    cdef Response resp
    cdef bint valid
    cdef object topic_
    cdef object topic_id_
    cdef int32_t partition_
    cdef int16_t error_code_
    cdef int64_t high_watermark_
    cdef int64_t last_stable_offset_
    cdef int64_t log_start_offset_
    cdef int64_t offset_
    cdef int64_t timestamp_
    cdef int8_t timestamp_type_
    cdef BatchHeader batch
    cdef const unsigned char* key_ptr
    cdef int32_t key_length_
    cdef const unsigned char* value_ptr
    cdef int32_t value_length_
    cdef const unsigned char* headers_ptr
    cdef Py_ssize_t headers_size
    cdef int32_t header_count
    cdef _Chunk chunk               # decompressed data of the record (None: in the ring)

    cdef inline void fill(self, const unsigned char* key, int32_t key_length,
                          const unsigned char* value, int32_t value_length,
                          const unsigned char* headers, Py_ssize_t headers_size,
                          int32_t header_count) noexcept:
        self.key_ptr = key
        self.key_length_ = key_length
        self.value_ptr = value
        self.value_length_ = value_length
        self.headers_ptr = headers
        self.headers_size = headers_size
        self.header_count = header_count

    cdef inline void invalidate(self) noexcept:
        self.valid = False
        self.chunk = None
        self.fill(NULL, -1, NULL, -1, NULL, 0, 0)

    def __init__(self, *args, **kwargs):
        not_from_a_ring(self)

    cdef int check(self) except -1:
        if self.resp is None:
            not_from_a_ring(self)
        self.resp.check()
        if not self.valid:
            raise BufferReleasedError(
                "FetchRecord used after its iterator moved on (next(), an error or the end): "
                "copy() the records you keep")
        return 0

    cdef object view_of(self, const unsigned char* p, Py_ssize_t n):
        cdef RingView view
        cdef ResponseRingBuffer ring
        cdef _Chunk chunk = self.chunk
        cdef Py_ssize_t start
        self.check()
        ring = self.resp.ring
        if p == NULL:
            return None
        if chunk is not None:
            # A view of the chunk pins it: the Decompressor then writes elsewhere.
            start = p - chunk.buf
            return memoryview(chunk)[start:start + n]
        view = RingView.__new__(RingView)
        view.ring = ring
        view.resp = self.resp
        view.seq = self.resp.seq
        view.start = p - ring.buf
        view.length = n
        return view

    @property
    def topic(self):
        self.check()
        return self.topic_

    @property
    def topic_id(self):
        """The topic's uuid.UUID from Fetch v13 (None before); `.bytes` gives its 16 raw bytes."""
        self.check()
        return self.topic_id_

    @property
    def partition(self) -> int:
        self.check()
        return self.partition_

    @property
    def error_code(self) -> int:
        self.check()
        return self.error_code_

    @property
    def high_watermark(self) -> int:
        self.check()
        return self.high_watermark_

    @property
    def last_stable_offset(self) -> int:
        self.check()
        return self.last_stable_offset_

    @property
    def log_start_offset(self) -> int:
        self.check()
        return self.log_start_offset_

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
        self.check()
        return self.offset_

    @property
    def timestamp(self) -> int:
        self.check()
        return self.timestamp_

    @property
    def timestamp_type(self):
        """TimestampType (an IntEnum): -1 (none: magic 0), 0 CreateTime, 1 LogAppendTime."""
        self.check()
        return _TIMESTAMP_TYPES[self.timestamp_type_ + 1]

    @property
    def leader_epoch(self) -> int:
        self.check()
        return self.batch.partition_leader_epoch

    @property
    def base_offset(self) -> int:
        """The batch's base offset (legacy: the entry's offset)."""
        self.check()
        return self.batch.base_offset

    @property
    def magic(self) -> int:
        self.check()
        return self.batch.magic

    @property
    def compression(self):
        """The batch's Compression (an IntEnum)."""
        self.check()
        if self.batch.compression > CODEC_ZSTD:     # the walker refuses these before a record
            raise UnsupportedCompressionError(f"unknown compression type id {self.batch.compression}",
                                              position=self.batch.position,
                                              offset=self.batch.base_offset)
        return _COMPRESSIONS[self.batch.compression]

    @property
    def key_length(self) -> int:
        self.check()
        return self.key_length_

    @property
    def value_length(self) -> int:
        self.check()
        return self.value_length_

    @property
    def key(self):
        """The key as bytes (a copy) or None."""
        self.check()
        if self.key_ptr == NULL:
            return None
        return PyBytes_FromStringAndSize(<const char*>self.key_ptr, self.key_length_)

    @property
    def value(self):
        """The value as bytes (a copy) or None."""
        self.check()
        if self.value_ptr == NULL:
            return None
        return PyBytes_FromStringAndSize(<const char*>self.value_ptr, self.value_length_)

    @property
    def headers(self):
        """((key str, value bytes or None), ...) as Record.headers, parsed on request.  A key
        that is not UTF-8 gets U+FFFD for its bad bytes, as Java's new String(bytes, UTF_8)
        (and MemoryRecords)."""
        cdef Cursor cur
        cdef const unsigned char* k
        cdef const unsigned char* v
        cdef int32_t kl, vl, i
        cdef _Chunk chunk = self.chunk
        cdef Response resp = self.resp
        cdef list out
        self.check()
        if self.header_count == 0:
            return _NO_HEADERS
        cursor_init(&cur, self.headers_ptr, self.headers_size, 0)
        # The tuples are GC-tracked: allocating them may run a collection, and with it any
        # finaliser (one that moves the iterator on, or releases the response).  The bytes
        # stay put meanwhile: `chunk` is held here, and the response's slot is pinned.
        if chunk is not None:
            pin_chunk(chunk)
        else:
            resp.ring.enter_reader(resp.seq)
        try:
            out = []
            for i in range(self.header_count):
                read_v2_header(&cur, &k, &kl, &v, &vl)
                out.append((PyUnicode_DecodeUTF8(<const char*>k, kl, "replace"),
                            None if v == NULL else PyBytes_FromStringAndSize(<const char*>v, vl)))
        finally:
            if chunk is not None:
                unpin_chunk(chunk)
            else:
                resp.ring.leave_reader(resp.seq)
        return tuple(out)

    def copy(self) -> tuple:
        """(topic, partition, offset, timestamp, key, value, headers) as new Python objects."""
        self.check()
        return (self.topic_, self.partition_, self.offset_, self.timestamp_, self.key,
                self.value, self.headers)

    def __repr__(self):
        if not self.valid or self.resp is None or self.resp.released:
            return "<FetchRecord (no record: its iterator moved on or the response was released)>"
        return (f"<FetchRecord {self.topic_ if self.topic_id_ is None else self.topic_id_}"
                f"-{self.partition_}@{self.offset_} key={self.key_length_} "
                f"value={self.value_length_} bytes>")


cdef FetchRecords fetch_records(Response resp, object api_version, object isolation_level):
    cdef FetchRecords it
    cdef const unsigned char* p = resp.check()
    cdef int32_t correlation_id, throttle_time_ms, session_id
    cdef int16_t error_code
    cdef int version = checked_version(api_version, b"Fetch", FETCH_MIN_VERSION,
                                       FETCH_MAX_VERSION)
    if isolation_level not in (0, 1):
        raise ValueError(f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), "
                         f"got {isolation_level!r}")
    it = FetchRecords.__new__(FetchRecords)
    it.resp = resp
    it.version = version
    it.read_committed = isolation_level == 1
    it.flexible = version >= FETCH_FLEXIBLE
    it.rec = FetchRecord.__new__(FetchRecord)
    it.rec.resp = resp
    it.rec.invalidate()
    cursor_init(&it.top, p, resp.size, 0)
    it.topics_total = read_fetch_start(&it.top, version, it.flexible, True, &correlation_id,
                                       &throttle_time_ms, &error_code, &session_id)
    it.topics_left = it.topics_total
    return it
