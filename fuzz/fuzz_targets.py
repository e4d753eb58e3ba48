"""Fuzz targets: one per kafkacodec entry point that takes bytes, in one table.

Contract checked for every input: the call ends in a result or a ``KafkaCodecError``. Any other
exception, a crash (segfault, sanitizer report) or a hang is a finding.

Adding a target is one entry in ``TARGETS`` (a function taking ``bytes``; the seed ``kind`` says
which corpus from fuzz/make_corpus.py feeds it). A target whose entry point is not in this
build of kafkacodec raises ``Missing`` and is reported as skipped, never as passed.

Usage:
  python fuzz/fuzz_targets.py list                          targets and whether they are wired
  python fuzz/fuzz_targets.py run TARGET [libFuzzer args]   atheris campaign on one target
  python fuzz/fuzz_targets.py campaign --seconds 90         every target, time split evenly
  python fuzz/fuzz_targets.py replay [--target T] [DIR]     run saved inputs (corpus, crashes)
(scripts/fuzz.sh wraps the long campaign; .ci/run the short one.)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
CRASHES = HERE / "crashes"          # new findings (not committed)
REGRESSIONS = HERE / "regressions"  # reproducers of fixed findings, replayed by the tests

import kafkacodec  # noqa: E402  (after the path constants, before the targets)
from kafkacodec.errors import KafkaCodecError  # noqa: E402


HANG_SECONDS = 10.0  # an input that takes longer than this is a finding (libFuzzer: -timeout)


class Missing(Exception):
    """The entry point a target needs is not in this build (yet)."""


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


# ---------------------------------------------------------------------------------------------
# Helpers


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


def fix_crcs(data: bytes) -> bytes:
    """Recompute every entry's checksum so mutations reach the decoders behind the CRC check."""
    from kafkacodec import _crc

    out = bytearray(data)
    pos = 0
    while pos + 17 <= len(out):
        (size,) = struct.unpack_from(">i", out, pos + 8)
        end = pos + 12 + size
        if size < 0 or end > len(out):
            break
        magic = out[pos + 16]
        if magic == 2 and size >= 9:
            struct.pack_into(">I", out, pos + 17, _crc.crc32c(bytes(out[pos + 21:end])))
        elif magic in (0, 1):
            struct.pack_into(">I", out, pos + 12, _crc.crc32(bytes(out[pos + 16:end])))
        pos = end
    return bytes(out)


def split(data: bytes) -> tuple[int, bytes]:
    """First byte: a small parameter (version, codec, offset); the rest: the payload."""
    return (data[0], data[1:]) if data else (0, b"")


# ---------------------------------------------------------------------------------------------
# Targets


def memory_records_shallow(data: bytes) -> None:
    records = api("kafkacodec.MemoryRecords")(data)
    for batch in records.batches():
        touch_batch(batch)
    getattr(records, "partial_tail_bytes", None)
    getattr(records, "size_in_bytes", None)


def _deep(data: bytes) -> None:
    records = api("kafkacodec.MemoryRecords")(data)
    for batch in records.batches():
        touch_batch(batch)
        for record in batch:
            touch_record(record)
    for record in records.records():
        touch_record(record)


def memory_records_deep(data: bytes) -> None:
    _deep(data)


def memory_records_deep_fixed_crc(data: bytes) -> None:
    api("kafkacodec.MemoryRecords")
    _deep(fix_crcs(data))


def memory_records_ensure_valid(data: bytes) -> None:
    for batch in api("kafkacodec.MemoryRecords")(data).batches():
        batch.ensure_valid()


def memory_records_index(data: bytes) -> None:
    """The batch-level fast path (numpy index of positions/offsets), if present."""
    records = api("kafkacodec.MemoryRecords")(data)
    index = getattr(records, "index", None) or getattr(records, "batch_index", None)
    if index is None:
        raise Missing("MemoryRecords.index / batch_index")
    table = index() if callable(index) else index
    # The fast path must agree with the object walk on how many entries there are.
    if len(table) != sum(1 for _ in records.batches()):
        raise AssertionError(f"index has {len(table)} rows, batches() walks a different count")


_FILE_DIR = tempfile.mkdtemp(prefix="kc-fuzz-")


