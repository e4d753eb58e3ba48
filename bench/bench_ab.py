"""The core readers before and after a change, in the same run (issue 15: no benchmark gets
slower when the readers move onto one walker).

    python bench/bench_ab.py --base 1e1014d                # this checkout against 1e1014d
    python bench/bench_ab.py --base main -k "columnar or ring" --rounds 9

The base commit is exported with `git archive` into build/ab/<commit> and built in place there
once (later runs reuse it). The inputs are made once by this checkout into build/ab/data; both
sides read the same files. Every round runs each workload in one child process per side, the
side that goes first alternating; a child imports kafkacodec from its own tree, warms up, then
times passes (each repeats the workload to about 50 ms) by thread CPU time (time.thread_time)
and prints its median. A side's time
is the median of its rounds; ratio = base time / new time (> 1: the new code is faster). The
1-minute load average is printed with the table: on a shared machine, rerun when it is high.

Workloads (the readers issue 15 put on the walker, with their own work):
  decode     MemoryRecords(data).records(), offset and value read per record
  columnar   ArrowDecoder over the whole log (all 14 columns)
  downconv   down_convert(data, magic) and LazyDownConvertRecords (128 KiB chunks)
  mirror     trim_batch(batch, fetch offset in the middle of the batch) for every batch
  ring       ResponseRingBuffer: feed 64 KiB chunks of Fetch v4 responses, records(4)
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "ab"
LOG_BYTES = 4 << 20
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# (name, kind, input, argument): input names a file made by make_inputs()
WORKLOADS = (
    [(f"decode v2 100B {c}", "decode", f"v2-100-{c}", None) for c in ("none", "lz4", "zstd", "gzip")]
    + [(f"decode v1 100B {c}", "decode", f"v1-100-{c}", None) for c in ("none", "gzip")]
    + [(f"columnar v2 {s} {c}", "columnar", f"v2-{n}-{c}", None)
       for s, n in (("100B", 100), ("1KiB", 1024)) for c in CODECS]
    + [(f"columnar v1 100B {c}", "columnar", f"v1-100-{c}", None) for c in ("none", "gzip")]
    + [(f"downconv eager {s} {c} to v{m}", "downconv", f"v2-{n}-{c}", m)
       for s, n in (("100B", 100), ("1KiB", 1024)) for c in ("none", "lz4") for m in (1, 0)]
    + [(f"downconv lazy {s} {c} to v1", "lazy", f"v2-{n}-{c}", 1)
       for s, n in (("100B", 100), ("1KiB", 1024)) for c in ("none", "lz4")]
    + [(f"mirror trim v2 100B {c}", "trim", f"v2-100-{c}", None) for c in ("none", "lz4", "gzip")]
    + [("mirror trim v1 100B gzip", "trim", "v1-100-gzip", None)]
    + [(f"ring v2 100B {c}", "ring", f"fetch-100-{c}", None) for c in ("none", "lz4")]
)

# What a child runs: one workload over one input, `passes` timed passes after a warm-up.
CHILD = r'''
import json, statistics, sys, time
kind, path, arg, passes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
data = open(path, "rb").read()
import kafkacodec
if kind == "decode":
    from kafkacodec import MemoryRecords
    def run():
        n = 0
        for r in MemoryRecords(data).records():
            r.offset; r.value
            n += 1
        return n
elif kind == "columnar":
    from kafkacodec.arrow import ArrowDecoder
    def run():
        dec, pos, n = ArrowDecoder("t", 0), 0, 0
        while pos < len(data):
            rb, pos = dec.decode(data, pos)
            n += rb.num_rows
        return n
elif kind == "downconv":
    from kafkacodec import down_convert
    def run():
        return down_convert(data, arg).records.size_in_bytes
elif kind == "lazy":
    from kafkacodec import LazyDownConvertRecords
    def run():
        return sum(c.records.size_in_bytes for c in LazyDownConvertRecords(data, arg, chunk_size=128 << 10))
elif kind == "trim":
    from kafkacodec import MemoryRecords
    from kafkacodec.mirror import trim_batch
    batches = [(bytes(b.raw), b.base_offset + (b.last_offset - b.base_offset) // 2)
               for b in MemoryRecords(data).batches()]
    def run():
        n = 0
        for raw, fetch_offset in batches:
            if trim_batch(raw, fetch_offset) is not None:
                n += 1
        return n
elif kind == "ring":
    from kafkacodec import ResponseRingBuffer
    view = memoryview(data)
    chunks = [view[i:i + (64 << 10)] for i in range(0, len(data), 64 << 10)]
    ring = ResponseRingBuffer(1 << 20)
    def run():
        n = 0
        for chunk in chunks:
            pos = 0
            while pos < len(chunk):
                pos += ring.feed(chunk[pos:] if pos else chunk)
                while (resp := ring.next_response()) is not None:
                    for rec in resp.records(4):
                        rec.offset; rec.value_length
                        n += 1
                    resp.release()
        return n
else:
    raise SystemExit(f"unknown kind {kind}")
t0 = time.thread_time()
count = run()
reps = max(1, int(0.05 / max(time.thread_time() - t0, 1e-6)))   # a pass takes >= ~50 ms
times = []
for _ in range(passes):
    t0 = time.thread_time()
    for _ in range(reps):
        run()
    times.append((time.thread_time() - t0) / reps)
print(json.dumps({"seconds": statistics.median(times), "count": count}))
'''


def sh(*args: str, cwd: Path | None = None, **kw: object) -> str:
    done = subprocess.run(args, cwd=cwd, text=True, capture_output=True, **kw)
    if done.returncode:
        raise SystemExit(f"{' '.join(args[:2])}... failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def base_tree(commit: str) -> Path:
    """build/ab/<full sha>: the commit's files, its extensions built in place (once)."""
    sha = sh("git", "rev-parse", "--verify", f"{commit}^{{commit}}", cwd=ROOT).strip()
    tree = WORK / sha
    done = tree / ".built"
    if done.exists():
        return tree
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    print(f"building {commit} ({sha[:10]}) in {tree} (once; a few minutes)", file=sys.stderr)
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL)
    done.write_text(sha)
    return tree


