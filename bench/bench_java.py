"""Same-run comparison with Kafka's own Java code: kafka-clients (3.9.1 by default, the last
line with down-conversion) on the JDK against kafkacodec, on the same bytes, alternating rounds.

Run (several minutes; needs java, javac and mvn on PATH):

    python bench/bench_java.py                  # the table on stdout, raw results in build/bench/
    python bench/bench_java.py --write-docs     # and its section of docs/results.md
    python bench/bench_java.py --runs 3 --write-docs    # three whole runs, their passes pooled
    python -m pytest bench/bench_java.py --benchmark-enable -q    # also part of bench/report.py

Without --benchmark-enable each case runs once on both sides and checks they did the same work.
One run's ratios move by 10-20% from the next one's (the JIT's choices, where the logs land in
memory, the shared host's load): --runs N repeats the whole run in fresh processes and takes
every ratio from all runs' passes.

How it is fair:
- Kafka's jars (kafka-clients and its lz4-java, zstd-jni, snappy-java) are resolved with Maven
  into ~/.m2, their classpath cached in ~/.cache/kafkacodec/kafka-clients-<version>/ (or
  $KAFKACODEC_JAR_CACHE), never in the repository; bench/java/KafkaBench.java is compiled there
  (with KafkaDownConvert.java where kafka-clients still has down-conversion), once per sources
  and classpath.
- The workload files are written here (our builder, in a temporary directory) and both sides
  read the same files: logs for the readers and converters, one records file (keys and values)
  for the builders.  Values are JSON-like (field names repeat, numbers vary: 2-3x compressible);
  100-byte values come 128 per batch and 1 KiB values 16 per batch (16 KiB producer batches).
- One JVM stays up for the whole run.  Each case warms Java up (passes for KC_BENCH_JAVA_WARM_MS
  of CPU time the first time per operation, then until its best pass stops improving) and us
  (one pass), then alternates Java, us, Java, us... for KC_BENCH_JAVA_ROUNDS rounds each (three
  times as many for the ~1 ms memory-bound passes below), so load drift hits both.  Both sides time a pass by the CPU time of the thread doing it (Java:
  ThreadMXBean.getCurrentThreadCpuTime in the JVM, no pipe in the interval; ours:
  time.thread_time), which a loaded machine disturbs far less than wall time; the ratios use
  it.  Wall times (System.nanoTime; pytest-benchmark's rounds) are kept as a second column,
  and the JVM's whole CPU time per pass (its GC and JIT threads too: work our side does on
  its own thread, such as freeing memory, Java may do on others) as a third.  Before each of
  our passes the harness waits until no JVM thread has run for 1 ms (50 ms at most): GC and
  JIT threads finishing after Java's pass would share the cores and the memory bus with ours,
  as ours never runs during Java's.  kafkacodec is
  imported where it is used: the command line's own process only runs pytest and renders the
  table.
- The CRC walk and shallow header rows are memory-bound single passes over a 16 MB log: what
  they cost depends on which side's copy the last passes left in the shared L3 cache (and in
  the TLB), which differs between rounds, runs and sides (Java warms up for seconds, we for
  one pass).  So before each of their timed passes, both sides evict the caches on the thread
  that times the pass (untimed: one byte written per 64-byte line of EVICT_BYTES of ordinary
  4 KiB-page memory, twice the L3): both passes read the log from memory.
- Every case checks both sides processed the same: batch or record counts, output sizes (and,
  for the builders, whether the batches are byte-identical).
Scale: KC_BENCH_JAVA_BATCHES batches per log (default 1024: 131,072 100-byte or 16,384 1 KiB
records, about 16 MB).

KC_BENCH_KAFKA_VERSION picks another kafka-clients.  4.x runs every case but down-conversion,
which Kafka 4.0 removed: the eager and lazy down-conversion cases are skipped ("kafka-clients
<version> has no down-conversion"), and KafkaBench compiles without them (they live in
KafkaDownConvert, compiled only where LazyDownConversionRecords exists).  In 4.4.0 the record
classes sit in org.apache.kafka.common.record.internal and some utilities in
...common.utils.internals: compile_harness points the harness's imports there.  The builders'
zstd output is Kafka's byte for byte where its zstd-jni bundles libzstd 1.5.7, as ours: 4.4.0
(zstd-jni 1.5.7-17), not 3.9-4.3 (1.5.6); docs/building.md has the sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
HARNESS = Path(__file__).resolve().parent / "java" / "KafkaBench.java"
# the down and lazy ops: compiled only against a kafka-clients with down-conversion (< 4.0)
DOWN_CONVERT = HARNESS.with_name("KafkaDownConvert.java")
KAFKA_VERSION = os.environ.get("KC_BENCH_KAFKA_VERSION", "3.9.1")
CACHE = Path(os.environ.get("KAFKACODEC_JAR_CACHE", Path.home() / ".cache" / "kafkacodec"))
BATCHES = int(os.environ.get("KC_BENCH_JAVA_BATCHES", "1024"))
ROUNDS = int(os.environ.get("KC_BENCH_JAVA_ROUNDS", "9"))
COLD_ROUNDS = 3 * ROUNDS               # the ~1 ms memory-bound passes: the host's memory bus
                                       # changes from second to second, so more of them
WARM_MS = int(os.environ.get("KC_BENCH_JAVA_WARM_MS", "3000"))
JVM_FLAGS = ["-Xms1g", "-Xmx2g"]
TIMESTAMP = 1_700_000_000_000
CHUNK = 128 * 1024                    # Kafka's LazyDownConversionRecordsSend.MAX_READ_SIZE
POOLED_BUFFER = 64 * 1024             # KafkaBench.POOLED_BUFFER: one batch's reused buffer
EVICT_BYTES = 64 << 20                # KafkaBench.EVICT_BYTES: twice this machine's L3 cache
COLD_KINDS = ("crc", "shallow")       # memory-bound single passes: timed from evicted caches
SIZES = {"100B": (100, 128), "1KiB": (1024, 16)}   # value bytes, records per batch
CODECS = ["none", "lz4", "zstd", "snappy", "gzip"]

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>kafkacodec.bench</groupId><artifactId>kafka-clients-bench</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId>
<version>{version}</version></dependency></dependencies></project>
"""


