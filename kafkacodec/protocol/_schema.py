"""Versioned Kafka messages described by schemas, and one interpreter that reads and writes them
(spec protocol.md §1-2).

A schema lists a message's fields as Kafka's message definitions do: a name, a type, the
versions that carry it, the versions where it may be null, and, for flexible versions, an
optional tag.  `Message.decode` turns the bytes of one version into a dict (snake_case names;
a field absent from that version holds its default), `Message.encode` does the reverse.  Used
for the control-plane messages of `kafkacodec serve` (the Fetch path has its own Cython codec,
protocol/_fetch_server.pyx).

Hostile input: every read is bounds-checked and an array count is checked against the bytes
left before anything is allocated; any malformation raises CorruptRecordError naming the byte
`position` (relative to the buffer given).  Encoding checks what a field can hold (ValueError).
"""

from __future__ import annotations

import struct
import uuid as _uuid
from collections.abc import Sequence
from typing import Any

from kafkacodec.errors import CorruptRecordError, RecordTooLargeError

__all__ = ["Field", "Message", "Reader", "f", "array", "struct_field", "versions",
           "INT8", "INT16", "INT32", "INT64", "BOOL", "UUID", "STRING", "BYTES", "RECORDS"]

INT8, INT16, INT32, INT64, BOOL, UUID, STRING, BYTES, RECORDS, STRUCT = (
    "int8", "int16", "int32", "int64", "bool", "uuid", "string", "bytes", "records", "struct")
_FIXED = {INT8: struct.Struct(">b"), INT16: struct.Struct(">h"), INT32: struct.Struct(">i"),
          INT64: struct.Struct(">q"), BOOL: struct.Struct(">?")}
_SMALLEST = {INT8: 1, INT16: 2, INT32: 4, INT64: 8, BOOL: 1, UUID: 16, STRING: 1, BYTES: 1,
             RECORDS: 1, STRUCT: 1}
_ALWAYS = (0, 1 << 15)
_NEVER = (1, 0)
ZERO_UUID = _uuid.UUID(int=0)


def versions(text: str | None) -> tuple[int, int]:
    """"3+" -> (3, max), "1-4" -> (1, 4), "2" -> (2, 2), None / "none" -> an empty range."""
    if text is None or text == "none":
        return _NEVER
    if text.endswith("+"):
        return int(text[:-1]), _ALWAYS[1]
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


