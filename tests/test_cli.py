"""The `kafkacodec` command (no Spark here; `spark convert` is in test_spark.py)."""

import json
import re
import struct

import pytest

from kafkacodec.arrow import scan_entries
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
    from kafkacodec.arrow import ArrowDecoder

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
    assert all(r["timestamp"] == wrapper["timestamp"] and r["timestampType"] == "LogAppendTime"
               for r in wrapper["records"])
    assert wrapper["records"][-1]["offset"] == wrapper["offset"]     # wrapper offset = last inner
    assert any(r.get("endTxnMarker") == "COMMIT" for b in batches for r in b.get("records", []))


def test_dump_reports_trailing_bytes_and_missing_file(log_dir, tmp_path, capsys):
    seg = sorted((log_dir / "clicks-1").glob("*.log"))[0]
    cut = tmp_path / seg.name
    cut.write_bytes(seg.read_bytes()[:-10])
    code, out, _ = run(capsys, "dump", cut)      # kafka-dump-log's line; a partial batch is damage: exit 1
    assert code == EXIT_DATA and out.rstrip().endswith(f"invalid bytes at the end of {seg.name}")
    code, _, err = run(capsys, "dump", tmp_path / "missing.log")
    assert code == EXIT_INPUT and "no such file" in err


def test_version(capsys):
    import kafkacodec

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    out, _ = capsys.readouterr()
    assert info.value.code == 0 and out.startswith(f"kafkacodec {kafkacodec.__version__} (compiled core, Python ")


def test_convert_refuses_a_file_that_is_not_kafka(tmp_path, capsys):
    text = tmp_path / "notes.log"
    text.write_bytes(b"not a segment, just some text that is long enough\n" * 10)
    code, out, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", text, tmp_path / "out.log")
    assert code == EXIT_DATA and out == "" and "this is not a Kafka segment" in err and "at byte" not in err
    assert not (tmp_path / "out.log").exists()


