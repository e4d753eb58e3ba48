"""Benchmark report: a Markdown table and a PNG chart of kafkacodec against aiokafka,
kafka-python and the machine's limits, from one pytest-benchmark run, and a section against
Kafka's own Java code (bench/bench_java.py).

  python bench/report.py                          run bench/ (and bench_spark.py when PySpark is
                                                  there) now, write docs/results.md + .png
  python bench/report.py --json out/benchmark.json [--spark-json build/bench/spark.json]
                                                  render a saved run instead
  python bench/report.py --quick --out /tmp/r.md  a smoke run (the chart's workloads only, tiny data,
                                                  one round): checks the pipeline; numbers mean nothing
  python bench/report.py --java-json build/bench/java.json   only the Kafka-Java section of
                                                  docs/results.md, from a bench_java.py run
  python bench/report.py --compare OLD.json NEW.json [--threshold 1.5]   regressions table

Conventions (bench/conftest.py `meta` fixture): benchmark.group is the workload,
extra_info["impl"] one of kafkacodec / aiokafka / kafka-python / limit, extra_info["bytes"] and
extra_info["items"] what one round processes. Benchmarks that set no impl are classified from
their names. Throughput uses the median round time.  bench_java.py's benchmarks carry Kafka's
per-round times in extra_info["kafka_java_s"] (wall), "kafka_java_cpu_s" (its thread's CPU time,
against our "ours_cpu_s": the ratios) and "kafka_java_jvm_cpu_s" (its whole JVM's); its rounds
alternate with ours.  They get their own section, between JAVA_BEGIN and JAVA_END, instead of
rows in the main table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ["kafkacodec", "aiokafka", "kafka-python", "confluent-kafka", "limit"]
COLORS = {"kafkacodec": "#1f77b4", "aiokafka": "#ff7f0e", "kafka-python": "#2ca02c",
          "confluent-kafka": "#9467bd", "limit": "#7f7f7f"}
DEFAULT_OUT = ROOT / "docs" / "results.md"
JAVA_BEGIN, JAVA_END = "<!-- kafka-java:begin -->", "<!-- kafka-java:end -->"


QUICK_ENV = {"KC_BENCH_MB": "1", "KAFKACODEC_BENCH_SHALLOW_MB": "1", "KC_BENCH_RECORDS": "10000"}
QUICK_PYTEST = ["--benchmark-min-rounds=1", "--benchmark-max-time=0", "--benchmark-warmup=off",
                "-k", "not gzip and not snappy"]
QUICK_MODULES = ["bench_decode.py", "bench_arrow.py", "bench_build.py", "bench_downconvert.py"]
QUICK_SPARK_RECORDS = 40_000


def _env(quick: bool) -> dict[str, str]:
    """The benchmarks' environment: this checkout's kafkacodec when it is built in place (setup.py
    build_ext --inplace), else the installed one (the bare source tree cannot import)."""
    env = dict(os.environ, **(QUICK_ENV if quick else {}))
    if any(p.suffix in (".so", ".pyd") for p in (ROOT / "kafkacodec").glob("_crc*")):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_benchmarks(json_path: Path, extra: list[str], quick: bool = False) -> None:
    targets = [str(ROOT / "bench" / m) for m in QUICK_MODULES] if quick else [str(ROOT / "bench")]
    # bench_java.py has its own protocol (whole runs pooled: `bench_java.py --runs 5 --write-docs`)
    # and its section of the report, kept as it is
    cmd = [sys.executable, "-m", "pytest", *targets, "--ignore", str(ROOT / "bench" / "bench_java.py"),
           "-p", "no:cacheprovider", "-q",
           "--benchmark-enable", "--benchmark-only", f"--benchmark-json={json_path}",
           "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), *(QUICK_PYTEST if quick else []), *extra]
    print("report: running", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=tempfile.gettempdir(), env=_env(quick))


def run_spark(json_path: Path, quick: bool = False) -> bool:
    """bench_spark.py in the same run (False when PySpark is not installed)."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        print("report: no PySpark, no Spark rows/s", file=sys.stderr)
        return False
    cmd = [sys.executable, str(ROOT / "bench" / "bench_spark.py"), "--json", str(json_path)]
    if quick:
        cmd += [str(QUICK_SPARK_RECORDS), "--rounds", "1"]
    env = _env(quick)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    print("report: running", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=tempfile.gettempdir(), env=env)
    return True


