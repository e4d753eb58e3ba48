"""The speed gate's verdicts (bench/gate.py, run by .ci/run): a ratio below its floor fails with
the workload and both times, a workload the benchmarks no longer produce fails, and every floor
names a workload the benchmarks' group names map to.  (`bench/gate.py --slow-down 3` shows the
whole gate failing on a real slowdown: docs/results.md.)"""

import importlib.util
import tomllib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"

pytestmark = pytest.mark.tooling


@pytest.fixture(scope="module")
def gate():
    spec = importlib.util.spec_from_file_location("gate", BENCH / "gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_ratio_below_its_floor_fails_with_both_times(gate):
    floors = {"decode v2 lz4": {"aiokafka": 1.2}, "build v2 none": {"aiokafka": 1.4}}
    found = {"decode v2 lz4": {"kafkacodec": 0.002, "aiokafka": 0.0022},      # 1.10x
             "build v2 none": {"kafkacodec": 0.001, "aiokafka": 0.0030}}      # 3.00x
    lines = gate.check(found, floors)
    assert lines[0] == "FAIL decode v2 lz4: kafkacodec 2.00 ms, aiokafka 2.20 ms: 1.10x (floor 1.20x)"
    assert lines[1].startswith("ok   build v2 none:") and "3.00x" in lines[1]


def test_a_workload_not_measured_fails(gate):
    lines = gate.check({"decode v2 lz4": {"aiokafka": 0.002}}, {"decode v2 lz4": {"aiokafka": 1.2},
                                                                  "build v2 zstd": {"aiokafka": 1.0}})
    assert [line.split(":")[0] for line in lines] == ["FAIL decode v2 lz4", "FAIL build v2 zstd"]
    assert all("not measured" in line for line in lines)


def test_every_floor_is_a_workload_the_benchmarks_name(gate):
    """bench_decode's and bench_build's group names, at any record count, map to the floors'
    keys (a renamed group would fail CI as "not measured", never pass unchecked)."""
    floors = tomllib.loads((BENCH / "floors.toml").read_text())
    codecs = ("none", "gzip", "snappy", "lz4", "zstd")
    for records in (20_000, 100_000):
        named = {gate.workload(f"decode v2 {records // 1000}k records {codec}") for codec in codecs}
        named |= {gate.workload(f"build v2 {codec}: {records:,} records") for codec in codecs}
        assert set(floors) <= named, set(floors) - named
