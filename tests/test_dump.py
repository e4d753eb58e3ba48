"""`kafkacodec dump` beyond .log batches: index files checked against their segment, the
transaction index, producer snapshots, Kafka's schemas for internal topics, decoders, and what
is not a Kafka file (test_dump_kafka.py compares the output with kafka-dump-log itself)."""

import json
import struct

import pytest

from kafkacodec.crc import crc32c
from kafkacodec.arrow import scan_entries
from kafkacodec.cli import EXIT_DATA, EXIT_OK, EXIT_USAGE, generate, main
from kafkacodec.logdir.indexes import build_indexes

from streams import cli_with_stdin, fed_fifo


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


@pytest.fixture()
def segment(tmp_path):
    """A sample segment with the .index and .timeindex a broker would write for it."""
    generate(tmp_path, ("t",), partitions=1, batches_per_segment=40, records_per_batch=30)
    seg = sorted(tmp_path.glob("t-0/*.log"))[-1]          # v2 batches only
    scan = scan_entries(seg.read_bytes())
    index, times = build_indexes(scan, int(seg.stem), interval=1024)
    seg.with_suffix(".index").write_bytes(index)
    seg.with_suffix(".timeindex").write_bytes(times)
    return seg, scan


def test_offset_index_entries_and_a_mismatch(segment, capsys):
    seg, scan = segment
    index = seg.with_suffix(".index")
    code, lines, err = run(capsys, "dump", index)
    entries = [struct.unpack(">ii", index.read_bytes()[i:i + 8]) for i in range(0, index.stat().st_size, 8)]
    assert code == EXIT_OK and err == "" and len(entries) >= 3
    assert lines == [f"Dumping {index}"] + [f"offset: {int(seg.stem) + r} position: {p}" for r, p in entries]
    # an entry pointing at the wrong batch: listed after the dump, exit 1
    data = bytearray(index.read_bytes())
    relative, position = entries[1]
    struct.pack_into(">i", data, 12, entries[2][1])                       # entry 1 -> batch of entry 2
    index.write_bytes(bytes(data))
    found = int(scan["last_offset"][list(scan["position"]).index(entries[2][1])])
    code, lines, err = run(capsys, "dump", "--verify-index-only", index)
    assert code == EXIT_DATA and lines == [f"Dumping {index}"]
    assert err.splitlines() == [f"Mismatches in :{index}", f"  Index offset: {int(seg.stem) + relative}, "
                                                           f"log offset: {found}"]


def test_max_message_size_bounds_the_batch_an_entry_may_point_at(segment, capsys):
    """An entry whose batch is larger than --max-message-size cannot be checked: a mismatch
    with log offset -1 (kafka-dump-log's slice of that size holds no whole batch)."""
    seg, scan = segment
    index = seg.with_suffix(".index")
    pointed = [struct.unpack(">ii", index.read_bytes()[i:i + 8]) for i in range(0, index.stat().st_size, 8)]
    sizes = {int(p): int(n) for p, n in zip(scan["position"], scan["size"])}
    largest = max(sizes[p] for _, p in pointed)
    code, _, err = run(capsys, "dump", "--verify-index-only", "--max-message-size", largest, index)
    assert code == EXIT_OK and err == ""
    code, _, err = run(capsys, "dump", "--verify-index-only", "--max-message-size", largest - 1, index)
    too_big = [int(seg.stem) + r for r, p in pointed if sizes[p] == largest]
    assert code == EXIT_DATA
    assert err.splitlines()[1:] == [f"  Index offset: {o}, log offset: -1" for o in too_big]


def test_preallocated_index_slots_end_the_dump(segment, capsys):
    """An active segment's index holds zero slots after its entries: the dump stops there."""
    seg, _ = segment
    index = seg.with_suffix(".index")
    entries = index.read_bytes()
    index.write_bytes(entries + bytes(8 * 100))
    code, lines, _ = run(capsys, "dump", index)
    assert code == EXIT_OK and len(lines) == 1 + len(entries) // 8
    code, lines, _ = run(capsys, "dump", "--index-sanity-check", index)    # Kafka's check passes it
    assert code == EXIT_OK and lines[-1] == f"{index} passed sanity check."
    index.write_bytes(entries + b"\x00" * 3)
    code, lines, err = run(capsys, "dump", "--index-sanity-check", index)
    assert code == EXIT_DATA and "not a multiple of the 8-byte entry size" in err


