"""Fuzz targets and the engine every harness kind shares.

Kinds (one module each, one `TARGETS` table of functions taking bytes; adding a case is one
entry): `bytes` (this file: one entry point fed one byte string), `differential`, `lifetime`,
`concurrency`, `reentrancy`, `filesystem` (fuzz/<kind>.py; what each checks: docs/reliability.md).
A target's name is `<kind>.<case>` except for the bytes kind.

Contract checked for every input: the call ends in a result or a ``KafkaCodecError`` (and
whatever the kind checks besides). Any other exception, a crash (segfault, sanitizer report),
a hang or runaway memory is a finding. Campaigns run each target in a worker process that
records the input in flight, so a crash or a hang is saved as a reproducer under
fuzz/crashes/<target>/ and the campaign goes on.

A target whose entry point is not in this build of kafkacodec raises ``Missing`` and is
reported as skipped, never as passed.

Usage:
  python fuzz/fuzz_targets.py list [--kind K]                 targets, seeds, wired or skipped
  python fuzz/fuzz_targets.py run TARGET [libFuzzer args]     atheris campaign on one target
  python fuzz/fuzz_targets.py campaign --seconds 90 [--kind K] [--target T]
                                    every selected kind gets `seconds`, split over its targets
  python fuzz/fuzz_targets.py replay [--kind K] [--target T] [PATH...]
                                    saved inputs (corpus, regressions, crashes), in a worker
(scripts/fuzz.sh wraps the long campaign; .ci/run the short one.)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import mmap
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
CRASHES = HERE / "crashes"          # new findings (not committed)
REGRESSIONS = HERE / "regressions"  # reproducers of fixed findings, replayed by the tests
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import kafkacodec  # noqa: E402,F401  (after the path constants, before the targets)
from kafkacodec.errors import KafkaCodecError  # noqa: E402

from _harness import (  # noqa: E402,F401  (re-exported: tests and kinds use them from here)
    HANG_SECONDS,
    Missing,
    Target,
    api,
    fix_crcs,
    split,
    touch_batch,
    touch_record,
)


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
    """The lazy send writes exactly what it committed; with a pool (param bit 1: the
    converter's buffers adopted as blocks) every block goes back; with max_size (the gateway's
    rule, from an offset inside the first batch) it commits no more than that."""
    param, payload = split(data)
    to_magic = param % 2
    pool = api("kafkacodec.SimpleMemoryPool")(1 << 24, 1 << 24, True) if param & 2 else None
    first_offset = (param >> 2) % 8
    max_size = len(payload) // 2 if param & 2 else None
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    records = api("kafkacodec.MemoryRecords")(payload)
    lazy = Lazy(records, to_magic, first_offset, chunk_size=64 + (param >> 5) * 256, pool=pool,
                max_size=max_size)
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
    lazy.close()
    if pool is not None and pool.available_memory != pool.size:
        raise AssertionError(f"{pool.size - pool.available_memory} pool bytes not given back")


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
    response = decode(payload, param % 13)
    list(response.brokers)                   # made on access, like every topic and partition
    for topic in response.topics:
        list(topic.partitions)


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



# The other kinds: fuzz/<kind>.py, each with a TARGETS table of its own.
KIND_MODULES = ("differential", "lifetime", "concurrency", "reentrancy", "filesystem")


def _kinds() -> dict[str, dict[str, Target]]:
    import importlib

    kinds = {"bytes": TARGETS}
    for kind in KIND_MODULES:
        module = importlib.import_module(kind)
        kinds[kind] = {f"{kind}.{case}": target for case, target in module.TARGETS.items()}
    return kinds


KINDS: dict[str, dict[str, Target]] = _kinds()
ALL_TARGETS: dict[str, Target] = {name: t for table in KINDS.values() for name, t in table.items()}


def kind_of(name: str) -> str:
    return next(kind for kind, table in KINDS.items() if name in table)


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
        ALL_TARGETS[name].fn(data)
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
    return CORPUS / ALL_TARGETS[name].kind.replace("+", "_")


def selected(args: argparse.Namespace) -> list[str]:
    kinds = getattr(args, "kind", None) or list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"unknown kind {unknown}; kinds: {', '.join(KINDS)}")
    return [n for k in kinds for n in KINDS[k] if not args.target or n in args.target]


# ---------------------------------------------------------------------------------------------
# Mutation


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


def save_crash(name: str, data: bytes, prefix: str = "crash") -> Path:
    out = CRASHES / name
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{prefix}-{hashlib.sha1(data).hexdigest()}"
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


# ---------------------------------------------------------------------------------------------
# Workers: a target runs in a process of its own, which writes each input to a state file
# before running it ([uint64 inputs started][uint32 length][input]). When the process dies
# (signal, sanitizer abort), stops making progress (a hang) or grows past the memory limit,
# the driver saves the input in flight as the reproducer and starts a new worker.

_STATE = struct.Struct("<QI")
EXIT_FINDING = 3       # a worker that saved a finding itself (a Python-level failure)


class _State:
    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDWR)
        self.started = 0

    def begin(self, data: bytes) -> None:
        self.started += 1
        os.pwrite(self.fd, _STATE.pack(self.started, len(data)) + data, 0)


def read_state(path: str) -> tuple[int, bytes]:
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < _STATE.size:
        return 0, b""
    started, length = _STATE.unpack_from(raw)
    return started, raw[_STATE.size:_STATE.size + length]


def cmd_worker(args: argparse.Namespace) -> int:
    """One target in this process (started by the driver, not by hand)."""
    name = args.target
    state = _State(args.state)
    done = 0
    result: dict[str, Any] = {"executions": 0, "finding": None}

    def one(data: bytes) -> None:
        nonlocal done
        state.begin(data)
        try:
            check_one(name, data)
        except Exception as error:
            traceback.print_exc()
            prefix = "replay-failure" if args.replay else "crash"
            if not args.replay:
                result["finding"] = str(save_crash(name, data, prefix))
            result["error"] = f"{type(error).__name__}: {error}"[:2000]
            raise
        done += 1

    try:
        if args.replay:
            for path in args.replay[args.skip:]:
                one(Path(path).read_bytes())
        else:
            rng = random.Random(args.seed)
            pool = load_seeds(name) + regression_inputs(name) or [b""]
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                one(mutate(rng.choice(pool), rng))
    except Exception:
        result["executions"] = done
        print(json.dumps(result))
        return EXIT_FINDING
    result["executions"] = done
    print(json.dumps(result))
    return 0


def _rss_bytes(pid: int) -> int:
    """Resident memory not backed by a file: pages of a mapped segment read whole are not
    memory taken in proportion to a size field."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_worker(name: str, *, seconds: float = 0, seed: int = 0, replay: list[str] | None = None,
               skip: int = 0, timeout: float = HANG_SECONDS, rss_limit_mb: int = 2048
               ) -> dict[str, Any]:
    """Run one worker to its end; returns executions, and a finding (kind, path, detail) if
    the worker died, hung, ran away with memory or failed a check."""
    fd, state_path = tempfile.mkstemp(prefix=f"kc-fuzz-{name}-")
    os.close(fd)
    cmd = [sys.executable, str(Path(__file__).resolve()), "worker", name, "--state", state_path]
    if replay is not None:
        cmd += ["--skip", str(skip), "--replay", *replay]
    else:
        cmd += ["--seconds", str(seconds), "--seed", str(seed)]
    out_f = tempfile.TemporaryFile()
    err_f = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, start_new_session=True)
    last_started, last_change = -1, time.monotonic()
    why = None
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            started, _ = read_state(state_path)
            now = time.monotonic()
            if started != last_started:
                last_started, last_change = started, now
            elif now - last_change > timeout:
                why = f"hang: one input ran over {timeout:.0f} s"
            if _rss_bytes(proc.pid) > rss_limit_mb << 20:
                why = f"memory: the worker passed {rss_limit_mb} MiB"
            if why:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
        started, inflight = read_state(state_path)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.unlink(state_path)
    out_f.seek(0)
    err_f.seek(0)
    stdout = out_f.read().decode(errors="replace")
    stderr = err_f.read().decode(errors="replace")
    summary: dict[str, Any] = {}
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            summary = json.loads(line)
            break
    result: dict[str, Any] = {"executions": summary.get("executions", max(started - 1, 0)),
                              "started": started, "finding": None}
    rc = proc.returncode
    if why is None and rc == 0:
        return result
    tail = "\n".join(stderr.splitlines()[-40:])
    if why is None and rc == EXIT_FINDING:
        why = summary.get("error", "a check failed")
        path = summary.get("finding")
    else:
        why = why or f"crash: the worker died (exit {rc}{_signal_name(rc)})"
        prefix = why.split(":")[0] if why.startswith(("hang", "memory")) else "crash"
        path = None if replay is not None else str(save_crash(name, inflight, prefix))
    result["finding"] = {"why": why, "path": path, "stderr": tail, "input": inflight}
    return result


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return f", {signal.Signals(-rc).name}"
        except ValueError:
            return ""
    return ""


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_list(args: argparse.Namespace) -> int:
    for name in selected(args):
        target = ALL_TARGETS[name]
        why = availability(name)
        seeds = len(load_seeds(name))
        print(f"{name:40} {target.kind:14} seeds={seeds:<5} {'SKIP ' + why if why else 'ok'}")
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


