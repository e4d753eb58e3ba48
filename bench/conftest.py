"""Shared bench plumbing: after a run, print every implementation's time relative to kafkacodec's
in the same benchmark group (pytest-benchmark's table shows absolute times only).

Convention: a benchmark whose parameter id contains "kafkacodec" is ours; the fastest of ours in
a group is the reference.  Ratios use the best round (min): on a shared machine the other
statistics mostly measure the neighbours."""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    groups = {}
    for bench in session.benchmarks:
        if bench.stats is not None and bench.stats.rounds:
            groups.setdefault(bench.group, []).append(bench)
    terminalreporter.section("ratios: time / kafkacodec's best time (min of rounds)")
    for group, benches in sorted(groups.items(), key=lambda item: str(item[0])):
        ours = [b for b in benches if "kafkacodec" in str(b.param)]
        if not ours:
            continue
        reference = min(b.stats.min for b in ours)
        terminalreporter.write_line(f"{group}:")
        for bench in sorted(benches, key=lambda b: b.stats.min):
            terminalreporter.write_line(
                f"    {bench.name:<58} {bench.stats.min * 1e3:9.2f} ms   x{bench.stats.min / reference:6.2f}")