def test_time_index_entries_checked_against_the_records(segment, capsys):
    seg, scan = segment
    times = seg.with_suffix(".timeindex")
    code, lines, err = run(capsys, "dump", "--json", times)
    assert code == EXIT_OK and err == ""
    rows = [json.loads(line) for line in lines]
    raw = times.read_bytes()
    assert [(r["timestamp"], r["offset"]) for r in rows] == [
        (struct.unpack_from(">q", raw, i)[0], int(seg.stem) + struct.unpack_from(">i", raw, i + 8)[0])
        for i in range(0, len(raw), 12)]
    data = bytearray(raw)
    struct.pack_into(">q", data, 0, struct.unpack_from(">q", raw, 0)[0] + 1)      # not the batch's largest
    times.write_bytes(bytes(data))
    code, lines, err = run(capsys, "dump", times)
    assert code == EXIT_DATA and err.splitlines()[0] == f"Found timestamp mismatch in :{times}"


def txn_entry(pid, first, last, lso, version=0):
    return struct.pack(">hqqqq", version, pid, first, last, lso)


def test_txn_index(tmp_path, capsys):
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(txn_entry(7, 100, 110, 100) + txn_entry(9, 105, 130, 111))
    code, lines, _ = run(capsys, "dump", path)
    assert code == EXIT_OK and lines[1:] == [
        "version: 0 producerId: 7 firstOffset: 100 lastOffset: 110 lastStableOffset: 100",
        "version: 0 producerId: 9 firstOffset: 105 lastOffset: 130 lastStableOffset: 111"]
    path.write_bytes(txn_entry(7, 100, 110, 100, version=3))
    code, _, err = run(capsys, "dump", path)
    assert code == EXIT_DATA and "version 3" in err


def snapshot(entries, version=1):
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", version, crc32c(body)) + body


def test_producer_snapshot(tmp_path, capsys):
    path = tmp_path / "00000000000000000042.snapshot"
    # producer, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, txn start
    path.write_bytes(snapshot([(5, 1, 19, 41, 9, 1_700_000_000_000, 3, 30), (6, 0, 2, 12, 4, 17, -1, -1),
                               (8, 2, -1, -1, 0, 5, 0, -1)]))
    code, lines, _ = run(capsys, "dump", path)
    assert code == EXIT_OK and lines[1:] == [
        "producerId: 5 producerEpoch: 1 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[30] lastTimestamp: "
        "1700000000000 firstSequence: 10 lastSequence: 19 lastOffset: 41 offsetDelta: 9 timestamp: 1700000000000",
        # a first sequence below 0 wraps past Integer.MAX_VALUE, as Kafka's sequences do
        "producerId: 6 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty lastTimestamp: "
        f"17 firstSequence: {2**31 - 2} lastSequence: 2 lastOffset: 12 offsetDelta: 4 timestamp: 17",
        "producerId: 8 producerEpoch: 2 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 5 "]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    code, lines, err = run(capsys, "dump", path)
    assert code == EXIT_DATA and "CRC" in err and lines == [f"Dumping {path}"]


def test_not_a_kafka_segment(tmp_path, capsys):
    """A text file said "at byte" twice and printed a garbage batch offset."""
    path = tmp_path / "server.log"
    path.write_bytes(b"[2024-01-01 00:00:00,000] INFO starting (kafka.Kafka)\n" * 20)
    code, lines, err = run(capsys, "dump", path)
    assert code == EXIT_DATA and lines == [f"Dumping {path}"]
    assert err.count("\n") == 1 and "this is not a Kafka segment" in err and "at byte" not in err
    assert "offset" not in err.split("segment", 1)[1]


