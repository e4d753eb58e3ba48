"""kafkacodec.errors: KafkaCodecError.with_context is the one way a layer adds what it knows
(the file, the row, what to do next) to an error, and every path that does so keeps the
error's class and fields (a subclass's too) and its cause."""

import pickle
import struct
from pathlib import Path

import pytest

from kafkacodec import Compression, MemoryRecords, MemoryRecordsBuilder, down_convert
from kafkacodec.arrow import ArrowDecoder, scan_entries
from kafkacodec.errors import CorruptRecordError, FileTruncatedError, InvalidCrcError, KafkaCodecError

LZ4_WRAPPER = Path(__file__).parent.parent / "fuzz/regressions/records_deep/invalid-crc-inside-lz4-wrapper"


def raised(exc):
    """`exc` as raised (with a traceback) from inside the handling of a cause."""
    try:
        try:
            raise OSError("the cause")
        except OSError as cause:
            raise exc from cause
    except KafkaCodecError as caught:
        return caught


def test_with_context_keeps_class_fields_cause_and_traceback():
    crc = raised(InvalidCrcError("batch crc", stored=1, computed=2, position=30, offset=7))
    new = crc.with_context("seg.log: ", hint="repair it", position=130)
    assert type(new) is InvalidCrcError and (new.stored, new.computed) == (1, 2)
    assert (new.position, new.offset) == (130, 7)
    assert new.reason == "seg.log: batch crc: stored crc 0x00000001 != computed 0x00000002"
    assert str(new) == f"{new.reason} at byte 130 (batch offset 7). repair it"
    assert isinstance(new.__cause__, OSError) and new.__traceback__ is crc.__traceback__
    assert str(crc) == "batch crc: stored crc 0x00000001 != computed 0x00000002 at byte 30 (batch offset 7)"
    # hints add up, None clears a field
    again = new.with_context(hint="or skip it", offset=None)
    assert str(again).endswith("at byte 130. repair it. or skip it") and again.offset is None

    cut = FileTruncatedError("shrank", path="/p/0.log", size=40, position=44)
    new = cut.with_context(suffix=" while read")
    assert (type(new), new.path, new.size, str(new)) == (FileTruncatedError, "/p/0.log", 40, "shrank while read at byte 44")


@pytest.mark.parametrize("error", [
    InvalidCrcError("batch crc", stored=1, computed=2, position=3, offset=4),
    InvalidCrcError("batch crc", stored=1, computed=2).with_context("f.log: ", hint="h"),
    FileTruncatedError("shrank", path="p", size=3, position=1).with_context("ctx: "),
    CorruptRecordError("bad", position=5),
])
def test_pickle_keeps_class_message_and_fields(error):
    # InvalidCrcError could not be unpickled (its __init__ needs stored= and computed=), and an
    # error given context lost it in FileTruncatedError's own __reduce__
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)


def lz4_wrapper():
    data = LZ4_WRAPPER.read_bytes()
    with pytest.raises(InvalidCrcError) as info:
        for batch in MemoryRecords(data).batches():
            list(batch)
    return data, info.value


def test_records_and_arrow_keep_checksums_of_an_error_inside_a_compressed_wrapper():
    data, from_records = lz4_wrapper()
    with pytest.raises(InvalidCrcError) as info:
        ArrowDecoder(validate_crc=False).decode(data)     # else the wrapper's own CRC fails first
    from_arrow = info.value
    for error in (from_records, from_arrow):
        assert error.stored != error.computed and error.offset is not None
    assert (from_arrow.stored, from_arrow.computed) == (from_records.stored, from_records.computed)
    assert from_arrow.reason.startswith("<buffer>: in the decompressed data of the entry at byte 0: ")


def two_batches_second_with_magic(magic):
    """Two v2 batches; the second's magic byte set to `magic`, and its position."""
    out = b""
    for base in (0, 1):
        b = MemoryRecordsBuilder(magic=2, compression=Compression.NONE, base_offset=base)
        b.append(1000, b"k", b"v")
        out += bytes(b.build())
    second = struct.unpack_from(">i", out, 8)[0] + 12
    data = bytearray(out)
    data[second + 16] = magic
    return bytes(data), second


def test_scan_entries_gives_the_error_itself_not_its_text():
    data, second = two_batches_second_with_magic(9)
    with pytest.raises(CorruptRecordError, match="invalid magic byte 9") as info:
        scan_entries(data, source="seg.log")
    strict = info.value
    scan = scan_entries(data, source="seg.log", strict=False)
    error = scan["error"]
    assert type(error) is CorruptRecordError and int(scan["stop"]) == second
    assert (error.position, error.offset, str(error)) == (strict.position, strict.offset, str(strict))
    assert str(error).startswith("seg.log: ")


def test_logdir_failfast_raises_a_copy_with_the_hint(tmp_path):
    from kafkacodec.logdir._problems import SKIP_HINT, Problem, Reporter

    original = InvalidCrcError("crc", stored=1, computed=2, position=3, offset=4)
    problem = Problem("corrupt", "f.log", str(original), 3, 4, original)
    for _ in range(2):
        with pytest.raises(InvalidCrcError) as info:
            Reporter("FAILFAST").damage(problem)
        assert str(info.value) == f"{original}. {SKIP_HINT}" and info.value.stored == 1
    # the problem's error (also given to callbacks) is left as it was
    assert str(original) == "crc: stored crc 0x00000001 != computed 0x00000002 at byte 3 (batch offset 4)"


