"""The README's results table, docs/results.md and the chart are one run (issue 33: the chart's
Spark panel contradicted the README's hand-kept table): bench/report.py keeps the run in
docs/results.json, and rendering it again gives the README's block and docs/results.md as they
are; the PNG names the run it was drawn from."""

import json
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "bench"))    # appended: bench/conftest.py must not shadow tests/conftest.py
import report  # noqa: E402

DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def kept():
    return json.loads((DOCS / "results.json").read_text())


def png_text(path: Path) -> dict[str, str]:
    """The tEXt chunks of a PNG (keyword -> text)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, pos = {}, 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"tEXt":
            key, _, text = data[pos + 8:pos + 8 + length].partition(b"\0")
            chunks[key.decode("latin-1")] = text.decode("latin-1")
        pos += 12 + length
    return chunks


def test_readme_table_is_the_kept_run(kept):
    text = (ROOT / "README.md").read_text()
    block = text[text.index(report.README_BEGIN):text.index(report.README_END) + len(report.README_END)]
    assert block == report.readme_results(kept["run"], kept["spark"])
    assert len(report.headline(kept["run"])) >= 10 and "Spark" in block


def test_results_md_is_the_kept_run(kept):
    rendered = report.markdown(kept["run"], "results.png", kept["command"], kept["spark"])
    assert (DOCS / "results.md").read_text().startswith(rendered)


def test_chart_names_the_kept_run(kept):
    assert png_text(DOCS / "results.png").get("Description") == report.run_id(kept["run"])


def test_readme_block_rows_follow_the_run(kept):
    """A row of the table moves with the run: halve kafkacodec's time in one workload and its
    ratios double (no number in the block is typed by hand)."""
    run = json.loads(json.dumps(kept["run"]))
    label, ours, ratios = report.headline(run)[0]
    bench = next(b for b in run["benchmarks"] if b["name"] == ours["name"])
    bench["stats"]["median"] /= 2
    _, _, doubled = report.headline(run)[0]
    assert doubled == pytest.approx({p: 2 * r for p, r in ratios.items()})
    assert report.readme_results(run, kept["spark"]) != report.readme_results(kept["run"], kept["spark"])