def slim(path: Path) -> None:
    """Drop every round's raw timing (pytest-benchmark keeps them: tens of MB); stats stay."""
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:
        bench["stats"].pop("data", None)
    path.write_text(json.dumps(data, indent=1))


def impl_of(bench: dict) -> str:
    extra = bench.get("extra_info") or {}
    impl = extra.get("impl") or extra.get("library")
    if impl:                          # "kafkacodec validate()", "machine: bytes copy": the variant says which
        impl = str(impl)
        return "kafkacodec" if impl.startswith("kafkacodec") else "limit" if impl.startswith("machine") else impl
    name = (bench["name"] + " " + str(bench.get("param") or "")).lower().replace("_", "-")
    for candidate in ("kafka-python", "aiokafka", "confluent-kafka", "kafkacodec"):
        if candidate in name or candidate.replace("-", "") in name:
            return candidate
    if "ours" in name:
        return "kafkacodec"
    if any(word in name for word in ("memcpy", "limit", "zlib", "crc32c-package")):
        return "limit"
    return "kafkacodec"


def rows_of(data: dict) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for bench in data["benchmarks"]:
        stats = bench["stats"]
        extra = bench.get("extra_info") or {}
        if "kafka_java_s" in extra:
            continue                                    # java_section()
        median = stats["median"]
        nbytes = extra.get("bytes") or extra.get("input_bytes")
        items = extra.get("items") or extra.get("records")
        mb_s = nbytes / median / 1e6 if nbytes else None
        if mb_s is None and extra.get("GB/s"):
            mb_s = float(extra["GB/s"]) * 1e3
        krec_s = items / median / 1e3 if items else None
        if krec_s is None and extra.get("records_per_second"):
            krec_s = float(extra["records_per_second"]) / 1e3
        row = {"name": bench["name"], "variant": str(bench.get("param") or bench["name"]),
               "impl": impl_of(bench), "median_s": median, "min_s": stats["min"],
               "rounds": stats.get("rounds"), "mb_s": mb_s, "krec_s": krec_s}
        groups[bench.get("group") or bench["name"]].append(row)
    return groups


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}"


def human_time(seconds: float) -> str:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds / 1e-9:.0f} ns"


def spark_section(spark: dict) -> list[str]:
    lines = ["## Spark (bench/bench_spark.py, same run)", "",
             f"{spark['records']:,} records, local[2], the noop sink, best of {spark.get('rounds', 3)}; "
             f"load average {spark['load_average'][0]:.1f} to {spark['load_average'][1]:.1f}.", "",
             "| path | rows/s |", "|---|---:|"]
    lines += [f"| {name} | {rate / 1e6:.2f} M |" for name, rate in spark["rows_per_s"].items()]
    lines += [f"| {name} | x{x:.1f} the full scan |" for name, x in spark.get("pushdown_speedup", {}).items()]
    return lines + [""]


