"""What every harness kind shares: the target record (`Target`), entry-point lookup (`api`),
checksums recomputed after a mutation (`fix_crcs`, `hostile`), and readers' outcomes.

The engine (mutation, campaigns in worker processes, replay, crash saving) is in
fuzz_targets.py; each harness kind is a module with a `TARGETS` table of `Target`s taking bytes.
"""

from __future__ import annotations

import hashlib
import importlib
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import kafkacodec
from kafkacodec.errors import KafkaCodecError

HANG_SECONDS = 10.0  # an input that takes longer than this is a finding (libFuzzer: -timeout)


class Missing(Exception):
    """The entry point a target needs is not in this build (yet)."""


@dataclass(frozen=True)
class Target:
    fn: Callable[[bytes], None]
    kind: str  # which seed corpus feeds it (fuzz/make_corpus.py)
    timeout: float = HANG_SECONDS  # an input running longer is a hang (at least --timeout)


def api(*paths: str) -> Any:
    """The first of the dotted names that exists, e.g. api("kafkacodec.MemoryRecords")."""
    for path in paths:
        module_name, _, attr = path.rpartition(".")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return obj
    raise Missing(" / ".join(paths))


def rng_of(data: bytes, salt: str = "") -> random.Random:
    """A generator seeded by the input, so a saved input replays the same scenario."""
    return random.Random(hashlib.sha1(salt.encode() + data).digest())


def split(data: bytes) -> tuple[int, bytes]:
    """First byte: a small parameter (version, codec, offset); the rest: the payload."""
    return (data[0], data[1:]) if data else (0, b"")


def touch_batch(batch: Any) -> None:
    for name in ("magic", "base_offset", "last_offset", "record_count", "compression",
                 "timestamp_type", "max_timestamp", "crc", "producer_id", "producer_epoch",
                 "base_sequence", "is_transactional", "is_control", "partition_leader_epoch",
                 "size_in_bytes"):
        getattr(batch, name, None)
    raw = getattr(batch, "raw", None)
    if raw is not None:
        bytes(raw[:16])
    if hasattr(batch, "is_valid"):
        batch.is_valid()


def touch_record(record: Any) -> None:
    for name in ("offset", "timestamp", "timestamp_type", "key", "value", "headers"):
        value = getattr(record, name, None)
        if isinstance(value, memoryview):
            bytes(value)
    headers = getattr(record, "headers", None)
    if headers:
        for item in headers:
            tuple(item)


# ---------------------------------------------------------------------------------------------
# Checksums: hostile inputs whose damage gets past the CRC check to the record parsers


def entry_spans(data: bytes | bytearray) -> list[tuple[int, int]]:
    """(start, end) of each complete entry as the in-memory reader frames them."""
    out, pos = [], 0
    while len(data) - pos >= 17:
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if size < 14 or pos + 12 + size > len(data):
            break
        out.append((pos, pos + 12 + size))
        pos += 12 + size
    return out


def fix_entry_crc(log: bytearray, start: int, end: int) -> None:
    magic = log[start + 16]
    if magic == 2 and end - start >= 21:
        struct.pack_into(">I", log, start + 17, _crc32c(log[start + 21:end]))
    elif magic in (0, 1):
        struct.pack_into(">I", log, start + 12, zlib.crc32(bytes(log[start + 16:end])))


def _crc32c(data: bytes | bytearray) -> int:
    from kafkacodec import _crc

    return _crc.crc32c(bytes(data))


def fix_crcs(data: bytes) -> bytes:
    """Recompute every entry's checksum so mutations reach the decoders behind the CRC check."""
    out = bytearray(data)
    for start, end in entry_spans(out):
        fix_entry_crc(out, start, end)
    return bytes(out)


def codec_of(entry: bytes) -> int:
    magic = entry[16]
    return (struct.unpack_from(">h", entry, 21)[0] if magic == 2 else entry[17]) & 7


def _plain_at(entry: bytes) -> tuple[int, int] | None:
    """Where the bytes the record parser reads start in an entry, and the codec (0: none)."""
    magic, codec = entry[16], codec_of(entry)
    if magic == 2:
        return (61, codec) if len(entry) >= 61 else None
    if magic not in (0, 1):
        return None
    # key length at 18 (magic 0) / 26 (magic 1); the value (length + bytes) after the key
    key_len_at = 18 if magic == 0 else 26
    if len(entry) < key_len_at + 4:
        return None
    (klen,) = struct.unpack_from(">i", entry, key_len_at)
    value_len_at = key_len_at + 4 + max(klen, 0)
    if len(entry) < value_len_at + 4:
        return None
    return value_len_at + 4, codec


def fix_inner_crcs(inner: bytearray) -> None:
    """The inner messages of a legacy wrapper (framed as next_inner_entry frames them)."""
    pos = 0
    while len(inner) - pos >= 17:
        (size,) = struct.unpack_from(">i", inner, pos + 8)
        if size < 14 or len(inner) - pos - 12 < size:
            return
        struct.pack_into(">I", inner, pos + 12, zlib.crc32(bytes(inner[pos + 16:pos + 12 + size])))
        pos += 12 + size


