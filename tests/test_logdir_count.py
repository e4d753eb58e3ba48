"""count_split (kafkacodec.logdir): a split's row count from batch headers where they hold it,
against read_split's rows of the same split on every kind of log and damage (the reader is the
oracle here; test_logdir checks it against kafka-python): the same count, the same problems
reported, the same error raised.  And the point of it: a clean v2 log is counted without one
record decoded."""

import os
import shutil
import struct
import sys

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from kafkacodec.arrow import encode_v2, scan_entries  # noqa: E402
from kafkacodec.cli import generate  # noqa: E402
from kafkacodec.crc import crc32c  # noqa: E402
from kafkacodec.errors import CorruptRecordError, KafkaCodecError  # noqa: E402
from kafkacodec.logdir import Predicate, Pushdown, ReadOptions, count_split, plan, read_split  # noqa: E402
from kafkacodec.logdir import _read  # noqa: E402


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """Magics 0, 1 and 2, every codec, committed and aborted transactions, 2 partitions each of
    orders and clicks, 6 batches per segment."""
    root = tmp_path_factory.mktemp("sample")
    generate(root, batches_per_segment=6)
    return root


def copy(root, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(root, dst)
    return dst


def outcome(run):
    """(result, problems as (kind, message, offset)) of run(on_problem), or the error's type and text."""
    problems = []
    try:
        result = run(problems.append)
    except KafkaCodecError as exc:
        return type(exc).__name__, str(exc)
    return result, [(p.kind, p.message, p.offset) for p in problems]


def both(root, options=None, pushdown=None):
    """What reading every split gives (rows) and what counting them gives, each as outcome()."""
    ro = ReadOptions.parse({"paths": [str(root)], **(options or {})})
    splits, _ = plan(None, ro, pushdown=pushdown, on_problem=lambda p: None)
    common = dict(validate_crc=ro.validate_crc, keep_control=ro.keep_control, mode=ro.mode,
                  fail_on_data_loss=ro.fail_on_data_loss, pushdown=pushdown)
    read = outcome(lambda tell: [sum(rb.num_rows for rb in read_split(s, columns=["offset"], on_problem=tell, **common))
                                 for s in splits])
    counted = outcome(lambda tell: [count_split(s, on_problem=tell, **common) for s in splits])
    return read, counted


def decoded_entries(monkeypatch):
    """A list that grows by one for every decoder the split reader makes."""
    made = []
    original = _read._SplitReader.decoder

    def spy(self):
        made.append(self.split.uri)
        return original(self)

    monkeypatch.setattr(_read._SplitReader, "decoder", spy)
    return made


OPTIONS = [
    {},
    {"kafka.isolation.level": "read_committed"},
    {"keepControl": "true"},
    {"keepControl": "true", "kafka.isolation.level": "read_committed"},
    {"validateCrc": "false"},
    {"minPartitions": "9"},                                   # splits cut inside segments
    {"subscribe": "orders", "startingOffsets": '{"orders": {"0": 7, "1": 31}}',
     "endingOffsets": '{"orders": {"0": 150, "1": 99}}'},    # ranges that cut batches
    {"failOnDataLoss": "false"},
    {"mode": "PERMISSIVE"},
]
PUSHDOWNS = [
    None,
    Pushdown([Predicate("offset", ">=", 40), Predicate("offset", "<", 133)]),
    Pushdown([Predicate("offset", "=", 77)]),
    Pushdown([Predicate("offset", "in", (3, 60, 61, 200))]),
    Pushdown([Predicate("partition", "=", 1), Predicate("topic", "in", ("orders",))]),
    Pushdown([Predicate("timestamp", "notnull")]),
    Pushdown([Predicate("offset", "notnull"), Predicate("offset", ">", 10)]),
]


@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) or "defaults" for o in OPTIONS])
@pytest.mark.parametrize("pushdown", PUSHDOWNS, ids=[str(p and ";".join(map(str, p.predicates))) for p in PUSHDOWNS])
def test_counts_are_the_rows_read(sample, options, pushdown):
    read, counted = both(sample, options, pushdown)
    assert counted == read
    assert sum(read[0]) > 0 or pushdown is not None and pushdown.offset_values() == {77}


