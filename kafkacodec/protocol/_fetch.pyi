import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar, overload

from typing_extensions import Buffer

from kafkacodec.protocol._types import AbortedTransaction, FetchResponse, FetchTopicResponse

_T = TypeVar("_T")

class FetchPartitionData:
    """One partition of a FetchResponse; ``records`` is a zero-copy view of the decoded buffer."""

    @property
    def partition_index(self) -> int: ...
    @property
    def error_code(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def aborted_transactions(self) -> AbortedTransactions | None: ...
    @property
    def preferred_read_replica(self) -> int: ...
    @property
    def records_position(self) -> int: ...
    @property
    def records_size(self) -> int: ...
    @property
    def records(self) -> memoryview | None: ...

class _LazySequence(Sequence[_T]):
    """A read-only sequence whose items are made on access (new ones every time)."""

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int, /) -> _T: ...
    @overload
    def __getitem__(self, index: slice, /) -> list[_T]: ...
    def __iter__(self) -> Iterator[_T]: ...
    def __reversed__(self) -> Iterator[_T]: ...
    def index(self, value: object, start: int = 0, stop: int | None = None) -> int: ...
    def count(self, value: object) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

class AbortedTransactions(_LazySequence[AbortedTransaction]):
    """A partition's aborted transactions, kept as (producer_id, first_offset) pairs."""

class _WalkedSequence(_LazySequence[_T]): ...

class FetchTopics(_WalkedSequence[FetchTopicResponse]):
    """The topics of a decoded FetchResponse, read from its buffer when looked at."""

class FetchPartitions(_WalkedSequence[FetchPartitionData]):
    """The partitions of one topic, read from the response's buffer when looked at."""

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