def test_files_option_and_decoders(segment, capsys):
    seg, _ = segment
    code, lines, _ = run(capsys, "dump", "--files", f"{seg},{seg.with_suffix('.index')}")
    assert code == EXIT_OK and [line for line in lines if line.startswith("Dumping")] == [
        f"Dumping {seg}", f"Dumping {seg.with_suffix('.index')}"]
    _, text, _ = run(capsys, "dump", "--print-data-log", seg)
    _, b64, _ = run(capsys, "dump", "--value-decoder-class", "base64", "--key-decoder-class", "hex", seg)
    import base64

    checked = 0
    for a, b in zip(text, b64):
        if " key: " in a and " payload: " in a:
            key, payload = a.split(" key: ", 1)[1].split(" payload: ")
            assert f" key: {key.encode().hex()} payload: {base64.b64encode(payload.encode()).decode()}" in b
            checked += 1
    assert checked > 100
    with pytest.raises(SystemExit) as info:
        main(["dump", "--value-decoder-class", "com.example.MyDecoder", str(seg)])
    assert info.value.code == EXIT_USAGE
    assert "string, hex, base64, int, long" in capsys.readouterr().err


def test_schema_reader_flexible_versions_and_tagged_fields():
    """TransactionLogValue v1 (flexible): compact strings and arrays, tagged fields shown only
    when they differ from their defaults; encoded here by Kafka's rules, field by field."""
    from kafkacodec.cli._internal_topics import transaction_record

    def uvarint(n):
        out = b""
        while n >= 0x80:
            out += bytes([n & 0x7F | 0x80])
            n >>= 7
        return out + bytes([n])

    key = struct.pack(">hh", 0, 4) + b"tx-9"
    partitions = uvarint(2) + uvarint(len("orders") + 1) + b"orders" + uvarint(3) + struct.pack(">ii", 0, 3) + uvarint(0)
    tagged = uvarint(2) + uvarint(0) + uvarint(8) + struct.pack(">q", 41) + uvarint(2) + uvarint(2) + struct.pack(">h", 0)
    value = (struct.pack(">hqhib", 1, 42, 3, 60000, 2) + partitions + struct.pack(">qq", 1700, 1600) + tagged)
    key_text, payload = transaction_record(key, value, 5)
    assert json.loads(key_text) == {"type": "0", "data": {"transactionalId": "tx-9"}}
    assert json.loads(payload) == {"version": "1", "data": {
        "producerId": 42, "previousProducerId": 41, "producerEpoch": 3, "transactionTimeoutMs": 60000,
        "transactionStatus": 2, "transactionPartitions": [{"topic": "orders", "partitionIds": [0, 3]}],
        "transactionLastUpdateTimestampMs": 1700, "transactionStartTimestampMs": 1600}}
    assert transaction_record(key, None, 5)[1] == "<DELETE>"
    assert transaction_record(key, value[:20], 5)[0].startswith("Error at offset 5, skipping.")
    assert transaction_record(struct.pack(">h", 7) + key[2:], value, 5) == (
        "Unknown record type 7 at offset 5, skipping.", None)



def _legacy_wrapper(inner_messages, codec_id, compressed):
    """A v0 compressed wrapper around `compressed` (its inner set), written field by field
    (offset = the last inner offset, CRC-32 from the magic byte on, as Kafka writes it)."""
    import zlib

    body = struct.pack(">bb", 0, codec_id) + struct.pack(">i", -1) + struct.pack(">i", len(compressed)) + compressed
    return struct.pack(">qiI", inner_messages - 1, 4 + len(body), zlib.crc32(body)) + body