def test_usage_errors(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify"])
    assert info.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out, _ = capsys.readouterr()
    assert info.value.code == 0 and "examples:" in out and "exit codes (docs/cli.md):" in out


@pytest.mark.parametrize("argv, usage, hint", [
    (["dupm", "x"], "usage: kafkacodec [", "invalid choice: 'dupm'"),
    (["dump", "--deeep", "x"], "usage: kafkacodec dump ", "unrecognized arguments: --deeep (did you mean --deep?)"),
    (["spark", "convert", "--sampel", "a", "b"], "usage: kafkacodec spark convert ",
     "(did you mean --sample?)"),
    (["users", "lst"], "usage: kafkacodec users ", "(did you mean list?)"),
    (["read", "/nowhere", "--max-bytes=3"], "usage: kafkacodec read ", "unrecognized arguments: --max-bytes=3"),
])
def test_a_typo_is_reported_by_its_subcommand_with_the_nearest_spelling(argv, usage, hint, capsys):
    """A flag the subcommand does not know: the subcommand's usage and error line (not the top
    level's), naming the flag and the nearest one it has."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    _, err = capsys.readouterr()
    assert info.value.code == EXIT_USAGE
    assert err.startswith(usage) and hint in err, err
    if argv[0] == "dupm":
        assert "(did you mean dump?)" in err


def test_convert_to_magic_1_read_by_kafka_python(log_dir, tmp_path, capsys):
    from kafka.record.memory_records import MemoryRecords

    from kafkacodec.arrow import ArrowDecoder

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


# --------------------------------------------------------------------------- files and memory
# Hostile files, memory, and what the writing commands leave behind (issue 14: items 10, 11,
# 14, 15, 17).  What can crash, hang or exhaust memory runs in a child process.

import os
import signal
import stat
import subprocess
import sys

import kafkacodec
from kafkacodec import MemoryRecordsBuilder
from kafkacodec.crc import crc32c

from memory_probe import available as memory_probe_available, child_env, run_measured

SANITIZED = os.environ.get("KAFKACODEC_SANITIZED") == "1"
CLI = "import sys\nfrom kafkacodec.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def cli(*argv, timeout=120, preexec_fn=None, prelude=""):
    """`kafkacodec ARGV` in a child process."""
    return subprocess.run([sys.executable, "-c", prelude + CLI, *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=child_env(),
                          preexec_fn=preexec_fn)


def one_line_error(run):
    """The child printed one `kafkacodec: error:` line and no traceback."""
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kafkacodec: error: "), run.stderr
    return lines[0]


def v2_segment(batches, records, value_size, codec="none"):
    """`batches` copies of one v2 batch of `records` records, with dense base offsets (the
    v2 CRC does not cover the base offset)."""
    builder = MemoryRecordsBuilder(magic=2, compression=codec)
    for i in range(records):
        builder.append(1_700_000_000_000 + i, b"key-%d" % i, bytes([i % 251]) * value_size)
    batch = builder.build()
    return b"".join(struct.pack(">q", n * records) + batch[8:] for n in range(batches))


def convertible(log_dir):
    """A sample segment with v2 batches and no zstd (convertible to magic 1)."""
    def usable(p):
        scan = scan_entries(p.read_bytes())
        v2 = scan["magic"] == 2
        return v2.any() and not (v2 & ((scan["attributes"] & 7) == 4)).any()
    return next(p for p in sorted(log_dir.glob("*/*.log")) if usable(p))


@pytest.mark.skipif(not memory_probe_available or SANITIZED, reason="needs Linux /proc; ASan's heap")
def test_dump_streams_a_large_segment_in_bounded_memory(tmp_path):
    seg = tmp_path / "00000000000000000000.log"
    with open(seg, "wb") as f:
        f.write(v2_segment(130, 100, 10_000))       # 130 MB, 13,000 records
    size = seg.stat().st_size
    run, growth = run_measured(CLI, "dump", "--deep", str(seg))
    assert run.returncode == EXIT_OK, run.stderr[-2000:]
    assert run.stdout.count("\n| offset: ") == 13_000
    assert 0 <= growth < size // 8, f"anonymous memory grew {growth} bytes for a {size}-byte segment"


def test_dump_refuses_a_directory_and_reads_a_device_promptly(tmp_path):
    # A device named on the command line is read as a stream (a FIFO too: test_dump.py), and
    # only as far as --max-bytes: /dev/zero's first 100 bytes are no Kafka segment.
    zero = tmp_path / "00000000000000000002.log"
    zero.symlink_to("/dev/zero")

    def guard():            # a regression must not eat the machine (ASan needs its address space)
        import resource
        if not SANITIZED:
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    run = cli("dump", "--max-bytes", "100", tmp_path, timeout=60, preexec_fn=guard)
    assert run.returncode == EXIT_INPUT, run.stderr[-2000:]
    line = one_line_error(run)
    assert str(tmp_path) in line and "directory" in line and "not a regular file" in line
    run = cli("dump", "--max-bytes", "100", zero, timeout=60, preexec_fn=guard)
    assert run.returncode == EXIT_DATA, run.stderr[-2000:]
    assert f"{zero}: this is not a Kafka segment" in one_line_error(run)


def test_dump_max_bytes_stops_at_the_last_whole_batch(log_dir, capsys):
    seg = sorted((log_dir / "orders-0").glob("*.log"))[-1]
    scan = scan_entries(seg.read_bytes())
    limit = int(scan["position"][2] + scan["size"][2]) + 30       # 3 batches and a bit
    code, out, err = run(capsys, "dump", "--max-bytes", limit, seg)
    assert code == EXIT_OK and err == ""
    assert [line.split(" position: ")[1].split()[0] for line in out.splitlines()[2:]] == \
        [str(p) for p in scan["position"][:3]]


def test_dump_deep_prints_any_int64_timestamp(tmp_path, capsys):
    """Timestamps are int64 Kafka data: the extremes are printed as they are, exit 0."""
    newest = MemoryRecordsBuilder(magic=2, base_offset=0)
    newest.append(2**63 - 1, b"k", b"newest")
    oldest = MemoryRecordsBuilder(magic=2, base_offset=1)
    oldest.append(0, b"k", b"oldest")
    patched = bytearray(oldest.build())
    struct.pack_into(">qq", patched, 27, -2**63, -2**63)       # base and max timestamp
    struct.pack_into(">I", patched, 17, crc32c(bytes(patched[21:])))
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(newest.build() + bytes(patched))
    code, out, err = run(capsys, "dump", "--deep", "--print-data", seg)
    assert code == EXIT_OK, err
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert records[0].startswith(f"| offset: 0 CreateTime: {2**63 - 1} ") and "payload: newest" in records[0]
    assert records[1].startswith(f"| offset: 1 CreateTime: {-2**63} ") and "payload: oldest" in records[1]
    code, out, err = run(capsys, "dump", "--deep", "--json", seg)
    assert code == EXIT_OK, err
    assert [b["records"][0]["timestamp"] for b in map(json.loads, out.splitlines())] == [2**63 - 1, -2**63]


@pytest.mark.parametrize("link", ["same path", "symlink", "hard link"])
def test_convert_refuses_output_that_is_the_input(log_dir, tmp_path, capsys, link):
    src = tmp_path / "in.log"
    src.write_bytes(convertible(log_dir).read_bytes())
    before = src.read_bytes()
    out = {"same path": src, "symlink": tmp_path / "s.log", "hard link": tmp_path / "h.log"}[link]
    if link == "symlink":
        out.symlink_to(src)
    elif link == "hard link":
        os.link(src, out)
    code, stdout, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", src, out)
    assert code == EXIT_USAGE and "is the input" in err and stdout == ""
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"in.log", out.name})


def no_sigxfsz():
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_convert_past_a_file_size_limit_keeps_the_old_output(log_dir, tmp_path):
    """A real kernel limit (RLIMIT_FSIZE: EFBIG) in the middle of writing OUT: one error line,
    exit 3, OUT keeps its old content and no temporary file is left."""
    src = convertible(log_dir)
    assert src.stat().st_size > 4096
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "v1.log"
    out.write_bytes(b"precious")
    run = cli("convert", "--to-magic", "1", "--no-progress", src, out, preexec_fn=no_sigxfsz)
    assert run.returncode == EXIT_INPUT, run.stderr
    assert "File too large" in one_line_error(run)
    assert out.read_bytes() == b"precious"
    assert [p.name for p in out_dir.iterdir()] == ["v1.log"]


def unshare_works():
    try:
        return subprocess.run(["unshare", "-Urm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not unshare_works(),
                    reason="needs unprivileged user and mount namespaces (unshare -Urm)")
def test_writing_commands_on_a_full_filesystem(log_dir, tmp_path):
    """ENOSPC from a real 64 KiB tmpfs (in a private mount namespace): convert and generate
    exit 3 with one line, leave no temporary file, and convert keeps the old OUT."""
    src = tmp_path / "big.log"
    src.write_bytes(v2_segment(4, 100, 1000))                   # 400 KB: more than the tmpfs
    full = tmp_path / "full"
    full.mkdir()
    python = [sys.executable, "-c", CLI]
    script = (
        'set -e; mount -t tmpfs -o size=64k tmpfs "$1"; printf precious > "$1/v1.log"; '
        'mkdir "$1/gen"; '
        'set +e; "$2" -c "$3" convert --to-magic 1 --no-progress "$4" "$1/v1.log"; echo "convert=$?"; '
        '"$2" -c "$3" generate --partitions 4 --records-per-batch 200 "$1/gen"; echo "generate=$?"; '
        'echo "old=$(cat "$1/v1.log")"; ls -A "$1" "$1/gen"')
    run = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", str(full), python[0], CLI, str(src)],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert "convert=3" in run.stdout and "generate=3" in run.stdout, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("No space left on device") == 2, run.stderr
    assert "old=precious" in run.stdout
    listing = run.stdout.split("old=precious", 1)[1].split()
    assert listing == [f"{full}:", "gen", "v1.log", f"{full}/gen:"], run.stdout


def test_convert_never_unlinks_an_output_it_did_not_create(log_dir, tmp_path, capsys):
    """OUT naming a device (here through a symlink to /dev/null) is refused, not replaced and
    not unlinked; a failing conversion (zstd) leaves an existing OUT as it was."""
    zstd = next(p for p in sorted(log_dir.glob("*/*.log"))
                if ((scan_entries(p.read_bytes())["attributes"] & 7) == 4).any())
    link = tmp_path / "null.log"
    link.symlink_to(os.devnull)
    code, _, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", zstd, link)
    assert code == EXIT_INPUT and "not a regular file" in err
    assert link.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    out = tmp_path / "v1.log"
    out.write_bytes(b"precious")
    code, _, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", zstd, out)
    assert code == EXIT_DATA and "zstd" in err
    assert out.read_bytes() == b"precious" and sorted(p.name for p in tmp_path.iterdir()) == ["null.log", "v1.log"]


def test_convert_checks_crcs_by_default(log_dir, tmp_path, capsys):
    src = convertible(log_dir)
    data = bytearray(src.read_bytes())
    scan = scan_entries(data)
    i = int(next(i for i, m in enumerate(scan["magic"]) if m == 2))
    pos, base = int(scan["position"][i]), int(scan["base_offset"][i])
    data[pos + 70] ^= 0x55                           # inside the records: CRC-32C mismatch
    bad = tmp_path / "bad.log"
    bad.write_bytes(data)
    out = tmp_path / "v1.log"
    code, stdout, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", bad, out)
    assert code == EXIT_DATA and stdout == ""
    assert "CRC" in err and f"at byte {pos}" in err and f"batch offset {base}" in err and "--no-verify" in err
    assert not out.exists()
    code, _, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", "--no-verify", bad, out)
    assert code == EXIT_OK and out.exists()


def test_convert_reports_a_partial_last_batch(log_dir, tmp_path, capsys):
    src = convertible(log_dir)
    data = src.read_bytes()
    scan = scan_entries(data)
    cut_at = int(scan["position"][-1])
    cut = tmp_path / "cut.log"
    cut.write_bytes(data[:-7])
    tail = len(data) - 7 - cut_at
    out = tmp_path / "v1.log"
    code, stdout, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", cut, out)
    assert code == EXIT_DATA and stdout == "" and not out.exists()
    assert f"{tail} bytes of a partial batch at byte {cut_at}" in err and "--allow-partial-tail" in err
    code, stdout, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", "--json",
                            "--allow-partial-tail", cut, out)
    result = json.loads(stdout)
    assert code == EXIT_OK and out.exists()
    assert result["partial_tail_bytes"] == tail and result["partial_tail_position"] == cut_at
    assert f"warning: left out {tail} bytes of a partial batch at byte {cut_at}" in err
    assert result["warnings"] == [err.strip().removeprefix("kafkacodec: warning: ")]


def test_generate_does_not_clobber_existing_segments(tmp_path, capsys):
    target = tmp_path / "log"
    code, out, _ = run(capsys, "generate", target, "--json")
    assert code == EXIT_OK
    files = {p: p.read_bytes() for p in target.glob("*/*.log")}
    code, out, _ = run(capsys, "generate", target, "--json")    # the same sample again: a no-op
    assert code == EXIT_OK and {p: p.read_bytes() for p in target.glob("*/*.log")} == files
    code, out, err = run(capsys, "generate", target, "--seed", "7")
    assert code == EXIT_USAGE and "--force" in err and out == ""
    assert {p: p.read_bytes() for p in target.glob("*/*.log")} == files
    code, out, err = run(capsys, "generate", target, "--seed", "7", "--force")
    assert code == EXIT_OK
    changed = {p: p.read_bytes() for p in target.glob("*/*.log")}
    assert changed.keys() >= files.keys() and changed != files
    assert not list(target.glob("*/.*"))                         # no temporary file left


def test_generate_summary_matches_an_independent_count(tmp_path, capsys):
    """generate counts what it wrote with the core reader; logdir.describe() counts the files
    with the Arrow decoder."""
    from kafkacodec.logdir import describe

    code, out, _ = run(capsys, "generate", tmp_path / "g", "--topics", "a,b", "--partitions", "3", "--json")
    result = json.loads(out)
    expected = describe(tmp_path / "g")
    assert code == EXIT_OK
    assert {k: result[k] for k in expected if k != "corrupt"} == {k: v for k, v in expected.items() if k != "corrupt"}


BLOCK_OPTIONAL = """\
class _CoreInstall:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyarrow", "pyspark", "pandas"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
import sys
sys.meta_path.insert(0, _CoreInstall())
"""


def test_core_install_without_pyarrow(log_dir, tmp_path):
    """A core install (no pyarrow, pyspark, pandas): dump (every file kind), convert, generate
    and --version work; verify and read exit 4 with the pip hint for kafkacodec[arrow], spark
    for kafkacodec[spark]; never an ImportError traceback (generate used to crash after writing
    its files, exit 1)."""
    from kafkacodec.logdir.indexes import build_indexes

    seg = sorted((log_dir / "orders-0").glob("*.log"))[-1]
    run = cli("dump", "--deep", "--json", seg, prelude=BLOCK_OPTIONAL)
    assert run.returncode == EXIT_OK and run.stderr == ""
    scan = scan_entries(seg.read_bytes())
    assert [json.loads(line)["position"] for line in run.stdout.splitlines()] == list(scan["position"])
    index = tmp_path / seg.with_suffix(".index").name
    index.write_bytes(build_indexes(scan, int(seg.stem), interval=512)[0])
    (tmp_path / seg.name).write_bytes(seg.read_bytes())
    run = cli("dump", "--offsets-decoder", "--files", f"{index},{tmp_path / seg.name}", prelude=BLOCK_OPTIONAL)
    assert run.returncode == EXIT_OK and run.stdout.count("offset: ") > len(scan["position"]), run.stderr
    run = cli("generate", tmp_path / "g", "--json", prelude=BLOCK_OPTIONAL)
    assert run.returncode == EXIT_OK and json.loads(run.stdout)["records"] > 0, run.stderr
    run = cli("convert", "--to-magic", "1", "--no-progress", convertible(log_dir), tmp_path / "v1.log",
              prelude=BLOCK_OPTIONAL)
    assert run.returncode == EXIT_OK, run.stderr
    run = cli("--version", prelude=BLOCK_OPTIONAL)
    assert run.returncode == EXIT_OK and run.stdout.startswith("kafkacodec ")
    for argv, extra in ((["verify", "--no-progress", log_dir], "arrow"), (["read", log_dir], "arrow"),
                        (["cat", "-J", log_dir], "arrow"), (["spark", "convert", log_dir, tmp_path / "pq"], "spark")):
        run = cli(*argv, prelude=BLOCK_OPTIONAL)
        assert run.returncode == 4, (argv, run.stderr)
        assert f'pip install "kafkacodec[{extra}]"' in one_line_error(run)


def test_every_kafkacodec_error_is_one_line_and_exit_1(tmp_path):
    """A framing error deep in a segment (a size below the minimum) stops dump with exit 1."""
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(v2_segment(2, 3, 10) + struct.pack(">qi", 6, 5) + bytes(20))
    with kafkacodec.FileRecords.open(seg) as records, pytest.raises(kafkacodec.CorruptRecordError) as error:
        list(records.batches())
    run = cli("dump", seg)
    assert run.returncode == EXIT_DATA
    assert f"{seg}: {error.value}; the rest of the file cannot be read" in one_line_error(run)


def test_generate_refuses_topic_names_kafka_refuses(tmp_path, capsys):
    for bad in ("../escape", "a/b", "..", "x" * 250):
        code, _, err = run(capsys, "generate", tmp_path / "g", "--topics", bad)
        assert code == EXIT_USAGE and "invalid topic name" in err
    assert not (tmp_path / "g").exists() and not (tmp_path / "escape-0").exists()


def test_dump_into_a_closed_pipe_stops_quietly(log_dir):
    """`kafkacodec dump ... | head -1`: exit 0 and nothing on stderr."""
    seg = sorted((log_dir / "orders-0").glob("*.log"))[0]
    many = [seg] * 200
    child = subprocess.Popen([sys.executable, "-c", CLI, "dump", "--deep", *map(str, many)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    assert child.stdout.readline().startswith(b"Dumping ")
    child.stdout.close()
    assert child.wait(timeout=60) == EXIT_OK
    assert child.stderr.read() == b""


def test_dump_deep_legacy_wrapper_whose_key_runs_past_it(tmp_path, capsys):
    # a v0/v1 compressed wrapper's key length past its end: the entry's records are
    # reported as damage (exit 1), not a struct.error traceback (found by the file-system harness)
    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=1, compression="gzip", base_offset=5)
    for i in range(3):
        builder.append(1_700_000_000_000 + i, b"k", b"v%d" % i)
    entry = bytearray(builder.build())
    struct.pack_into(">i", entry, 26, 2**31 - 8)        # offset, size, crc, magic, attributes, ts | key
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(entry))
    code, out, err = run(capsys, "dump", "--deep", "--print-data", path)
    assert code == EXIT_DATA, (out, err)
    assert "Traceback" not in err and "struct.error" not in out + err
    assert re.search(r"\n\| error: truncated message .* at byte \d+ \(batch offset 7\)\n", out), out


def test_read_says_the_verify_hint_once(tmp_path, capsys):
    """logdir's FAILFAST error already ends in a `kafkacodec verify` hint: the CLI adds none."""
    data = bytearray(v2_segment(3, 3, 1))
    size = struct.unpack(">i", data[8:12])[0]
    data[12 + size + 16] = 7                      # the second batch's magic byte
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(data)
    code, _, err = run(capsys, "read", tmp_path, "-o", "-5")
    assert code == EXIT_DATA and "invalid magic byte 7" in err and "(batch offset 3)" in err
    assert err.count("lists every problem") == 1, err


# --- streams as inputs (`-`, a FIFO, a device): read where the command reads one segment's bytes,
# refused in one line (exit 3) where it needs the file or directory itself ----------------------

def test_convert_reads_a_segment_from_a_fifo_and_from_stdin(log_dir, tmp_path, capsys, monkeypatch):
    # Before: "a FIFO, not a regular file" and "-: no such file" (exit 3).
    from streams import cli_with_stdin, fed_fifo

    seg = convertible(log_dir)
    code, _, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", seg, tmp_path / "file.log")
    assert code == EXIT_OK, err
    stream = tmp_path / "fifo"
    with fed_fifo(stream, seg.read_bytes()):
        code, out, err = run(capsys, "convert", "--to-magic", "1", "--no-progress", stream,
                             tmp_path / "fifo.log")
    assert code == EXIT_OK and err == "" and out.startswith(f"{stream} -> {tmp_path / 'fifo.log'}: ")
    piped = cli_with_stdin(seg.read_bytes(), "convert", "--to-magic", "1", "--no-progress", "--json", "-",
                           tmp_path / "stdin.log")
    assert piped.returncode == EXIT_OK, piped.stderr
    assert json.loads(piped.stdout)["input"] == "-"
    expected = (tmp_path / "file.log").read_bytes()
    assert (tmp_path / "fifo.log").read_bytes() == expected == (tmp_path / "stdin.log").read_bytes()
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "convert", "--to-magic", "1", seg, "-")    # OUT: no stdout (atomic)
    assert code == EXIT_INPUT and err.startswith("kafkacodec: error: - is stdout; convert needs a file")
    assert not (tmp_path / "-").exists()