class JavaUnavailable(RuntimeError):
    """java, javac or mvn is missing, or Kafka's jars could not be resolved."""


# --- the JVM side -------------------------------------------------------------------------------

def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    """kafka-clients and its dependencies, resolved once with Maven (jars stay in ~/.m2)."""
    folder = CACHE / f"kafka-clients-{version}"
    cp_file = folder / "classpath.txt"
    if cp_file.exists():
        cp = cp_file.read_text().strip()
        if all(Path(p).exists() for p in cp.split(os.pathsep)):
            return cp
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            raise JavaUnavailable(f"the Java comparison needs {tool} on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pom.xml").write_text(_POM.format(version=version))
    tmp = folder / f"classpath.{os.getpid()}.tmp"
    run = subprocess.run(["mvn", "-q", "-B", "dependency:build-classpath",
                          f"-Dmdep.outputFile={tmp}"], cwd=folder, capture_output=True,
                         text=True, timeout=900)
    if run.returncode != 0 or not tmp.exists():
        raise JavaUnavailable(f"mvn could not resolve kafka-clients:{version}:\n"
                              f"{run.stdout[-2000:]}{run.stderr[-2000:]}")
    os.replace(tmp, cp_file)
    return cp_file.read_text().strip()


def kafka_clients_classes(classpath: str) -> set[str]:
    """The class files (org/apache/kafka/.../Name.class) of the kafka-clients jar on classpath."""
    jar = next(p for p in classpath.split(os.pathsep) if Path(p).name.startswith("kafka-clients-"))
    with zipfile.ZipFile(jar) as z:
        return {name for name in z.namelist() if name.endswith(".class")}


