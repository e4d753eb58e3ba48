"""Benchmark report: a Markdown table and a PNG chart of kafkacodec against aiokafka,
kafka-python and the machine's limits, from one pytest-benchmark run, and a section against
Kafka's own Java code (bench/bench_java.py).

  python bench/report.py                          run bench/ now, write docs/results.md + .png
  python bench/report.py --json out/benchmark.json   render a saved run instead
  python bench/report.py --java-json build/bench/java.json   only the Kafka-Java section of
                                                  docs/results.md, from a bench_java.py run
  python bench/report.py --compare OLD.json NEW.json [--threshold 1.5]   regressions table

Conventions (bench/conftest.py `meta` fixture): benchmark.group is the workload,
extra_info["impl"] one of kafkacodec / aiokafka / kafka-python / limit, extra_info["bytes"] and
extra_info["items"] what one round processes. Benchmarks that set no impl are classified from
their names. Throughput uses the median round time.  bench_java.py's benchmarks carry Kafka's
per-round times in extra_info["kafka_java_s"] (its rounds alternate with ours) and get their own
section, between JAVA_BEGIN and JAVA_END, instead of rows in the main table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ["kafkacodec", "aiokafka", "kafka-python", "confluent-kafka", "limit"]
COLORS = {"kafkacodec": "#1f77b4", "aiokafka": "#ff7f0e", "kafka-python": "#2ca02c",
          "confluent-kafka": "#9467bd", "limit": "#7f7f7f"}
JAVA_BEGIN, JAVA_END = "<!-- kafka-java:begin -->", "<!-- kafka-java:end -->"


def run_benchmarks(json_path: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench"), "-p", "no:cacheprovider", "-q",
           "--benchmark-enable", "--benchmark-only", f"--benchmark-json={json_path}",
           "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), *extra]
    print("report: running", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=tempfile.gettempdir())


def slim(path: Path) -> None:
    """Drop every round's raw timing (pytest-benchmark keeps them: tens of MB); stats stay."""
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:
        bench["stats"].pop("data", None)
    path.write_text(json.dumps(data, indent=1))


def impl_of(bench: dict) -> str:
    extra = bench.get("extra_info") or {}
    impl = extra.get("impl") or extra.get("library")
    if impl:
        return str(impl)
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
        mb_s = extra["bytes"] / median / 1e6 if extra.get("bytes") else None
        if mb_s is None and extra.get("GB/s"):
            mb_s = float(extra["GB/s"]) * 1e3
        krec_s = extra["items"] / median / 1e3 if extra.get("items") else None
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


def markdown(data: dict, png_name: str | None, command: str) -> str:
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
    if any("kafka_java_s" in (b.get("extra_info") or {}) for b in data["benchmarks"]):
        lines += [java_section(data, command), ""]
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


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
    rounds = sorted({b["stats"].get("rounds") for b in benches})
    java_times: dict[str, list[float]] = defaultdict(list)
    for b in benches:
        java_times[b["group"]] += b["extra_info"]["kafka_java_s"]
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
             "JVM up, then alternates a Java pass and a kafkacodec pass "
             f"({', '.join(str(r) for r in rounds)} rounds each). Rates are records per second "
             "from the median pass; ratio = kafkacodec's rate / Kafka's (> 1: kafkacodec is "
             "faster). 1-minute load average during the run: "
             f"{min(loads, default=0):.1f} to {max(loads, default=0):.1f}"
             " (on a shared machine the ratios move between runs; rerun on a quiet one).", "",
             "Kafka's side: the CRC walk is `MemoryRecords.batches()` and `ensureValid()`; "
             "shallow headers the same walk reading every header field; deep iteration the "
             "consumer's path (`ensureValid()`, `streamingIterator()`, key and value copied to "
             "`byte[]` as `ByteArrayDeserializer` receives them); build `MemoryRecordsBuilder."
             "append()` per record into one pooled 64 KiB buffer (the producer's `BufferPool`); "
             "eager `MemoryRecords.downConvert()`; lazy `LazyDownConversionRecords.iterator("
             "128 KiB)`. Ours as the variant says: `ArrowDecoder` checks CRCs and fills Arrow "
             "columns, `records()` makes one Python `Record` per record, `build_into()` writes each "
             "batch into one reused 64 KiB buffer (as Kafka's side) and `build()` returns a new "
             "`bytes` per batch, `LazyDownConvertRecords` uses 128 KiB chunks.", "",
             "| workload | Kafka (Java) | kafkacodec | kafkacodec variant | ratio |",
             "|---|---:|---:|---|---:|"]
    for b in benches:
        extra = b["extra_info"]
        java_s, ours_s = _median(java_times[b["group"]]), b["stats"]["median"]
        items = extra.get("items") or 0
        lines.append(f"| {extra.get('workload', b['group'])} | {items / java_s / 1e6:.2f} M/s | "
                     f"{items / ours_s / 1e6:.2f} M/s | {extra.get('variant', '')} | "
                     f"{java_s / ours_s:.2f}x |")
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


def chart(data: dict, png: Path) -> None:
    """One row per workload, one bar per other implementation: its median time / kafkacodec's
    fastest (log scale). Right of 1x: kafkacodec is that many times faster; a `limit` bar left
    of 1x: how far kafkacodec is from the machine's limit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []  # (group, impl, ratio)
    for group, entries in sorted(rows_of(data).items()):
        ours = min((r for r in entries if r["impl"] == "kafkacodec"),
                   key=lambda r: r["median_s"], default=None)
        if ours is None:
            continue
        best: dict[str, float] = {}
        for r in entries:
            if r["impl"] != "kafkacodec":
                best[r["impl"]] = min(best.get(r["impl"], float("inf")), r["median_s"])
        for impl, seconds in best.items():
            rows.append((group, impl, seconds / ours["median_s"]))
    groups = sorted({g for g, _, _ in rows})
    impls = [i for i in IMPLS if any(r[1] == i for r in rows)]
    if not rows:
        return
    height = 0.8 / max(1, len(impls))
    fig, ax = plt.subplots(figsize=(10, 0.22 * len(groups) * max(1, len(impls)) + 1.6))
    for k, impl in enumerate(impls):
        ys = [groups.index(g) + k * height for g, i, _ in rows if i == impl]
        xs = [ratio for _, i, ratio in rows if i == impl]
        ax.barh(ys, xs, height=height, label=impl, color=COLORS.get(impl))
    ax.set_yticks([y + height * (len(impls) - 1) / 2 for y in range(len(groups))])
    ax.set_yticklabels(groups, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("time / kafkacodec's time (log scale; > 1: kafkacodec is faster)")
    ax.set_title("kafkacodec vs aiokafka, kafka-python and the machine's limits (one run, medians)")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
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
    parser.add_argument("--java-json", type=Path,
                        help="a saved bench_java.py run: replace only its section of --out")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results.md")
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
    command = "python bench/report.py" + (" " + " ".join(args.pytest_args) if args.pytest_args else "")
    if args.json:
        command += f"   # rendered from {args.json}"
    if args.json:
        json_path = args.json
    else:
        json_path = ROOT / "build" / "bench" / "benchmark.json"
        json_path.parent.mkdir(parents=True, exist_ok=True)
        run_benchmarks(json_path, args.pytest_args)
        slim(json_path)
        print(f"report: raw results in {json_path}", file=sys.stderr)
    data = json.loads(json_path.read_text())
    png = args.png or args.out.with_suffix(".png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    chart(data, png)
    rel_png = os.path.relpath(png, args.out.parent)
    args.out.write_text(markdown(data, rel_png, command))
    print(f"report: wrote {args.out} and {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