def test_deep_legacy_wrapper_prints_each_inner_messages_own_crc(tmp_path, capsys):
    # kafka-dump-log prints every inner message of a v0/v1 wrapper with its own isValid and
    # crc: one inner message's stored CRC is damaged (the wrapper's CRC still matches)
    import gzip
    import zlib

    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=0, base_offset=0)
    for i in range(3):
        builder.append(-1, b"k", b"v%d" % i)
    inner = bytearray(builder.build())
    messages = []
    pos = 0
    while pos < len(inner):                             # offset, size | crc, magic...
        size = 12 + struct.unpack_from(">i", inner, pos + 8)[0]
        messages.append((pos, size))
        pos += size
    crcs = [struct.unpack_from(">I", inner, p + 12)[0] for p, _ in messages]
    assert crcs == [zlib.crc32(inner[p + 16:p + s]) for p, s in messages]
    struct.pack_into(">I", inner, messages[1][0] + 12, crcs[1] ^ 1)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_legacy_wrapper(3, 1, gzip.compress(bytes(inner))))
    code, out, _ = run(capsys, "dump", "--deep", path)
    rows = [line for line in out if line.startswith("| offset")]
    assert [r.split(" isValid: ")[1] for r in rows] == [
        f"true crc: {crcs[0]}", f"false crc: {crcs[1] ^ 1}", f"true crc: {crcs[2]}"]
    assert [r.split()[2] for r in rows] == ["0", "1", "2"]
    assert code == EXIT_OK        # as kafka-dump-log: an inner CRC is printed, not an error


# --- streams as inputs: `cat seg.log | kafkacodec dump -`, `dump <(zcat seg.log.gz)` -------------

def test_dump_reads_a_segment_from_a_fifo_and_from_stdin(segment, tmp_path, capsys):
    # Before, a FIFO was "not a regular file" (exit 3) and `-` "no such file": both refused.
    seg, scan = segment
    cut = bytearray(seg.read_bytes()[:int(scan["position"][-1]) + 30])    # a partial last batch,
    at = int(scan["position"][2])                                          # and offsets that jump
    struct.pack_into(">q", cut, at, int(scan["base_offset"][2]) + 5)       # (not under the v2 CRC)
    cut = bytes(cut)
    seg.write_bytes(cut)
    code, expected, err = run(capsys, "dump", "--deep", "--print-data", seg)
    assert code == EXIT_DATA and expected[0] == f"Dumping {seg}"
    stream = tmp_path / "fifo" / seg.name
    stream.parent.mkdir()
    with fed_fifo(stream, cut) as writer:
        code, lines, fifo_err = run(capsys, "dump", "--deep", "--print-data", stream)
    assert writer["written"] == len(cut)
    assert code == EXIT_DATA and lines[0] == f"Dumping {stream}"
    assert lines[1:] == [line.replace(str(seg), str(stream)) for line in expected[1:]]
    assert fifo_err == err.replace(str(seg), str(stream)) and str(stream) in fifo_err
    piped = cli_with_stdin(cut, "dump", "--deep", "--print-data", "-")
    lines = piped.stdout.decode().splitlines()
    assert piped.returncode == EXIT_DATA and lines[0] == "Dumping -"
    assert lines[1:] == [line.replace(str(seg), "-").replace(seg.name, "-") for line in expected[1:]]
    assert piped.stderr.decode() == err.replace(str(seg), "-")
    assert "kafkacodec-dump-" not in piped.stderr.decode() + fifo_err     # never the spooled copy


def test_dump_of_an_index_stream_checks_it_against_the_segment_beside_it(segment, tmp_path, capsys):
    seg, _ = segment
    index = seg.with_suffix(".index")
    code, expected, err = run(capsys, "dump", index)
    assert code == EXIT_OK and err == ""
    data = index.read_bytes()
    index.unlink()
    with fed_fifo(index, data):
        code, lines, err = run(capsys, "dump", "--verify-index-only", index)
    assert code == EXIT_OK and err == "" and lines == [f"Dumping {index}"]    # every entry checked


