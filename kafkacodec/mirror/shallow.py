"""KIP-712 shallow mirroring: forward fetched batches into produce requests as raw bytes.

- :class:`RawBytesBatchRecord`: one whole batch as a record (value = zero-copy view of the
  batch, still compressed; offset = last offset; timestamp = max timestamp).
- :func:`shallow_records`: the batches of a fetched record set, the first one trimmed to the
  fetch offset when the fetch started inside it.
- :func:`trim_batch`: that trimming for one batch (one decode and one encode of that batch).
- :class:`RawBatchesBuilder`: several raw batches into one record set, bounded by max_bytes.
- :func:`fetch_to_produce`: a decoded FetchResponse straight into ProduceRequest bytes.

See docs/mirroring.md ("The pieces").
"""

from kafkacodec._mirror import (
    RawBatchesBuilder,
    RawBytesBatchRecord,
    fetch_to_produce,
    shallow_records,
    trim_batch,
)

__all__ = [
    "RawBytesBatchRecord",
    "RawBatchesBuilder",
    "fetch_to_produce",
    "shallow_records",
    "trim_batch",
]