def make_log(magic: int, size: int, codec: str) -> tuple[bytes, list[bytes]]:
    """~LOG_BYTES of 16 KiB batches with consecutive offsets: the log and its batches."""
    sys.path.insert(0, str(ROOT))
    from bench_downconvert import values        # JSON-like values (they compress 2-3x)
    from kafkacodec import MemoryRecordsBuilder

    rng = random.Random(size * 10 + magic)
    per_batch = max(1, (16 << 10) // (size + 20))
    out, batches, offset = bytearray(), [], 0
    while len(out) < LOG_BYTES:
        builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=offset)
        for i, value in enumerate(values(size, per_batch, rng.randrange(1 << 30))):
            builder.append(1_700_000_000_000 + offset + i, b"key-%08d" % (offset + i), value)
        batch = builder.build()
        batches.append(batch)
        out += batch
        offset += per_batch
    return bytes(out), batches


def fetch_stream(batches: list[bytes]) -> bytes:
    """One Fetch v4 response per batch (tests/fetch_fixtures.py writes them)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fetch_fixtures import build_fetch_response

    return b"".join(build_fetch_response(4, i, [("bench", [(0, batch)])])
                    for i, batch in enumerate(batches))


def make_inputs(names: set[str]) -> Path:
    data = WORK / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name in sorted(names):
        path = data / name
        if path.exists():
            continue
        kind, size, codec = name.split("-")
        magic = 1 if kind == "v1" else 2
        log, batches = make_log(magic, int(size), codec)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(fetch_stream(batches) if kind == "fetch" else log)
        tmp.replace(path)
    return data


def run_child(tree: Path, kind: str, path: Path, arg: object, passes: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory() as cwd:        # nothing else on the path
        out = sh(sys.executable, "-c", CHILD, kind, str(path), json.dumps(arg), str(passes),
                 cwd=Path(cwd), env=env)
    return json.loads(out.strip().splitlines()[-1])


def check_tree(tree: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    where = sh(sys.executable, "-c", "import kafkacodec; print(kafkacodec.__file__)",
               cwd=Path("/"), env=env).strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"{tree} imports kafkacodec from {where}: build it in place first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--new", type=Path, default=ROOT, help="the tree under test (built in place)")
    parser.add_argument("-k", dest="select", help="glob or words: workloads whose name matches any")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args()

    chosen = list(WORKLOADS)
    if args.select:
        words = [w for w in args.select.replace(" or ", ",").split(",") if w.strip()]
        chosen = [w for w in WORKLOADS
                  if any(fnmatch.fnmatch(w[0], f"*{p.strip()}*") for p in words)]
    base = base_tree(args.base)
    for tree in (base, args.new.resolve()):
        check_tree(tree)
    data = make_inputs({w[2] for w in chosen})
    print(f"base {args.base} ({base.name[:10]}) vs {args.new}; load {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} rounds x {args.passes} passes, thread CPU time")
    print(f"{'workload':34} {'base ms':>9} {'new ms':>9} {'new/base speed':>15}")
    rows = []
    for name, kind, input_name, arg in chosen:
        times: dict[str, list[float]] = {"base": [], "new": []}
        counts = set()
        for r in range(args.rounds):
            order = [("base", base), ("new", args.new)] if r % 2 == 0 else [("new", args.new), ("base", base)]
            for side, tree in order:
                result = run_child(tree, kind, data / input_name, arg, args.passes)
                times[side].append(result["seconds"])
                counts.add((side, result["count"]))
        b, n = statistics.median(times["base"]), statistics.median(times["new"])
        sides = {c for _, c in counts}
        note = "" if len(sides) == 1 else f"  (counts differ: {sorted(counts)})"
        rows.append({"workload": name, "base_s": b, "new_s": n, "ratio": b / n})
        print(f"{name:34} {b * 1e3:9.2f} {n * 1e3:9.2f} {b / n:14.2f}x{note}", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"base": args.base, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
