from collections.abc import Iterable

from typing_extensions import Buffer

from kafkacodec.protocol._types import ApiVersionsResponse, MetadataResponse

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
