from typing import Any

from typing_extensions import Buffer

__all__ = ["decode_produce_request", "encode_produce_response", "MIN_VERSION", "MAX_VERSION"]

MIN_VERSION: int
MAX_VERSION: int

def decode_produce_request(data: Buffer, api_version: int, offset: int = 0, size: int = -1,
                           strict: bool = True, max_entries: int = ...) -> dict[str, Any]:
    """The ProduceRequest body as the generic codec's dict (records as bytes, None when null);
    CorruptRecordError when malformed (or followed by extra bytes, if strict);
    RecordTooLargeError past `max_entries` topics and partitions in all."""
def encode_produce_response(api_version: int, value: dict[str, Any]) -> bytes:
    """The ProduceResponse body for the generic codec's dict (absent keys: Kafka's defaults)."""
