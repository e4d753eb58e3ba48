from collections.abc import Iterable, Sequence

from typing_extensions import Buffer

from kafkacodec._writer import WriteBuffer
from kafkacodec.protocol._fetch import _WalkedSequence
from kafkacodec.protocol._types import (ProducePartitionResponse, ProduceResponse,
                                        ProduceTopicResponse)

MIN_VERSION: int
MAX_VERSION: int

_Records = Buffer | Sequence[Buffer] | None

def encode_produce_request(
    topic_data: Iterable[tuple[str, Iterable[tuple[int, _Records]]]],
    *,
    api_version: int = 9,
    correlation_id: int = 0,
    client_id: str | None = "kafkacodec",
    acks: int = -1,
    timeout_ms: int = 30000,
    transactional_id: str | None = None,
    out: WriteBuffer | None = None,
) -> WriteBuffer: ...
def decode_produce_response(data: Buffer, api_version: int, offset: int = 0, size: int = -1,
                            header: bool = True) -> ProduceResponse: ...

class ProduceTopics(_WalkedSequence[ProduceTopicResponse]):
    """The topics of a decoded ProduceResponse, read from its buffer when looked at."""

class ProducePartitions(_WalkedSequence[ProducePartitionResponse]):
    """The partitions of one topic, read from the response's buffer when looked at."""
