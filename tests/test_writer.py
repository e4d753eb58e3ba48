"""The write buffer under hostile sizes: growth past PY_SSIZE_T_MAX / 2 fails at once (it used to
double into a negative capacity and spin forever with the GIL held), and the ProduceRequest
writer sizes its buffer from the bytes it really writes, not from what __len__ claims."""

import os
import subprocess
import sys
import textwrap

import pytest

from isolated import run_python
from kafkacodec import WriteBuffer
from kafkacodec.protocol import encode_produce_request


def run_isolated(code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (a hang or a crash cannot take the test run along)."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {timeout} s:\n{code}")


@pytest.mark.parametrize("call", [
    "from kafkacodec._convert import DownConverter; DownConverter(1).reserve(2**62 + 1)",
    "from kafkacodec import WriteBuffer; WriteBuffer(2**62 + 1)",
    "from kafkacodec import WriteBuffer; WriteBuffer(2**63 - 1)",
    "from kafkacodec import WriteBuffer; b = WriteBuffer(16); b.write(b'x' * 9); "
    "from kafkacodec._convert import DownConverter; DownConverter(0).reserve(2**63 - 2)",
])
def test_growth_past_half_the_address_space_raises_memory_error_at_once(call):
    result = run_isolated(f"""
        try:
            {call}
        except MemoryError as exc:
            print("MemoryError", exc)
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("MemoryError"), result.stdout


@pytest.mark.parametrize("which", ["topic", "client_id", "transactional_id"])
def test_produce_request_ignores_a_lying_len_of_its_strings(which):
    result = run_isolated(f"""
        from kafkacodec.protocol import encode_produce_request
        class Lying(str):
            def __len__(self):
                return 2**60

        names = dict(topic="orders", client_id="me", transactional_id="tx")
        lying = dict(names, {which}=Lying(names["{which}"]))
        def encode(names):
            return bytes(encode_produce_request([(names["topic"], [(0, b"abc")])],
                                                client_id=names["client_id"],
                                                transactional_id=names["transactional_id"]))
        assert encode(lying) == encode(names)
        print("same")
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("same"), result.stdout


def test_produce_request_is_sized_from_the_real_utf8_bytes():
    name = "ünïcödé-" * 40 + "\U0001F600"
    honest = bytes(encode_produce_request([(name, [(0, b"x" * 10)])], client_id="c" * 300))
    assert name.encode() in honest and b"c" * 300 in honest
    assert int.from_bytes(honest[:4], "big") == len(honest) - 4


class Shrinking:
    """A partition index whose __index__ empties a bytearray the request was sized for."""

    def __init__(self, victim: bytearray):
        self.victim = victim

    def __index__(self):
        del self.victim[:]
        return 0

    __int__ = __index__


def test_records_that_change_size_between_the_passes_are_refused_or_framed_as_written():
    records = bytearray(b"r" * 100)
    try:
        out = encode_produce_request([("t", [(Shrinking(records), records)])], api_version=3,
                                     client_id="c")
    except ValueError as exc:
        assert "changed size" in str(exc)
        return
    frame = bytes(out)
    # v3 layout: size, key, version, correlation id, client id, null transactional id, acks,
    # timeout, 1 topic "t", 1 partition, index, records length, records
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header = 4 + 2 + 2 + 4 + (2 + 1) + 2 + 2 + 4 + 4 + (2 + 1) + 4 + 4
    length = int.from_bytes(frame[header:header + 4], "big", signed=True)
    assert length == len(frame) - header - 4 == len(records)


def test_write_takes_any_contiguous_buffer_as_its_raw_bytes():
    raw = bytes(range(16))
    out = WriteBuffer()
    assert out.write(memoryview(raw).cast("i")) == 16
    assert out.write(memoryview(raw).cast("B", (4, 4))) == 16
    assert out.getvalue() == raw + raw


def test_freed_large_blocks_are_kept_within_the_bound_and_hand_out_no_old_bytes():
    from kafkacodec import _writer

    big = [WriteBuffer(2 << 20) for _ in range(40)]         # 80 MiB, more than the pool keeps
    for buffer in big:
        buffer.write(b"old" * 1000)
    del buffer, big
    kept = _writer._pooled_bytes()
    assert 0 < kept <= 64 << 20
    reused = WriteBuffer(2 << 20)                            # takes a kept block
    assert _writer._pooled_bytes() == kept - (2 << 20)
    assert len(reused) == 0 and reused.getvalue() == b""
    reused.write(b"new")
    assert bytes(memoryview(reused)) == b"new"
    small = WriteBuffer(4096)                                # small ones never touch the pool
    del small
    assert _writer._pooled_bytes() == kept - (2 << 20)


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="glibc's mallopt and minor-fault counts (ASan has its own allocator)")
def test_lazy_conversion_chunks_reuse_mapped_memory():
    # With glibc's mmap threshold held at its default (128 KiB; after frees glibc may raise it,
    # which is why this depended on the allocator's history), every ~147 KiB chunk buffer was a
    # fresh mapping: ~36 page faults a chunk.  Kept blocks make the steady state fault-free.
    run = run_python("""
        import ctypes, resource
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 << 10)        # M_MMAP_THRESHOLD
        from kafkacodec import LazyDownConvertRecords, MemoryRecordsBuilder
        log = b""
        for batch in range(64):
            builder = MemoryRecordsBuilder(base_offset=batch * 16)
            for i in range(16):
                builder.append(1, b"k%d" % i, bytes([i]) * 1000)
            log += builder.build()
        def convert():
            return sum(c.records.size_in_bytes for c in LazyDownConvertRecords(log, 1, chunk_size=128 << 10))
        convert()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        chunks = 0
        for _ in range(10):
            for chunk in LazyDownConvertRecords(log, 1, chunk_size=128 << 10):
                chunks += chunk.records.size_in_bytes > 0
        print(chunks, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    assert run.returncode == 0, run.stderr
    chunks, faults = map(int, run.stdout.split())
    assert chunks >= 70 and faults < chunks, (chunks, faults)
