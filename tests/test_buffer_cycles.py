"""A reader that holds a buffer export, left in a reference cycle with the memoryview it reads,
is collected without a crash (found by the re-entrancy harness, fuzz/reentrancy.py).

Cython's generated tp_traverse/tp_clear treat a Py_buffer member as an ordinary reference: the
collector saw the exported memoryview as garbage and cleared it while our export was alive
(CPython then frees the cleared memoryview through a NULL pointer: SIGSEGV), or cleared our
reference without releasing the export. Each case runs in a subprocess."""

from __future__ import annotations

import pytest

from isolated import run_python

CYCLES = {
    "memory_records_only_reference": """
        holder = [MemoryRecords(memoryview(bytearray(data)))]
    """,
    "memory_records": """
        mv = memoryview(bytearray(data))
        holder = [mv, MemoryRecords(mv)]
    """,
    "memory_records_iterator": """
        mv = memoryview(bytearray(data))
        holder = [MemoryRecords(mv).records(), mv]
    """,
    "ring_with_pool": """
        pool = SimpleMemoryPool(1 << 16, 1 << 16)
        holder = [ResponseRingBuffer(4096, pool), pool]
    """,
}


@pytest.mark.parametrize("case", list(CYCLES))
def test_a_reader_in_a_cycle_with_its_buffer_is_collected(case):
    body = "\n".join("    " + line.strip() for line in CYCLES[case].strip().splitlines())
    proc = run_python(f"""
import gc
from kafkacodec import MemoryRecords, MemoryRecordsBuilder, ResponseRingBuffer, SimpleMemoryPool
builder = MemoryRecordsBuilder()
builder.append(1, b"k", b"v")
data = builder.build()
for _ in range(50):
{body}
    holder.append(holder)
    del holder
    gc.collect()
print("collected")
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "collected"
    assert "exported buffer" not in proc.stderr, proc.stderr[-2000:]
