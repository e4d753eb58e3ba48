"""Kafka wire-protocol framing for the messages around record sets: Fetch, Produce, Metadata
and ApiVersions (spec protocol.md), and Kafka's api keys and error codes (`ApiKey`, `Error`).

Every ``encode_*_request`` returns a whole frame (int32 size + request header + body); every
``decode_*_response(data, api_version, offset=0, size=-1, header=True)`` reads a response
that starts at its correlation id (the int32 frame size already consumed), with the response
header version chosen from the api version.  Truncated or malformed input raises
:class:`kafkacodec.CorruptRecordError` naming the byte position.
"""

from kafkacodec.protocol._fetch import FetchPartitionData, decode_fetch_response, encode_fetch_request
from kafkacodec.protocol._metadata import (
    decode_api_versions_response,
    decode_metadata_response,
    encode_api_versions_request,
    encode_metadata_request,
)
from kafkacodec.protocol._produce import decode_produce_response, encode_produce_request
from kafkacodec.protocol.api import ApiKey, Error
from kafkacodec.protocol._types import (
    AbortedTransaction,
    ApiVersionRange,
    ApiVersionsResponse,
    FetchResponse,
    FetchTopicResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicResponse,
)

__all__ = [
    "ApiKey",
    "Error",
    "encode_fetch_request",
    "decode_fetch_response",
    "encode_produce_request",
    "decode_produce_response",
    "encode_api_versions_request",
    "decode_api_versions_response",
    "encode_metadata_request",
    "decode_metadata_response",
    "AbortedTransaction",
    "ApiVersionRange",
    "ApiVersionsResponse",
    "FetchPartitionData",
    "FetchResponse",
    "FetchTopicResponse",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataResponse",
    "MetadataTopic",
    "ProducePartitionResponse",
    "ProduceResponse",
    "ProduceTopicResponse",
]
