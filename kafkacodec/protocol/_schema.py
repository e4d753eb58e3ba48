"""Versioned Kafka messages described by schemas, and the one interpreter that reads and writes
them (spec protocol.md §1-2): the control-plane messages of serve, the consumer and the mirror
(protocol/messages.py), and the records of Kafka's internal topics that `kafkacodec dump`
decodes (cli/_internal_topics.py).  The hot Fetch and Produce paths have Cython codecs of
their own (protocol/_fetch*.pyx, _produce.pyx).

A schema lists a message's fields as Kafka's message definitions do: a name (snake_case of
Kafka's), a type, the versions that carry it, the versions where it may be null, and, for
flexible versions, an optional tag.  `Message.decode` reads one version into one of three forms:
- `DICT` (the default): a dict of snake_case names; a field absent from the version holds its
  default, a tagged field its default unless sent;
- `ATTRS`: the same as `Struct`s, dicts whose keys read as attributes too (`answer.error_code`);
- `JSON`: as Kafka's generated JSON converters write the message (kafka-dump-log's decoders):
  camelCase names, a field outside the version left out, a tagged field only where it differs
  from its default, bytes as standard base64, uuids as Kafka's `Uuid.toString()` (URL-safe
  base64, no padding), strings with invalid UTF-8 replaced as Java's decoder does.
`Message.encode` writes a dict (or Struct) in a version.

Wire rules (Kafka's MessageDataGenerator): fixed-size numbers big-endian, a uuid 16 bytes;
non-flexible versions: string = int16 length, bytes = int32 length, array = int32 count (-1
null); flexible versions: compact forms (unsigned varint of length + 1, 0 for null) and every
struct ends with its tagged fields (a count, then tag, size, value; unknown tags skipped); a
nullable struct is an int8 (-1 null, 1 present) before its fields.

Hostile input: every read is bounds-checked and an array count is checked against the bytes
left before anything is allocated; any malformation raises CorruptRecordError naming the byte
`position` (relative to the buffer given).  Encoding checks what a field can hold (ValueError).
"""

from __future__ import annotations

import base64
import struct
import uuid as _uuid
from collections.abc import Callable, Sequence
from typing import Any

from kafkacodec.errors import CorruptRecordError, RecordTooLargeError

__all__ = ["Field", "Message", "Reader", "Struct", "f", "array", "struct_field", "versions",
           "DICT", "ATTRS", "JSON", "ZERO_UUID", "INT8", "INT16", "INT32", "INT64", "UINT16",
           "UINT32", "FLOAT64", "BOOL", "UUID", "STRING", "BYTES", "RECORDS", "STRUCT"]

INT8, INT16, INT32, INT64, UINT16, UINT32, FLOAT64 = (
    "int8", "int16", "int32", "int64", "uint16", "uint32", "float64")
BOOL, UUID, STRING, BYTES, RECORDS, STRUCT = "bool", "uuid", "string", "bytes", "records", "struct"
_FIXED = {INT8: struct.Struct(">b"), INT16: struct.Struct(">h"), INT32: struct.Struct(">i"),
          INT64: struct.Struct(">q"), UINT16: struct.Struct(">H"), UINT32: struct.Struct(">I"),
          FLOAT64: struct.Struct(">d"), BOOL: struct.Struct(">?")}
_SMALLEST = {**{kind: codec.size for kind, codec in _FIXED.items()},
             UUID: 16, STRING: 1, BYTES: 1, RECORDS: 1, STRUCT: 1}
_ALWAYS = (0, 1 << 15)
_NEVER = (1, 0)
ZERO_UUID = _uuid.UUID(int=0)

#: Decoded forms (see the module docstring).
DICT, ATTRS, JSON = "dict", "attrs", "json"


def versions(text: str | None) -> tuple[int, int]:
    """"3+" -> (3, max), "1-4" -> (1, 4), "2" -> (2, 2), None / "none" -> an empty range."""
    if text is None or text == "none":
        return _NEVER
    if text.endswith("+"):
        return int(text[:-1]), _ALWAYS[1]
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


