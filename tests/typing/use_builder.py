import numpy as np

from kafkacodec import MemoryRecordsBuilder, TimestampType

b = MemoryRecordsBuilder(magic=2, compression="lz4", timestamp_type=TimestampType.CREATE_TIME)
b.append(1, b"k", bytearray(b"v"), [("h", None)])
b.append_many(np.zeros(2, dtype=np.int64), None, [b"a", memoryview(b"b")])
data: bytes = b.build()
n: int = b.record_count + b.next_offset
marker: bytes = MemoryRecordsBuilder.build_end_txn_marker(True, 1, 0, 0)
b.append("1", b"k", b"v")  # E: Argument 1 to "append" of "MemoryRecordsBuilder" has incompatible type "str"
bad: str = b.build()  # E: Incompatible types in assignment
