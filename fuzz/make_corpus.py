"""Generate the fuzz seed corpora from real logs: record sets written by kafka-python (every
magic x codec) and by kafkacodec's own builder when it is present, and the protocol frames that
carry them (FetchResponse v4-v11, ProduceResponse, MetadataResponse and ApiVersionsResponse from
kafka-python's protocol classes,
a ring-buffer stream of size-prefixed responses, codec payloads).

  python fuzz/make_corpus.py [OUT_DIR]        (default fuzz/corpus)

Layout: OUT_DIR/<kind>/<sha1>, one directory per seed kind used in fuzz_targets.TARGETS.
Kinds with a leading parameter byte (version, codec, offset) get it prepended here.
"""

from __future__ import annotations

import hashlib
import random
import struct
import sys
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "corpus"
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
rng = random.Random(20261122)


def records_shape(n: int, big: bool = False) -> list[tuple[bytes | None, bytes | None, list]]:
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else (b"" if i % 4 == 1 else f"key-{i}".encode())
        value = None if i % 7 == 3 else bytes(rng.getrandbits(8) for _ in range(
            2000 if big and i == 0 else rng.randint(0, 40)))
        headers = [] if i % 3 else [("h", b"v"), ("null", None)]
        out.append((key, value, headers))
    return out


def kafka_python_logs() -> list[bytes]:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    logs = []
    for magic in (0, 1, 2):
        for name, codec in CODECS.items():
            if codec == 4 and magic < 2:
                continue
            for n, base in ((1, 0), (5, 100), (20, 7)):
                shape = records_shape(n, big=(n == 20))
                if magic == 2:
                    builder = DefaultRecordBatchBuilder(2, codec, n == 5, 42 if n == 5 else -1,
                                                        3 if n == 5 else -1, 0, 1 << 20)
                    for i, (key, value, headers) in enumerate(shape):
                        builder.append(i, 1_700_000_000_000 + i * (-1) ** i, key, value,
                                       headers)
                    batch = bytearray(builder.build())
                else:
                    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
                    for i, (key, value, _) in enumerate(shape):
                        builder.append(i, 1_700_000_000_000 + i if magic else None, key, value)
                    batch = bytearray(builder.build())
                if codec == 0 or magic == 2:
                    struct.pack_into(">q", batch, 0, base)  # a non-zero base offset
                    if magic < 2:  # legacy offsets are per message: rewrite each one
                        pos, off = 0, base
                        while pos + 12 <= len(batch):
                            struct.pack_into(">q", batch, pos, off)
                            pos += 12 + struct.unpack_from(">i", batch, pos + 8)[0]
                            off += 1
                logs.append(bytes(batch))
    return logs


def our_logs() -> list[bytes]:
    try:
        from kafkacodec import MemoryRecordsBuilder  # type: ignore[attr-defined]
    except ImportError:
        print("make_corpus: kafkacodec.MemoryRecordsBuilder not present, kafka-python seeds only")
        return []
    logs = []
    for magic in (0, 1, 2):
        for name, codec in CODECS.items():
            if codec == 4 and magic < 2:
                continue
            try:
                builder = MemoryRecordsBuilder(magic=magic, compression=name, base_offset=10)
                for i, (key, value, headers) in enumerate(records_shape(6)):
                    builder.append(1_700_000_000_000 + i, key, value,
                                   headers=tuple(headers) if magic == 2 else ())
                logs.append(bytes(builder.build()))
            except Exception as error:  # the builder is someone else's work in progress
                print(f"make_corpus: our builder magic={magic} {name}: {error!r}")
    return logs


def fetch_responses(record_sets: list[bytes]) -> list[bytes]:
    from kafka.protocol.old.fetch import FetchResponse

    out = []
    for version in range(4, 12):
        schema = FetchResponse[version].SCHEMA
        for k in range(0, len(record_sets), 9):
            chunk = record_sets[k:k + 3]
            partitions = []
            for index, records in enumerate(chunk):
                fields = {"partition_index": index, "error_code": 0, "high_watermark": 1000,
                          "last_stable_offset": 1000, "log_start_offset": 0,
                          "aborted_transactions": [(42, 100)] if index == 1 else [],
                          "preferred_read_replica": -1, "records": records}
                partitions.append(tuple(fields[n] for n in
                                        schema.fields[-1].array_of.fields[-1].array_of.names))
            top = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                   "responses": [("topic-a", partitions), ("b", partitions[:1])]}
            body = FetchResponse[version](*[top[n] for n in schema.names]).encode()
            correlation_id = struct.pack(">i", 1000 + k)
            out.append(bytes([version - 4]) + correlation_id + body)
    return out


def produce_requests(record_sets: list[bytes]) -> list[bytes]:
    from kafka.protocol.old.produce import ProduceRequest

    out = []
    for version in range(3, 9):
        for k in range(0, len(record_sets), 11):
            data = [("topic-a", [(0, record_sets[k]), (1, record_sets[(k + 1) % len(record_sets)])]),
                    ("b", [(3, record_sets[(k + 2) % len(record_sets)])])]
            body = ProduceRequest[version](None if k % 2 else "txn", -1, 30000, data).encode()
            out.append(bytes([version - 3]) + body)
    return out


