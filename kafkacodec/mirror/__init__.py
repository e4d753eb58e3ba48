"""Mirroring between Kafka clusters.

- The shallow pieces (KIP-712; :mod:`kafkacodec.mirror.shallow`): :class:`RawBytesBatchRecord`,
  :func:`shallow_records`, :func:`trim_batch`, :class:`RawBatchesBuilder`,
  :func:`fetch_to_produce`.
- The mirror process (``kafkacodec mirror``; :mod:`kafkacodec.mirror.process`, needs the
  ``kafkacodec[mirror]`` extra): :class:`Mirror`.

See docs/mirroring.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacodec.mirror.shallow import (
    RawBatchesBuilder,
    RawBytesBatchRecord,
    fetch_to_produce,
    shallow_records,
    trim_batch,
)

if TYPE_CHECKING:
    from kafkacodec.mirror.process import Mirror, MirrorConfig

__all__ = [
    "RawBytesBatchRecord",
    "RawBatchesBuilder",
    "fetch_to_produce",
    "shallow_records",
    "trim_batch",
    "Mirror",
    "MirrorConfig",
]


def __getattr__(name: str) -> Any:
    # The process needs the mirror extra (kafka-python...): imported only when asked for, so
    # `import kafkacodec` keeps working without it.
    if name in ("Mirror", "MirrorConfig"):
        from kafkacodec.mirror import process

        return getattr(process, name)
    raise AttributeError(f"module 'kafkacodec.mirror' has no attribute {name!r}")
