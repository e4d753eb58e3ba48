"""A small reader of Kafka's message schemas (the `common/message/*.json` format Kafka generates
its protocol and record classes from), for the records of Kafka's internal topics.

A schema is a tuple of `Field`s.  `read(data, fields, version, flexible)` decodes one message
into a dict in the field order, named and shaped as Kafka's generated JSON converters write
them: camelCase names, int64 as numbers, bytes as standard base64, uuids as Kafka's
`Uuid.toString()` (URL-safe base64, no padding), a field outside `version` left out, a tagged
field only when it differs from its default.  Rules (Kafka's MessageDataGenerator):
- fixed-size integers are big-endian; `uuid` is 16 bytes;
- non-flexible versions: string = int16 length (-1 null), bytes = int32 length (-1 null),
  array = int32 count (-1 null);
- flexible versions: compact forms (unsigned varint of length + 1, 0 for null), and every
  struct ends with its tagged fields: a count, then (tag, size, value) triples, unknown tags
  skipped.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

from kafkacodec.errors import CorruptRecordError

__all__ = ["Field", "read", "SchemaError"]

_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H", "uint32": ">I",
          "float64": ">d", "bool": ">?"}


class SchemaError(CorruptRecordError):
    """The bytes do not hold a message of the schema (too short, a negative length...)."""


@dataclass(frozen=True)
class Field:
    name: str                          # Kafka's name; JSON uses it with a lower-case first letter
    type: str                          # int8..int64, uint32, float64, bool, uuid, string, bytes,
    #                                    "[]<type>", or "struct" (with `fields`)
    versions: str = "0+"               # "0+", "1-3", "2", "none"
    nullable: str = "none"             # the versions in which it may be null
    tag: int | None = None             # a tagged field (in the versions of `versions`)
    default: Any = None                # a tagged field's default (it is written only when different)
    fields: tuple[Field, ...] = ()     # a struct's or an array of structs' fields

    @property
    def json_name(self) -> str:
        return self.name[:1].lower() + self.name[1:]


def in_versions(spec: str, version: int) -> bool:
    if spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


class _Cursor:
    def __init__(self, data: bytes | memoryview):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError(f"needs {n} bytes, {len(self.data) - self.pos} left",
                              position=self.pos)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def fixed(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise SchemaError("a varint longer than 5 bytes", position=self.pos)

    def length(self, flexible: bool, wide: bool) -> int:
        """A length or count: -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return int(self.fixed(">i" if wide else ">h"))


def _value(cur: _Cursor, field: Field, type_: str, version: int, flexible: bool) -> Any:
    if type_ in _FIXED:
        return cur.fixed(_FIXED[type_])
    if type_ == "uuid":
        return base64.urlsafe_b64encode(bytes(cur.take(16))).decode().rstrip("=")
    nullable = in_versions(field.nullable, version)
    if type_ in ("string", "bytes"):
        n = cur.length(flexible, wide=type_ == "bytes")
        if n < 0:
            if not nullable:
                raise SchemaError(f"{field.name}: null where the schema allows none", position=cur.pos)
            return None
        raw = bytes(cur.take(n))
        return raw.decode("utf-8", "replace") if type_ == "string" else base64.b64encode(raw).decode()
    if type_.startswith("[]"):
        n = cur.length(flexible, wide=True)
        if n < 0:
            if not nullable:
                raise SchemaError(f"{field.name}: null array where the schema allows none", position=cur.pos)
            return None
        if n > len(cur.data) - cur.pos:        # every element takes a byte at least
            raise SchemaError(f"{field.name}: {n} elements cannot fit in {len(cur.data) - cur.pos} bytes",
                              position=cur.pos)
        return [_value(cur, field, type_[2:], version, flexible) for _ in range(n)]
    if type_ == "struct":
        return _struct(cur, field.fields, version, flexible)
    raise SchemaError(f"{field.name}: unknown type {type_}")


def _field(cur: _Cursor, f: Field, version: int, flexible: bool) -> Any:
    if f.type == "struct" and in_versions(f.nullable, version):
        present = cur.fixed(">b")                      # a nullable struct: int8 -1 null, 1 present
        return None if present < 0 else _struct(cur, f.fields, version, flexible)
    return _value(cur, f, f.type, version, flexible)


def _struct(cur: _Cursor, fields: tuple[Field, ...], version: int, flexible: bool) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in fields:
        if f.tag is None and in_versions(f.versions, version):
            values[f.name] = _field(cur, f, version, flexible)
    if flexible:
        tagged = {f.tag: f for f in fields if f.tag is not None and in_versions(f.versions, version)}
        for _ in range(cur.uvarint()):
            tag, size = cur.uvarint(), cur.uvarint()
            body = _Cursor(cur.take(size))
            known = tagged.get(tag)
            if known is not None:
                values[known.name] = _field(body, known, version, flexible)
    out: dict[str, Any] = {}
    for f in fields:
        if f.name not in values:
            continue
        if f.tag is not None and values[f.name] == f.default:
            continue
        out[f.json_name] = values[f.name]
    return out


def read(data: bytes | memoryview, fields: tuple[Field, ...], version: int, flexible: bool,
         start: int = 0) -> dict[str, Any]:
    """One message of `fields` at `version` from data[start:] (SchemaError if it does not fit)."""
    cur = _Cursor(data)
    cur.pos = start
    return _struct(cur, fields, version, flexible)