def resolve_imports(source: str, classes: set[str]) -> str:
    """`source` with each import of a Kafka class that `classes` lacks pointed at the one class
    of that name under the imported package: kafka-clients 4.4 moved the record classes into
    org.apache.kafka.common.record.internal and some utilities into ...common.utils.internals
    (the harness is written against the older names: 3.9.1 and 4.1.1 have them)."""
    def resolve(match: re.Match) -> str:
        package, name = match[1], match[2]
        folder = package.replace(".", "/")
        if f"{folder}/{name}.class" in classes:
            return match[0]
        moved = [c for c in classes if c.startswith(folder + "/") and c.endswith(f"/{name}.class")]
        if len(moved) != 1:             # not found, or ambiguous: javac names it
            return match[0]
        return f"import {moved[0].removesuffix('.class').replace('/', '.')};"
    return re.sub(r"^import (org\.apache\.kafka[\w.]*)\.(\w+);", resolve, source, flags=re.M)


def compile_harness(classpath: str) -> Path:
    """KafkaBench.class (and KafkaDownConvert.class where kafka-clients still has
    down-conversion), compiled once per classpath and sources as javac gets them (imports
    resolved): cached beside the jars' list, keyed by their digest."""
    jar_classes = kafka_clients_classes(classpath)
    sources = [HARNESS]
    if any(c.endswith("/LazyDownConversionRecords.class") for c in jar_classes):
        sources.append(DOWN_CONVERT)
    texts = {p.name: resolve_imports(p.read_text(), jar_classes) for p in sources}
    digest = hashlib.sha256(json.dumps([classpath, texts]).encode()).hexdigest()[:16]
    classes = CACHE / f"kafka-clients-{KAFKA_VERSION}" / f"harness-{digest}"
    if not (classes / "KafkaBench.class").exists():
        tmp = Path(tempfile.mkdtemp(prefix="harness-", dir=classes.parent))
        (tmp / "src").mkdir()
        for name, text in texts.items():    # the sources as compiled, kept beside their classes
            (tmp / "src" / name).write_text(text)
        run = subprocess.run(["javac", "-d", str(tmp), "-cp", classpath,
                              *(str(tmp / "src" / name) for name in texts)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise JavaUnavailable(f"javac failed:\n{run.stderr[-3000:]}")
        try:
            os.rename(tmp, classes)
        except OSError:                 # compiled meanwhile by another run
            shutil.rmtree(tmp, ignore_errors=True)
    return classes


class KafkaJava:
    """One JVM running bench/java/KafkaBench (a line protocol on its stdin/stdout)."""

    def __init__(self, workdir: Path):
        classpath = kafka_classpath()
        classes = compile_harness(classpath)
        self.stderr_path = workdir / "kafka-java.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                ["java", *JVM_FLAGS, "-cp", os.pathsep.join([classpath, str(classes)]),
                 "KafkaBench"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                text=True, bufsize=1)
        self.warmed: set[tuple[str, ...]] = set()
        facts = dict(item.split("=", 1) for item in self.call("versions"))
        facts["jars"] = ", ".join(Path(p).name.removesuffix(".jar")
                                  for p in classpath.split(os.pathsep))
        facts["jvm_flags"] = " ".join(JVM_FLAGS)
        self.facts = facts

    def call(self, *words: object) -> list[str]:
        line = " ".join(str(w) for w in words)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        reply = self.process.stdout.readline().split()
        if not reply or reply[0] != "ok":
            raise RuntimeError(f"KafkaBench `{line}`: {' '.join(reply) or 'no reply'}\n"
                               f"{self.stderr_path.read_text(errors='replace')[-3000:]}")
        return reply[1:]

    def warm(self, *op: object) -> None:
        key = tuple(str(w) for w in op[:2])     # the op and its first file: JIT and caches
        self.call("warm", WARM_MS if key not in self.warmed else WARM_MS // 8, *op)
        self.warmed.add(key)

    def run(self, *op: object, cold: bool = False) -> tuple[float, float, float, int]:
        """One timed pass (cold: after evicting the caches, untimed): (wall seconds, this
        thread's CPU seconds, the JVM's CPU seconds, what it processed)."""
        wall, cpu, jvm_cpu, result, _ = self.call("runcold" if cold else "run", *op)
        return int(wall) / 1e9, int(cpu) / 1e9, int(jvm_cpu) / 1e9, int(result)

    def cpu_seconds(self) -> float | None:
        """The CPU time all the JVM's threads have run (Linux: /proc's schedstat, ns), or None."""
        total = 0
        try:
            tasks = os.listdir(f"/proc/{self.process.pid}/task")
        except OSError:
            return None
        for task in tasks:
            try:
                with open(f"/proc/{self.process.pid}/task/{task}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except (OSError, ValueError, IndexError):        # a thread that just ended
                pass
        return total / 1e9

    def wait_idle(self, window: float = 0.001, limit: float = 0.05) -> None:
        """Return once no JVM thread ran in the last `window` seconds (at most `limit`): GC and
        JIT threads still busy after Java's pass would otherwise share the cores, caches and
        memory bandwidth with ours (the JVM waits on its pipe while ours runs)."""
        before = self.cpu_seconds()
        deadline = time.perf_counter() + limit
        while before is not None and time.perf_counter() < deadline:
            time.sleep(window)
            now = self.cpu_seconds()
            if now is None or now - before < window / 20:
                return
            before = now

    def close(self) -> None:
        """Ask the JVM to quit; kill it if it does not within 10 s."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write("quit\n")
                self.process.stdin.close()
                self.process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


_evict_buffer: Any = None


def evict_caches() -> None:
    """Write one byte per 64-byte line of EVICT_BYTES (a bytearray: ordinary 4 KiB pages, as
    the JVM's heap; a large numpy array would ask for huge pages and spare the TLB), so the
    next pass reads its input from memory, as KafkaBench's runcold."""
    global _evict_buffer
    import numpy as np

    if _evict_buffer is None:
        _evict_buffer = np.frombuffer(bytearray(EVICT_BYTES), dtype=np.uint8)
    _evict_buffer[::64] += 1


# --- the workloads --------------------------------------------------------------------------------

def json_values(size: int, count: int, seed: int) -> list[bytes]:
    """`count` JSON-like values of `size` bytes: field names repeat, numbers and ids vary."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        doc = b""
        while len(doc) < size:
            doc += json.dumps({"user": f"user_{rng.randrange(10**6)}", "event": rng.choice(
                ["click", "view", "purchase"]), "ts": TIMESTAMP + rng.randrange(10**9),
                "session": rng.randbytes(8).hex(), "amount": rng.randrange(10**5)}).encode()
        out.append(doc[:size])
    return out


class Workloads:
    """The files both sides read, made on first use in `folder` (our builder writes the logs)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._records: dict[str, tuple[list[bytes], list[bytes]]] = {}
        self._files: dict[tuple[str, str], Path] = {}
        self._columns: dict[tuple[str, str], Any] = {}

    def records(self, size: str) -> tuple[list[bytes], list[bytes]]:
        if size not in self._records:
            value_size, per_batch = SIZES[size]
            count = BATCHES * per_batch
            keys = [b"key-%08d" % i for i in range(count)]
            self._records[size] = keys, json_values(value_size, count, seed=value_size)
        return self._records[size]

    def batches(self, size: str) -> list[tuple[list[bytes], list[bytes]]]:
        keys, values = self.records(size)
        per_batch = SIZES[size][1]
        return [(keys[s:s + per_batch], values[s:s + per_batch])
                for s in range(0, len(keys), per_batch)]

    def arrow_columns(self, size: str) -> tuple[Any, Any, Any]:
        """records() as columns: numpy int64 timestamps, pyarrow binary keys and values."""
        import numpy as np
        import pyarrow as pa

        if (size, "arrow") not in self._columns:
            keys, values = self.records(size)
            self._columns[size, "arrow"] = (np.full(len(values), TIMESTAMP, dtype=np.int64),
                                            pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
        return self._columns[size, "arrow"]

    def records_file(self, size: str) -> Path:
        """[i32 count] then ([i32 klen][key][i32 vlen][value]) per record (KafkaBench reads it)."""
        if (size, "records") not in self._files:
            keys, values = self.records(size)
            path = self.folder / f"records-{size}.bin"
            with open(path, "wb") as f:
                f.write(struct.pack(">i", len(keys)))
                for key, value in zip(keys, values):
                    f.write(b"".join((struct.pack(">i", len(key)), key,
                                      struct.pack(">i", len(value)), value)))
            self._files[size, "records"] = path
        return self._files[size, "records"]

    def log(self, size: str, codec: str) -> Path:
        """A v2 log: the records in producer-sized batches, offsets 0.., compressed with codec."""
        from kafkacodec import MemoryRecordsBuilder

        if (size, codec) not in self._files:
            path = self.folder / f"log-{size}-{codec}.bin"
            builder = MemoryRecordsBuilder(2, codec)
            with open(path, "wb") as f:
                for keys, values in self.batches(size):
                    builder.append_many(TIMESTAMP, keys, values)
                    f.write(builder.build())
            self._files[size, codec] = path
        return self._files[size, codec]


# --- kafkacodec's side of each operation ----------------------------------------------------------

def ours_crc(data: bytes) -> Callable[[], int]:
    # (imported before the pass, as Java's classes are loaded: from cold caches the import
    # statement alone costs some microseconds of a ~100 us pass)
    from kafkacodec import MemoryRecords

    return lambda: MemoryRecords(data).validate()


def ours_shallow(data: bytes) -> Callable[[], int]:
    from kafkacodec import MemoryRecords

    return lambda: len(MemoryRecords(data).index(check_crc=False))


# What KafkaBench's deep pass reads of every record: ArrowDecoder with these columns makes the
# same things (offsets and timestamps read, keys and values copied out of the batches).
JAVA_DEEP_FIELDS = ["offset", "timestamp", "key", "value"]


def ours_arrow(data: bytes, columns: list[str] | None = None, views: bool = False) -> int:
    """Columnar decode (CRCs checked, as Java's consumer with check.crcs=true) of every record:
    all of Spark's Kafka columns, or `columns`; keys and values as views of `data` (views)."""
    from kafkacodec._arrow import ArrowDecoder

    decoder = ArrowDecoder("t", 0, columns=columns, views=views)
    position = rows = 0
    while position < len(data):
        batch, position = decoder.decode(data, position)
        rows += batch.num_rows
    return rows


def ours_record_iterator(data: bytes) -> int:
    """validate() then one Record per record, reading offset, timestamp, key and value."""
    from kafkacodec import MemoryRecords

    records = MemoryRecords(data)
    records.validate()
    n = 0
    for record in records.records():
        record.offset, record.timestamp, record.key, record.value
        n += 1
    return n


def ours_append(batches: list, codec: str) -> int:
    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, codec)
    append, build = builder.append, builder.build
    total = 0
    for keys, values in batches:
        for key, value in zip(keys, values):
            append(TIMESTAMP, key, value)
        total += len(build())
    return total


def ours_append_many(batches: list, codec: str) -> int:
    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, codec)
    append_many, build = builder.append_many, builder.build
    total = 0
    for keys, values in batches:
        append_many(TIMESTAMP, keys, values)
        total += len(build())
    return total


def ours_build_into(batches: list, codec: str) -> int:
    """The bulk path: append_many over the lists, each batch built into one reused 64 KiB
    buffer (as Kafka's producer builds into a pooled one)."""
    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, codec)
    append_many, build_into = builder.append_many, builder.build_into
    out = bytearray(POOLED_BUFFER)
    total = 0
    for keys, values in batches:
        append_many(TIMESTAMP, keys, values)
        total += build_into(out)
    return total


def ours_build_into_arrow(columns: tuple[Any, Any, Any], codec: str, per_batch: int) -> int:
    """The same from columns, as Arrow data comes (a Parquet row group, a Spark Arrow batch):
    keys and values as one pyarrow binary array each, timestamps as a numpy int64 array, every
    batch a row range of them (read in place: no Python object per record or per batch)."""
    from kafkacodec import MemoryRecordsBuilder

    timestamps, keys, values = columns
    builder = MemoryRecordsBuilder(2, codec)
    append_many, build_into = builder.append_many, builder.build_into
    out = bytearray(POOLED_BUFFER)
    total = 0
    for start in range(0, len(values), per_batch):
        append_many(timestamps, keys, values, None, start, start + per_batch)
        total += build_into(out)
    return total


def ours_built(batches: list, codec: str) -> bytes:
    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(2, codec)
    out = bytearray()
    for keys, values in batches:
        builder.append_many(TIMESTAMP, keys, values)
        out += builder.build()
    return bytes(out)


def records_sections(data: bytes) -> list[bytes]:
    """The records section (after the 61-byte header) of each batch of an uncompressed v2 log:
    what a builder feeds its codec."""
    sections, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        sections.append(data[pos + 61:pos + 12 + length])
        pos += 12 + length
    return sections


def ours_codec(sections: list[bytes], codec: str) -> int:
    """The codec alone, as the builder runs it: each section into one reused buffer."""
    from kafkacodec._compression import _compress_into
    from kafkacodec._writer import WriteBuffer

    out = WriteBuffer(POOLED_BUFFER)
    total = 0
    for section in sections:
        out.clear()
        total += _compress_into(out, codec, 2, section)
    return total


def ours_down_convert(data: bytes, magic: int) -> int:
    from kafkacodec import down_convert

    return down_convert(data, magic).records.size_in_bytes


def ours_lazy(data: bytes, magic: int) -> int:
    from kafkacodec import LazyDownConvertRecords

    return sum(chunk.records.size_in_bytes
               for chunk in LazyDownConvertRecords(data, magic, chunk_size=CHUNK))


# --- the cases ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    group: str            # the workload (one Java operation)
    variant: str          # kafkacodec's way of doing it
    kind: str             # crc, shallow, deep, build, codec, down, lazy
    size: str
    codec: str = "none"
    magic: int = 2

    @property
    def cold(self) -> bool:
        return self.kind in COLD_KINDS

    @property
    def id(self) -> str:
        return f"{self.group} [{self.variant}]".replace(" ", "_")


ARROW_BUILD = "append_many (Arrow, row ranges) + build_into"
BUILD_VARIANTS = {"append_many + build_into": ours_build_into, ARROW_BUILD: ours_build_into_arrow,
                  "append_many": ours_append_many, "append": ours_append}


ARROW_JAVA_FIELDS = f"ArrowDecoder(columns={','.join(JAVA_DEEP_FIELDS)})"
ARROW_VIEWS = "ArrowDecoder(views=True)"


def _cases() -> list[Case]:
    cases = []
    for size in SIZES:
        cases.append(Case(f"CRC-checked walk {size} none", "validate()", "crc", size))
        cases.append(Case(f"shallow headers {size} none", "index(check_crc=False)", "shallow",
                          size))
    for size in SIZES:
        for codec in CODECS:
            for variant in ("ArrowDecoder", ARROW_JAVA_FIELDS, ARROW_VIEWS, "validate() + records()"):
                cases.append(Case(f"deep iteration {size} {codec}", variant, "deep", size, codec))
    for size in SIZES:
        for codec in CODECS:
            for variant in BUILD_VARIANTS:
                cases.append(Case(f"build v2 {size} {codec}", variant, "build", size, codec))
            if codec != "none":      # the floor under the build rows: the codec alone
                cases.append(Case(f"codec alone {size} {codec}", "_compress_into", "codec",
                                  size, codec))
    conversions = [(size, "none", magic) for size in SIZES for magic in (1, 0)]
    conversions.append(("100B", "lz4", 1))
    for size, codec, magic in conversions:
        for variant in ("down_convert", "LazyDownConvertRecords"):
            cases.append(Case(f"down-convert eager {size} {codec} to v{magic}", variant, "down",
                              size, codec, magic))
        cases.append(Case(f"down-convert lazy {size} {codec} to v{magic}",
                          "LazyDownConvertRecords", "lazy", size, codec, magic))
    return cases


CASES = _cases()


def prepare(case: Case, workloads: Workloads) -> tuple[list[Any], Callable[[], int], int, int]:
    """(Java op, our pass, records per pass, input bytes per pass)."""
    if case.kind == "build":
        batches = workloads.batches(case.size)
        nbytes = sum(len(k) + len(v) for keys, values in batches for k, v in zip(keys, values))
        per_batch = SIZES[case.size][1]
        java = ["build", workloads.records_file(case.size), case.codec, per_batch]
        if case.variant == ARROW_BUILD:
            columns = workloads.arrow_columns(case.size)
            ours = lambda: ours_build_into_arrow(columns, case.codec, per_batch)  # noqa: E731
        else:
            ours = partial(BUILD_VARIANTS[case.variant], batches, case.codec)
        return java, ours, len(workloads.records(case.size)[0]), nbytes
    records = len(workloads.records(case.size)[0])
    if case.kind == "codec":
        path = workloads.log(case.size, "none")
        sections = records_sections(path.read_bytes())
        return (["codec", path, case.codec], lambda: ours_codec(sections, case.codec), records,
                sum(map(len, sections)))
    path = workloads.log(case.size, case.codec)
    data = path.read_bytes()
    if case.kind == "crc":
        return ["crc", path], ours_crc(data), records, len(data)
    if case.kind == "shallow":
        return ["shallow", path], ours_shallow(data), records, len(data)
    if case.kind == "deep":
        if case.variant == "ArrowDecoder":
            return ["deep", path], lambda: ours_arrow(data), records, len(data)
        if case.variant == ARROW_JAVA_FIELDS:
            return ["deep", path], lambda: ours_arrow(data, JAVA_DEEP_FIELDS), records, len(data)
        if case.variant == ARROW_VIEWS:
            return ["deep", path], lambda: ours_arrow(data, views=True), records, len(data)
        return ["deep", path], lambda: ours_record_iterator(data), records, len(data)
    java = ["down", path, case.magic] if case.kind == "down" else ["lazy", path, case.magic, CHUNK]
    if case.variant == "down_convert":
        return java, lambda: ours_down_convert(data, case.magic), records, len(data)
    return java, lambda: ours_lazy(data, case.magic), records, len(data)


def check_same_work(case: Case, java_result: int, ours_result: int, extra: dict,
                    kafka: KafkaJava, workloads: Workloads) -> None:
    """Both sides processed the same: counts match; output sizes recorded (and compared where
    the output is deterministic)."""
    if case.kind in ("crc", "shallow"):
        assert java_result == ours_result == BATCHES, (java_result, ours_result)
    elif case.kind == "deep":
        assert java_result == ours_result == len(workloads.records(case.size)[0])
    elif case.kind == "build":
        java_file = workloads.folder / f"java-built-{case.size}-{case.codec}.bin"
        kafka.run("build", workloads.records_file(case.size), case.codec,
                  SIZES[case.size][1], java_file)
        java_bytes = java_file.read_bytes()
        ours = ours_built(workloads.batches(case.size), case.codec)
        assert java_result == len(java_bytes) and ours_result == len(ours)
        extra.update(java_output_bytes=len(java_bytes), kafkacodec_output_bytes=len(ours),
                     identical_output=java_bytes == ours)
        if case.codec == "none":
            assert java_bytes == ours, "uncompressed batches must be byte-identical to Kafka's"
    else:
        extra.update(java_output_bytes=java_result, kafkacodec_output_bytes=ours_result)
        if case.codec == "none":
            assert java_result == ours_result, (java_result, ours_result)


# --- pytest ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bench_dir():
    folder = Path(tempfile.mkdtemp(prefix="kc-bench-java-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def kafka(bench_dir):
    try:
        harness = KafkaJava(bench_dir)
    except JavaUnavailable as e:
        pytest.skip(str(e))
    yield harness
    harness.close()


@pytest.fixture(scope="module")
def workloads(bench_dir):
    return Workloads(bench_dir)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_vs_kafka_java(benchmark, meta, kafka, workloads, case):
    if case.kind in ("down", "lazy") and kafka.facts["down_conversion"] != "true":
        pytest.skip(f"kafka-clients {kafka.facts['kafka']} has no down-conversion "
                    "(removed in Kafka 4.0)")
    java_op, ours, records, nbytes = prepare(case, workloads)
    meta(f"java: {case.group}", "kafkacodec", nbytes, records)
    extra = benchmark.extra_info
    extra.update(variant=case.variant, workload=case.group, kafka_java=kafka.facts,
                 loadavg_start=os.getloadavg(), cold_caches=case.cold)
    kafka.warm(*java_op)
    ours_result = ours()                     # our warm-up pass
    java_wall: list[float] = []
    java_cpu: list[float] = []
    java_jvm_cpu: list[float] = []
    ours_cpu: list[float] = []
    java_results: set[int] = set()

    def java_round():                         # untimed on our side (pedantic's setup)
        wall, cpu, jvm_cpu, result = kafka.run(*java_op, cold=case.cold)
        java_wall.append(wall)
        java_cpu.append(cpu)
        java_jvm_cpu.append(jvm_cpu)
        java_results.add(result)
        kafka.wait_idle()
        if case.cold:
            evict_caches()

    def ours_round():
        start = time.thread_time()
        result = ours()
        ours_cpu.append(time.thread_time() - start)
        return result

    result = benchmark.pedantic(ours_round, setup=java_round,
                                rounds=COLD_ROUNDS if case.cold else ROUNDS)
    assert result == ours_result and len(java_results) == 1
    extra.update(kafka_java_s=java_wall, kafka_java_cpu_s=java_cpu,
                 kafka_java_jvm_cpu_s=java_jvm_cpu, ours_cpu_s=ours_cpu,
                 java_result=min(java_results), ours_result=ours_result,
                 loadavg_end=os.getloadavg())
    check_same_work(case, min(java_results), ours_result, extra, kafka, workloads)


# --- command line ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "java.json")
    parser.add_argument("--write-docs", action="store_true",
                        help="replace the Kafka-Java section of docs/results.md")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results.md")
    parser.add_argument("-k", dest="select", help="pytest -k expression (a subset of cases)")
    parser.add_argument("--runs", type=int, default=1,
                        help="run it N times (a fresh JVM and Python each), rounds pooled")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import report

    args.json = args.json.resolve()          # pytest runs from the temporary directory
    args.json.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if any(p.suffix in (".so", ".pyd") for p in (ROOT / "kafkacodec").glob("_crc*")):
        # an in-place build (setup.py build_ext --inplace): bench the working tree
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    status, runs = 0, []
    for run in range(max(args.runs, 1)):
        path = args.json if args.runs <= 1 else args.json.with_suffix(f".run{run + 1}.json")
        path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", str(Path(__file__).resolve()), "-p",
               "no:cacheprovider", "-q", "--benchmark-enable", f"--benchmark-json={path}",
               "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
               "--benchmark-columns=min,median,rounds"]
        if args.select:
            cmd += ["-k", args.select]
        print("bench_java: running", " ".join(cmd), file=sys.stderr)
        status = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env).returncode or status
        if not path.exists():
            return status or 1
        runs.append(json.loads(path.read_text()))
    data = report.pooled(runs)
    args.json.write_text(json.dumps(data))
    report.slim(args.json)
    data = json.loads(args.json.read_text())
    command = "python bench/bench_java.py" + (f" --runs {args.runs}" if args.runs > 1 else "") + (
        f" -k '{args.select}'" if args.select else "")
    section = report.java_section(data, command)
    print(section)
    if args.write_docs:
        report.replace_java_section(args.out, section)
        print(f"bench_java: wrote the Kafka-Java section of {args.out}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