MAX_FINDINGS_PER_TARGET = 3


def hang_after(name: str, args: argparse.Namespace) -> float:
    """Seconds one input may run: --timeout, or more for a target whose inputs are big by
    design (a sparse segment of several GiB read whole)."""
    return max(args.timeout, ALL_TARGETS[name].timeout)


def _campaign_one(name: str, engine: str, share: float, args: argparse.Namespace
                  ) -> tuple[int, list[dict[str, Any]]]:
    """Executions and findings of one target over `share` seconds."""
    findings: list[dict[str, Any]] = []
    if engine == "atheris":
        seeds_dir = corpus_dir(name)
        work = Path(tempfile.mkdtemp(prefix=f"kc-corpus-{name}-"))
        artifacts = CRASHES / name
        artifacts.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "run", name,
               f"-max_total_time={int(share)}", f"-timeout={int(hang_after(name, args))}",
               f"-rss_limit_mb={args.rss_limit_mb}", "-print_final_stats=1",
               f"-artifact_prefix={artifacts}{os.sep}", str(work)]
        if seeds_dir.is_dir():
            cmd.append(str(seeds_dir))
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=share + args.timeout + 120)
        shutil.rmtree(work, ignore_errors=True)
        runs = next((int(line.rsplit(":", 1)[1]) for line in proc.stderr.splitlines()
                     if line.startswith("stat::number_of_executed_units")), 0)
        if proc.returncode != 0:
            findings.append({"why": f"libFuzzer exit {proc.returncode}", "path": str(artifacts),
                             "stderr": "\n".join(proc.stderr.splitlines()[-40:])})
        return runs, findings
    runs = 0
    deadline = time.monotonic() + share
    seed = args.seed
    while len(findings) < MAX_FINDINGS_PER_TARGET:
        left = deadline - time.monotonic()
        if left < 0.5:
            break
        result = run_worker(name, seconds=left, seed=seed, timeout=hang_after(name, args),
                            rss_limit_mb=args.rss_limit_mb)
        runs += result["executions"]
        seed += 1
        if result["finding"]:
            findings.append(result["finding"])
    return runs, findings