INTERESTING = [-1, 0, 1, 2, 3, 7, 0x7F, 0x80, 0xFF, -(2**31), 2**31 - 1, 2**63 - 1, -(2**63)]


def _zigzag(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _damage(buf: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(buf)) if buf else 0
        op = rng.randrange(6)
        if op == 0 and buf:
            buf[at] = rng.randrange(256)
        elif op == 1:
            buf[at:at + rng.randint(0, 3)] = _zigzag(rng.choice(INTERESTING + [rng.getrandbits(40)]))
        elif op == 2:
            width, fmt = rng.choice([(1, ">b"), (2, ">h"), (4, ">i"), (8, ">q")])
            value = rng.choice(INTERESTING)
            try:
                buf[at:at + width] = struct.pack(fmt, value)
            except struct.error:
                buf[at:at + width] = struct.pack(fmt, value & 0x7F)
        elif op == 3:
            buf[at:at] = rng.randbytes(rng.randint(1, 4))
        elif op == 4:
            del buf[at:at + rng.randint(1, 8)]
        elif op == 5 and buf:          # an inner message's magic
            buf[at] = rng.choice([0, 1, 2, 3, 0xFF])


def hostile(data: bytes, rng: random.Random, rounds: int = 2) -> bytes:
    """`data` damaged where the record parsers read (a v2 records section, a legacy message's
    body, a wrapper's inner message set: decompressed, damaged, inner checksums recomputed,
    recompressed) and in entry header fields, then every checksum recomputed: the damage
    reaches the readers' record rules instead of stopping at a CRC mismatch."""
    from kafkacodec._compression import compress, decompress

    log = bytearray(data)
    for _ in range(rng.randint(0, rounds)):
        spans = entry_spans(log)
        if not spans:
            break
        start, end = rng.choice(spans)
        entry = bytes(log[start:end])
        where = _plain_at(entry)
        if where is None or rng.random() < 0.3:       # a header field
            field, width = rng.choice([(0, 8), (8, 4), (16, 1), (17, 1), (18, 8), (21, 2),
                                       (23, 4), (27, 8), (35, 8), (43, 8), (51, 2), (53, 4),
                                       (57, 4)])
            if field + width <= len(entry):
                fmt = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}[width]
                value = rng.choice(INTERESTING)
                try:
                    struct.pack_into(fmt, log, start + field, value)
                except struct.error:
                    struct.pack_into(fmt, log, start + field, value & 0x7F)
            continue
        at, codec = where
        magic = entry[16]
        try:
            plain = bytearray(decompress(codec, magic, entry[at:]) if codec else entry[at:])
        except (KafkaCodecError, ValueError):
            continue
        _damage(plain, rng)
        if codec and magic < 2:
            fix_inner_crcs(plain)
        try:
            body = compress(codec, magic, bytes(plain)) if codec else bytes(plain)
        except (KafkaCodecError, ValueError):
            continue
        new = bytearray(entry[:at]) + body
        if magic < 2 and codec:
            struct.pack_into(">i", new, at - 4, len(body))
        struct.pack_into(">i", new, 8, len(new) - 12)
        log[start:end] = new
    if rng.random() < 0.2 and log:
        del log[len(log) - rng.randint(1, min(len(log), 40)):]     # a partial tail
    return fix_crcs(bytes(log))


def fetch_frame(records: bytes, correlation_id: int = 1, topic: bytes = b"t") -> bytes:
    """A FetchResponse v4 (response header v0) with one partition holding `records`, framed."""
    body = struct.pack(">ii", correlation_id, 0)                      # throttle_time_ms
    body += struct.pack(">ih", 1, len(topic)) + topic                 # one topic
    body += struct.pack(">iihqqi", 1, 0, 0, 100, 100, -1)             # one partition, no aborts
    body += struct.pack(">i", len(records)) + records
    return struct.pack(">i", len(body)) + body


def arrow_rows(batch: Any) -> list[dict[str, Any]]:
    """An Arrow record batch's rows, timestamps as integers (datetime ends at year 9999)."""
    import pyarrow as pa

    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    rows = batch.drop_columns(["timestamp"]).to_pylist()
    for row, stamp in zip(rows, stamps):
        row["timestamp"] = stamp
    return rows


# ---------------------------------------------------------------------------------------------
# Outcomes


def error_class(exc: BaseException) -> type:
    """The class an outcome is compared by; anything but a KafkaCodecError is a finding."""
    if isinstance(exc, KafkaCodecError):
        return type(exc)
    raise exc


def public_modules() -> list[Any]:
    """kafkacodec and every importable submodule that is not private (`_x`)."""
    import pkgutil

    out = [kafkacodec]
    for info in pkgutil.walk_packages(kafkacodec.__path__, "kafkacodec."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        try:
            out.append(importlib.import_module(info.name))
        except ImportError:          # an optional dependency (pyspark...) is not installed
            continue
    return out
