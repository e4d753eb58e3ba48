"""The sample log generator: a broker-shaped log directory that kafka-python reads back whole."""

import struct

import pytest

from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from kafkacodec.sample import sample_log, write_sample_log


def walk(data):
    """(magic, attributes, batch) for each top-level entry, by the framing alone."""
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        entry = data[pos:pos + 12 + size]
        magic = entry[16]
        attributes = entry[22] if magic == 2 else entry[17]
        yield magic, attributes, entry
        pos += 12 + size
    assert pos == len(data)


def kp_offsets(data):
    records = KpMemoryRecords(data)
    offsets = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        offsets.extend(r.offset for r in batch)
    return offsets


def test_sample_log_is_dense_and_mixed():
    data = sample_log(0, seed=3)
    offsets = kp_offsets(data)
    assert offsets == list(range(len(offsets)))          # dense, increasing, from 0
    entries = list(walk(data))
    seen = {(magic, attributes & 7) for magic, attributes, _ in entries}
    assert seen >= {(0, c) for c in range(4)} | {(1, c) for c in range(4)} | {(2, c) for c in range(5)}
    v1_log_append = [a for m, a, _ in entries if m == 1 and a & 0x08]
    v2_flags = [a & 0x78 for m, a, _ in entries if m == 2]
    assert v1_log_append
    assert 0x08 in v2_flags                                # LogAppendTime batch
    assert 0x10 in v2_flags                                # transactional data
    assert v2_flags.count(0x30) == 2                       # a COMMIT and an ABORT marker
    control_types = [struct.unpack_from(">h", e, 61 + 7)[0]
                     for m, a, e in entries if m == 2 and a & 0x20]
    assert control_types == [1, 0]
    leader_epochs = {struct.unpack_from(">i", e, 12)[0] for m, _, e in entries if m == 2}
    assert leader_epochs == {0, 1}


def test_sample_log_is_deterministic_per_seed():
    assert sample_log(1, seed=5) == sample_log(1, seed=5)
    assert sample_log(1, seed=5) != sample_log(1, seed=6)
    assert sample_log(0, seed=5) != sample_log(1, seed=5)


def test_write_sample_log_layout(tmp_path):
    paths = write_sample_log(tmp_path, topic="events", partitions=2, seed=1, batches_per_segment=7)
    by_partition = {}
    for path in paths:
        assert path.suffix == ".log" and len(path.stem) == 20
        by_partition.setdefault(path.parent.name, []).append(path)
    assert sorted(by_partition) == ["events-0", "events-1"]
    for partition, segments in by_partition.items():
        assert len(segments) > 1
        joined = b"".join(p.read_bytes() for p in segments)
        assert joined == sample_log(int(partition[-1]), seed=1)
        # each segment is named after the first offset it holds
        for path in segments:
            first = kp_offsets(path.read_bytes())[0]
            assert int(path.stem) == first
    with pytest.raises(ValueError):
        write_sample_log(tmp_path, partitions=0)