def test_a_stream_longer_than_a_segment_is_refused_unread(tmp_path, capsys, monkeypatch):
    from kafkacodec.cli import _files
    from streams import fed_fifo

    monkeypatch.setattr(_files, "STREAM_LIMIT", 4096)      # 2 GiB - 1, Kafka's largest segment
    stream = tmp_path / "big"
    with fed_fifo(stream, bytes(1 << 20)) as writer:
        code, out, err = run(capsys, "dump", stream)
    assert code == EXIT_INPUT and err.count("\n") == 1
    assert err.startswith(f"kafkacodec: error: {stream}: the stream carries more than 4096 bytes")
    assert writer.get("broken") and writer["written"] < 1 << 20           # not read further
    assert not list(tmp_path.glob("kafkacodec-*"))


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal: POSIX")
def test_stdin_that_is_a_terminal_is_refused(tmp_path):
    import pty

    leader, follower = pty.openpty()
    try:
        run = subprocess.run([sys.executable, "-c", CLI, "dump", "-"], stdin=follower, capture_output=True,
                             text=True, timeout=60, env=child_env())
    finally:
        os.close(follower)
        os.close(leader)
    assert run.returncode == EXIT_INPUT
    assert "- is stdin, a terminal; pipe a segment into it (cat seg.log | kafkacodec dump -)" in one_line_error(run)