def test_dump_max_bytes_reads_no_more_of_a_stream(segment, tmp_path, capsys):
    seg, scan = segment
    data = seg.read_bytes() * 64                     # megabytes: more than a pipe holds
    limit = int(scan["position"][3]) + 10
    code, expected, _ = run(capsys, "dump", "--max-bytes", limit, seg)
    stream = tmp_path / "00000000000000000000.log"
    with fed_fifo(stream, data) as writer:
        code, lines, err = run(capsys, "dump", "--max-bytes", limit, stream)
    assert code == EXIT_OK and err == "" and lines[1:] == expected[1:] and len(lines) == 2 + 3
    assert writer.get("broken") and writer["written"] < len(data) // 2     # the rest was never read


def test_cluster_metadata_records_kafka_cannot_read_either():
    """--cluster-metadata-decoder: a record that cannot be read gives kafka-dump-log's
    "skipping" text (an unknown type, a frame of KRaft's 2.8 preview, a cut record, bytes
    after it), never a crash; a float64 (a client quota) as Java prints a double."""
    import uuid

    from kafkacodec.cli._cluster_metadata import RECORDS, metadata_record

    topic = bytes(RECORDS[2].encode(0, {"name": "t", "topic_id": uuid.UUID(int=1)}))
    assert metadata_record(None, b"\x01\x02\x00" + topic, 4) == (
        None, '{"type":"TOPIC_RECORD","version":0,"data":{"name":"t","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}')
    skipped = {data: metadata_record(None, data, 4)[1] for data in (
        b"\x01\x63\x00", b"\x00\x02\x00", b"\x01\x02\x00" + topic[:-3], b"\x01\x02\x00" + topic + b"\x00", b"\x01")}
    assert list(skipped.values()) == [
        "Error at 4, skipping. org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 99",
        "Error at 4, skipping. Could not deserialize metadata record with frame version 0. Note that upgrades from "
        "the preview release of KRaft in 2.8 to newer versions are not supported.",
        skipped[b"\x01\x02\x00" + topic[:-3]],
        "Error at 4, skipping. Found 1 byte(s) of garbage after 2",
        "Error at 4, skipping. Error while reading type"]
    assert skipped[b"\x01\x02\x00" + topic[:-3]].startswith("Error at 4, skipping. Failed to deserialize record "
                                                            "with type 2: TopicRecord v0 ")
    quota = {"entity": [{"entity_type": "user", "entity_name": None}], "key": "producer_byte_rate", "remove": False}
    for value, java in ((1e7, "1.0E7"), (1048576.0, "1048576.0"), (0.001, "0.001"), (1e-4, "1.0E-4"),
                        (-2.5e-5, "-2.5E-5"), (123.456, "123.456"), (9999999.0, "9999999.0"), (0.0, "0.0")):
        record = b"\x01\x0e\x00" + bytes(RECORDS[14].encode(0, dict(quota, value=value)))
        assert f'"value":{java},' in metadata_record(None, record, 0)[1]


def test_kraft_control_records_as_kafka_41_prints_them():
    """Read at version 0, written at the version their own `version` field names: a leader
    change of version 1 lists its voters' directory ids (zero: version 0 does not carry them)."""
    from kafkacodec.cli._cluster_metadata import CONTROL_RECORDS, control_record
    from kafkacodec.errors import CorruptRecordError

    leader_change = CONTROL_RECORDS[2][1]
    change = {"leader_id": 1, "voters": [{"voter_id": 1}, {"voter_id": 2}], "granting_voters": [{"voter_id": 1}]}
    assert control_record(2, bytes(leader_change.encode(0, dict(change, version=0)))) == {
        "version": 0, "leaderId": 1, "voters": [{"voterId": 1}, {"voterId": 2}], "grantingVoters": [{"voterId": 1}]}
    zero = "AAAAAAAAAAAAAAAAAAAAAA"
    assert control_record(2, bytes(leader_change.encode(0, dict(change, version=1))))["voters"] == [
        {"voterId": 1, "voterDirectoryId": zero}, {"voterId": 2, "voterDirectoryId": zero}]
    assert control_record(0, b"") is None                       # a transaction marker: not KRaft's
    with pytest.raises(CorruptRecordError):
        control_record(3, b"\x00")