def test_a_clean_v2_log_is_counted_from_headers_alone(sample, tmp_path, monkeypatch):
    """v2 batches in every codec, a segment each: not one decoder made (nothing decompressed),
    in any split; the sample's legacy entries need theirs."""
    part = tmp_path / "v2" / "events-0"
    part.mkdir(parents=True)
    first = 0
    for codec in range(5):                                # none, gzip, snappy, lz4, zstd
        n = np.arange(first, first + 500)
        value = pa.array([b"v%07d" % i for i in n], pa.binary())
        data, _ = encode_v2(pa.array([None] * len(n), pa.binary()), value,
                            (1_700_000_000_000 + n).astype(np.int64), codec=codec, batch_bytes=900,
                            base_offset=first)
        (part / f"{first:020d}.log").write_bytes(data)
        first += len(n)
    made = decoded_entries(monkeypatch)
    for options in ({}, {"minPartitions": "7"}):
        read, counted = both(tmp_path / "v2", options)
        assert read == counted and sum(read[0]) == first
    made.clear()
    ro = ReadOptions.parse({"paths": [str(tmp_path / "v2")], "minPartitions": "7"})
    assert sum(count_split(s) for s in plan(None, ro)[0]) == first and made == []
    [count_split(s) for s in plan(None, ReadOptions.parse({"paths": [str(sample)]}))[0]]
    assert made                                               # magic 0 and 1: decoded


def damaged(sample, tmp_path, how):
    dst = copy(sample, tmp_path)
    seg = sorted((dst / "orders-1").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    scan = scan_entries(bytes(data))
    v2 = np.flatnonzero((scan["magic"] == 2) & (scan["attributes"] & 0x20 == 0))
    j = int(v2[1])
    at, size = int(scan["position"][j]), int(scan["size"][j])
    if how == "crc":
        data[at + 70] ^= 1                                 # a record's byte: the checksum fails
    elif how == "cut":
        data = data[:int(scan["position"][-1]) + 30]       # the last entry cut short
    elif how == "size":
        data[at + 8:at + 12] = struct.pack(">i", 0x7FFF0000)    # an entry claims 2 GiB
    elif how == "overlap":
        segs = sorted((dst / "clicks-0").glob("*.log"))
        shutil.copy(segs[2], dst / "clicks-0" / f"{int(segs[2].stem) + 3:020d}.log")
    elif how == "repeat":
        data += data[at:at + size]                         # a batch again at the end: offsets go back
    elif how == "gap":
        sorted((dst / "orders-0").glob("*.log"))[2].unlink()
    seg.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("how", ["crc", "cut", "size", "overlap", "repeat", "gap"])
@pytest.mark.parametrize("options", [{}, {"mode": "DROPMALFORMED"}, {"mode": "PERMISSIVE"},
                                     {"mode": "DROPMALFORMED", "failOnDataLoss": "false"},
                                     {"validateCrc": "false", "mode": "DROPMALFORMED"}],
                         ids=["failfast", "dropmalformed", "permissive", "dropmalformed-noloss", "nocrc"])
def test_damage_is_counted_and_reported_as_it_is_read(sample, tmp_path, how, options):
    read, counted = both(damaged(sample, tmp_path, how), options)
    assert counted == read


def lie_about_the_count(sample, tmp_path, by):
    """The first v2 data batch of clicks-0's last segment with its record count
    changed by `by` and its checksum recomputed (a client's bug: Kafka's broker refuses it)."""
    dst = copy(sample, tmp_path)
    seg = sorted((dst / "clicks-0").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    scan = scan_entries(bytes(data))
    j = int(np.flatnonzero((scan["magic"] == 2) & (scan["attributes"] & 0x20 == 0))[0])
    at, size = int(scan["position"][j]), int(scan["size"][j])
    count = struct.unpack_from(">i", data, at + 57)[0]
    struct.pack_into(">i", data, at + 57, count + by)
    struct.pack_into(">I", data, at + 17, crc32c(bytes(data[at + 21:at + size])))
    seg.write_bytes(bytes(data))
    return dst


def test_a_count_no_batch_can_hold_is_decoded_and_found_out(sample, tmp_path):
    """More records than the batch's offsets span, or than its bytes hold uncompressed: the
    batch is decoded, and the error is read_split's."""
    read, counted = both(lie_about_the_count(sample, tmp_path, +1))
    assert read[0] == "CorruptRecordError" and counted == read


def test_a_header_that_undercounts_under_a_valid_checksum_is_counted_as_it_says(sample, tmp_path):
    """The documented limit: one record fewer than the batch holds, its checksum recomputed.
    Reading finds the record left over; counting trusts the header (no record is decoded)."""
    read, counted = both(lie_about_the_count(sample, tmp_path, -1))
    honest, _ = both(sample)
    assert read[0] == "CorruptRecordError"
    assert sum(counted[0]) == sum(honest[0]) - 1


def test_a_batch_whose_offsets_wrap_past_the_largest_is_decoded(tmp_path):
    """A base offset 2 below 2^63 - 1 (outside the CRC: any copy can carry it) and 5 records:
    the header's last offset wraps to a negative, below the segment's name, and the read passes
    the batch over; the count decodes it too (a fuzzing finding: it counted all 5)."""
    from kafkacodec import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression="none")
    for i in range(5):
        builder.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, 2**63 - 3)
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / f"{2**63 - 3:020d}.log").write_bytes(bytes(data))
    read, counted = both(tmp_path)
    assert counted == read and read[0] == [0]