NEEDS_A_PATH = {        # command line with STREAM for the stream, and what the command says it needs
    "spark convert IN": (["spark", "convert", "STREAM", "OUT"], "spark convert needs a log directory"),
    "spark convert OUT": (["spark", "convert", "LOG", "STREAM"], "spark convert needs a directory to write into"),
    "serve LOG_DIR": (["serve", "STREAM", "--listen", "127.0.0.1:0"], "serve needs Kafka log directories"),
    "serve --state-dir": (["serve", "LOG", "--listen", "127.0.0.1:0", "--state-dir", "STREAM"],
                          "serve needs a directory for --state-dir"),
    "generate DIR": (["generate", "STREAM"], "generate needs a directory to write the sample log into"),
    "mirror --state-dir": (["mirror", "--source", "127.0.0.1:1", "--target", "127.0.0.1:1", "--topics", "t",
                            "--state-dir", "STREAM"], "mirror needs a directory for --state-dir"),
}
STDIN_IS = {"spark convert IN": "stdin", "serve LOG_DIR": "stdin"}     # elsewhere "-" is not an input


@pytest.mark.parametrize("stream", ["fifo", "-"])
@pytest.mark.parametrize("case", sorted(NEEDS_A_PATH))
def test_commands_that_need_a_path_refuse_a_stream_in_one_line(case, stream, log_dir, tmp_path):
    # Before: Spark's FileNotFoundError with a SQLSTATE, "-: not a directory", generate's
    # "Not a directory" for a file under the FIFO, a directory named "-", serve's or mirror's
    # own errors after starting.  Now one line naming the stream and what the command needs,
    # exit 3, before anything starts; the stream is never read.
    from streams import cli_with_stdin, fed_fifo

    argv, needs = NEEDS_A_PATH[case]
    fifo = tmp_path / "fifo"
    given = str(fifo) if stream == "fifo" else "-"
    values = {"STREAM": given, "OUT": str(tmp_path / "out"), "LOG": str(log_dir), "SEG": str(convertible(log_dir))}
    argv = [values.get(a, a) for a in argv]
    if stream == "fifo":
        with fed_fifo(fifo, b"x" * 100) as writer:
            run = cli_with_stdin(b"", *argv, cwd=tmp_path, timeout=60)
        assert not writer["opened"]                                     # never opened
        said = f"{fifo} is a FIFO; {needs}"
    else:
        run = cli_with_stdin(b"x" * 100, *argv, cwd=tmp_path, timeout=60)
        said = f"- is {STDIN_IS.get(case, 'stdout' if 'state-dir' not in case else 'a stream')}; {needs}"
    stderr = run.stderr.decode()
    assert run.returncode == EXIT_INPUT, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"kafkacodec: error: {said}"), stderr
    assert "not a stream" in lines[0] and "corrupt" not in lines[0]
    assert not (tmp_path / "-").exists() and not list(tmp_path.glob("out*"))


@pytest.mark.parametrize("command", [["read", "-c", "5", "-J"], ["verify"]], ids=["read", "verify"])
def test_a_short_read_does_not_import_pandas(log_dir, command):
    """pyarrow imports pandas on its first conversion to or from Python or numpy values
    (`to_numpy()`, `pa.scalar`, a compute call with a Python number): 0.3-0.4 s of every short
    `kafkacodec read` or `verify`, and of a Spark worker's first split.  The read path makes
    none."""
    code = ("import sys\nfrom kafkacodec.cli import main\n"
            "code = main(sys.argv[1:])\nprint('pandas' in sys.modules, file=sys.stderr)\nsys.exit(code)\n")
    run = subprocess.run([sys.executable, "-c", code, *command, str(log_dir)],
                         capture_output=True, text=True, timeout=120, env=child_env())
    assert run.returncode == EXIT_OK, run.stderr
    if command[0] == "read":
        assert [json.loads(line)["offset"] for line in run.stdout.splitlines()] == [0, 1, 2, 3, 4]
    assert run.stderr.strip().splitlines()[-1] == "False", run.stderr