def file_records(data: bytes) -> None:
    FileRecords = api("kafkacodec.FileRecords")
    path = os.path.join(_FILE_DIR, "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)
    with FileRecords.open(path) as records:
        for batch in records.batches():
            touch_batch(batch)
            for record in batch:
                touch_record(record)
        if len(data) > 2:
            part = records.slice(len(data) // 3, len(data) // 2)
            for batch in part.batches():
                touch_batch(batch)


def _check_converted(out: Any, to_magic: int) -> None:
    """Output we produced must decode cleanly (a KafkaCodecError here is a bug, not bad input)."""
    records = getattr(out, "records", out)
    try:
        for batch in records.batches():
            if batch.magic > to_magic:
                raise AssertionError(f"down_convert left magic {batch.magic} > {to_magic}")
            for record in batch:
                touch_record(record)
    except KafkaCodecError as error:
        raise AssertionError(f"down_convert produced undecodable output: {error}") from error


def _decodes_cleanly(payload: bytes) -> bool:
    try:
        _deep(payload)
    except KafkaCodecError:
        return False
    return True


def down_convert(data: bytes) -> None:
    """Eager down-conversion. When the input decodes cleanly, so must the output (entries at or
    below the target magic are copied byte for byte, as Kafka does, so a corrupt one stays
    corrupt: then only the result-or-KafkaCodecError contract applies)."""
    param, payload = split(data)
    to_magic = param % 2
    convert = api("kafkacodec.down_convert")
    records = api("kafkacodec.MemoryRecords")(payload)
    out = convert(records, to_magic, first_offset=(param >> 1) % 8)
    if _decodes_cleanly(payload):
        _check_converted(out, to_magic)


def lazy_down_convert(data: bytes) -> None:
    param, payload = split(data)
    to_magic = param % 2
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    records = api("kafkacodec.MemoryRecords")(payload)
    lazy = Lazy(records, to_magic, chunk_size=64 + (param >> 1) * 256)
    size = lazy.size_in_bytes
    sink = io.BytesIO()
    written = 0
    while written < size:
        n = lazy.write_to(sink)
        if not n:
            break
        written += n
    if len(sink.getvalue()) != size:
        raise AssertionError(f"write_to wrote {len(sink.getvalue())} bytes, committed {size}")


def shallow_records(data: bytes) -> None:
    """KIP-712 shallow iteration from a fetch offset (the first batch trimmed when the offset
    falls inside it), and every batch re-appended through RawBatchesBuilder."""
    param, payload = split(data)
    shallow = api("kafkacodec.shallow_records")
    Builder = api("kafkacodec.RawBatchesBuilder")
    builder = Builder(1 << 22)
    for raw in shallow(payload, param * 3):
        value = raw.value
        bytes(value[:8])
        for name in ("offset", "base_offset", "magic", "compression", "record_count",
                     "timestamp", "trimmed"):
            getattr(raw, name, None)
        builder.append(raw)
    out = builder.build()
    if len(out) != builder.size_in_bytes:
        raise AssertionError("RawBatchesBuilder.build() length differs from size_in_bytes")


def trim_batch(data: bytes) -> None:
    param, payload = split(data)
    trim = api("kafkacodec.mirror.trim_batch", "kafkacodec._mirror.trim_batch")
    raw = trim(payload, param)
    if raw is not None:
        bytes(raw.value[:8])


def raw_batches_builder(data: bytes) -> None:
    Builder = api("kafkacodec.RawBatchesBuilder")
    builder = Builder(1 << 20)
    for batch in api("kafkacodec.MemoryRecords")(data).batches():
        builder.append(batch.raw)
    builder.build()


def _fetch(data: bytes) -> tuple[Any, int]:
    param, payload = split(data)
    decode = api("kafkacodec.protocol.decode_fetch_response")
    version = 4 + param % 9
    return decode(payload, version), version


def fetch_response(data: bytes) -> None:
    """FetchResponse v4-v12 decode, then every partition's records decoded deeply."""
    response, _ = _fetch(data)
    MemoryRecords = api("kafkacodec.MemoryRecords")
    for topic in response.responses:
        for partition in topic.partitions:
            partition.aborted_transactions
            records = partition.records
            records = records() if callable(records) else records
            if records is not None:
                for batch in MemoryRecords(records).batches():
                    touch_batch(batch)
                    for record in batch:
                        touch_record(record)


def produce_response(data: bytes) -> None:
    param, payload = split(data)
    decode = api("kafkacodec.protocol.decode_produce_response")
    response = decode(payload, 3 + param % 7)
    for topic in response.responses:
        for partition in topic.partition_responses:
            partition.record_errors


def metadata_response(data: bytes) -> None:
    param, payload = split(data)
    decode = api("kafkacodec.protocol.decode_metadata_response")
    decode(payload, param % 13)


def api_versions_response(data: bytes) -> None:
    param, payload = split(data)
    decode = api("kafkacodec.protocol.decode_api_versions_response")
    decode(payload, param % 4)


def mirror_fetch_to_produce(data: bytes) -> None:
    """FetchResponse -> ProduceRequest bytes without decompressing (kafkacodec.mirror)."""
    mirror = api("kafkacodec.mirror.fetch_to_produce")
    response, _ = _fetch(data)
    out = mirror(response)
    if out is not None:
        bytes(memoryview(out)[:16])


def _walk(obj: Any, depth: int = 0) -> Any:
    """Visit what a parser returned (lists, dicts, objects with records) without knowing it."""
    if depth > 6 or obj is None or isinstance(obj, (bytes, str, int, float, bool)):
        return
    if isinstance(obj, memoryview):
        bytes(obj[:8])
        return
    if isinstance(obj, dict):
        for value in obj.values():
            yield from _walk(value, depth + 1)
        return
    if isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _walk(value, depth + 1)
        return
    if hasattr(obj, "batches") and callable(obj.batches):
        for batch in obj.batches():
            touch_batch(batch)
            for record in batch:
                yield record
        return
    for name in ("topics", "partitions", "responses", "records"):
        value = getattr(obj, name, None)
        if value is not None and not callable(value):
            yield from _walk(value, depth + 1)


def ring_feed(data: bytes) -> None:
    """KAFKA-2045 ring: feed in random chunk sizes, take responses, release them; a released
    response's payload must refuse access instead of showing someone else's bytes."""
    param, payload = split(data)
    Ring = api("kafkacodec.ResponseRingBuffer")
    ring = Ring(64 + (param % 16) * 512)
    rng = random.Random(param)
    pos = 0
    stalled = 0
    while pos < len(payload) and stalled < 3:
        accepted = ring.feed(payload[pos:pos + rng.randint(1, 300)])
        pos += accepted
        progressed = accepted > 0
        while True:
            response = ring.next_response()
            if response is None:
                break
            progressed = True
            response.correlation_id
            view = response.payload
            bytes(memoryview(view)[:16]) if not isinstance(view, bytes) else None
            if rng.random() < 0.3:
                try:
                    fetch = response.records(4 + param % 9)
                    for record in fetch:
                        touch_record(record)
                except KafkaCodecError:
                    pass
            response.release()
            try:
                bytes(memoryview(response.payload)[:1])
            except KafkaCodecError:
                pass  # BufferReleasedError: the contract
            else:
                if len(memoryview(response.payload)) > 0:
                    raise AssertionError("a released response's payload is still readable")
        stalled = 0 if progressed else stalled + 1
    ring.close()


def decompress(data: bytes) -> None:
    """Every codec container, both the one-shot function and the reusable Decompressor, under
    a small cap (bombs must raise RecordTooLargeError, never exhaust memory)."""
    param, payload = split(data)
    codec = 1 + param % 4
    magic = 2 if codec == 4 else (param >> 2) % 3
    cap = 1 << 20
    fn = api("kafkacodec._compression.decompress")
    out = fn(codec, magic, payload, cap)
    if len(out) > cap:
        raise AssertionError(f"decompressed {len(out)} bytes past the {cap}-byte cap")
    Decompressor = api("kafkacodec._compression.Decompressor")
    view = Decompressor(cap).decompress(codec, magic, payload)
    if bytes(view) != bytes(out):
        raise AssertionError("Decompressor and decompress() disagree")


def columnar_decode(data: bytes) -> None:
    """The Arrow decoder (no Python object per record) over a record set, CRC checked."""
    Decoder = api("kafkacodec._arrow.ArrowDecoder")
    param, payload = split(data)
    decoder = Decoder("t", 0, validate_crc=bool(param & 1), include_headers=bool(param & 2),
                      keep_control=bool(param & 4), max_rows=1 + (param >> 3) * 8)
    start, n = 0, len(payload)
    for _ in range(10_000):
        batch, start = decoder.decode(payload, start)
        batch.validate(full=True) if hasattr(batch, "validate") else None
        if start >= n or batch.num_rows == 0:
            break


def v2_record_scan(data: bytes) -> None:
    """The raise-free parser of the common v2 record (scan_v2_record) against the checked
    one, at a few starts inside a record set: where it accepts, both must agree exactly."""
    parsers = api("kafkacodec._records._v2_record_parsers")
    param, payload = split(data)
    for start in (param, 61 + param, 61 + 2 * param):      # 61: a v2 batch's first record
        scanned, read = parsers(payload[start:])
        if scanned is not None and scanned != read:
            raise AssertionError(f"scan_v2_record accepted {scanned!r}, the checked reader "
                                 f"says {read!r}")


def crc(data: bytes) -> None:
    """The checksum helpers against the reference implementations (zlib, the chained form)."""
    import zlib

    from kafkacodec import _crc

    cut = data[0] % (len(data) + 1) if data else 0
    if _crc.crc32(data) != zlib.crc32(data):
        raise AssertionError("crc32 differs from zlib.crc32")
    if _crc.crc32c(data[cut:], _crc.crc32c(data[:cut])) != _crc.crc32c(data):
        raise AssertionError("chained crc32c differs from one-shot crc32c")


@dataclass(frozen=True)
class Target:
    fn: Callable[[bytes], None]
    kind: str  # which seed corpus feeds it (fuzz/make_corpus.py)


TARGETS: dict[str, Target] = {
    "crc": Target(crc, "records"),
    "records_shallow": Target(memory_records_shallow, "records"),
    "records_deep": Target(memory_records_deep, "records"),
    "records_deep_fixed_crc": Target(memory_records_deep_fixed_crc, "records"),
    "records_ensure_valid": Target(memory_records_ensure_valid, "records"),
    "records_index": Target(memory_records_index, "records"),
    "file_records": Target(file_records, "records"),
    "down_convert": Target(down_convert, "records+param"),
    "lazy_down_convert": Target(lazy_down_convert, "records+param"),
    "shallow_records": Target(shallow_records, "records+param"),
    "trim_batch": Target(trim_batch, "records+param"),
    "raw_batches_builder": Target(raw_batches_builder, "records"),
    "fetch_response": Target(fetch_response, "fetch"),
    "produce_response": Target(produce_response, "produce"),
    "metadata_response": Target(metadata_response, "metadata"),
    "api_versions_response": Target(api_versions_response, "api_versions"),
    "mirror_fetch_to_produce": Target(mirror_fetch_to_produce, "fetch"),
    "ring_feed": Target(ring_feed, "ring"),
    "decompress": Target(decompress, "compressed"),
    "columnar_decode": Target(columnar_decode, "records+param"),
    "v2_record_scan": Target(v2_record_scan, "records+param"),
}


# Open findings, reported but not failing a run until fixed: target -> (message regex, note).
# Each has a reproducer in fuzz/known/<target>/; when fixed, delete the entry here and move the
# reproducer to fuzz/regressions/<target>/.
KNOWN_FINDINGS: dict[str, list[tuple[str, str]]] = {}
KNOWN_HITS: dict[str, int] = {}


def check_one(name: str, data: bytes) -> None:
    """Run one input; KafkaCodecError is a valid outcome, anything else propagates (except a
    documented open finding, which is counted in KNOWN_HITS)."""
    import re

    try:
        TARGETS[name].fn(data)
    except KafkaCodecError:
        pass
    except AssertionError as error:
        for pattern, _ in KNOWN_FINDINGS.get(name, []):
            if re.search(pattern, str(error)):
                KNOWN_HITS[name] = KNOWN_HITS.get(name, 0) + 1
                return
        raise


def availability(name: str) -> str | None:
    """None when the target's entry point exists, else why it is skipped."""
    try:
        check_one(name, b"")
    except Missing as missing:
        return f"entry point not in this build: {missing}"
    except Exception:  # exists; the empty input is judged in the campaign, not here
        return None
    return None


def corpus_dir(name: str) -> Path:
    return CORPUS / TARGETS[name].kind.replace("+", "_")


# ---------------------------------------------------------------------------------------------
# Drivers


def run_atheris(name: str, argv: list[str]) -> None:
    import atheris

    def one_input(data: bytes) -> None:
        check_one(name, data)

    atheris.Setup([sys.argv[0], *argv], one_input)
    atheris.Fuzz()


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A small mutator for platforms without atheris: flips, cuts, splices, interesting ints."""
    buf = bytearray(data or b"\0")
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(buf)) if buf else 0
        if op == 0 and buf:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            del buf[i:]
        elif op == 2:
            buf[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and len(buf) >= 4:
            j = rng.randrange(len(buf) - 3)
            buf[j:j + 4] = struct.pack(">i", rng.choice([0, -1, 1, 0x7FFFFFFF, -0x80000000, 61,
                                                          len(buf), 1 << 20]))
        elif op == 4 and buf:
            buf[i] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF])
        elif op == 5 and len(buf) > 2:
            j = rng.randrange(len(buf))
            buf[i:i] = buf[j:j + rng.randint(1, 64)]
    return bytes(buf)


def run_builtin(name: str, seconds: float, seeds: list[bytes], seed: int = 0) -> int:
    """Mutational fuzzing without coverage feedback (fallback); returns executions."""
    rng = random.Random(seed)
    pool = seeds or [b""]
    deadline = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < deadline:
        data = mutate(rng.choice(pool), rng)
        t0 = time.monotonic()
        try:
            check_one(name, data)
        except Exception:
            save_crash(name, data)
            raise
        if time.monotonic() - t0 > HANG_SECONDS:
            save_crash(name, data)
            raise AssertionError(f"{name}: one input took {time.monotonic() - t0:.1f}s (hang)")
        runs += 1
    return runs


def save_crash(name: str, data: bytes) -> Path:
    out = CRASHES / name
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"crash-{hashlib.sha1(data).hexdigest()}"
    path.write_bytes(data)
    print(f"[{name}] finding saved to {path}", file=sys.stderr)
    return path


def regression_inputs(name: str) -> list[bytes]:
    directory = REGRESSIONS / name
    return [p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()] \
        if directory.is_dir() else []


def load_seeds(name: str) -> list[bytes]:
    directory = corpus_dir(name)
    if not directory.is_dir():
        return []
    return [p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()]


def cmd_list(_: argparse.Namespace) -> int:
    for name, target in TARGETS.items():
        why = availability(name)
        seeds = len(load_seeds(name))
        print(f"{name:26} {target.kind:14} seeds={seeds:<5} {'SKIP ' + why if why else 'ok'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    why = availability(args.target)
    if why:
        print(f"[{args.target}] skipped: {why}")
        return 0
    run_atheris(args.target, args.libfuzzer_args)
    return 0


def pick_engine(requested: str) -> str:
    """atheris only pays when the core is built with coverage instrumentation
    (-fsanitize=fuzzer-no-link, scripts/sanitize.sh with clang sets KC_FUZZ_NATIVE=1): it sees no
    coverage in compiled code otherwise, and its corpus collapses to one input. Without it the
    built-in mutator over the seed corpus does more."""
    if requested != "auto":
        return requested
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "builtin"
    return "atheris" if os.environ.get("KC_FUZZ_NATIVE") == "1" else "builtin"


def cmd_campaign(args: argparse.Namespace) -> int:
    """Every available target for an equal share of `seconds`."""
    engine = pick_engine(args.engine)
    print(f"fuzz: engine {engine}"
          f"{' (coverage from the instrumented core)' if engine == 'atheris' else ''}")
    names = [n for n in TARGETS if not args.target or n in args.target]
    live = [n for n in names if availability(n) is None]
    for name in names:
        if name not in live:
            print(f"[{name}] SKIPPED: {availability(name)}")
    if not live:
        print("fuzz: no target is wired in this build")
        return 0
    share = max(2.0, args.seconds / len(live))
    failed: list[str] = []
    total_runs = 0
    for name in live:
        seeds_dir = corpus_dir(name)
        t0 = time.monotonic()
        if engine == "atheris":
            work = Path(tempfile.mkdtemp(prefix=f"kc-corpus-{name}-"))
            artifacts = CRASHES / name
            artifacts.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, str(Path(__file__).resolve()), "run", name,
                   f"-max_total_time={int(share)}", f"-timeout={args.timeout}",
                   f"-rss_limit_mb={args.rss_limit_mb}", "-print_final_stats=1",
                   f"-artifact_prefix={artifacts}{os.sep}", str(work)]
            if seeds_dir.is_dir():
                cmd.append(str(seeds_dir))
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=share + args.timeout + 120)
            shutil.rmtree(work, ignore_errors=True)
            runs = next((int(line.rsplit(":", 1)[1]) for line in proc.stderr.splitlines()
                         if line.startswith("stat::number_of_executed_units")), 0)
            ok = proc.returncode == 0
            if not ok:
                tail = "\n".join(proc.stderr.splitlines()[-40:])
                print(f"[{name}] FINDING (exit {proc.returncode}):\n{tail}")
        else:
            try:
                runs = run_builtin(name, share, load_seeds(name) + regression_inputs(name))
                ok = True
            except Exception:
                traceback.print_exc()
                runs, ok = 0, False
        total_runs += runs
        known = f", {KNOWN_HITS[name]} hits of known open findings" if KNOWN_HITS.get(name) else ""
        print(f"[{name}] {engine}: {runs} executions in {time.monotonic() - t0:.1f}s "
              f"{'ok' if ok else 'FAILED'}{known}")
        if not ok:
            failed.append(name)
    print(f"fuzz: {len(live)} targets, {total_runs} executions, "
          f"{len(names) - len(live)} skipped, {len(failed)} with findings {failed or ''}")
    return 1 if failed else 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Run saved inputs through their targets (no mutation): corpus regression, crash repro."""
    names = [n for n in TARGETS if not args.target or n in args.target]
    failures = 0
    executed = 0
    for name in names:
        if availability(name):
            continue
        if args.paths:
            files = [p for d in args.paths for p in (sorted(Path(d).rglob("*"))
                     if Path(d).is_dir() else [Path(d)]) if p.is_file()]
        else:
            files = [p for p in sorted(corpus_dir(name).glob("*")) if p.is_file()]
            for extra in (REGRESSIONS / name, CRASHES / name):
                if extra.is_dir():
                    files += sorted(p for p in extra.iterdir() if p.is_file())
        for path in files:
            data = path.read_bytes()
            t0 = time.monotonic()
            try:
                check_one(name, data)
            except Exception as error:
                failures += 1
                print(f"[{name}] {path}: {type(error).__name__}: {error}")
            elapsed = time.monotonic() - t0
            if elapsed > args.timeout:
                failures += 1
                print(f"[{name}] {path}: took {elapsed:.1f}s (> {args.timeout}s)")
            executed += 1
    print(f"replay: {executed} inputs, {failures} failures")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list").set_defaults(func=cmd_list)
    run = sub.add_parser("run")
    run.add_argument("target", choices=list(TARGETS))
    run.add_argument("libfuzzer_args", nargs=argparse.REMAINDER)
    run.set_defaults(func=cmd_run)
    campaign = sub.add_parser("campaign")
    campaign.add_argument("--seconds", type=float, default=90)
    campaign.add_argument("--target", action="append")
    campaign.add_argument("--timeout", type=int, default=10, help="seconds per input (hang)")
    campaign.add_argument("--rss-limit-mb", type=int, default=2048)
    campaign.add_argument("--engine", choices=["auto", "atheris", "builtin"], default="auto")
    campaign.set_defaults(func=cmd_campaign)
    replay = sub.add_parser("replay")
    replay.add_argument("--target", action="append")
    replay.add_argument("--timeout", type=float, default=10)
    replay.add_argument("paths", nargs="*")
    replay.set_defaults(func=cmd_replay)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