def cmd_campaign(args: argparse.Namespace) -> int:
    """Every selected kind for `seconds`, split evenly over its available targets."""
    engine = pick_engine(args.engine)
    print(f"fuzz: engine {engine}"
          f"{' (coverage from the instrumented core)' if engine == 'atheris' else ''}")
    names = selected(args)
    live = [n for n in names if availability(n) is None]
    for name in names:
        if name not in live:
            print(f"[{name}] SKIPPED: {availability(name)}")
    if not live:
        print("fuzz: no target is wired in this build")
        return 0
    failed: list[str] = []
    report: dict[str, dict[str, Any]] = {}
    by_kind: dict[str, list[str]] = {}
    for name in live:
        by_kind.setdefault(kind_of(name), []).append(name)
    plan = [(kind, name, max(1.0, args.seconds / len(members)))   # at least a second each
            for kind, members in by_kind.items() for name in members]

    def one(step: tuple[str, str, float]) -> tuple[str, str, int, list[dict[str, Any]], float]:
        kind, name, share = step
        t0 = time.monotonic()
        runs, findings = _campaign_one(name, engine, share, args)
        return kind, name, runs, findings, time.monotonic() - t0

    # the targets run in worker processes, `jobs` at a time (a time-boxed campaign: the same
    # seconds per target, the wall time divided)
    with ThreadPoolExecutor(max(1, args.jobs or os.cpu_count() or 1)) as pool:
        for kind, name, runs, findings, took in pool.map(one, plan):
            for finding in findings:
                print(f"[{name}] FINDING: {finding['why']}\n  reproducer: {finding['path']}\n"
                      + "\n".join("    " + line for line in finding["stderr"].splitlines()))
            known = f", {KNOWN_HITS[name]} hits of known open findings" if KNOWN_HITS.get(name) else ""
            print(f"[{name}] {engine}: {runs} executions in {took:.1f}s "
                  f"{'ok' if not findings else 'FAILED'}{known}", flush=True)
            report[name] = {"kind": kind, "executions": runs, "seconds": took,
                            "findings": [{k: f[k] for k in ("why", "path")} for f in findings]}
            if findings:
                failed.append(name)
    print("fuzz: executions per kind:")
    for kind, members in by_kind.items():
        total = sum(report[n]["executions"] for n in members)
        print(f"  {kind:14} {len(members):3} targets {total:>10} executions")
    total = sum(r["executions"] for r in report.values())
    print(f"fuzz: {len(live)} targets, {total} executions, "
          f"{len(names) - len(live)} skipped, {len(failed)} with findings {failed or ''}")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


