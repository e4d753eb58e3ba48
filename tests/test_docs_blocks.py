"""Python blocks of docs/ run as written: the names a block leaves to the reader (a fetch
response's records) are bound by the test, and a segment named as in the block is in the working
directory."""

from __future__ import annotations

import re
from pathlib import Path

from kafkacodec import MemoryRecordsBuilder
from kafkacodec.cli import generate

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_reading_md_first_block_runs_on_a_real_segment(tmp_path, monkeypatch, capsys):
    """The opening example of docs/reading.md: decode a fetch response's records, then a slice
    of a segment from a batch boundary (a slice from an arbitrary byte raises, as in Kafka)."""
    root = tmp_path / "log"
    generate(root)
    segment = max((root / "orders-0").glob("*.log"), key=lambda p: p.stat().st_size)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "00000000000000000000.log").write_bytes(segment.read_bytes())
    builder = MemoryRecordsBuilder(magic=2, base_offset=0)
    for i in range(5):
        builder.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    block = python_blocks(DOCS / "reading.md")[0]
    exec(compile(block, "docs/reading.md", "exec"), {"fetch_response_records": builder.build()})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) >= 2 and all(len(line.split()) == 3 for line in printed)


def test_building_md_first_block_builds_a_log_kafka_python_reads():
    """docs/building.md's opening example as written: two builds concatenated are one log whose
    offsets continue (0, 1, then 2)."""
    from kafka.record import MemoryRecords as KafkaPythonRecords

    scope: dict = {}
    exec(compile(python_blocks(DOCS / "building.md")[0], "docs/building.md", "exec"), scope)
    records = KafkaPythonRecords(scope["log"])
    got = []
    while (batch := records.next_batch()) is not None:
        got += [(r.offset, r.key, r.value) for r in batch]
    assert got == [(0, b"user-1", b'{"event":"click"}'), (1, None, None), (2, b"user-2", b"...")]
