from collections.abc import Iterable

from typing_extensions import Buffer

from kafkacodec.protocol._fetch import _WalkedSequence
from kafkacodec.protocol._types import (ApiVersionsResponse, MetadataBroker, MetadataPartition,
                                        MetadataResponse, MetadataTopic)

API_VERSIONS_MAX_VERSION: int
METADATA_MAX_VERSION: int

def encode_api_versions_request(*, api_version: int = 3, correlation_id: int = 0,
                                client_id: str | None = "kafkacodec",
                                client_software_name: str = "kafkacodec",
                                client_software_version: str = "0.1.0") -> bytes: ...
def decode_api_versions_response(data: Buffer, api_version: int, offset: int = 0, size: int = -1,
                                 header: bool = True) -> ApiVersionsResponse: ...
def encode_metadata_request(topics: Iterable[str] | None = None, *, api_version: int = 12,
                            correlation_id: int = 0, client_id: str | None = "kafkacodec",
                            allow_auto_topic_creation: bool = True,
                            include_topic_authorized_operations: bool = False) -> bytes: ...
def decode_metadata_response(data: Buffer, api_version: int, offset: int = 0, size: int = -1,
                             header: bool = True) -> MetadataResponse: ...

class MetadataBrokers(_WalkedSequence[MetadataBroker]):
    """The brokers of a decoded MetadataResponse, read from its buffer when looked at."""

class MetadataTopics(_WalkedSequence[MetadataTopic]):
    """The topics of a decoded MetadataResponse, read from its buffer when looked at."""

class MetadataPartitions(_WalkedSequence[MetadataPartition]):
    """The partitions of one topic, read from the response's buffer when looked at."""
