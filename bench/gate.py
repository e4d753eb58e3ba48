"""The speed gate .ci/run runs: pytest-benchmark over bench_decode.py and bench_build.py in a short
mode (KC_BENCH_RECORDS records), each kafkacodec workload as a ratio against its peer measured in
the same process (peer time / kafkacodec time, from each side's best round: the least disturbed
by other load), compared with the floors in bench/floors.toml.  A ratio below its floor is
measured again (as many runs more, the best rounds over all of them) and then fails (exit 1)
naming the workload, both times and the ratio.  Ratios, not times: CI machines are
shared and noisy; the floors sit below what this machine measures (docs/results.md) by the noise
seen between runs, so they catch a real slowdown, not a busy neighbour.

    python bench/gate.py                     # the gate (about 15 s)
    python bench/gate.py --slow-down 3       # kafkacodec's decode done 3 times a round: fails
    python bench/gate.py --json out.json     # keep pytest-benchmark's JSON
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLOORS = HERE / "floors.toml"
SELECTION = [f"{HERE / 'bench_decode.py'}::test_decode_v2", f"{HERE / 'bench_build.py'}::test_build_v2"]
PEERS_LEFT_OUT = "not kafka-python and not append_many and not arrow"   # the floors' peer: aiokafka


def workload(group: str) -> str:
    """"decode v2 20k records lz4" and "build v2 lz4: 20,000 records" -> "decode v2 lz4",
    "build v2 lz4": the floors' keys, whatever the record count."""
    name = re.sub(r"\s*:?\s*[\d,]+k? records", "", group)
    return " ".join(name.split())


def measure(records: int, slowdown: int, keep: str | None) -> dict[str, dict[str, float]]:
    """{workload: {implementation: best seconds}} from one pytest-benchmark run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = keep or os.path.join(tmp, "gate.json")
        env = dict(os.environ, KC_BENCH_RECORDS=str(records), KC_BENCH_SLOWDOWN=str(slowdown))
        run = subprocess.run([sys.executable, "-m", "pytest", *SELECTION, "-k", PEERS_LEFT_OUT,
                              "-q", "-p", "no:cacheprovider", "--benchmark-enable", "--benchmark-only",
                              f"--benchmark-json={out}", "--rootdir", str(HERE.parent),
                              "-c", str(HERE.parent / "pyproject.toml")],
                             cwd=tmp, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"gate: the benchmarks failed (exit {run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
        data = json.loads(Path(out).read_text())
    found: dict[str, dict[str, float]] = {}
    for bench in data["benchmarks"]:
        impl = bench["extra_info"].get("library") or bench["params"].get("impl")
        found.setdefault(workload(bench["group"]), {})[impl] = bench["stats"]["min"]
    return found


def check(found: dict[str, dict[str, float]], floors: dict[str, dict[str, float]]) -> list[str]:
    """One line per workload; those below a floor start with FAIL."""
    lines = []
    for name, peers in floors.items():
        times = found.get(name)
        if times is None or "kafkacodec" not in times:
            lines.append(f"FAIL {name}: not measured (the benchmark or its group name changed)")
            continue
        ours = times["kafkacodec"]
        for peer, floor in peers.items():
            ratio = times[peer] / ours
            verdict = "ok  " if ratio >= floor else "FAIL"
            lines.append(f"{verdict} {name}: kafkacodec {ours * 1e3:.2f} ms, {peer} {times[peer] * 1e3:.2f} ms: "
                         f"{ratio:.2f}x (floor {floor:.2f}x)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="records per workload (default 20000)")
    parser.add_argument("--slow-down", type=int, default=1, metavar="N",
                        help="do kafkacodec's decode N times a round (shows that the gate fails)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs; each implementation's best round over all of them (default 3)")
    parser.add_argument("--json", help="keep pytest-benchmark's JSON (of the last run) here")
    args = parser.parse_args()
    floors = tomllib.loads(FLOORS.read_text())
    best: dict[str, dict[str, float]] = {}

    def runs(n: int) -> list[str]:
        for _ in range(n):
            for name, times in measure(args.records, args.slow_down, args.json).items():
                for impl, seconds in times.items():
                    kept = best.setdefault(name, {})
                    kept[impl] = min(seconds, kept.get(impl, seconds))
        return check(best, floors)

    lines = runs(args.repeat)
    if any(line.startswith("FAIL") for line in lines):
        # a burst of load (a process of the test run still exiting) fails one run, a slowdown
        # every run: as many runs again, each side's best round over all of them
        print("\n".join(f"gate: {line}" for line in lines if line.startswith("FAIL")))
        print(f"gate: measuring {args.repeat} more runs before failing")
        lines = runs(args.repeat)
    print("\n".join(f"gate: {line}" for line in lines))
    failed = [line for line in lines if line.startswith("FAIL")]
    print(f"gate: {len(lines) - len(failed)} of {len(lines)} ratios at or above their floors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
