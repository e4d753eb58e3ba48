"""`kafkacodec verify DIR` (issue 14 item 16): every problem of a log directory reported, with
the counts a "kafkalog" read in PERMISSIVE mode reports for the same directory."""

import json
import os
import shutil

import pytest

from kafkacodec.arrow import scan_entries
from kafkacodec.cli import EXIT_DATA, EXIT_OK, generate, main
from kafkacodec.logdir import ReadOptions, plan, read_split


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Six partitions, each with one kind of problem, and the problems it was given."""
    root = tmp_path_factory.mktemp("verify") / "log"
    generate(root, ("a", "b", "c"), batches_per_segment=6)

    def segments(part):
        return sorted((root / part).glob("*.log"))

    def end_of(part):
        return int(scan_entries(segments(part)[-1].read_bytes())["last_offset"][-1]) + 1

    (root / "a-0" / f"{end_of('a-0'):020d}.log").mkdir()                       # a directory
    (root / "a-1" / f"{end_of('a-1'):020d}.log").symlink_to(root / "gone.log")  # a dangling link
    seg = segments("b-0")[-1]                                                     # a CRC mismatch
    data = bytearray(seg.read_bytes())
    scan = scan_entries(data)
    crc_at = int(scan["position"][1])
    data[crc_at + 80] ^= 0x55
    seg.write_bytes(data)
    seg = segments("b-1")[2]                                                      # an overlapping copy
    shutil.copy(seg, seg.with_name(f"{int(seg.stem) + 2:020d}.log"))
    segments("c-0")[2].unlink()                                                   # a missing segment
    seg = segments("c-1")[1]                                                      # a cut entry
    data = seg.read_bytes()
    seg.write_bytes(data[:int(scan_entries(data)["position"][-1]) + 20])
    os.mkfifo(root / "d-0")                                                       # a FIFO partition
    seg = segments("a-0")[0]                                                      # an invalid index
    seg.with_suffix(".index").write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10\x00")
    return root, crc_at


def test_verify_reports_every_problem(damaged, capsys):
    """It stopped at the first unreadable entry with exit 3, never reporting the rest, and said
    OK for an overlap and for a missing segment."""
    root, crc_at = damaged
    code = main(["verify", "--json", "--no-progress", str(root)])
    result = json.loads(capsys.readouterr().out)
    assert code == EXIT_DATA and not result["ok"]
    counts = result["counts"]
    assert counts["unreadable"] == 3 and counts["corrupt"] == 1 and counts["partial"] == 1
    assert counts["gap"] == 1 and counts["overlap"] >= 1 and counts["index"] == 1
    files = {os.path.basename(os.path.dirname(p["file"])) for p in result["problems"]}
    assert files >= {"a-0", "a-1", "b-0", "b-1", "c-0", "c-1"}
    [crc] = [p for p in result["problems"] if p["kind"] == "corrupt"]
    assert crc["position"] == crc_at and "CRC" in crc["error"]
    code = main(["verify", "--no-progress", str(root)])
    out = capsys.readouterr().out
    assert code == EXIT_DATA and "problem(s)" in out and "3 unreadable" in out and "1 gap" in out


def test_verify_counts_match_a_permissive_read(damaged, capsys):
    root, _ = damaged
    main(["verify", "--json", "--no-progress", str(root)])
    result = json.loads(capsys.readouterr().out)
    ro = ReadOptions.parse({"path": str(root), "mode": "PERMISSIVE", "failOnDataLoss": "false",
                            "keepControl": "true"})
    problems = []
    splits, _ = plan(None, ro, on_problem=problems.append)
    marked = rows = 0
    for s in splits:
        for rb in read_split(s, mode="PERMISSIVE", keep_control=True, fail_on_data_loss=False,
                             include_headers=False, on_problem=problems.append):
            bad = rb.column("_corrupt_record").null_count
            marked += rb.num_rows - bad
            rows += bad
    damage = sum(result["counts"].get(k, 0) for k in ("corrupt", "partial", "unreadable"))
    assert marked == damage                        # one _corrupt_record row per damage problem
    assert rows == result["records"] + result["control_records"]
    # the same problems, but for the index file the read did not need (verify checks every one)
    assert sorted(p.kind for p in problems) == sorted(p["kind"] for p in result["problems"] if p["kind"] != "index")


def test_verify_clean_and_remote_paths(tmp_path, capsys):
    root = tmp_path / "log"
    summary = generate(root, batches_per_segment=6)
    assert main(["verify", "--json", "--no-progress", f"file://{root}"]) == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert result["ok"]
    assert {k: result[k] for k in ("records", "control_records", "aborted_records")} == \
        {k: summary[k] for k in ("records", "control_records", "aborted_records")}
    assert main(["verify", "--no-progress", str(root / "*-1")]) == EXIT_OK
    assert "OK" in capsys.readouterr().out


def test_verify_a_segment_under_any_name(tmp_path, capsys):
    """`verify seg.log` was refused ("not a segment file name") while `dump --help` used it."""
    root = tmp_path / "log"
    generate(root, ("t",), partitions=1, batches_per_segment=6)
    named = sorted(root.glob("t-0/*.log"))[1]
    copy = tmp_path / "seg.log"
    copy.write_bytes(named.read_bytes())
    assert main(["verify", "--json", "--no-progress", str(named)]) == EXIT_OK
    expected = json.loads(capsys.readouterr().out)
    assert main(["verify", "--json", "--no-progress", str(copy)]) == EXIT_OK
    got = json.loads(capsys.readouterr().out)
    assert got["ok"] and got["records"] == expected["records"] > 0 and got["segments"] == 1


def test_verify_a_file_that_is_not_kafka(tmp_path, capsys):
    """A text file: one problem saying so, not a size "at byte 8" with a garbage batch offset."""
    text = tmp_path / "server.log"
    text.write_bytes(b"[2024-01-01 00:00:00,000] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)\n" * 30)
    assert main(["verify", "--json", "--no-progress", str(text)]) == EXIT_DATA
    [problem] = json.loads(capsys.readouterr().out)["problems"]
    assert problem["kind"] == "corrupt" and problem["position"] == 0 and problem["offset"] is None
    assert "this is not a Kafka segment" in problem["error"] and problem["error"].count("at byte") == 0


def test_verify_a_segment_from_a_fifo_and_from_stdin(tmp_path, capsys):
    # Before, a FIFO was one "unreadable" problem (exit 1, nothing checked) and `-` "no such
    # file or directory" (exit 3).  A stream is checked as the segment it carries, named as given.
    from streams import cli_with_stdin, fed_fifo

    root = tmp_path / "log"
    generate(root, ("t",), partitions=1, batches_per_segment=6)
    seg = sorted(root.glob("t-0/*.log"))[1]
    data = bytearray(seg.read_bytes())
    crc_at = int(scan_entries(data)["position"][1])
    data[crc_at + 80] ^= 0x55                                       # a CRC mismatch
    seg.write_bytes(bytes(data))
    assert main(["verify", "--json", "--no-progress", str(seg)]) == EXIT_DATA
    expected = json.loads(capsys.readouterr().out)
    assert [p["kind"] for p in expected["problems"]] == ["corrupt"] and expected["records"] > 0

    def as_named(result, name):
        problems = [{**p, "file": name, "error": p["error"].replace(str(seg), name)}
                    for p in result["problems"]]
        return {**result, "path": name, "problems": problems}

    stream = tmp_path / "fifo" / seg.name
    stream.parent.mkdir()
    with fed_fifo(stream, bytes(data)):
        assert main(["verify", "--json", "--no-progress", str(stream)]) == EXIT_DATA
    assert json.loads(capsys.readouterr().out) == as_named(expected, str(stream))
    piped = cli_with_stdin(bytes(data), "verify", "--json", "--no-progress", "-")
    assert piped.returncode == EXIT_DATA, piped.stderr
    got = json.loads(piped.stdout)
    assert got == as_named(expected, "-") and got["problems"][0]["position"] == crc_at
