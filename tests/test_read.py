"""`kafkacodec read` (kcat-style records): format strings, offset and time ranges, counts,
filters and JSON Lines, checked against the records as FileRecords' own reader decodes them,
and the counts against `verify` (the same reader as the Spark source)."""

import base64
import json
import struct
import subprocess
import sys

import pytest

import kafkacodec
from kafkacodec.cli import EXIT_DATA, EXIT_OK, EXIT_USAGE, generate, main
from kafkacodec.cli.read import parse_format, unescape

from memory_probe import child_env


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("read") / "log"
    generate(root, ("orders", "clicks"), partitions=2, batches_per_segment=6)
    return root


def expected_records(root):
    """Every data record, per (topic, partition), from FileRecords' deep iteration."""
    out = {}
    for part in sorted(root.iterdir()):
        topic, partition = part.name.rsplit("-", 1)
        rows = out.setdefault((topic, int(partition)), [])
        for seg in sorted(part.glob("*.log")):
            with kafkacodec.FileRecords.open(seg) as records:
                for batch in records.batches():
                    if batch.is_control:
                        continue
                    for r in batch:
                        rows.append(r)
    return out


def read_json(capsys, *argv):
    code = main(["read", "--json-columns", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_json_lines_hold_every_record_as_the_core_reader_decodes_it(log_dir, capsys):
    code, rows, err = read_json(capsys, log_dir)
    assert code == EXIT_OK and err == ""
    expected = expected_records(log_dir)
    assert len(rows) == sum(map(len, expected.values()))
    assert all(set(row) == {"topic", "partition", "offset", "timestamp", "timestampType", "key", "value",
                            "headers"} for row in rows)                    # fixed keys
    by_partition = {}
    for row in rows:
        by_partition.setdefault((row["topic"], row["partition"]), []).append(row)
    assert by_partition.keys() == expected.keys()
    for tp, got in by_partition.items():
        for row, r in zip(got, expected[tp], strict=True):
            assert row["offset"] == r.offset and row["timestamp"] == r.timestamp
            assert row["timestampType"] == {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[
                int(r.timestamp_type)]
            assert (None if row["key"] is None else base64.b64decode(row["key"])) == r.key
            assert (None if row["value"] is None else base64.b64decode(row["value"])) == r.value
            assert [(h["key"], None if h["value"] is None else base64.b64decode(h["value"]))
                    for h in row["headers"]] == list(r.headers)
    code, hexed, _ = read_json(capsys, "--binary", "hex", "-c", "50", log_dir)
    assert [None if h["value"] is None else bytes.fromhex(h["value"]) for h in hexed] == \
        [None if r["value"] is None else base64.b64decode(r["value"]) for r in rows[:50]]


def test_counts_agree_with_verify_for_each_isolation_level(log_dir, capsys):
    assert main(["verify", "--json", "--no-progress", str(log_dir)]) == EXIT_OK
    counts = json.loads(capsys.readouterr().out)
    assert counts["aborted_records"] > 0 and counts["control_records"] > 0
    for options, expected in (([], counts["records"]),
                              (["-X", "kafka.isolation.level=read_committed"],
                               counts["records"] - counts["aborted_records"]),
                              (["-X", "keepControl=true"], counts["records"] + counts["control_records"])):
        code, rows, _ = read_json(capsys, *options, log_dir)
        assert code == EXIT_OK and len(rows) == expected, options


def test_format_tokens_and_escapes(log_dir, capsys):
    expected = expected_records(log_dir)[("orders", 1)]
    code = main(["read", "-t", "orders", "-p", "1", "-f", r"%t|%p|%o|%T|%K|%S|%k|%s|%h|%%\x41\t\065\n", str(log_dir)])
    out = capsys.readouterr().out.encode()
    assert code == EXIT_OK
    lines = out.split(b"\n")[:-1]
    assert len(lines) == len(expected)
    for line, r in zip(lines, expected):
        headers = b",".join(k.encode() + b"=" + (b"NULL" if v is None else v) for k, v in r.headers)
        assert line == b"|".join([b"orders", b"1", b"%d" % r.offset, b"%d" % r.timestamp,
                                  b"%d" % (-1 if r.key is None else len(r.key)),
                                  b"%d" % (-1 if r.value is None else len(r.value)), r.key or b"", r.value or b"",
                                  headers, b"%A\t5"])
    main(["read", "-t", "orders", "-p", "1", "-c", "3", "-f", "%R%s", str(log_dir)])
    out = capsys.readouterr().out.encode()
    for r in expected[:3]:                          # %R: the length as a big-endian int32
        n = -1 if r.value is None else len(r.value)
        assert out.startswith(struct.pack(">i", n) + (r.value or b""))
        out = out[4 + max(n, 0):]
    assert out == b""


def test_offsets_counts_and_filters(log_dir, capsys):
    expected = expected_records(log_dir)
    code, rows, _ = read_json(capsys, "-o", "-4", log_dir)          # the last 4 of each partition
    assert code == EXIT_OK
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [
        (t, p, r.offset) for (t, p), recs in expected.items() for r in recs[-4:]]
    start = expected[("clicks", 0)][40].offset
    code, rows, _ = read_json(capsys, "-t", "clicks", "-p", "0", "-o", str(start), "-c", "7", log_dir)
    assert [r["offset"] for r in rows] == [r.offset for r in expected[("clicks", 0)][40:47]]
    recs = expected[("orders", 0)]
    ts = sorted(r.timestamp for r in recs)
    low, high = ts[len(ts) // 3], ts[2 * len(ts) // 3]
    code, rows, _ = read_json(capsys, "-p", "0", "-t", "orders", "-o", f"s@{low}", "-o", f"e@{high}", log_dir)
    # Kafka's offsetsForTimes: from the first offset whose timestamp is at or after s@, to
    # (not including) the first offset whose timestamp is at or after e@
    first = next(i for i, r in enumerate(recs) if r.timestamp >= low)
    last = next(i for i, r in enumerate(recs) if r.timestamp >= high)
    assert [r["offset"] for r in rows] == [r.offset for r in recs[first:last]]
    code, rows, _ = read_json(capsys, "-o", "-4", "-X", "kafka.isolation.level=read_committed", log_dir)
    assert code == EXIT_OK and 0 < len(rows) <= 4 * len(expected)
    code, rows, _ = read_json(capsys, "-o", "end", log_dir)
    assert code == EXIT_OK and rows == []
    code, rows, _ = read_json(capsys, "-c", "0", log_dir)
    assert code == EXIT_OK and rows == []


def test_usage_errors(log_dir, capsys):
    for argv in (["-o", "stored"], ["-o", "x@5"], ["-f", "%z"], ["-X", "nope"], ["-X", "subscrib=orders"],
                 ["-p", "9"]):
        assert main(["read", *argv, str(log_dir)]) == EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert err.startswith("kafkacodec: error: ") and err.count("\n") == 1, err
    assert parse_format("a%%b%s") == [b"a%b", "s"] and unescape(r"\x7e\q") == b"~q"


def test_kcat_json_layout_and_flags(log_dir, capsys):
    """-J is kcat's layout (jq scripts written for kcat work): tstype/ts, broker, headers as a
    flat [name, value, ...] list only when there are headers, key and payload as the bytes'
    text, null for null; -Z prints null as NULL in formats; -e says where each partition ended
    unless -q."""
    code, columns, _ = read_json(capsys, log_dir)
    assert code == EXIT_OK
    assert main(["read", "-J", "-e", str(log_dir)]) == EXIT_OK
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == len(columns)
    types = {"CreateTime": "create", "LogAppendTime": "logappend"}
    decoded = lambda text: base64.b64decode(text).decode("utf-8", "surrogateescape")  # noqa: E731
    for row, col in zip(rows, columns):
        want = {"topic": col["topic"], "partition": col["partition"], "offset": col["offset"]}
        if col["timestampType"] in types and col["timestamp"] != -1:
            want.update(tstype=types[col["timestampType"]], ts=col["timestamp"])
        want["broker"] = -1
        if col["headers"]:
            want["headers"] = [x for h in col["headers"]
                               for x in (h["key"], None if h["value"] is None else decoded(h["value"]))]
        want["key"] = None if col["key"] is None else decoded(col["key"])
        want["payload"] = None if col["value"] is None else decoded(col["value"])
        assert list(row) == list(want) and row == want          # kcat's field order too
    assert any("headers" in r for r in rows) and any("headers" not in r for r in rows)
    assert any(r["key"] is None for r in rows) and any("tstype" in r for r in rows)
    ends = {}
    for r in rows:
        ends[(r["topic"], r["partition"])] = r["offset"] + 1
    assert err.splitlines() == [f"% Reached end of topic {t} [{p}] at offset {o}: exiting"
                                for (t, p), o in ends.items()]
    assert main(["read", "-J", "-e", "-q", "-u", str(log_dir)]) == EXIT_OK
    quiet_out, quiet_err = capsys.readouterr()
    assert quiet_out == out and quiet_err == ""
    assert main(["read", "-Z", "-f", "%k|%s\\n", str(log_dir)]) == EXIT_OK
    lines = capsys.readouterr().out.encode("utf-8", "surrogateescape").split(b"\n")[:-1]
    assert [line.split(b"|", 1)[0] == b"NULL" for line in lines] == [c["key"] is None for c in columns]
    assert main(["read", "-J", "--json-columns", str(log_dir)]) == EXIT_USAGE


def test_damage_follows_the_mode(log_dir, tmp_path, capsys):
    from kafkacodec.arrow import scan_entries

    part = tmp_path / "t-0"
    part.mkdir()
    seg = sorted((log_dir / "orders-0").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    scan = scan_entries(data)
    data[int(scan["position"][1]) + 80] ^= 0x55
    (part / seg.name).write_bytes(bytes(data))
    code = main(["read", "--json-columns", str(part)])
    out, err = capsys.readouterr()
    assert code == EXIT_DATA and "CRC" in err and "mode=DROPMALFORMED" in err
    code = main(["read", "--json-columns", "-X", "mode=DROPMALFORMED", str(part)])
    out, err = capsys.readouterr()
    lost = int(scan["count"][1])
    assert code == EXIT_DATA and "skipping" in err and "CRC" in err
    assert len(out.splitlines()) == int(scan["count"].sum()) - lost - int((scan["control_type"] >= 0).sum())


def test_into_a_closed_pipe(log_dir):
    """`kafkacodec read ... | head -1`: exit 0, nothing on stderr."""
    child = subprocess.Popen([sys.executable, "-m", "kafkacodec.cli", "read", str(log_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    child.stdout.readline()
    child.stdout.close()
    assert child.wait(timeout=60) == EXIT_OK
    assert child.stderr.read() == b""


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_read_gives_what_a_client_gets_through_serve(tmp_path_factory, capsys, isolation):
    """`kafkacodec read` and `kafkacodec serve` read a log directory the same way: every
    (offset, key, value) confluent-kafka consumes through serve, per partition and isolation
    level, is what `read -J` prints (the sample log: magics 0/1/2, every codec, transactions)."""
    pytest.importorskip("confluent_kafka")
    from serve_support import TOPICS, confluent_read, expected, make_log_dir

    from kafkacodec.serve import Server

    root = make_log_dir(tmp_path_factory.mktemp("read-serve") / "log")
    want = expected(root, committed=isolation == "read_committed")
    with Server([str(root)], listen=("127.0.0.1", 0), zstd_codec="lz4") as server:
        served = confluent_read(f"127.0.0.1:{server.port}", want, **{"isolation.level": isolation})
    code, rows, err = read_json(capsys, "-X", f"kafka.isolation.level={isolation}", root)
    assert code == EXIT_OK, err
    printed: dict = {}
    for row in rows:
        if row["topic"] in TOPICS:
            printed.setdefault((row["topic"], row["partition"]), []).append(
                (row["offset"], None if row["key"] is None else base64.b64decode(row["key"]),
                 None if row["value"] is None else base64.b64decode(row["value"])))
    assert served == want and printed == served


# --- streams: `kafkacodec read <(zcat seg.log.gz)`, `cat seg.log | kafkacodec read -` ------------

def test_read_a_segment_from_a_fifo_and_from_stdin(log_dir, tmp_path, capsys):
    # Before, a FIFO was "named like a segment but is a FIFO" (exit 2, "bad arguments", with a
    # hint about corrupt data) and `-` "no such file or directory" (exit 3).
    from streams import cli_with_stdin, fed_fifo

    seg = sorted((log_dir / "clicks-1").glob("*.log"))[0]
    code, expected, err = read_json(capsys, seg)
    assert code == EXIT_OK and err == "" and expected and {r["topic"] for r in expected} == {"clicks"}
    stream = tmp_path / "clicks-1" / seg.name               # a FIFO where the segment would be
    stream.parent.mkdir()
    with fed_fifo(stream, seg.read_bytes()) as writer:
        code, rows, err = read_json(capsys, stream)
    assert code == EXIT_OK and err == "" and rows == expected and writer["written"] == seg.stat().st_size
    piped = cli_with_stdin(seg.read_bytes(), "read", "--json-columns", "-")
    assert piped.returncode == EXIT_OK and piped.stderr == b""
    rows = [json.loads(line) for line in piped.stdout.splitlines()]
    assert rows == [{**r, "topic": "stdin", "partition": 0} for r in expected]   # no name to tell


def test_a_damaged_stream_is_bad_data_named_as_given(log_dir, tmp_path, capsys):
    from kafkacodec.arrow import scan_entries
    from streams import cli_with_stdin, fed_fifo

    seg = sorted((log_dir / "orders-0").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    data[int(scan_entries(data)["position"][1]) + 80] ^= 0x55
    stream = tmp_path / "damaged"
    with fed_fifo(stream, bytes(data)):
        code = main(["read", "--json-columns", str(stream)])
    err = capsys.readouterr().err
    assert code == EXIT_DATA and err.startswith(f"kafkacodec: error: {stream}: ") and "CRC" in err
    piped = cli_with_stdin(bytes(data), "read", "--json-columns", "-")
    err = piped.stderr.decode()
    assert piped.returncode == EXIT_DATA and err.startswith("kafkacodec: error: -: ") and "CRC" in err
    assert err.count("\n") == 1 and "kafkacodec-read-" not in err           # never the spooled copy


def test_a_fifo_inside_a_log_directory_is_damage_not_bad_arguments(tmp_path, capsys):
    # Found inside a directory, a FIFO named like a segment is reported, never opened (it could
    # block): exit 1 as any damage, where it was exit 2 ("bad arguments").
    import os

    part = tmp_path / "t-0"
    part.mkdir()
    os.mkfifo(part / "00000000000000000000.log")
    code = main(["read", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_DATA and "is named like a segment but is a FIFO" in err and err.count("\n") == 1
