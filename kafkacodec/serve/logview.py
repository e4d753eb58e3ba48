"""The log directories as the server sees them: topics and partitions, kept up to date while
another process appends, rolls, deletes or truncates.

Discovery is `kafkacodec.logdir._layout.find_partitions` (a broker's `log.dirs` layout, Kafka's
tiered-storage names, several directories merged); topic ids come from `partition.metadata`
(logdir/partition_metadata.py), the log start from `log-start-offset-checkpoint`.

Each partition is a `kafkacodec.logdir.partition_log.PartitionLog`, the engine the Spark reader and
the command line read with too: its segments, offset and time lookups, aborted transactions and
last stable offset, by the rules written there.  This module adds what serving needs: following
the partition's directory (new, removed or replaced segments, appends to the last one), reloading
after a cut file, and answering ListOffsets on the view's interface (the upstream view, for
`serve --upstream`, has the same one).  Index files found invalid are logged and counted once
(IndexUse, the metrics).

Segments in an object store are read without waiting (serve/remote.py): a step that needs bytes
not read yet raises ReadPending, and its request waits for a worker to read them.

Not thread-safe: the server's network thread owns it.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable

from kafkacodec.errors import FileTruncatedError, KafkaCodecError
from kafkacodec.logdir._layout import PartitionFiles, find_partitions, one_copy_per_tier
from kafkacodec.logdir._txn import TxnState
from kafkacodec.logdir.partition_log import Notes, PartitionLog, ReadRange, StorageError
from kafkacodec.logdir.partition_metadata import read_partition_metadata
from kafkacodec.logdir.storage import resolve
from kafkacodec.net.pieces import BytesPiece, FilePiece
from kafkacodec.serve.remote import MAX_RERUNS, REMOTE_READ_CAP, ReadPending, RemoteReads, too_many_reruns

__all__ = ["LogView", "Topic", "Partition", "ReadRange", "StorageError", "IndexUse", "stable_topic_id"]

log = logging.getLogger("kafkacodec.serve")

def stable_topic_id(name: str) -> uuid.UUID:
    """The topic id of a topic without partition.metadata: derived from its name, so it is the
    same after a restart (Fetch v13+ and Metadata v10+ name topics by id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kafkacodec-serve:{name}")


class IndexUse(Notes):
    """Where read_committed's transactions came from, and the index files found invalid (each
    logged and counted once, however often its partition reloads): the serve metrics read it."""

    def __init__(self) -> None:
        self.txn_segments = {"txnindex": 0, "rebuilt": 0}   # rolled segments, by source
        self.invalid_files: dict[str, int] = {}              # suffix -> files found invalid
        self._warned: set[str] = set()

    def invalid(self, suffix: str, uri: str, exc: BaseException, position: int | None = None) -> None:
        if uri in self._warned:
            return
        self._warned.add(uri)
        self.invalid_files[suffix] = self.invalid_files.get(suffix, 0) + 1
        log.warning("%s; read without it (as Kafka rebuilds a corrupt index)", exc)

    def skipped(self, uri: str, why: str) -> None:
        log.warning("%s is %s: not served", uri, why)


class Partition(PartitionLog):
    """One partition directory, followed live: the engine's log plus the view's interface
    (refresh, in_range, list_offset)."""

    def __init__(self, topic: str, index: int, files: PartitionFiles, use: IndexUse | None = None,
                 remote: RemoteReads | None = None):
        self.use = use or IndexUse()
        self.remote = remote
        super().__init__(files, self.use, live=True, reads=remote.cache if remote is not None else None)
        self.index = index
        # followed: the partition's local log directory.  Its tiered segments (remote copies
        # Kafka no longer changes: the broker's __remote_log_metadata, when it was among the
        # paths, chose them) and segments in an object store are kept as first listed (a store
        # is not listed on this thread again).
        self.listed_once = [s for s in files.segments if s.tiered or s.storage.scheme]
        self.directories = sorted({os.path.dirname(s.path) for s in files.segments
                                   if not (s.tiered or s.storage.scheme)})
        self.directory = self.directories[0] if self.directories else ""
        self.dir_stamp: tuple[int, ...] | None = None

    def refresh(self) -> None:
        """Follow the directory: new, removed or replaced segments; appends to the last one.
        StorageError when the files cannot be read."""
        try:
            stamp = tuple(os.stat(d).st_mtime_ns for d in self.directories)
            if stamp != self.dir_stamp:
                self.dir_stamp = stamp
                parts, _ = find_partitions(list(self.directories)) if self.directories else ([], [])
                files = parts[0] if parts else PartitionFiles(self.topic, self.partition)
                files.segments = one_copy_per_tier(files.segments + self.listed_once)
                self.adopt(files)
            # the last segment grows; the one before may have taken its last appends
            for seg in self.segments[-2:]:
                if (seg.active or seg.inode is not None) and seg.refresh():
                    self.txn = None
        except FileTruncatedError as exc:
            log.info("%s; reloading %s-%d", exc, self.topic, self.index)
            self.reload()
        except (OSError, KafkaCodecError) as exc:
            raise StorageError(f"{self.topic}-{self.index}: {exc}") from exc

    def reload(self) -> None:
        self.reset()
        self.dir_stamp = None
        try:
            self.refresh()
        except FileTruncatedError as exc:
            raise StorageError(f"{self.topic}-{self.index}: {exc}") from exc

    def in_range(self, offset: int) -> bool | None:
        """Whether a fetch at `offset` is inside the log (None: not known yet, see upstream.py)."""
        return self.log_start <= offset <= self.log_end

    def list_offset(self, timestamp: int, committed: bool,
                    on_done: Callable[[tuple[int, int] | None, BaseException | None], None], reruns: int = 0) -> None:
        """ListOffsets' answer, called back at once (the view's interface: serve --upstream
        calls back once the cluster answered): `on_done(offset_at(...), None)`, or
        `on_done(None, error)` (StorageError, OSError) when the files cannot be read."""
        try:
            self.refresh()
            found = self.offset_at(timestamp, committed)
        except ReadPending as pending:          # (a remote segment: looked up again once read)
            assert self.remote is not None
            if reruns >= MAX_RERUNS:
                on_done(None, too_many_reruns(f"ListOffsets of {self.topic}-{self.index}"))
                return
            self.remote.defer(pending, lambda: self.list_offset(timestamp, committed, on_done, reruns + 1))
            return
        except (StorageError, OSError) as exc:
            on_done(None, exc)
            return
        on_done(found, None)

    def read(self, offset: int, max_bytes: int, min_one: bool, upper: int) -> ReadRange | None:
        """PartitionLog.read, at most REMOTE_READ_CAP bytes (or the first entry) from a remote
        segment: each such read is held whole in memory on its way out."""
        found = super().read(offset, max_bytes, min_one, upper)
        if found is not None and found.size > REMOTE_READ_CAP and found.segment.storage.scheme:
            found = super().read(offset, REMOTE_READ_CAP, min_one, upper)
        return found

    @staticmethod
    def stored_piece(found: ReadRange, on_bytes: Callable[[int], None]) -> FilePiece | BytesPiece:
        """The stored bytes of a range: sent with sendfile from a local segment; from the bytes a
        worker read from a remote one (ReadPending until they are there)."""
        seg = found.segment
        if not seg.storage.scheme:
            return FilePiece(seg.path, seg.inode, found.position, found.size, on_bytes)
        data = seg.read_bytes(found.position, found.size)      # (the view keeps its bytes alive)
        on_bytes(found.size)
        return BytesPiece(data)

    def transactions(self) -> TxnState:
        """The engine's transactions, counted by source for the metrics."""
        before = (self.txn.from_index, self.txn.walked) if self.txn is not None else (0, 0)
        txn = super().transactions()
        self.use.txn_segments["txnindex"] += txn.from_index - before[0]
        self.use.txn_segments["rebuilt"] += txn.walked - before[1]
        return txn


class Topic:
    def __init__(self, name: str):
        self.name = name
        self.topic_id = stable_topic_id(name)
        self.partitions: dict[int, Partition] = {}

    @property
    def is_internal(self) -> bool:
        return self.name in ("__consumer_offsets", "__transaction_state")


class LogView:
    """Every topic-partition under the given log directories.  `refresh()` picks up new
    partitions (cheap when no directory changed); a partition follows its own files
    (Partition.refresh)."""

    def __init__(self, log_dirs: list[str], remote: RemoteReads | None = None):
        # local directories, and URIs of object stores (a tiered-storage store: s3://, gs://,
        # hdfs://, read through pyarrow.fs as configured by the environment)
        self.log_dirs = [d if "://" in d else os.path.abspath(d) for d in log_dirs]
        for d in self.log_dirs:
            storage, path = resolve([d])[0]
            if storage.info(path).kind != "dir":
                raise FileNotFoundError(f"{d}: not a directory (give a Kafka log directory holding "
                                        "<topic>-<partition>/<base offset>.log files)")
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._stamps: dict[str, int] = {}
        self.index_use = IndexUse()
        self.remote = remote
        self.refresh()

    def refresh(self) -> None:
        stamps = {}
        for d in self.log_dirs:
            try:
                stamps[d] = os.stat(d).st_mtime_ns if "://" not in d else 0    # (an object store: once)
            except OSError:
                stamps[d] = -1
        if stamps == self._stamps:
            return
        self._stamps = stamps
        parts, problems = find_partitions(list(self.log_dirs))
        for problem in problems:
            log.warning("%s", problem.message)
        for files in parts:
            topic = self.topics.get(files.topic)
            if topic is None:
                topic = self.topics[files.topic] = Topic(files.topic)
            if files.partition not in topic.partitions and files.segments:
                part = Partition(files.topic, files.partition, files, self.index_use, self.remote)
                topic.partitions[files.partition] = part
                self._topic_id(topic, part)
        self.by_id = {t.topic_id: t for t in self.topics.values()}

    @staticmethod
    def _topic_id(topic: Topic, part: Partition) -> None:
        try:
            found = read_partition_metadata(part.directory) if part.directory else None
        except (OSError, ValueError) as exc:
            log.warning("%s; the topic id of %s is derived from its name", exc, topic.name)
            return
        if found is not None:
            topic.topic_id = found

    def summary(self) -> tuple[int, str]:
        """(partitions served, a line saying what: topics, partitions, segments and bytes)."""
        parts = [p for t in self.topics.values() for p in t.partitions.values()]
        segments = [s for p in parts for s in p.segments]
        size = sum(s.files.size for s in segments)          # as listed
        topics = sum(1 for t in self.topics.values() if t.partitions)
        return len(parts), (f"{topics} topics, {len(parts)} partitions, {len(segments)} segments "
                            f"({size / 1e6:.1f} MB) from {', '.join(self.log_dirs)}")

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(index)

    def close(self) -> None:
        for topic in self.topics.values():
            for part in topic.partitions.values():
                part.close()