class Struct(dict[str, Any]):
    """A decoded struct whose fields also read as attributes (`answer.topics[0].error_code`)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Field:
    """One field of a schema: `kind` is a type name, `item` the element type of an array
    (a type name or a tuple of Fields for an array of structs), `fields` a nested struct's."""

    __slots__ = ("name", "json_name", "label", "kind", "valid", "nullable", "tag", "default",
                 "item", "fields", "compact", "plans")

    def __init__(self, name: str, kind: str, valid: str = "0+", *, nullable: str | None = None,
                 tag: int | None = None, default: Any = None, item: Any = None,
                 fields: Sequence[Field] = (), flexible: str | None = None):
        self.name = name
        first, *rest = name.split("_")
        self.json_name = first + "".join(part.capitalize() for part in rest)   # Kafka's JSON name
        self.label = f"field {name}"                   # errors name it (the message added later)
        self.kind = kind
        self.valid = versions(valid)
        self.nullable = versions(nullable)
        self.tag = tag
        self.item = item
        self.fields = tuple(fields)
        self.default = default
        # the versions in which a string, bytes or array of this field is compact, where not
        # the message's flexible versions (Kafka's field "flexibleVersions": the header's ClientId)
        self.compact = None if flexible is None else versions(flexible)
        self.plans: dict[tuple[int, bool], _Plan] = {}   # a nested struct's, by version

    def is_compact(self, flexible: bool, version: int) -> bool:
        return flexible if self.compact is None else self.compact[0] <= version <= self.compact[1]

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
        if self.kind == FLOAT64:
            return 0.0
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

    def string(self, compact: bool, nullable: bool, what: str, errors: str = "strict") -> str | None:
        """A string; invalid UTF-8 raises, or is replaced with errors="replace" (Java's way)."""
        n = self.length(compact, 2, nullable, what)
        if n < 0:
            return None
        start = self.pos
        raw = self.take(n, what)
        try:
            return bytes(raw).decode("utf-8", errors)
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{what}: not UTF-8", position=start) from None

    def skip_tags(self) -> None:
        for _ in range(self.uvarint("tagged fields count")):
            self.uvarint("tag")
            self.take(self.uvarint("tagged field size"), "tagged field")


