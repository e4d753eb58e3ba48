"""`serve` and the consumer core before and after a change of the network layer, alternating
in one session (the issue's "the event-loop merge must leave the existing serve and consumer
benchmarks no slower").

    python bench/bench_net_ab.py --base /work/wt/bench-base [--rounds 5] [--only serve,consumer]

--base is another checkout with its compiled modules in place (a git worktree of the old commit
with the .so files of a wheel built from it, or built in place).  Both sides run the same client
code, this checkout's: only the process under test imports the side's kafkacodec.

serve      bench_serve.py's plaintext mode: one 16 KiB-record log (--size-mb, 1 MiB batches) read
           whole by confluent-kafka with bench_serve.CONSUMER settings, then by the minimal Fetch
           v4 client (16 MiB fetches); a fresh `kafkacodec serve` per side per round.  Figures:
           MB/s, and the server process's CPU seconds per GB (/proc/PID/stat).
consumer   bench_consumer.py's kafkacodec rows: the consumer core reads a librdkafka mock cluster
           (3 brokers in this process) as raw batches, then into Arrow, each in a child process.
           Figures: MB/s of source batches, and the child's CPU seconds per GB (process_time,
           all its threads).

Rounds are ABAB...: odd rounds run the base first, even rounds the new code first.  For each
figure: the median of each side, its spread (min..max), and the median of the per-round ratios
new / base (a paired comparison: both sides of a round saw the same neighbours).  The 1-minute
load is printed per round.  Linux only (/proc).  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_consumer  # noqa: E402
import bench_serve  # noqa: E402

# figure -> True when higher is better
HIGHER = {"MB/s": True, "CPU s/GB": False}


def git_describe(tree: Path) -> str:
    run = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True,
                         text=True)
    return run.stdout.strip()[:70] or str(tree)


def serve_round(code: Path, log_dir: Path, size: int) -> dict[str, float]:
    server = bench_serve.ServeProcess(log_dir, code=code)
    try:
        served = server.cpu_seconds()
        rate, spent = bench_serve.confluent_rate(server.bootstrap, "new", size, bench_serve.CONSUMER)
        confluent_cpu = server.cpu_seconds() - served
        served = server.cpu_seconds()
        raw = bench_serve.raw_fetch_rate(server.port, "new", size, 16 << 20)
        raw_cpu = server.cpu_seconds() - served
    finally:
        server.stop()
    gb = size / 1e9
    return {"serve: confluent-kafka MB/s": rate / 1e6, "serve: confluent-kafka server CPU s/GB": confluent_cpu / gb,
            "serve: confluent-kafka client CPU s/GB": spent["all"] / gb,
            "serve: minimal client MB/s": raw / 1e6, "serve: minimal client server CPU s/GB": raw_cpu / gb}


def consumer_round(code: Path, mock: object, topics: list[str], records: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for form, label in (("raw", "raw batches"), ("arrow", "-> Arrow")):
        r = bench_consumer.run_consumer(bench_consumer.OURS, mock.bootstrap, ",".join(topics), form,  # type: ignore[attr-defined]
                                        code=str(code))
        if r["records"] != records:
            raise RuntimeError(f"the consumer under {code} read {r['records']} of {records} records")
        out[f"consumer {label} MB/s"] = r["bytes"] / 1e6 / r["wall"]
        out[f"consumer {label} CPU s/GB"] = r["cpu"] / (r["bytes"] / 1e9)
    return out


def report(results: dict[str, list[dict[str, float]]], names: dict[str, str]) -> None:
    figures = list(results["base"][0])
    print(f"{'figure':42} {'base: median (min..max)':>26} {'new: median (min..max)':>26} {'new/base':>9} "
          f"{'paired':>7}")
    for figure in figures:
        base = [r[figure] for r in results["base"]]
        new = [r[figure] for r in results["new"]]
        ratios = [n / b for n, b in zip(new, base)]
        higher = HIGHER["MB/s" if figure.endswith("MB/s") else "CPU s/GB"]
        verdict = statistics.median(ratios) if higher else 1 / statistics.median(ratios)

        def cell(values: list[float]) -> str:
            return f"{statistics.median(values):8.2f} ({min(values):.2f}..{max(values):.2f})"

        print(f"{figure:42} {cell(base):>26} {cell(new):>26} {statistics.median(new) / statistics.median(base):9.3f} "
              f"{statistics.median(ratios):7.3f}  {'faster' if verdict > 1 else 'slower'} by "
              f"{abs(verdict - 1) * 100:.1f}%")
    print(f"base = {names['base']}; new = {names['new']}; paired = median of the rounds' new/base "
          "ratios; for CPU s/GB lower is better")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, type=Path, help="the other checkout (modules built)")
    parser.add_argument("--new", default=ROOT, type=Path, help="default: this checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mb", type=int, default=512, help="serve's log (default 512)")
    parser.add_argument("--consumer-mb", type=int, default=64, help="the mock cluster's data (default 64)")
    parser.add_argument("--only", default="serve,consumer")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    sides = {"base": args.base.resolve(), "new": args.new.resolve()}
    names = {side: f"{git_describe(tree)} ({tree})" for side, tree in sides.items()}
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {platform.platform()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for side, name in names.items():
        print(f"# {side}: {name}")
    results: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp)
        size = mock = topics = records = None
        if "serve" in parts:
            size = bench_serve.write_topic(log_dir, "new", args.size_mb << 20, 16 << 10, 1 << 20)
            bench_serve.sendfile_limit(log_dir / "new-0" / "00000000000000000000.log")   # warm the page cache
        if "consumer" in parts:
            mock, topics, records = bench_consumer.prepare(args.consumer_mb)
        for i in range(args.rounds):
            order = ["base", "new"] if i % 2 == 0 else ["new", "base"]
            load = os.getloadavg()[0]
            for side in order:
                figures: dict[str, float] = {}
                if "serve" in parts:
                    figures.update(serve_round(sides[side], log_dir, size))
                if "consumer" in parts:
                    figures.update(consumer_round(sides[side], mock, topics, records))
                results[side].append(figures)
            print(f"round {i + 1} ({' then '.join(order)}), load {load:.2f}: " + "; ".join(
                f"{figure} {results['base'][-1][figure]:.2f} / {results['new'][-1][figure]:.2f}"
                for figure in results["base"][-1]), flush=True)
    print(f"# load at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(results, names)


if __name__ == "__main__":
    main()
