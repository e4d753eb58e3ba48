"""The `kafkacodec` command (no Spark here; `spark convert` is in test_spark.py)."""

import json
import struct

import pytest

from kafkacodec._arrow import scan_entries
from kafkacodec.cli import EXIT_DATA, EXIT_INPUT, EXIT_OK, EXIT_USAGE, main


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("clilog")
    assert main(["generate", str(root), "--batches-per-segment", "6", "--json"]) == EXIT_OK
    return root


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_json_summary(tmp_path, capsys):
    code, out, _ = run(capsys, "generate", tmp_path / "g", "--topics", "a,b", "--partitions", "3", "--json")
    result = json.loads(out)
    assert code == EXIT_OK and result["records"] > 0 and result["aborted_records"] > 0
    assert set(result["per_topic"]) == {"a", "b"} and result["control_records"] == 2 * 2 * 3
    assert len(list((tmp_path / "g").glob("*-*/*.log"))) == result["segments"]


def test_verify_clean_log(log_dir, capsys):
    code, out, _ = run(capsys, "verify", log_dir, "--json", "--no-progress")
    result = json.loads(out)
    assert code == EXIT_OK and result["ok"] and result["problems"] == []
    assert result["segments"] >= 3 and result["records"] > 100


def test_verify_reports_crc_failure_with_file_and_position(log_dir, tmp_path, capsys):
    src = sorted((log_dir / "orders-0").glob("*.log"))[-1]
    bad_dir = tmp_path / "events-0"
    bad_dir.mkdir()
    data = bytearray(src.read_bytes())
    scan = scan_entries(data)
    pos = int(scan["position"][1])
    data[pos + 80] ^= 0x55
    (bad_dir / src.name).write_bytes(data)
    code, out, _ = run(capsys, "verify", tmp_path, "--json", "--no-progress")
    result = json.loads(out)
    assert code == EXIT_DATA and not result["ok"]
    [problem] = result["problems"]
    assert problem["position"] == pos and problem["file"].endswith(src.name)
    assert "CRC" in problem["error"]
    # the rest of the segment was still read
    assert scan["magic"][1] == 2
    assert result["records"] == int(scan["count"].sum() - scan["count"][1])   # only that batch lost
    code, out, _ = run(capsys, "verify", tmp_path, "--no-progress")
    assert code == EXIT_DATA and "1 problem" in out and f"at byte {pos}" in out


def test_verify_missing_dir(tmp_path, capsys):
    code, _, err = run(capsys, "verify", tmp_path / "nope")
    assert code == EXIT_INPUT and "no such file or directory" in err and "log directory" in err


def test_dump_batches_and_records(log_dir, capsys):
    from kafkacodec._arrow import ArrowDecoder

    seg = next(p for p in sorted((log_dir / "orders-0").glob("*.log"))
               if 0 in scan_entries(p.read_bytes())["control_type"])      # holds an ABORT marker
    data = seg.read_bytes()
    scan = scan_entries(data)
    code, out, _ = run(capsys, "dump", seg)
    lines = out.splitlines()
    assert code == EXIT_OK
    assert lines[0] == f"Dumping {seg}" and lines[1] == f"Log starting offset: {int(seg.stem)}"
    assert len(lines) == 2 + len(scan["position"])
    first = lines[2]
    assert first.startswith(f"baseOffset: {scan['base_offset'][0]} lastOffset: {scan['last_offset'][0]} ")
    assert f"size: {scan['size'][0]} magic: {scan['magic'][0]}" in first and first.endswith("isvalid: true")
    code, out, _ = run(capsys, "dump", "--deep", seg)
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(records) == ArrowDecoder(keep_control=True).decode(data)[0].num_rows
    assert any("endTxnMarker: ABORT coordinatorEpoch: 2" in r for r in records)


def test_dump_json_and_legacy(log_dir, capsys):
    batches = []
    for seg in sorted((log_dir / "orders-0").glob("*.log")):
        code, out, _ = run(capsys, "dump", "--json", "--print-data", seg)
        assert code == EXIT_OK
        batches += [json.loads(line) for line in out.splitlines()]
    assert {b["magic"] for b in batches} == {0, 1, 2}
    wrapper = next(b for b in batches if b["magic"] == 1 and b["compresscodec"] == "gzip"
                   and b["timestampType"] == "LogAppendTime")
    assert all(r["LogAppendTime"] == wrapper["timestamp"] for r in wrapper["records"])
    assert wrapper["records"][-1]["offset"] == wrapper["offset"]     # wrapper offset = last inner
    assert any(r.get("endTxnMarker") == "COMMIT" for b in batches for r in b.get("records", []))


def test_dump_reports_trailing_bytes_and_missing_file(log_dir, tmp_path, capsys):
    seg = sorted((log_dir / "clicks-1").glob("*.log"))[0]
    cut = tmp_path / seg.name
    cut.write_bytes(seg.read_bytes()[:-10])
    code, out, _ = run(capsys, "dump", cut)
    assert code == EXIT_OK and out.rstrip().endswith(f"invalid bytes at the end of {seg.name}")
    code, _, err = run(capsys, "dump", tmp_path / "missing.log")
    assert code == EXIT_INPUT and "no such file" in err


def test_usage_errors(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify"])
    assert info.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out, _ = capsys.readouterr()
    assert info.value.code == 0 and "examples:" in out and "exit codes:" in out


def test_convert_to_magic_1_read_by_kafka_python(log_dir, tmp_path, capsys):
    from kafka.record.memory_records import MemoryRecords

    from kafkacodec._arrow import ArrowDecoder

    def usable(p):
        scan = scan_entries(p.read_bytes())
        return (scan["magic"] == 2).any() and not ((scan["magic"] == 2) & ((scan["attributes"] & 7) == 4)).any()

    src = next(p for p in sorted(log_dir.glob("*/*.log")) if usable(p))
    out = tmp_path / "v1.log"
    code, text, _ = run(capsys, "convert", "--to-magic", "1", "--json", "--no-progress", src, out)
    result = json.loads(text)
    assert code == EXIT_OK and result["records_converted"] > 0
    expected = [r["value"] for r in ArrowDecoder().decode(src.read_bytes())[0].to_pylist()]
    records = MemoryRecords(out.read_bytes())
    values = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.magic <= 1
        values += [r.value for r in batch]
    assert values == expected


def test_convert_zstd_is_refused_like_kafka(log_dir, tmp_path, capsys):
    src = next(p for p in sorted(log_dir.glob("*/*.log"))
               if ((scan_entries(p.read_bytes())["attributes"] & 7) == 4).any())
    out = tmp_path / "v1.log"
    code, _, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", src, out)
    assert code == EXIT_DATA and "zstd" in err and "UNSUPPORTED_COMPRESSION_TYPE" in err
    assert not out.exists()
