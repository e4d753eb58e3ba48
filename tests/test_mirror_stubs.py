"""The .pyi stubs of the protocol and mirror modules type-check real usage (msgspec style)."""

import subprocess
import sys

import pytest

SNIPPET = '''
import uuid
from kafkacodec.mirror import RawBatchesBuilder, fetch_to_produce, shallow_records, trim_batch
from kafkacodec.protocol import decode_fetch_response, encode_fetch_request, encode_produce_request
from kafkacodec._writer import WriteBuffer

raw: bytes = encode_fetch_request([("t", [(0, 5)])], api_version=12)
response = decode_fetch_response(bytearray(raw), 12, offset=4)
for topic in response.responses:
    for part in topic.partitions:
        if part.records is not None:
            for batch in shallow_records(part.records, 3):
                last: int = batch.offset
                size: int = len(batch.value)
builder = RawBatchesBuilder(1 << 20)
ok: bool = builder.append(b"")
frame: WriteBuffer | None = fetch_to_produce(response, next_offsets={}, topic_names={uuid.uuid4(): "t"})
out: WriteBuffer = encode_produce_request([("t", [(0, [b"a", memoryview(b"b")])])])
trimmed = trim_batch(b"", 3)
count: int = trimmed.record_count  # error: may be None (and trimmed may be None)
'''


@pytest.mark.slow
@pytest.mark.tooling
def test_stubs_type_check_usage(tmp_path):
    path = tmp_path / "usage.py"
    path.write_text(SNIPPET)
    result = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
                             str(path)], capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    # exactly the two deliberate errors on the last line, nothing else
    assert len(errors) == 2, result.stdout
    assert all(f"usage.py:{SNIPPET.count(chr(10))}:" in line for line in errors), result.stdout
