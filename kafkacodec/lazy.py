"""KIP-283 lazy down-conversion: convert a record set chunk by chunk while it is written.

`LazyDownConvertRecords` commits to a size up front (Kafka's S_pre), converts at most
`chunk_size` bytes of input at a time, and `write_to()` delivers exactly `size_in_bytes`
bytes: longer output is cut, shorter output is padded with Kafka's overflow stubs.  Memory
stays bounded by a chunk plus one genuine entry larger than a chunk: a file input is read one
chunk at a time, a mapped buffer is only touched where the current chunk lies, and an entry
larger than a chunk is read whole only once its size is within `max_entry_size` and its CRC,
checked in pieces, holds.  Rules: spec downconvert.md §3; guide: docs/down-conversion.md.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import ssl
import struct
from collections.abc import Iterator
from time import monotonic_ns
from typing import Any

from kafkacodec._convert import (
    ConvertedRecords,
    ChunkReader,
    DownConverter,
    RecordConversionStats,
    first_entry_above,
    records_buffer,
)
from kafkacodec._crc import crc32, crc32c
from kafkacodec._format import (LOG_OVERHEAD, MAGIC_OFFSET, V0_RECORD_OVERHEAD, V2_ATTRIBUTES_OFFSET,
                                V2_HEADER_SIZE, entry_head)
from kafkacodec._inuse import InUse
from kafkacodec._mapguard import check_read
from kafkacodec._records import FileRecords, MemoryRecords
from kafkacodec._types import Compression, recompress_codec_id
from kafkacodec.errors import (
    FileTruncatedError,
    InvalidCrcError,
    KafkaCodecError,
    MemoryPoolError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
)

__all__ = ["LazyDownConvertRecords", "overflow_stub", "MAX_READ_SIZE", "MIN_OVERFLOW_MESSAGE_LENGTH",
           "DEFAULT_MAX_ENTRY_SIZE"]

#: Kafka's chunk read limit (LazyDownConversionRecords.MAX_READ_SIZE), also the stub piece size.
MAX_READ_SIZE = 128 * 1024
#: Committed size when nothing converts but a complete batch exists (LOG_OVERHEAD).
MIN_OVERFLOW_MESSAGE_LENGTH = LOG_OVERHEAD
#: The largest entry converted unless `max_entry_size` says otherwise (RecordTooLargeError
#: above it): as large as the default decompression cap.
DEFAULT_MAX_ENTRY_SIZE = 256 * 1024 * 1024
_INT32_MAX = 2**31 - 1
# The entry header (spec record-formats.md): int64 offset, int32 size (bytes after it), then
# v0/v1: uint32 CRC-32 of the bytes from the magic (16) on; v2: int32 partition leader epoch,
# int8 magic (16), uint32 CRC-32C of the bytes from the attributes (21) on.  The smallest size
# field any entry may declare is V0_RECORD_OVERHEAD.
_HEADER = struct.Struct(">qiibI")      # through the v2 CRC: 21 bytes


def overflow_stub(remaining: int) -> bytes:
    """The bytes Kafka writes to pad a partition with `remaining` bytes still owed (§3.4).

    One stub: int64 -1, int32 max(R + 1, 61), zeros, in a piece of max(12, min(R + 1, 128 KiB))
    bytes, of which min(piece, R) are written; the caller builds a new stub for what is still
    owed after that (so padding above 128 KiB is a sequence of stubs)."""
    if remaining <= 0:
        return b""
    piece = max(MIN_OVERFLOW_MESSAGE_LENGTH, min(remaining + 1, MAX_READ_SIZE))
    declared = min(max(remaining + 1, V2_HEADER_SIZE), _INT32_MAX)
    stub = bytearray(piece)
    struct.pack_into(">qi", stub, 0, -1, declared)
    return bytes(stub[: min(piece, remaining)])


def _name_of(file: Any, fd: int) -> str:
    """What an error calls an open file: its name, or where that is its descriptor (os.fdopen)
    the path the descriptor has (Linux), else "<fd N>"."""
    name = getattr(file, "name", None)
    if isinstance(name, (str, bytes, os.PathLike)):
        return os.fsdecode(name)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"<fd {fd}>"


class _BufferSource:
    """A record set in memory or mapped: windows are zero-copy slices.  For a FileRecords
    mapping (`records`), the pages of converted chunks are handed back to the page cache,
    so the resident set stays about one chunk however large the slice (a cut of the file by
    another process is noticed where the bytes are read: ChunkReader and check_read)."""

    def __init__(self, view: memoryview, file_backed: bool = False):
        self.view = view
        self.size = view.nbytes
        self.file_backed = file_backed

    def window(self, position: int, size: int) -> memoryview:
        return self.view[position : position + size]

    def whole(self, position: int) -> memoryview:
        return self.view[position:]


class _FileSource:
    """A byte range of a file, read with pread into one reused buffer (never mapped whole)."""

    def __init__(self, file: Any, start: int, end: int):
        self.file = file
        self.fd = file.fileno()
        self.start = start
        self.size = end - start
        self.buffer = bytearray()

    def window(self, position: int, size: int) -> memoryview:
        """Up to `size` bytes at `position`, in the reused buffer (valid until the next call)."""
        size = max(0, min(size, self.size - position))
        if len(self.buffer) < size:
            self.buffer = bytearray(size)
        return self._read(memoryview(self.buffer)[:size], position)

    def entry(self, position: int, size: int) -> memoryview:
        """An entry larger than a chunk, in a buffer of its own that goes with the view (the
        reused buffer stays chunk-sized)."""
        return self._read(memoryview(bytearray(max(0, min(size, self.size - position)))), position)

    def _read(self, view: memoryview, position: int) -> memoryview:
        done = 0
        while done < view.nbytes:
            if hasattr(os, "preadv"):
                n = os.preadv(self.fd, [view[done:]], self.start + position + done)
            else:                                   # Windows: no positional read into a buffer
                self.file.seek(self.start + position + done)
                n = self.file.readinto(view[done:])
            if not n:
                # the file ends before the size it had when the conversion began: another
                # process truncated it (a live segment); the committed size cannot be met
                size = os.fstat(self.fd).st_size
                path = _name_of(self.file, self.fd)
                raise FileTruncatedError(
                    f"{path}: the file shrank to {size} bytes (from {self.start + self.size}) "
                    f"while being converted", path=path, size=size,
                    position=self.start + position + done)
            done += n
        return view[:done]

    def whole(self, position: int) -> None:
        return None


def _open_source(records: Any) -> _BufferSource | _FileSource:
    if hasattr(records, "fileno") and hasattr(records, "readinto"):
        start = records.tell()
        end = os.fstat(records.fileno()).st_size
        return _FileSource(records, start, end)
    # A FileRecords slice is a read-only shared mapping of a file: its pages may be dropped.
    return _BufferSource(records_buffer(records), isinstance(records, FileRecords))


class _Chunks:
    """Cuts the source into Kafka's chunks and converts them, resuming where the last ended.

    An entry larger than `big` bytes (the chunk size, at least MAX_READ_SIZE) is checked before
    it is read whole or converted: its size against `max_entry_size`, then its CRC in
    MAX_READ_SIZE pieces, so a header claiming 2 GiB costs no memory.  Every source does the
    same, so a file, a mapping and bytes of the same data give the same result."""

    def __init__(self, source: _BufferSource | _FileSource, to_magic: int, first_offset: int,
                 chunk_size: int, max_entry_size: int, zstd_codec: int = -1, again: bool = True,
                 crc_checked: bool = False):
        self.source = source
        self.converter = DownConverter(to_magic, first_offset)
        self.converter.stop_before_unsupported = True     # send what precedes a zstd batch
        self.converter.zstd_codec = zstd_codec
        self.again = again                                # keep a chunk-sized output buffer
        self.big = max(chunk_size, MAX_READ_SIZE)
        self.max_entry_size = max_entry_size
        self.crc_checked = crc_checked
        self.reader = None
        if isinstance(source, _BufferSource):
            self.reader = ChunkReader(source.view, self.converter, source.file_backed)

    def step(self, position: int, max_bytes: int) -> tuple[int, Any, int, int, int]:
        """Convert one chunk at `position`: at least one whole entry, then more while the total
        stays within `max_bytes`.  Returns (bytes consumed, output, temp bytes, records, ns);
        0 bytes consumed when no complete entry is left."""
        started = monotonic_ns()
        try:
            big = self._check_big_entry(position)
        except KafkaCodecError as error:
            if isinstance(self.source, _BufferSource):    # zeros read past a cut of a mapping
                check_read(self.source.view, self.source.size, error.position, error.offset,
                           error)
            raise
        if self.reader is not None:
            self.reader.position = position
            done = self.reader.step(max_bytes, self.again)   # checks a cut itself (check_read)
            if done is None:
                return 0, None, 0, 0, 0
            return (self.reader.position - position, *done)
        source = self.source
        assert isinstance(source, _FileSource)       # a buffer source has a ChunkReader
        left = source.size - position
        if left < LOG_OVERHEAD:
            return 0, None, 0, 0, 0
        if big:
            consumed = self.converter.convert(source.entry(position, big), -1, 1, position)
        else:
            # a file: read only what may be taken
            data = source.window(position, max(max_bytes, V2_HEADER_SIZE))
            consumed = self.converter.convert(data, max_bytes, -1, position)
            head = entry_head(data) if consumed == 0 and data.nbytes < left else None
            if head is not None and head[1] <= left:
                # The first entry is larger than the window (and at most `big`): read it whole.
                consumed = self.converter.convert(source.window(position, head[1]), -1, 1, position)
        output, temp, converted = self.converter.take(self.again)
        return consumed, output, temp, converted, monotonic_ns() - started

    def _check_big_entry(self, position: int) -> int:
        """The size of the complete entry at `position` when it is larger than `big` and
        passes the checks (RecordTooLargeError, InvalidCrcError otherwise); 0 for any other
        entry, left to the converter (a partial one ends the data, a malformed one raises)."""
        source = self.source
        left = source.size - position
        if left < _HEADER.size:
            return 0
        offset, declared, _, magic, stored = _HEADER.unpack(source.window(position, _HEADER.size))
        entry: int = LOG_OVERHEAD + declared
        if declared < V0_RECORD_OVERHEAD or not 0 <= magic <= 2 or entry <= self.big or entry > left:
            return 0
        if entry > self.max_entry_size:
            raise RecordTooLargeError(
                f"entry of {entry} bytes is larger than max_entry_size ({self.max_entry_size} bytes)",
                position=position, offset=offset)
        if self.crc_checked:
            return entry
        crc, start, kind = ((crc32c, V2_ATTRIBUTES_OFFSET, "CRC-32C") if magic == 2
                            else (crc32, MAGIC_OFFSET, "CRC-32"))
        computed = 0
        done = start
        while done < entry:
            piece = source.window(position + done, min(MAX_READ_SIZE, entry - done))
            if not piece.nbytes:
                return 0                # the file shrank meanwhile: a partial entry now
            computed = crc(piece, computed)
            done += piece.nbytes
        if computed != stored:
            raise InvalidCrcError(f"{kind} mismatch in magic {magic} batch", stored=stored,
                                  computed=computed, position=position, offset=offset)
        return entry


class LazyDownConvertRecords:
    """Records converted to `to_magic` lazily, in chunks of at most `chunk_size` input bytes.

    `records`: a MemoryRecords or FileRecords (slice), any contiguous buffer (bytes,
    memoryview, mmap), or a binary file opened for reading (read from its current position to
    its end, one chunk at a time).  A FileRecords slice is read where the current chunk lies
    and its pages are handed back after each chunk.  Chunks are ConvertedRecords whose
    `records` is a MemoryRecords.  `enabled=False` is Kafka's
    `message.downconversion.enable=false`: UnsupportedVersionError if any complete batch is
    newer than `to_magic`, else the data passes through untouched.

    An entry larger than the chunk (and than MAX_READ_SIZE) is converted on its own once it is
    known to be genuine: RecordTooLargeError above `max_entry_size` (default
    DEFAULT_MAX_ENTRY_SIZE), InvalidCrcError when its checksum, computed in pieces, does not
    match (not computed again with `crc_checked=True`: the caller checked every entry's when
    the data arrived, as the gateway does once per upstream answer).  Smaller entries are
    converted without a CRC check.

    Beyond Kafka:
    - batches sharing a chunk with a zstd batch are converted and sent; the zstd batch ends
      the data (padding), so the consumer gets UNSUPPORTED_COMPRESSION_TYPE only when it
      fetches from it; `recompress` ("none", "gzip", "snappy", "lz4", a Compression or its
      id) rebuilds zstd batches with that codec instead (every record kept; Kafka refuses them
      with UNSUPPORTED_COMPRESSION_TYPE);
    - `pool` (a SimpleMemoryPool) bounds the memory of every conversion sharing it: the first
      chunk is kept in a block of the pool from construction until it is written (when the
      pool refuses, `refused` is True, nothing is committed and `size_in_bytes` is 0: try again
      when memory returns), each later chunk is a block from the moment it is converted (the
      pool takes the converter's buffer: `SimpleMemoryPool.try_adopt`, no copy) and the block
      goes back as soon as it is out; when the pool refuses a later chunk, the
      partition's data ends there (overflow stubs fill what was committed; the client fetches
      the rest).  `close()` gives back any block still held (a client that went away).
    - `max_size`: commit at most this many bytes (at least the first converted chunk), less
      the bytes that convert to nothing before the first chunk (records a rebuilt v2 batch
      drops below `first_offset`, batches entirely below it), where Kafka commits the source's
      size and pads those bytes with overflow stubs (a fetch from the middle of a 1 MiB batch
      got ~0.9 MiB of padding, and the client asked again).  A source larger than `max_size`
      fills them with the records that follow instead.
    Not for concurrent use: a write_to(), or a step of an iteration, while another runs (in
    another thread, or from a callback of the running one: `dest.write`) raises
    ConcurrentUseError and changes nothing.
    """

    def __init__(self, records: Any, to_magic: int, first_offset: int = 0,
                 chunk_size: int = MAX_READ_SIZE, enabled: bool = True,
                 max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE, *, pool: Any = None,
                 recompress: Compression | int | str | None = None, crc_checked: bool = False,
                 max_size: int | None = None):
        if chunk_size < 0:
            raise ValueError(f"chunk_size must be >= 0, got {chunk_size}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        if max_entry_size < LOG_OVERHEAD + V0_RECORD_OVERHEAD:
            raise ValueError(f"max_entry_size must be at least {LOG_OVERHEAD + V0_RECORD_OVERHEAD}, "
                             f"got {max_entry_size}")
        self._in_use = InUse("LazyDownConvertRecords")
        self.to_magic = to_magic
        self.first_offset = first_offset
        self.chunk_size = chunk_size
        self.enabled = enabled
        self.max_entry_size = max_entry_size
        self.pool = pool
        self.zstd_codec = recompress_codec_id(recompress)
        self.crc_checked = crc_checked
        self.refused = False            # the pool refused the first chunk: nothing committed
        self.pool_refusals = 0          # chunks the pool refused (the data ended there)
        self._block: memoryview | None = None             # the first chunk, in the pool
        self._source = _open_source(records)
        committed = self._source.size if max_size is None else min(self._source.size, max_size)
        chunks = self._new_chunks()                       # validates to_magic
        self._first: ConvertedRecords | None = None
        self._first_end = 0
        self._send: _Send | None = None
        self.converts = True
        if not enabled:
            newer = self._first_newer_entry()
            if newer is not None:
                raise UnsupportedVersionError(
                    f"down-conversion to magic {to_magic} is disabled and the batch at byte "
                    f"{newer} needs it")
            self.converts = False
            self.size_in_bytes = committed
            return
        # S_pre: convert one source batch at a time until one yields something (§3.1).
        position = 0
        saw_batch = False
        first = None
        while True:
            consumed, output, temp, converted, elapsed = chunks.step(position, 0)
            if consumed == 0:
                break
            saw_batch = True
            position += consumed
            if len(output):
                first = output
                stats = RecordConversionStats(temp, converted, elapsed)
                break
        self._first_end = position
        if first is None:
            self.size_in_bytes = MIN_OVERFLOW_MESSAGE_LENGTH if saw_batch else 0
        else:
            if max_size is not None:        # the bytes that convert to nothing are not owed
                committed = min(committed, self._source.size - max(0, position - len(first)))
            self.size_in_bytes = max(committed, len(first))
            if pool is None:
                self._first = ConvertedRecords(MemoryRecords(first), stats)
            elif len(first) > pool.size:
                raise RecordTooLargeError(
                    f"the first batch converts to {len(first)} bytes, more than the conversion "
                    f"pool holds ({pool.size} bytes)", position=0, offset=first_offset)
            else:
                self._block = _adopt(pool, first)
                self._first_stats = stats
                if self._block is None:
                    self.refused = True
                    self.size_in_bytes = 0

    def _new_chunks(self) -> _Chunks:
        return _Chunks(self._source, self.to_magic, self.first_offset, self.chunk_size,
                       self.max_entry_size, self.zstd_codec, again=self.pool is None,
                       crc_checked=self.crc_checked)

    def _pooled_chunks(self) -> Iterator[tuple[memoryview, RecordConversionStats]]:
        """The chunks of the send in pool blocks: the first one kept since construction, then
        each converted chunk's own buffer, taken over by the pool; ends early when the pool
        refuses."""
        if self._block is not None:
            first, self._block = self._block, None
            yield first, self._first_stats
        chunks = self._new_chunks()
        position = self._first_end
        while True:
            consumed, output, temp, converted, elapsed = chunks.step(position, self.chunk_size)
            if consumed == 0:
                return
            position += consumed
            if len(output):
                block = _adopt(self.pool, output)
                output = None                             # refused: freed here
                if block is None:
                    self.pool_refusals += 1
                    return
                yield block, RecordConversionStats(temp, converted, elapsed)

    def close(self) -> None:
        """Give back the pool blocks still held and stop converting (idempotent)."""
        if self._send is not None:
            self._send.close()
        if self._block is not None:
            self.pool.release(self._block)
            self._block = None

    def _first_newer_entry(self) -> int | None:
        """The position of the first complete entry newer than `to_magic`, from the entry
        headers only (an entry larger than the window is skipped, not read)."""
        position = 0
        source = self._source
        while True:
            data = source.whole(position)
            if data is None:
                data = source.window(position, max(self.chunk_size, MAX_READ_SIZE))
            walked, newer = first_entry_above(data, self.to_magic, position)
            if newer:
                return position + walked
            if walked == 0:
                # None complete in the window; first_entry_above checked the size field and
                # the magic of the next entry (it raises on bad ones).
                left = source.size - position
                head = entry_head(data)
                if data.nbytes >= left or data.nbytes < MAGIC_OFFSET + 1 or head is None:
                    return None
                if head[1] > left:
                    return None                 # a partial trailing entry
                if data[MAGIC_OFFSET] > self.to_magic:
                    return position
                walked = head[1]
            position += walked

    # --- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[ConvertedRecords]:
        """Yield the converted chunks (ConvertedRecords), the committed first chunk first; each
        call starts over.  Pass-through data is yielded in `chunk_size` pieces, untouched."""
        return self._chunks_from_start(self._in_use)

    def _chunks_from_start(self, in_use: Any) -> Iterator[ConvertedRecords]:
        """The chunks; each step inside `in_use` (the guard, or a null one for the send,
        whose write_to() holds the guard already)."""
        if not self.converts:
            step = max(self.chunk_size, 1)
            for position in range(0, self._source.size, step):
                with in_use:
                    piece = bytes(self._source.window(position, step))
                yield ConvertedRecords(MemoryRecords(piece), RecordConversionStats())
            return
        if self._block is not None:                       # pool mode: a copy of the block
            yield ConvertedRecords(MemoryRecords(bytes(self._block)), self._first_stats)
        elif self._first is None:
            return
        else:
            yield self._first
        chunks = self._new_chunks()
        position = self._first_end
        while True:
            with in_use:
                consumed, output, temp, converted, elapsed = chunks.step(position,
                                                                         self.chunk_size)
            if consumed == 0:
                return
            position += consumed
            if len(output):
                yield ConvertedRecords(MemoryRecords(output),
                                       RecordConversionStats(temp, converted, elapsed))

    # --- the send ----------------------------------------------------------------------------
    def write_to(self, dest: Any) -> int:
        """Write the next bytes of this partition's data to `dest`; returns the bytes written.

        `dest`: a socket (blocking or not), a file object, or anything with `write`.  Writes
        until everything committed (`size_in_bytes`) is out or `dest` would block; call again
        to resume.  Returns 0 once complete."""
        with self._in_use:
            if self._send is None:
                self._send = _Send(self)
            return self._send.write_to(dest)

    @property
    def completed(self) -> bool:
        """True once write_to() has delivered all `size_in_bytes` bytes."""
        return self.size_in_bytes == 0 or (self._send is not None and self._send.remaining == 0)

    @property
    def bytes_written(self) -> int:
        return 0 if self._send is None else self.size_in_bytes - self._send.remaining

    @property
    def stats(self) -> RecordConversionStats:
        """Stats of the chunks pulled by write_to() so far (what the broker records)."""
        return RecordConversionStats() if self._send is None else self._send.stats

    def __len__(self) -> int:
        return self.size_in_bytes

    def __repr__(self) -> str:
        return (f"LazyDownConvertRecords(to_magic={self.to_magic}, size_in_bytes={self.size_in_bytes}, "
                f"first_offset={self.first_offset}, chunk_size={self.chunk_size})")


class _Send:
    """LazyDownConversionRecordsSend: chunks then overflow stubs, exactly `size` bytes."""

    def __init__(self, records: LazyDownConvertRecords):
        # No reference to `records` beyond the chunk iterator, dropped at close(): the two
        # would form a reference cycle, and the collector clearing one that holds a
        # MemoryRecords over a memoryview crashed the process (tests/test_downconvert.py).
        self.converts = records.converts
        self.remaining = records.size_in_bytes
        self.stats = RecordConversionStats()
        self.pool = records.pool if records.converts else None
        self.chunks: Iterator[Any] | None = (records._pooled_chunks() if self.pool is not None
                                             else records._chunks_from_start(contextlib.nullcontext()))
        self.block: memoryview | None = None      # the pool block being written
        self.current = _EMPTY

    def next_piece(self) -> memoryview:
        data: Any = None
        if self.chunks is not None:
            try:
                chunk = next(self.chunks)
            except StopIteration:
                self.chunks = None
            except UnsupportedCompressionError:
                # zstd after the first chunk: pad; the consumer gets the error on its next fetch.
                self.chunks = None
            else:
                if self.pool is not None:
                    self.block, stats = chunk
                    self.stats.add(stats)
                    return self.block[: min(self.block.nbytes, self.remaining)]
                if self.converts:
                    self.stats.add(chunk.stats)
                data = chunk.records
        if data is None:
            self.chunks = None
            data = overflow_stub(self.remaining)
        view = memoryview(data).cast("B")
        return view[: min(view.nbytes, self.remaining)]

    def release_block(self) -> None:
        self.current = _EMPTY                     # no view of the block may outlive it
        if self.block is not None and self.pool is not None:
            block, self.block = self.block, None
            try:
                self.pool.release(block)
            except MemoryPoolError:
                # a slice is still referenced (a traceback being handled holds the frame that
                # was writing it): the pool takes the block back when the last view goes
                pass

    def close(self) -> None:
        self.release_block()
        self.chunks = None

    def write_to(self, dest: Any) -> int:
        written = 0
        while self.remaining > 0:
            if not self.current.nbytes:
                self.release_block()
                self.current = self.next_piece()
            n = _write_some(dest, self.current)
            if n <= 0:
                break
            self.current = self.current[n:]
            self.remaining -= n
            written += n
        if self.remaining == 0:
            self.close()
        return written


_EMPTY = memoryview(b"")
def _adopt(pool: Any, output: Any) -> memoryview | None:
    """The converter's output (a WriteBuffer) as a pool block, no copy; None when the pool
    refuses (or it is above what the pool hands out at once)."""
    if len(output) > pool.max_single_allocation:
        return None
    block: memoryview | None = pool.try_adopt(output)
    return block


def _write_some(dest: Any, data: memoryview) -> int:
    """Bytes accepted by `dest` now (0 when it would block)."""
    if isinstance(dest, socket.socket):
        try:
            return dest.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return 0
    try:
        n = dest.write(data)
    except BlockingIOError as error:              # buffered non-blocking file objects
        return error.characters_written
    if n is None:
        # io raw files and SocketIO say "would block" with None; other writers take it all.
        return 0 if isinstance(dest, io.RawIOBase) else data.nbytes
    return int(n)
