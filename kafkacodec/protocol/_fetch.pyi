import uuid
from collections.abc import Iterable, Sequence

from typing_extensions import Buffer

from kafkacodec.protocol._types import FetchResponse

MIN_VERSION: int
MAX_VERSION: int

def decode_fetch_response(data: Buffer, api_version: int, offset: int = 0, size: int = -1,
                          header: bool = True) -> FetchResponse: ...
def encode_fetch_request(
    topics: Iterable[tuple[str | uuid.UUID | bytes, Iterable[Sequence[int]]]],
    *,
    api_version: int = 12,
    correlation_id: int = 0,
    client_id: str | None = "kafkacodec",
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 52428800,
    isolation_level: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
    replica_id: int = -1,
    partition_max_bytes: int = 1048576,
    rack_id: str = "",
) -> bytes: ...