def _filled(schema, rng_: random.Random, depth: int = 0):
    """A value for every field of a kafka-python (old-style) protocol Schema."""
    values = []
    for name, field in zip(schema.names, schema.fields):
        kind = field.__name__ if isinstance(field, type) else type(field).__name__
        if kind in ("Array", "CompactArray"):
            inner = field.array_of
            count = 0 if depth > 3 else rng_.randint(1, 3)
            if hasattr(inner, "names"):
                values.append([_filled(inner, rng_, depth + 1) for _ in range(count)])
            else:
                values.append([rng_.randint(0, 5) for _ in range(count)])
        elif kind in ("String", "CompactString"):
            values.append(rng_.choice(["topic-a", "b", "", "node-1.example"]))
        elif kind in ("Bytes", "CompactBytes"):
            values.append(b"")
        elif kind == "Boolean":
            values.append(bool(rng_.getrandbits(1)))
        elif kind == "TaggedFields":
            values.append({})
        elif kind == "UUID":
            import uuid
            values.append(uuid.UUID(int=rng_.getrandbits(128)))
        elif kind == "BitField":
            values.append(set())
        else:  # Int8/16/32/64, VarInts
            values.append(rng_.randint(0, 100) if "error" not in name else 0)
    return tuple(values)


def response_frames(module: str, cls: str, first_version: int, param_of,
                    header_tags: bool = True) -> list[bytes]:
    """Response bodies prefixed with the correlation id (and the param byte)."""
    import importlib

    classes = getattr(importlib.import_module(module), cls)
    out = []
    for version in range(first_version, len(classes)):
        for k in range(3):
            try:
                body = classes[version](*_filled(classes[version].SCHEMA, rng)).encode()
            except Exception as error:  # a schema this filler does not know: skip that version
                print(f"make_corpus: {cls} v{version}: {error!r}")
                break
            header = struct.pack(">i", 7 + k)
            if header_tags and getattr(classes[version], "FLEXIBLE_VERSION", False):
                header += b"\x00"  # empty tagged fields of response header v1
            out.append(bytes([param_of(version)]) + header + body)
    return out


def ring_streams(fetches: list[bytes]) -> list[bytes]:
    out = []
    for k in range(0, len(fetches), 4):
        frames = b"".join(struct.pack(">i", len(f) - 1) + f[1:] for f in fetches[k:k + 3])
        out.append(bytes([rng.randrange(16)]) + frames)
    tiny = b"".join(struct.pack(">ii", 4 + n, i) + b"x" * n for i, n in enumerate((0, 1, 50, 7)))
    out.append(b"\x00" + tiny)
    return out


def compressed(record_sets: list[bytes]) -> list[bytes]:
    """Codec payloads; the leading byte is fuzz_targets.decompress's parameter:
    codec = 1 + p % 4, magic = (p >> 2) % 3 (zstd: always 2)."""
    from kafka import codec

    def param(codec_id: int, magic: int) -> bytes:
        return bytes([(codec_id - 1) | (magic << 2)])

    out = []
    for raw in record_sets[:12]:  # kafka-python's writers (magic 1/2 framing)
        out.append(param(1, 2) + codec.gzip_encode(raw))
        out.append(param(2, 2) + codec.snappy_encode(raw, xerial_compatible=True))
        out.append(param(3, 2) + codec.lz4_encode(raw))
        out.append(param(4, 2) + codec.zstd_encode(raw))
    try:
        from kafkacodec._compression import compress
    except ImportError:
        return out
    for raw in record_sets[:6]:  # ours, every magic (magic 0 LZ4 has Kafka's header quirk)
        for codec_id in (1, 2, 3, 4):
            for magic in ((2,) if codec_id == 4 else (0, 1, 2)):
                out.append(param(codec_id, magic) + bytes(compress(codec_id, magic, raw)))
    return out


def produce_requests(record_sets: list[bytes]) -> list[bytes]:
    """ProduceRequest bodies of every version 0-11 (the version byte first), written by the
    generic codec from Kafka's message definitions."""
    from kafkacodec.protocol import messages as m

    out = []
    for version in range(12):
        for n, raw in enumerate(record_sets[:4]):
            value = {"transactional_id": "tx" if version >= 3 and n % 2 else None, "acks": -1,
                     "timeout_ms": 30000, "topic_data": [
                         {"name": "orders", "partition_data": [{"index": 0, "records": raw},
                                                               {"index": 1, "records": None}]},
                         {"name": "t\u00e9", "partition_data": []}]}
            out.append(bytes([version]) + bytes(m.PRODUCE_REQUEST.encode(version, value)))
    return out


def write(out: Path, kind: str, seeds: list[bytes]) -> int:
    directory = out / kind
    directory.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    return len(seeds)


def main(out: Path = DEFAULT_OUT) -> dict[str, int]:
    logs = kafka_python_logs() + our_logs()
    multi = [b"".join(rng.sample(logs, 4)) for _ in range(12)]   # mixed magics and codecs
    record_sets = logs + multi
    record_sets += [s[: len(s) - 5] for s in multi[:4]]           # partial trailing batch
    fetches = fetch_responses(record_sets)
    counts = {
        "records": write(out, "records", record_sets),
        "records_param": write(out, "records_param", [bytes([p]) + s for s in record_sets
                                                 for p in (0, 1, 5)]),
        "fetch": write(out, "fetch", fetches),
        "produce": write(out, "produce", response_frames(
            "kafka.protocol.old.produce", "ProduceResponse", 3, lambda v: v - 3)),
        "metadata": write(out, "metadata", response_frames(
            "kafka.protocol.old.metadata", "MetadataResponse", 0, lambda v: v)),
        "api_versions": write(out, "api_versions", response_frames(
            "kafka.protocol.old.api_versions", "ApiVersionsResponse", 0, lambda v: v,
            header_tags=False)),  # ApiVersions answers with response header v0 always
        "ring": write(out, "ring", ring_streams(fetches)),
        "produce_request": write(out, "produce_request", produce_requests(record_sets)),
        "compressed": write(out, "compressed", compressed(record_sets)),
    }
    print("make_corpus:", ", ".join(f"{k}={v}" for k, v in counts.items()), "->", out)
    return counts


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