def replay_files(name: str, paths: list[str]) -> list[Path]:
    if paths:
        return [p for d in paths for p in (sorted(Path(d).rglob("*")) if Path(d).is_dir()
                                           else [Path(d)]) if p.is_file()]
    files = [p for p in sorted(corpus_dir(name).glob("*")) if p.is_file()] \
        if kind_of(name) == "bytes" else []
    for extra in (REGRESSIONS / name, CRASHES / name):
        if extra.is_dir():
            files += sorted(p for p in extra.iterdir() if p.is_file())
    return files


def cmd_replay(args: argparse.Namespace) -> int:
    """Run saved inputs through their targets (no mutation), in a worker per target: corpus
    (bytes kind), regressions and crashes; a crash or hang is reported with its file."""
    failures = 0
    executed = 0
    for name in selected(args):
        if availability(name):
            continue
        files = [str(p) for p in replay_files(name, args.paths)]
        skip = 0
        while skip < len(files):
            result = run_worker(name, replay=files, skip=skip, timeout=hang_after(name, args))
            executed += result["executions"]
            finding = result["finding"]
            if not finding:
                break
            failed_at = skip + max(result["started"] - 1, 0)
            failures += 1
            print(f"[{name}] {files[failed_at]}: {finding['why']}\n" + finding["stderr"])
            executed += 1
            skip = failed_at + 1
    print(f"replay: {executed} inputs, {failures} failures")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kind", action="append", help=f"one of {', '.join(KINDS)} (repeatable)")
        p.add_argument("--target", action="append")

    listing = sub.add_parser("list")
    selection(listing)
    listing.set_defaults(func=cmd_list)
    run = sub.add_parser("run")
    run.add_argument("target", choices=list(ALL_TARGETS))
    run.add_argument("libfuzzer_args", nargs=argparse.REMAINDER)
    run.set_defaults(func=cmd_run)
    campaign = sub.add_parser("campaign")
    campaign.add_argument("--seconds", type=float, default=90, help="per kind")
    selection(campaign)
    campaign.add_argument("--timeout", type=float, default=HANG_SECONDS,
                          help="seconds per input (hang)")
    campaign.add_argument("--rss-limit-mb", type=int, default=2048)
    campaign.add_argument("--engine", choices=["auto", "atheris", "builtin"], default="auto")
    campaign.add_argument("--seed", type=int, default=0)
    campaign.add_argument("--jobs", type=int, default=0,
                          help="targets run at once (default: one per core)")
    campaign.add_argument("--report", help="write executions and findings per target (JSON)")
    campaign.set_defaults(func=cmd_campaign)
    replay = sub.add_parser("replay")
    selection(replay)
    replay.add_argument("--timeout", type=float, default=HANG_SECONDS)
    replay.add_argument("paths", nargs="*")
    replay.set_defaults(func=cmd_replay)
    worker = sub.add_parser("worker")
    worker.add_argument("target", choices=list(ALL_TARGETS))
    worker.add_argument("--state", required=True)
    worker.add_argument("--seconds", type=float, default=0)
    worker.add_argument("--seed", type=int, default=0)
    worker.add_argument("--skip", type=int, default=0)
    worker.add_argument("--replay", nargs="*")
    worker.set_defaults(func=cmd_worker)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