class Field:
    """One field of a schema: `kind` is a type name, `item` the element type of an array
    (a type name or a tuple of Fields for an array of structs), `fields` a nested struct's."""

    __slots__ = ("name", "kind", "valid", "nullable", "tag", "default", "item", "fields")

    def __init__(self, name: str, kind: str, valid: str = "0+", *, nullable: str | None = None,
                 tag: int | None = None, default: Any = None, item: Any = None,
                 fields: Sequence[Field] = ()):
        self.name = name
        self.kind = kind
        self.valid = versions(valid)
        self.nullable = versions(nullable)
        self.tag = tag
        self.item = item
        self.fields = tuple(fields)
        self.default = default

    def present(self, version: int) -> bool:
        return self.valid[0] <= version <= self.valid[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable[0] <= version <= self.nullable[1]

    def default_value(self, version: int) -> Any:
        if self.default is not None:
            return self.default
        if self.kind == "array":
            return None if self.nullable_in(version) else []
        if self.kind in (STRING, BYTES, RECORDS):
            # absent from this version: null where some version allows it (Kafka's "null" default)
            if self.nullable_in(version) or (not self.present(version) and self.nullable != _NEVER):
                return None
            return b"" if self.kind != STRING else ""
        if self.kind == UUID:
            return ZERO_UUID
        if self.kind == BOOL:
            return False
        if self.kind == STRUCT:
            return None
        return 0


def f(name: str, kind: str, valid: str = "0+", **options: Any) -> Field:
    return Field(name, kind, valid, **options)


def array(name: str, item: str | Sequence[Field], valid: str = "0+", **options: Any) -> Field:
    """An array of a primitive type (`item` a type name) or of structs (a list of Fields)."""
    return Field(name, "array", valid, item=item if isinstance(item, str) else tuple(item), **options)


def struct_field(name: str, fields: Sequence[Field], valid: str = "0+", **options: Any) -> Field:
    """A single nested struct (Kafka uses them as tagged fields)."""
    return Field(name, STRUCT, valid, fields=fields, **options)


class Reader:
    """A bounds-checked cursor over a buffer: every read past `end` raises CorruptRecordError."""

    __slots__ = ("data", "pos", "end", "entries_left")

    def __init__(self, data: Any, pos: int = 0, end: int | None = None, entries: int = 1 << 62):
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.entries_left = entries            # array elements this message may still hold

    def fail(self, what: str, at: int | None = None) -> CorruptRecordError:
        return CorruptRecordError(f"malformed {what}", position=self.pos if at is None else at)

    def take(self, n: int, what: str) -> Any:
        if n < 0 or n > self.end - self.pos:
            raise CorruptRecordError(f"{what}: {n} bytes needed, {self.end - self.pos} left",
                                     position=self.pos)
        start = self.pos
        self.pos += n
        return self.data[start:self.pos]

    def fixed(self, kind: str, what: str) -> Any:
        codec = _FIXED[kind]
        if codec.size > self.end - self.pos:
            raise CorruptRecordError(f"{what}: {codec.size} bytes needed, {self.end - self.pos} left",
                                     position=self.pos)
        value = codec.unpack_from(self.data, self.pos)[0]
        self.pos += codec.size
        return value

    def uvarint(self, what: str) -> int:
        value: int = 0
        shift = 0
        start = self.pos
        while True:
            if self.pos >= self.end:
                raise CorruptRecordError(f"{what}: truncated varint", position=start)
            byte: int = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:                       # Kafka's unsigned varints are 32-bit
                raise CorruptRecordError(f"{what}: varint longer than 5 bytes", position=start)

    def length(self, compact: bool, width: int, nullable: bool, what: str) -> int:
        """A string/bytes/array length: -1 for null (refused where not nullable)."""
        start = self.pos
        if compact:
            n = self.uvarint(what) - 1
        else:
            n = self.fixed(INT16 if width == 2 else INT32, what)
        if n < -1 or (n == -1 and not nullable):
            raise CorruptRecordError(f"{what}: invalid length {n}", position=start)
        return int(n)

    def string(self, compact: bool, nullable: bool, what: str) -> str | None:
        n = self.length(compact, 2, nullable, what)
        if n < 0:
            return None
        start = self.pos
        raw = self.take(n, what)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{what}: not UTF-8", position=start) from None

    def skip_tags(self) -> None:
        for _ in range(self.uvarint("tagged fields count")):
            self.uvarint("tag")
            self.take(self.uvarint("tagged field size"), "tagged field")


class Message:
    """One message type (a request or a response body) across its versions."""

    def __init__(self, name: str, api_key: int, valid: str, flexible: str, fields: Sequence[Field]):
        self.name = name
        self.api_key = api_key
        self.valid = versions(valid)
        self.flexible = versions(flexible)
        self.fields = tuple(fields)

    @property
    def min_version(self) -> int:
        return self.valid[0]

    @property
    def max_version(self) -> int:
        return self.valid[1]

    def is_flexible(self, version: int) -> bool:
        return self.flexible[0] <= version <= self.flexible[1]

    # --- decoding ------------------------------------------------------------------------------
    def decode(self, data: Any, version: int, pos: int = 0, end: int | None = None, *,
               strict: bool = True, max_entries: int = 1 << 62) -> dict[str, Any]:
        """The message at data[pos:end] as a dict; CorruptRecordError when malformed or, if
        `strict`, when bytes are left over (Kafka's broker ignores them: librdkafka sends a few
        after some requests).  RecordTooLargeError, before they are read, when its arrays
        hold more than `max_entries` elements in all (a cost bound: a server's work and memory
        grow with them)."""
        reader = Reader(data, pos, end, max_entries)
        value = self._read_struct(reader, self.fields, version, self.is_flexible(version))
        if strict and reader.pos != reader.end:
            raise CorruptRecordError(f"{self.name} v{version}: {reader.end - reader.pos} bytes left "
                                     "after the last field", position=reader.pos)
        return value

    def _read_struct(self, r: Reader, fields: Sequence[Field], version: int,
                     flexible: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tagged: dict[int, Field] = {}
        for field in fields:
            if not field.present(version):
                out[field.name] = field.default_value(version)
            elif flexible and field.tag is not None:
                tagged[field.tag] = field
                out[field.name] = field.default_value(version)
            else:
                out[field.name] = self._read_field(r, field, version, flexible)
        if flexible:
            for _ in range(r.uvarint("tagged fields count")):
                tag = r.uvarint("tag")
                size = r.uvarint("tagged field size")
                field_for_tag = tagged.get(tag)
                if field_for_tag is None:
                    r.take(size, "unknown tagged field")
                    continue
                sub = Reader(r.data, r.pos, r.pos + size, r.entries_left)
                if size > r.end - r.pos:
                    raise CorruptRecordError("tagged field longer than the message", position=r.pos)
                out[field_for_tag.name] = self._read_field(sub, field_for_tag, version, flexible)
                r.pos += size
                r.entries_left = sub.entries_left
        return out

    def _read_field(self, r: Reader, field: Field, version: int, flexible: bool) -> Any:
        kind = field.kind
        what = f"{self.name} v{version} field {field.name}"
        nullable = field.nullable_in(version)
        if kind == "array":
            n = r.length(flexible, 4, nullable, what)
            if n < 0:
                return None
            item = field.item
            smallest = _SMALLEST[item] if isinstance(item, str) else 1
            if n > (r.end - r.pos) // smallest:
                raise CorruptRecordError(f"{what}: {n} elements cannot fit in {r.end - r.pos} bytes",
                                         position=r.pos)
            r.entries_left -= n
            if r.entries_left < 0:
                raise RecordTooLargeError(f"{what}: {n} elements, more than the entries allowed "
                                          "in one message", position=r.pos)
            if isinstance(item, str):
                return [self._read_value(r, item, False, flexible, what) for _ in range(n)]
            return [self._read_struct(r, item, version, flexible) for _ in range(n)]
        if kind == STRUCT:
            if nullable:
                if r.fixed(INT8, what) < 0:
                    return None
            return self._read_struct(r, field.fields, version, flexible)
        return self._read_value(r, kind, nullable, flexible, what)

    @staticmethod
    def _read_value(r: Reader, kind: str, nullable: bool, flexible: bool, what: str) -> Any:
        if kind in _FIXED:
            return r.fixed(kind, what)
        if kind == STRING:
            return r.string(flexible, nullable, what)
        if kind == UUID:
            return _uuid.UUID(bytes=bytes(r.take(16, what)))
        n = r.length(flexible, 4, nullable, what)                       # bytes, records
        return None if n < 0 else bytes(r.take(n, what))   # a copy: the request buffer goes back

    # --- encoding ------------------------------------------------------------------------------
    def encode(self, version: int, value: dict[str, Any], out: bytearray | None = None) -> bytearray:
        """Append the message to `out` (a new bytearray when None) and return it."""
        if out is None:
            out = bytearray()
        self._write_struct(out, self.fields, value, version, self.is_flexible(version))
        return out

    def _write_struct(self, out: bytearray, fields: Sequence[Field], value: dict[str, Any],
                      version: int, flexible: bool) -> None:
        tagged: list[tuple[int, bytes]] = []
        for field in fields:
            if not field.present(version):
                continue
            item = value.get(field.name, field.default_value(version))
            if flexible and field.tag is not None:
                if item is None or item == field.default_value(version) or item == []:
                    continue
                encoded = bytearray()
                self._write_field(encoded, field, item, version, flexible)
                tagged.append((field.tag, bytes(encoded)))
                continue
            self._write_field(out, field, item, version, flexible)
        if flexible:
            _put_uvarint(out, len(tagged))
            for tag, piece in sorted(tagged):
                _put_uvarint(out, tag)
                _put_uvarint(out, len(piece))
                out += piece

    def _write_field(self, out: bytearray, field: Field, item: Any, version: int,
                     flexible: bool) -> None:
        nullable = field.nullable_in(version)
        if item is None and not nullable and field.kind in ("array", STRING, BYTES, RECORDS):
            item = field.default_value(version)
            if item is None:
                raise ValueError(f"{self.name} v{version}: {field.name} cannot be null")
        if field.kind == "array":
            if item is None:
                _put_length(out, -1, flexible, True)
                return
            _put_length(out, len(item), flexible, True)
            for element in item:
                if isinstance(field.item, str):
                    _write_value(out, field.item, element, False, flexible)
                else:
                    self._write_struct(out, field.item, element, version, flexible)
            return
        if field.kind == STRUCT:
            if nullable:
                out += b"\xff" if item is None else b"\x01"
                if item is None:
                    return
            self._write_struct(out, field.fields, item or {}, version, flexible)
            return
        _write_value(out, field.kind, item, nullable, flexible)


def _put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_length(out: bytearray, n: int, compact: bool, wide: bool) -> None:
    if compact:
        _put_uvarint(out, n + 1)
    else:
        out += struct.pack(">i" if wide else ">h", n)


def _write_value(out: bytearray, kind: str, item: Any, nullable: bool, flexible: bool) -> None:
    codec = _FIXED.get(kind)
    if codec is not None:
        out += codec.pack(item)
        return
    if kind == UUID:
        out += (item if isinstance(item, _uuid.UUID) else _uuid.UUID(bytes=bytes(item))).bytes
        return
    if item is None:
        _put_length(out, -1, flexible, kind != STRING)
        return
    data: bytes = item.encode("utf-8") if isinstance(item, str) else bytes(item)
    if kind == STRING and not flexible and len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    _put_length(out, len(data), flexible, kind != STRING)
    out += data