def _kafka_uuid(value: _uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _json_value(kind: str, value: Any) -> Any:
    """A primitive value as Kafka's JSON converters write it."""
    if value is None:
        return None
    if kind == UUID:
        return _kafka_uuid(value)
    if kind in (BYTES, RECORDS):
        return base64.b64encode(value).decode()
    return value


class _Plan:
    """How a struct's fields are read in one version: the fields on the wire in order, the
    tagged ones by tag, and every field with its default (the output's order).  Made once per
    struct and version; a (field, nullable, compact) step says how to read one field."""

    __slots__ = ("reads", "tagged", "layout")

    def __init__(self, fields: Sequence[Field], version: int, flexible: bool):
        reads: list[tuple[Field, bool, bool]] = []
        self.tagged: dict[int, tuple[Field, bool, bool]] = {}
        self.layout: list[tuple[Field, bool, Any]] = []
        for field in fields:
            present = field.present(version)
            step = (field, field.nullable_in(version), field.is_compact(flexible, version))
            if present and flexible and field.tag is not None:
                self.tagged[field.tag] = step
            elif present:
                reads.append(step)
            self.layout.append((field, present, field.default_value(version)))
        self.reads = tuple(reads)


def _plan(plans: dict[tuple[int, bool], _Plan], fields: Sequence[Field], version: int,
          flexible: bool) -> _Plan:
    plan = plans.get((version, flexible))
    if plan is None:
        plan = plans[version, flexible] = _Plan(fields, version, flexible)
    return plan


def _fresh(default: Any) -> Any:
    """A default to hand out: a list (an array's) copied, since callers may change it."""
    return default.copy() if isinstance(default, list) else default


class _Decoding:
    """One decode: the message's version and flexibility, and the form asked for."""

    __slots__ = ("version", "flexible", "json", "make", "strings")

    def __init__(self, version: int, flexible: bool, form: str):
        if form not in (DICT, ATTRS, JSON):
            raise ValueError(f"unknown decoded form {form!r} (dict, attrs or json)")
        self.version = version
        self.flexible = flexible
        self.json = form == JSON
        self.make: Callable[[], dict[str, Any]] = Struct if form == ATTRS else dict
        self.strings = "replace" if self.json else "strict"

    def read_struct(self, r: Reader, plans: dict[tuple[int, bool], _Plan],
                    fields: Sequence[Field]) -> dict[str, Any]:
        plan = _plan(plans, fields, self.version, self.flexible)
        values: dict[str, Any] = {}
        for step in plan.reads:
            values[step[0].name] = self.read_field(r, step)
        if self.flexible:
            for _ in range(r.uvarint("tagged fields count")):
                tag = r.uvarint("tag")
                size = r.uvarint("tagged field size")
                known = plan.tagged.get(tag)
                if known is None:
                    r.take(size, "unknown tagged field")
                    continue
                if size > r.end - r.pos:
                    raise CorruptRecordError("tagged field longer than the message", position=r.pos)
                sub = Reader(r.data, r.pos, r.pos + size, r.entries_left)
                values[known[0].name] = self.read_field(sub, known)
                r.pos += size
                r.entries_left = sub.entries_left
        out = self.make()
        if self.json:
            for field, present, default in plan.layout:
                if field.name not in values:
                    continue            # outside the version, or a tagged field not sent
                value = values[field.name]
                if field.tag is not None and value == self.json_default(field, default):
                    continue            # Kafka's converters write a tagged field if not default
                out[field.json_name] = value
            return out
        for field, present, default in plan.layout:
            value = values.get(field.name, values)
            out[field.name] = _fresh(default) if value is values else value
        return out

    @staticmethod
    def json_default(field: Field, default: Any) -> Any:
        if field.kind == "array" and isinstance(field.item, str) and default:
            return [_json_value(field.item, item) for item in default]
        return _json_value(field.kind, default)

    def read_field(self, r: Reader, step: tuple[Field, bool, bool]) -> Any:
        field, nullable, compact = step
        kind = field.kind
        what = field.label
        if kind == "array":
            n = r.length(compact, 4, nullable, what)
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
                return [self.read_value(r, item, False, compact, what) for _ in range(n)]
            return [self.read_struct(r, field.plans, item) for _ in range(n)]
        if kind == STRUCT:
            if nullable and r.fixed(INT8, what) < 0:
                return None
            return self.read_struct(r, field.plans, field.fields)
        return self.read_value(r, kind, nullable, compact, what)

    def read_value(self, r: Reader, kind: str, nullable: bool, compact: bool, what: str) -> Any:
        codec = _FIXED.get(kind)
        if codec is not None:
            if codec.size > r.end - r.pos:
                raise CorruptRecordError(f"{what}: {codec.size} bytes needed, {r.end - r.pos} left",
                                         position=r.pos)
            value: Any = codec.unpack_from(r.data, r.pos)[0]
            r.pos += codec.size
            return value
        if kind == STRING:
            return r.string(compact, nullable, what, self.strings)
        if kind == UUID:
            value = _uuid.UUID(bytes=bytes(r.take(16, what)))
        else:
            n = r.length(compact, 4, nullable, what)                      # bytes, records
            value = None if n < 0 else bytes(r.take(n, what))  # a copy: the buffer goes back
        return _json_value(kind, value) if self.json else value


class Message:
    """One message type (a request or response body, or a record key or value of an internal
    topic, `api_key` None) across its versions.  `name` is Kafka's (ProduceRequest)."""

    def __init__(self, name: str, api_key: int | None, valid: str, flexible: str,
                 fields: Sequence[Field]):
        self.name = name
        self.api_key = api_key
        self.valid = versions(valid)
        self.flexible = versions(flexible)
        self.fields = tuple(fields)
        self.plans: dict[tuple[int, bool], _Plan] = {}

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
               strict: bool = True, max_entries: int = 1 << 62, form: str = DICT) -> dict[str, Any]:
        """The message at data[pos:end] in `form` (DICT, ATTRS or JSON); CorruptRecordError
        when malformed or, if `strict`, when bytes are left over (Kafka's broker ignores them:
        librdkafka sends a few after some requests).  RecordTooLargeError, before they are
        read, when its arrays hold more than `max_entries` elements in all (a cost bound: a
        server's work and memory grow with them)."""
        reader = Reader(data, pos, end, max_entries)
        value = self.read(reader, version, form=form)
        if strict and reader.pos != reader.end:
            raise CorruptRecordError(f"{self.name} v{version}: {reader.end - reader.pos} bytes left "
                                     "after the last field", position=reader.pos)
        return value

    def read(self, reader: Reader, version: int, *, form: str = DICT,
             invalid_utf8: str | None = None) -> dict[str, Any]:
        """The message at the reader's position, which is left after it.  Invalid UTF-8 in a
        string raises in the DICT and ATTRS forms and is replaced in JSON; `invalid_utf8`
        ("strict" or "replace") overrides that."""
        decoding = _Decoding(version, self.is_flexible(version), form)
        if invalid_utf8 is not None:
            decoding.strings = invalid_utf8
        try:
            return decoding.read_struct(reader, self.plans, self.fields)
        except (CorruptRecordError, RecordTooLargeError) as exc:
            raise exc.with_context(f"{self.name} v{version} ")

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
        compact = field.is_compact(flexible, version)
        if item is None and not nullable and field.kind in ("array", STRING, BYTES, RECORDS):
            item = field.default_value(version)
            if item is None:
                raise ValueError(f"{self.name} v{version}: {field.name} cannot be null")
        if field.kind == "array":
            if item is None:
                _put_length(out, -1, compact, True)
                return
            _put_length(out, len(item), compact, True)
            for element in item:
                if isinstance(field.item, str):
                    _write_value(out, field.item, element, compact)
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
        _write_value(out, field.kind, item, compact)


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


def _write_value(out: bytearray, kind: str, item: Any, compact: bool) -> None:
    codec = _FIXED.get(kind)
    if codec is not None:
        out += codec.pack(item)
        return
    if kind == UUID:
        out += (item if isinstance(item, _uuid.UUID) else _uuid.UUID(bytes=bytes(item))).bytes
        return
    if item is None:
        _put_length(out, -1, compact, kind != STRING)
        return
    data: bytes = item.encode("utf-8") if isinstance(item, str) else bytes(item)
    if kind == STRING and not compact and len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    _put_length(out, len(data), compact, kind != STRING)
    out += data
