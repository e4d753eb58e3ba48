"""The mirror's hot path: batches copied into a ProduceRequest with the target producer's
state, their CRC-32C updated from the rewritten header bytes alone."""

from collections.abc import Iterable, Sequence

from typing_extensions import Buffer

from kafkacodec._writer import WriteBuffer

def rewrite_batch(batch: Buffer, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes: ...
def write_produce_request(
    topics: Iterable[tuple[str, Iterable[tuple[int, Sequence[tuple[Buffer, int, int, int]]]]]],
    *,
    api_version: int,
    correlation_id: int,
    client_id: str | None = "kafkacodec-mirror",
    acks: int = -1,
    timeout_ms: int = 30000,
    transactional_id: str | None = None,
    out: WriteBuffer | None = None,
) -> tuple[WriteBuffer, list[tuple[int, int]]]: ...