def markdown(data: dict, png_name: str | None, command: str, spark: dict | None = None) -> str:
    info = data.get("machine_info", {})
    facts = info.get("kafkacodec_facts", {})
    env = " ".join(f"{k}={v}" for k, v in (facts.get("env") or {}).items() if v)
    if env and not command.startswith(env):
        command = f"{env} {command}"
    versions = info.get("kafkacodec_versions", {})
    lines = ["# Benchmark results", "",
             f"Measured in one run on {data.get('datetime', '?')[:19]} UTC with:", "",
             "```bash", command, "```", "",
             "## Machine", "",
             f"- CPU: {facts.get('cpu_model') or info.get('cpu', {}).get('brand_raw', '?')}, "
             f"{facts.get('cpu_count', '?')} logical cores (benchmarks run on one)",
             f"- Python {facts.get('python') or info.get('python_version', '?')} on "
             f"{facts.get('platform') or info.get('system', '?')}",
             f"- CRC-32C in hardware: {facts.get('crc32c_hardware', '?')}; "
             f"big-buffer workloads: {facts.get('scale_mb', '?')} MB",
             "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v), ""]
    if png_name:
        lines += [f"![throughput]({png_name})", ""]
    lines += ["## Results", "",
              "Median of the rounds (best round in brackets: on a shared machine the other "
              "statistics partly measure the neighbours). Ratio = this row's median / the "
              "fastest kafkacodec variant's median in the workload (> 1: kafkacodec is "
              "faster; for a `limit` row, < 1 says how far kafkacodec is from the limit).", "",
              "| workload | implementation | variant | median (best) | MB/s | k records/s | ratio |",
              "|---|---|---|---:|---:|---:|---:|"]
    for group, rows in sorted(rows_of(data).items()):
        ours = min((r for r in rows if r["impl"] == "kafkacodec"), key=lambda r: r["median_s"],
                   default=None)
        for row in sorted(rows, key=lambda r: (IMPLS.index(r["impl"]) if r["impl"] in IMPLS
                                               else 9, r["median_s"])):
            ratio = ""
            if ours is not None and row is not ours:
                ratio = f"{row['median_s'] / ours['median_s']:.2f}x"
            lines.append(f"| {group} | {row['impl']} | {row['variant']} | "
                         f"{human_time(row['median_s'])} ({human_time(row['min_s'])}) | "
                         f"{fmt(row['mb_s'])} | {fmt(row['krec_s'])} | {ratio} |")
    lines.append("")
    if spark:
        lines += spark_section(spark)
    if any("kafka_java_s" in (b.get("extra_info") or {}) for b in data["benchmarks"]):
        lines += [java_section(data, command), ""]
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def pooled(runs: list[dict]) -> dict:
    """Several bench_java runs' results as one: each case's passes (both sides') and pytest-benchmark's
    rounds pooled, so a ratio is the median over every run (what one run's JIT, memory
    placement and load decided moves it less); the load average's extremes kept."""
    data = runs[0]
    data["runs"] = len(runs)
    for other in runs[1:]:
        found = {b["fullname"]: b for b in other["benchmarks"]}
        for bench in data["benchmarks"]:
            more = found.get(bench["fullname"])
            if more is None:
                continue
            extra, extra_more = bench["extra_info"], more["extra_info"]
            for key in ("ours_cpu_s", "kafka_java_s", "kafka_java_cpu_s", "kafka_java_jvm_cpu_s"):
                extra[key] = extra.get(key, []) + extra_more.get(key, [])
            for key, pick in (("loadavg_start", min), ("loadavg_end", max)):
                if extra.get(key) and extra_more.get(key):
                    extra[key] = pick(extra[key], extra_more[key])
            bench["stats"]["data"] = bench["stats"].get("data", []) + more["stats"].get("data", [])
    for bench in data["benchmarks"]:
        rounds = bench["stats"].get("data", [])
        if rounds:
            bench["stats"]["median"] = _median(rounds)
            bench["stats"]["rounds"] = len(rounds) // len(runs)
    return data


def java_section(data: dict, command: str) -> str:
    """bench_java.py's results: per workload Kafka's rate, ours per variant and the ratio (ours /
    Kafka's, > 1: kafkacodec is faster), medians of alternating rounds; then the output sizes."""
    benches = [b for b in data["benchmarks"] if "kafka_java_s" in (b.get("extra_info") or {})]
    if not benches:
        return ""
    info = data.get("machine_info", {})
    facts = info.get("kafkacodec_facts", {})
    java = benches[0]["extra_info"]["kafka_java"]
    loads = [load[0] for b in benches for load in (b["extra_info"].get("loadavg_start"),
                                                    b["extra_info"].get("loadavg_end")) if load]
    def rounds_of(cold: bool) -> str:
        counts = sorted({b["stats"].get("rounds") for b in benches
                         if bool(b["extra_info"].get("cold_caches")) == cold})
        return "/".join(str(count) for count in counts)
    runs = data.get("runs", 1)
    runs_note = (f"in each of {runs} runs of the whole bench, a fresh JVM and Python process "
                 "each, every ratio from the pooled passes of all runs") if runs > 1 else ""
    warm, cold = rounds_of(False), rounds_of(True)
    rounds_note = ", ".join(([f"{warm} rounds each"] if warm else []) + ([runs_note] if runs_note else []))
    cold_note = ("The CRC walk and shallow header rows are memory-bound single passes over a 16 MB "
                 "log, decided by whose copy earlier passes left in the shared caches: there both "
                 "sides evict the caches before each timed pass (untimed, on the timing thread: "
                 "one byte written per line of 64 MiB of 4 KiB pages), so both read the log from "
                 f"memory, and they take {cold} rounds each (a ~1 ms pass, decided by a memory bus "
                 "the host shares: more rounds spread over more of its changes). ") if cold else ""
    converts = any("down-convert" in b["group"] for b in benches)
    # per workload (group), Java's passes of every variant's case: wall, thread CPU, JVM CPU
    java_times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for b in benches:
        for key in ("kafka_java_s", "kafka_java_cpu_s", "kafka_java_jvm_cpu_s"):
            java_times[b["group"]][key] += b["extra_info"].get(key, [])
    lines = [JAVA_BEGIN, "## Against Kafka's own Java code (same run)", "",
             f"Kafka {java.get('kafka')}'s record classes ({java.get('jars')}) on "
             f"{java.get('java.vm.name', '?').replace('_', ' ')} {java.get('java.vm.version')} "
             f"(`{java.get('jvm_flags')}`), against kafkacodec on Python "
             f"{facts.get('python', '?')}, {facts.get('cpu_model', '?')} "
             f"({facts.get('cpu_count', '?')} logical cores), measured "
             f"{data.get('datetime', '?')[:19]} UTC with:", "",
             "```bash", command, "```", "",
             "Both sides read the same files (bench/bench_java.py writes them: JSON-like values, "
             "100-byte values 128 per batch and 1 KiB values 16 per batch); each case warms the "
             "JVM up, then alternates a Java pass and a kafkacodec pass"
             f"{f' ({rounds_note})' if rounds_note else ''}. {cold_note}Our pass starts once no "
             "JVM thread has run for 1 ms. Rates are records per second "
             "from the median pass's CPU time; ratio = kafkacodec's rate / Kafka's (> 1: "
             "kafkacodec is faster), by the CPU time of the thread doing the pass on each side "
             "(Java's `ThreadMXBean.getCurrentThreadCpuTime()`, Python's `time.thread_time()`); the wall "
             "ratio is beside it, and the JVM ratio counts the whole JVM's CPU time in Java's "
             "pass (its GC and JIT threads too). 1-minute load average during the run: "
             f"{min(loads, default=0):.1f} to {max(loads, default=0):.1f}"
             " (on a shared machine the ratios move between runs; rerun on a quiet one).", "",
             "Kafka's side: the CRC walk is `MemoryRecords.batches()` and `ensureValid()`; "
             "shallow headers the same walk reading every header field; deep iteration the "
             "consumer's path (`ensureValid()`, `streamingIterator()`, offset and timestamp "
             "read, key and value copied to `byte[]` as `ByteArrayDeserializer` receives them); "
             "build `MemoryRecordsBuilder.append()` per record into one pooled 64 KiB buffer "
             "(the producer's `BufferPool`); codec alone (the floor under the compressed build "
             "rows) each batch's records section through `Compression.wrapForOutput()` into "
             "that buffer, ours through `_compress_into()` into one reused buffer"
             + ("; eager `MemoryRecords.downConvert()`; lazy `LazyDownConversionRecords.iterator("
                "128 KiB)`" if converts else "")
             + ". Ours as the variant says: `ArrowDecoder` checks CRCs and fills the 14 "
             "Arrow columns of Spark's Kafka schema, with `columns=offset,timestamp,key,value` "
             "only what Java's pass reads (the like-for-like row: keys and values copied out, "
             "offsets and timestamps made), `views=True` the 14 columns with keys and values "
             "as `binary_view` views of the log (an uncompressed value is not copied, where "
             "Java's pass copies it into a `byte[]`), `records()` makes one Python `Record` per "
             "record, `build_into()` writes each batch into one reused 64 KiB buffer (as Kafka's "
             "side) "
             "and `build()` returns a new `bytes` per batch, the Arrow build row passes the "
             "whole workload's arrays (one binary array each for keys and values, a numpy "
             "int64 array for timestamps) with each batch's row range"
             + (", `LazyDownConvertRecords` uses 128 KiB chunks." if converts else "."), "",
             "| workload | Kafka (Java) | kafkacodec | kafkacodec variant | ratio | wall ratio | "
             "JVM ratio |", "|---|---:|---:|---|---:|---:|---:|"]
    for b in benches:
        extra = b["extra_info"]
        java = java_times[b["group"]]
        java_wall, ours_wall = _median(java["kafka_java_s"]), b["stats"]["median"]
        # a run from before the CPU columns: wall time only
        java_cpu = _median(java["kafka_java_cpu_s"]) if java["kafka_java_cpu_s"] else java_wall
        jvm_passes = java["kafka_java_jvm_cpu_s"]          # < 0: no /proc on Java's machine
        java_jvm = _median(jvm_passes) if jvm_passes and min(jvm_passes) >= 0 else None
        ours_cpu = _median(extra["ours_cpu_s"]) if extra.get("ours_cpu_s") else ours_wall
        items = extra.get("items") or 0
        lines.append(f"| {extra.get('workload', b['group'])} | {items / java_cpu / 1e6:.2f} M/s | "
                     f"{items / ours_cpu / 1e6:.2f} M/s | {extra.get('variant', '')} | "
                     f"{java_cpu / ours_cpu:.2f}x | {java_wall / ours_wall:.2f}x | "
                     f"{'' if java_jvm is None else f'{java_jvm / ours_cpu:.2f}x'} |")
    sizes = {}
    for b in benches:
        extra = b["extra_info"]
        if "java_output_bytes" in extra and extra.get("workload") not in sizes:
            sizes[extra.get("workload")] = extra
    if sizes:
        lines += ["", "Output sizes of the same records (the builders) and of the same input "
                  "(the converters):", "",
                  "| workload | Kafka (Java) bytes | kafkacodec bytes | kafkacodec / Kafka | "
                  "identical bytes |", "|---|---:|---:|---:|---|"]
        for workload, extra in sizes.items():
            java_bytes, ours_bytes = extra["java_output_bytes"], extra["kafkacodec_output_bytes"]
            same = extra.get("identical_output")
            lines.append(f"| {workload} | {java_bytes:,} | {ours_bytes:,} | "
                         f"{ours_bytes / java_bytes:.4f} | "
                         f"{'' if same is None else 'yes' if same else 'no'} |")
    lines.append(JAVA_END)
    return "\n".join(lines)


def kept_sections(path: Path, *, java: bool = True) -> str:
    """The sections of `path` that other benchmarks wrote by hand or by their own script, between
    `<!-- NAME:begin -->` and `<!-- NAME:end -->` (bench_java.py --write-docs: the Kafka-Java
    section; bench_serve.py's TLS, bench_mirror.py's Kafka mode, bench_net_ab.py: docs/results.md's
    "Network layer"): kept, in order, at the end of the new file; the Kafka-Java one only with
    `java` (a run that measured Java itself writes its own)."""
    if not path.exists():
        return ""
    text = path.read_text()
    kept = [m.group(0) for m in re.finditer(r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->", text, flags=re.S)
            if java or m.group(1) != "kafka-java"]
    return "".join("\n\n" + block + "\n" for block in kept)


def replace_java_section(path: Path, section: str) -> None:
    """Put `section` between the markers in `path` (appended when there are none); the rest of
    the file is kept."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    if JAVA_BEGIN in text and JAVA_END in text:
        head, rest = text.split(JAVA_BEGIN, 1)
        text = head + section + rest.split(JAVA_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


# The README's workloads, in its table and its chart: (group name pattern, label), those of the
# run that match.
HEADLINE = [
    (r"^decode v2 100k records none$", "decode v2 to records, none"),
    (r"^decode v2 100k records lz4$", "decode v2 to records, lz4"),
    (r"^decode v2 100k records zstd$", "decode v2 to records, zstd"),
    (r"^decode v2 100k records gzip$", "decode v2 to records, gzip"),
    (r"^decode v2 100k records snappy$", "decode v2 to records, snappy"),
    (r"^decode v1 100k records none$", "decode v1 to records, none"),
    (r"^decode v0 100k records none$", "decode v0 to records, none"),
    (r"^decode v2 none, 100-byte values$", "decode v2 to Arrow columns"),
    (r"^shallow\+CRC", "walk + check CRCs"),
    (r"^build v2 none:", "build v2, none"),
    (r"^build v2 lz4:", "build v2, lz4"),
    (r"^build v2 zstd:", "build v2, zstd"),
    (r"^v2->v1 1KiB none$", "down-convert v2 to v1, 1 KiB"),
    (r"^v2->v1 100B lz4$", "down-convert v2 to v1, 100 B lz4"),
]
PEERS = ["aiokafka", "kafka-python"]
README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"


def headline(data: dict) -> list[tuple[str, dict, dict[str, float]]]:
    """(label, kafkacodec's fastest row, {peer: the peer's best median / that row's median})
    per headline workload the run has."""
    groups = rows_of(data)
    out = []
    for pattern, label in HEADLINE:
        name = next((g for g in sorted(groups) if re.search(pattern, g)), None)
        ours = min((r for r in groups.get(name, []) if r["impl"] == "kafkacodec"), key=lambda r: r["median_s"],
                   default=None)
        if ours is None:
            continue
        best: dict[str, float] = {}
        for r in groups[name]:
            best[r["impl"]] = min(best.get(r["impl"], float("inf")), r["median_s"])
        ratios = {p: best[p] / ours["median_s"] for p in PEERS if p in best}
        if ratios:
            out.append((label, ours, ratios))
    return out


def speedups(data: dict) -> list[tuple[str, dict[str, float]]]:
    """(label, {peer: speed-up}) per headline workload: the chart's left panel."""
    return [(label, ratios) for label, _, ratios in headline(data)]


def rate(row: dict) -> str:
    """kafkacodec's rate in a README row: records/s where the workload counts records, else bytes/s."""
    if row["krec_s"]:
        return f"{row['krec_s'] / 1e3:.2f} M records/s"
    return f"{row['mb_s'] / 1e3:.1f} GB/s" if row["mb_s"] else human_time(row["median_s"])


def readme_results(data: dict, spark: dict | None) -> str:
    """The README's results table, from the run that drew the chart and docs/results.md."""
    facts = data.get("machine_info", {}).get("kafkacodec_facts", {})
    lines = [README_BEGIN,
             f"One run, {data.get('datetime', '?')[:16].replace('T', ' ')} UTC, {facts.get('cpu_model') or '?'} "
             f"({facts.get('cpu_count', '?')} cores), Python {facts.get('python', '?')}: medians; the chart above "
             "and docs/results.md are the same run (bench/report.py). Each row: kafkacodec's fastest "
             "variant (its name in docs/results.md) against each peer's fastest.", "",
             "| workload | kafkacodec | vs aiokafka (compiled) | vs kafka-python |", "|---|---|---|---|"]
    for label, ours, ratios in headline(data):
        cells = [f"{ratios[p]:.2f}x" if p in ratios else "" for p in PEERS]
        lines.append(f"| {label} | {rate(ours)} (`{ours['variant']}`) | {' | '.join(cells)} |")
    if spark:
        paths = spark["rows_per_s"]
        source = paths.get("kafkalog source")
        others = [f"{source / v:.0%} of {name}" if v > source else f"{source / v:.2f}x {name}"
                  for name, v in paths.items() if name != "kafkalog source"]
        lines.append(f"| Spark `format(\"kafkalog\")`, local[2], {spark['records'] / 1e6:g}M rows | "
                     f"{source / 1e6:.2f} M rows/s | | {'; '.join(others)} |")
    return "\n".join(lines + ["", README_END])


def run_id(data: dict) -> str:
    """What the chart's PNG carries (tEXt Description) to name the run it was drawn from."""
    return f"bench/report.py run {data.get('datetime', '?')}"


def replace_readme_results(path: Path, block: str) -> None:
    text = path.read_text()
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    path.write_text(text[:start] + block + text[end:])


def chart(data: dict, png: Path, spark: dict | None = None) -> None:
    """The README chart, about 1000 x 420 px: left, kafkacodec's speed-up over aiokafka and
    kafka-python on the headline workloads (bars from 1x; a log axis labelled 1x, 2x, 5x...,
    each bar with its value); right, Spark rows/s per path (linear), from the same run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = speedups(data)
    if not rows:
        return
    panels = 2 if spark else 1
    fig, axes = plt.subplots(1, panels, figsize=(10, 0.34 * len(rows) + 1.9), dpi=100,
                             gridspec_kw={"width_ratios": [3, 2][:panels]}, squeeze=False)
    ax = axes[0][0]
    height = 0.38
    top = max(v for _, ratios in rows for v in ratios.values())
    for k, peer in enumerate(PEERS):
        ys = [i + (k - 0.5) * height for i, (_, ratios) in enumerate(rows) if peer in ratios]
        values = [ratios[peer] for _, ratios in rows if peer in ratios]
        ax.barh(ys, [max(v - 1, 0.001) for v in values], left=1, height=height, label=f"vs {peer}",
                color=COLORS[peer])
        for y, v in zip(ys, values):
            ax.text(v * 1.05, y, f"{v:.1f}x" if v < 10 else f"{v:.0f}x", va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(1, top * 2.2)
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= top * 2.2]
    ax.set_xticks(ticks, [f"{t}x" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1, color="black", linewidth=0.8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel("kafkacodec's speed-up (peer's time / ours; log axis from 1x = as fast)", fontsize=8)
    ax.set_title("kafkacodec vs Python peers", fontsize=10, pad=20)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8, frameon=False,
              borderaxespad=0.2)
    if spark:
        ax2 = axes[0][1]
        paths = list(spark["rows_per_s"].items())
        colors = [COLORS["kafkacodec"] if "kafka-python" not in name and "no-decode" not in name
                  and "Parquet" not in name else COLORS["kafka-python"] if "kafka-python" in name
                  else COLORS["limit"] for name, _ in paths]
        values = [v / 1e6 for _, v in paths]
        ax2.barh(range(len(paths)), values, color=colors, height=0.6)
        for i, v in enumerate(values):
            ax2.text(v + max(values) * 0.02, i, f"{v:.2f}", va="center", fontsize=7)
        ax2.set_xlim(0, max(values) * 1.25)
        ax2.set_yticks(range(len(paths)), [name for name, _ in paths], fontsize=8)
        ax2.invert_yaxis()
        ax2.grid(axis="x", alpha=0.3)
        low, high = spark.get("load_average", [0, 0])
        ax2.set_xlabel(f"million rows/s (linear; load average {low:.1f}-{high:.1f})", fontsize=8)
        ax2.set_title(f"Spark local[2], {spark['records'] / 1e6:g}M records", fontsize=10, pad=20)
    facts = data.get("machine_info", {}).get("kafkacodec_facts", {})
    fig.text(0.01, 0.01, f"one run, {data.get('datetime', '?')[:10]}, {facts.get('cpu_model') or '?'} "
                         f"({facts.get('cpu_count', '?')} cores), Python {facts.get('python', '?')}; medians; "
                         "bench/report.py", fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(png, dpi=100, metadata={"Description": run_id(data)})
    plt.close(fig)


def compare(old_path: Path, new_path: Path, threshold: float) -> int:
    """Per benchmark, new median / old median; lists regressions beyond `threshold`."""
    old = {b["fullname"]: b["stats"]["median"] for b in json.loads(old_path.read_text())["benchmarks"]}
    new = {b["fullname"]: b["stats"]["median"] for b in json.loads(new_path.read_text())["benchmarks"]}
    lines = ["| benchmark | previous | now | now/previous |", "|---|---:|---:|---:|"]
    regressions = 0
    for name in sorted(new):
        if name not in old:
            continue
        ratio = new[name] / old[name]
        flag = " ⚠" if ratio > threshold else ""
        regressions += ratio > threshold
        lines.append(f"| {name} | {human_time(old[name])} | {human_time(new[name])} | "
                     f"{ratio:.2f}{flag} |")
    print("\n".join(lines))
    print(f"\n{regressions} benchmark(s) slower than {threshold}x the previous run.")
    return 1 if regressions else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="a saved pytest-benchmark JSON (else: run now)")
    parser.add_argument("--spark-json", type=Path, help="a saved bench_spark.py --json run (with --json)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny data, one round: a smoke run of the whole pipeline (numbers mean nothing)")
    parser.add_argument("--no-spark", action="store_true", help="do not run bench_spark.py")
    parser.add_argument("--java-json", type=Path,
                        help="a saved bench_java.py run: replace only its section of --out")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--readme", type=Path, default=None,
                        help="the README whose results table to replace (default: README.md with the default --out)")
    parser.add_argument("--png", type=Path, default=None, help="default: beside --out")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--threshold", type=float, default=1.5)
    parser.add_argument("--fail-on-regression", action="store_true")
    parser.add_argument("--slim", type=Path, metavar="JSON",
                        help="rewrite a pytest-benchmark JSON without the per-round data")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments when running")
    args = parser.parse_args(argv)
    if args.slim:
        slim(args.slim)
        return 0
    if args.compare:
        status = compare(*args.compare, args.threshold)
        return status if args.fail_on_regression else 0
    if args.java_json:
        section = java_section(json.loads(args.java_json.read_text()),
                               f"python bench/bench_java.py   # rendered from {args.java_json}")
        replace_java_section(args.out, section)
        print(f"report: wrote the Kafka-Java section of {args.out}", file=sys.stderr)
        return 0
    command = "python bench/report.py" + (" --quick" if args.quick else "") + \
        (" " + " ".join(args.pytest_args) if args.pytest_args else "")
    spark_path = args.spark_json
    if args.json:
        json_path = args.json
    else:
        json_path = ROOT / "build" / "bench" / "benchmark.json"
        json_path.parent.mkdir(parents=True, exist_ok=True)
        run_benchmarks(json_path, args.pytest_args, args.quick)
        slim(json_path)
        print(f"report: raw results in {json_path}", file=sys.stderr)
        if not args.no_spark and run_spark(json_path.with_name("spark.json"), args.quick):
            spark_path = json_path.with_name("spark.json")
    data = json.loads(json_path.read_text())
    spark = json.loads(spark_path.read_text()) if spark_path else None
    if "run" in data:                     # a results.json this script wrote: the run as it was
        data, spark, command = data["run"], data.get("spark"), data["command"]
    elif args.json:
        command += f"   # rendered from {args.json}"
    png = args.png or args.out.with_suffix(".png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    chart(data, png, spark)
    rel_png = os.path.relpath(png, args.out.parent)
    measured_java = any("kafka_java_s" in (b.get("extra_info") or {}) for b in data["benchmarks"])
    args.out.write_text(markdown(data, rel_png, command, spark) + kept_sections(args.out, java=not measured_java))
    # The run itself beside its report: tests/test_bench_report.py renders the README's table,
    # docs/results.md and the chart's run id from it and compares.
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "run": data, "spark": spark},
                                                        indent=None, separators=(",", ":")))
    readme = args.readme or (ROOT / "README.md" if args.out == DEFAULT_OUT else None)
    if readme:
        replace_readme_results(readme, readme_results(data, spark))
    print(f"report: wrote {args.out}, {png}, {args.out.with_suffix('.json')}"
          + (f" and {readme}'s results" if readme else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