def test_appending_after_a_damaged_segment_names_the_error_found(tmp_path):
    from kafkacodec.logdir._store import open_store
    from kafkacodec.logdir._write import next_offsets

    data, second = two_batches_second_with_magic(9)
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / f"{0:020d}.log").write_bytes(data)
    store, path = open_store(str(tmp_path))
    with pytest.raises(CorruptRecordError, match="invalid magic byte 9") as info:
        next_offsets(store, path)
    # the scan's error itself: the magic byte's position, the batch offset, the hint after them
    assert (info.value.position, info.value.offset) == (second + 16, 1)
    assert str(info.value).endswith(f"at byte {second + 16} (batch offset 1). cannot append after it "
                                    "(repair or write elsewhere)")


def broken_batch(byte_from_end):
    b = MemoryRecordsBuilder(magic=2, compression=Compression.NONE)
    b.append(1000, b"k", b"value")
    data = bytearray(bytes(b.build()))
    data[-byte_from_end] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize("function, byte_from_end, cls", [
    ("decode_batches", 2, InvalidCrcError),           # a value byte: the batch CRC no longer matches
    ("down_convert_batches", 1, CorruptRecordError),  # the header count (down-conversion checks no CRC)
])
def test_spark_failfast_raises_the_cells_error_with_the_row(function, byte_from_end, cls):
    pa = pytest.importorskip("pyarrow")
    from kafkacodec.spark import udf

    run = udf.decode_batches("batch") if function == "decode_batches" else udf.down_convert_batches("batch", 1)
    cells = pa.RecordBatch.from_pydict({"batch": [broken_batch(byte_from_end)]}, pa.schema([("batch", pa.binary())]))
    with pytest.raises(cls) as info:
        list(run(iter([cells])))
    error = info.value
    assert type(error) is cls and error.position is not None
    assert error.reason.startswith(("row 0 of this task's input: ", "batch[row 0]: "))
    assert "mode='DROPMALFORMED'" in error.hint and str(error).endswith(error.hint)
    # what Spark ships to the driver keeps the row, the class and the fields
    shipped = pickle.loads(pickle.dumps(error))
    assert (type(shipped), str(shipped), vars(shipped)) == (cls, str(error), vars(error))


def test_down_convert_names_the_callers_byte_of_a_bad_compressed_stream():
    first, _ = two_batches_second_with_magic(2)
    b = MemoryRecordsBuilder(magic=2, compression=Compression.LZ4, base_offset=5)
    b.append(1000, b"k", b"v" * 100)
    lz4 = bytearray(bytes(b.build()))
    lz4[61] ^= 0x01                           # the LZ4 frame magic, the batch's first records byte
    with pytest.raises(CorruptRecordError, match="invalid frame magic") as info:
        down_convert(first + bytes(lz4), 1)
    assert (info.value.position, info.value.offset) == (len(first) + 61, 5)


# --- bad data and misuse are apart ------------------------------------------------------------

def test_the_three_kinds_are_told_apart_by_class():
    from kafkacodec import errors

    data = {errors.CorruptRecordError, errors.InvalidCrcError, errors.UnsupportedCompressionError,
            errors.UnsupportedVersionError, errors.RecordTooLargeError, errors.LogLayoutError,
            errors.WriteConflictError, errors.InvalidRecordError}
    misuse = {errors.BufferReleasedError, errors.ConcurrentUseError, errors.MemoryPoolError}
    for cls in data:
        assert issubclass(cls, errors.DataError) and issubclass(cls, ValueError)
        assert not issubclass(cls, (errors.MisuseError, RuntimeError))
    for cls in misuse:
        assert issubclass(cls, errors.MisuseError) and issubclass(cls, RuntimeError)
        assert not issubclass(cls, errors.DataError)
    assert issubclass(errors.MemoryPoolError, ValueError)          # as before: kept for callers
    assert not issubclass(errors.FileTruncatedError, (errors.DataError, errors.MisuseError))
    # a blocking call's deadline ran out: neither kind, and a TimeoutError as Python's
    assert not issubclass(errors.KafkaTimeoutError, (errors.DataError, errors.MisuseError))
    assert issubclass(errors.KafkaTimeoutError, TimeoutError)
    # refused credentials are neither bad data nor misuse of an object
    assert not issubclass(errors.AuthenticationError, (errors.DataError, errors.MisuseError,
                                                       ValueError, RuntimeError))
    every = {getattr(errors, name) for name in errors.__all__}
    assert data | misuse | {errors.FileTruncatedError, errors.KafkaTimeoutError,
                            errors.AuthenticationError} == {
        c for c in every if c not in (errors.KafkaCodecError, errors.DataError, errors.MisuseError,
                                      errors.NotRegularFileError)}
    import kafkacodec

    assert set(errors.__all__) <= set(kafkacodec.__all__)


def test_representative_raises_have_their_kind(tmp_path):
    from kafkacodec import FileRecords, SimpleMemoryPool
    from kafkacodec.errors import DataError, MisuseError

    # bad data: a codec id Kafka does not know (7) is a ValueError like a bad length
    data, _ = two_batches_second_with_magic(2)
    bad = bytearray(data)
    bad[22] = 7                                   # attributes' low byte of the first batch
    with pytest.raises(DataError) as info:
        for batch in MemoryRecords(bytes(bad)).batches():
            list(batch)
    assert isinstance(info.value, ValueError) and "compression" in str(info.value)
    # misuse: a closed file's batches, a pool buffer released twice
    path = tmp_path / "0.log"
    path.write_bytes(data)
    records = FileRecords.open(str(path))
    batches = list(records.batches())
    records.close()
    with pytest.raises(MisuseError) as info:
        batches[0].raw
    assert isinstance(info.value, RuntimeError) and not isinstance(info.value, ValueError)
    pool = SimpleMemoryPool(100, 50)
    view = pool.try_allocate(10)
    pool.release(view)
    with pytest.raises(MisuseError, match="double release"):
        pool.release(view)
