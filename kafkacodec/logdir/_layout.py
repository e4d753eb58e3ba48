"""Finding a log's files: which directories are partitions, which files are segments and their
indexes, and the checkpoint files beside them.

Layouts recognised, for any path given (a log directory, a partition directory, one segment):
- a broker's `log.dirs`: `<topic>-<partition>/<20-digit base offset>.log` with `.index`,
  `.timeindex`, `.txnindex` beside each segment and `log-start-offset-checkpoint`,
  `cleaner-offset-checkpoint` at the top;
- Kafka's own tiered-storage layout (LocalTieredStorage, the RemoteStorageManager Kafka tests
  with): `<topic>-<partition>-<topic id>/<20-digit start offset>-<segment id>.log` (ids are
  22-character base64 UUIDs) with the same index suffixes.

`-delete`, `-future` and `-stray` partition directories (being deleted or moved by the broker)
are not partitions.  Entries named like segments that are not regular files are reported as
"unreadable" and never opened.  Names are Kafka's: ASCII digits, and never a name that is not
UTF-8 (left out of every listing by `Storage.list` and reported as a "name" problem).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kafkacodec.logdir._problems import Problem
from kafkacodec.logdir.checkpoints import CLEANER, LOG_START, parse_checkpoint
from kafkacodec.logdir.storage import Entry, Storage, printable, resolve, undecodable

__all__ = ["Segment", "PartitionFiles", "find_partitions", "partition_of", "segment_base", "SEGMENT_RE",
           "PARTITION_RE", "SNAPSHOT_AT_END", "one_copy_per_tier"]

# ASCII digits only (re.ASCII): str patterns' \d also matches other scripts' digits, which int() reads
SEGMENT_RE = re.compile(r"^(\d{20})\.log$", re.ASCII)
TIERED_SEGMENT_RE = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.log$", re.ASCII)
PARTITION_RE = re.compile(r"^(.+)-(\d+)$", re.ASCII)
TIERED_PARTITION_RE = re.compile(r"^(.+)-(\d+)-([A-Za-z0-9_-]{22})$", re.ASCII)
MAX_PARTITION = 2**31 - 1
METADATA_TOPIC = "__remote_log_metadata"   # (remote_log_metadata.py) the broker's record of its remote segments
SNAPSHOT_AT_END = ".snapshot@end"    # (Segment.index key) a tiered segment's snapshot: the state at its end


@dataclass(frozen=True)
class Segment:
    path: str
    topic: str
    partition: int
    base_offset: int
    size: int
    storage: Storage = field(default_factory=Storage, compare=False, repr=False)
    unreadable: str = ""          # why it cannot be read ("a FIFO"...), "" for a regular file
    indexes: tuple[tuple[str, Entry], ...] = field(default=(), compare=False, repr=False)

    def index(self, suffix: str) -> Entry | None:
        """The `.index`/`.timeindex`/`.txnindex` file beside this segment, the producer
        `.snapshot` Kafka took at its base offset, or (SNAPSHOT_AT_END) the one a tiered copy
        carries, taken at its end; None when there is none."""
        return dict(self.indexes).get(suffix)

    @property
    def segment_id(self) -> str | None:
        """The id of a remote copy in Kafka's tiered-storage layout (`<base offset>-<segment
        id>.log`), None for a local segment."""
        match = TIERED_SEGMENT_RE.match(self.path.rstrip("/").rsplit("/", 1)[-1])
        return match.group(2) if match else None

    @property
    def tiered(self) -> bool:
        return self.segment_id is not None

    @property
    def uri(self) -> str:
        return self.storage.uri(self.path)


@dataclass
class PartitionFiles:
    topic: str
    partition: int
    segments: list[Segment] = field(default_factory=list)
    log_start: int | None = None         # log-start-offset-checkpoint
    cleaned_to: int | None = None        # cleaner-offset-checkpoint (a compacted partition)


def segment_base(name: str) -> int | None:
    m = SEGMENT_RE.match(name) or TIERED_SEGMENT_RE.match(name)
    return int(m.group(1)) if m else None


def partition_of(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory's name, or None (a name that is not UTF-8
    names no topic)."""
    if undecodable(name):
        return None
    for regex in (TIERED_PARTITION_RE, PARTITION_RE):
        m = regex.match(name)
        if m and int(m.group(2)) <= MAX_PARTITION:
            return m.group(1), int(m.group(2))
    return None


def _segments_in(storage: Storage, directory: str, topic: str, partition: int,
                 entries: list[Entry]) -> list[Segment]:
    by_name = {e.name: e for e in entries}
    out = []
    for e in entries:
        base = segment_base(e.name)
        if base is None:
            continue
        stem = e.name[:-len(".log")]
        # a tiered segment's producer snapshot is the state at its end (Kafka's RemoteLogManager
        # copies the snapshot taken at the next segment's base offset); a local one's at its base
        at_end = TIERED_SEGMENT_RE.match(e.name) is not None
        indexes = tuple((SNAPSHOT_AT_END if suffix == ".snapshot" and at_end else suffix, by_name[stem + suffix])
                        for suffix in (".index", ".timeindex", ".txnindex", ".snapshot") if stem + suffix in by_name)
        note = "" if e.kind == "file" else (e.note or ("a directory" if e.kind == "dir" else "missing"))
        out.append(Segment(e.path, topic, partition, base, e.size if e.kind == "file" else 0, storage,
                           note, indexes))
    return out


def _checkpoints(storage: Storage, directory: str, names: set[str],
                 problems: list[Problem]) -> dict[str, dict[tuple[str, int], int]]:
    out = {}
    for name in (LOG_START, CLEANER):
        if name not in names:
            continue
        path = storage.join(directory, name)
        try:
            out[name] = parse_checkpoint(storage.read_bytes(path, 16 << 20).decode("utf-8", "replace"),
                                         storage.uri(path))
        except (OSError, ValueError) as exc:
            problems.append(Problem("checkpoint", storage.uri(path), f"{exc}; read without it"))
    return out


def find_partitions(paths: list[str], storage_options: dict[str, str] | None = None
                    ) -> tuple[list[PartitionFiles], list[Problem]]:
    """Every partition under the given paths (globs expanded) with its segments sorted by base
    offset (a base offset found twice, e.g. the same partition under two paths, stays twice:
    the planner reports the overlap; a tiered copy of a local segment is left out) and the
    problems found while listing.  A partition's local directory and its tiered-storage one
    (`<topic>-<partition>-<topic id>`), given as two paths, are one partition."""
    problems: list[Problem] = []
    found: dict[tuple[str, int], PartitionFiles] = {}
    skipped: list[str] = []                    # names that are not UTF-8, reported at the end
    roots = resolve(paths, storage_options, skipped)

    def add(topic: str, partition: int, segments: list[Segment],
            checkpoints: dict[str, dict[tuple[str, int], int]]) -> None:
        part = found.setdefault((topic, partition), PartitionFiles(topic, partition))
        part.segments += segments
        start = checkpoints.get(LOG_START, {}).get((topic, partition))
        if start is not None:
            part.log_start = max(part.log_start or start, start)
        cleaned = checkpoints.get(CLEANER, {}).get((topic, partition))
        if cleaned is not None:
            part.cleaned_to = max(part.cleaned_to or cleaned, cleaned)

    for storage, path in roots:
        entry = storage.info(path)
        if entry.kind == "missing":
            raise FileNotFoundError(
                f"{storage.uri(path)}: no such file or directory; give a Kafka log directory (holding "
                "<topic>-<partition>/<base offset>.log files), a partition directory or a .log file")
        if entry.kind != "dir":
            parent = storage.parent(path)
            topic, partition = partition_of(parent.rstrip("/").rsplit("/", 1)[-1]) or (
                printable(parent.rstrip("/").rsplit("/", 1)[-1]), 0)
            if segment_base(entry.name) is None:
                # a file named otherwise, given by its name (a copy such as seg.log): one segment
                # whose name says no base offset (0), without index files
                note = "" if entry.kind == "file" else (entry.note or "not a regular file")
                add(topic, partition, [Segment(entry.path, topic, partition, 0, entry.size if not note else 0,
                                               storage, note)], {})
                continue
            add(topic, partition, _segments_in(storage, parent, topic, partition, [entry] + [
                e for e in storage.list(parent, skipped) if e.name.startswith(entry.name[:-4] + ".")
                and e.name != entry.name]), {})
            continue
        entries = storage.list(path, skipped)
        if any(segment_base(e.name) is not None for e in entries):      # a partition directory
            name = path.rstrip("/").rsplit("/", 1)[-1]
            topic, partition = partition_of(name) or (printable(name), 0)
            parent = storage.parent(path)
            checkpoints: dict[str, dict[tuple[str, int], int]] = {}
            if parent and parent != path:
                try:
                    checkpoints = _checkpoints(storage, parent, {e.name for e in storage.list(parent, skipped)},
                                               problems)
                except OSError:
                    pass                             # an unlistable parent: no checkpoints
            add(topic, partition, _segments_in(storage, path, topic, partition, entries), checkpoints)
            continue
        checkpoints = _checkpoints(storage, path, {e.name for e in entries}, problems)
        for e in entries:
            tp = partition_of(e.name)
            if tp is None:
                continue
            if e.kind != "dir":
                if e.kind == "other" and e.note:
                    problems.append(Problem("unreadable", storage.uri(e.path),
                                            f"{storage.uri(e.path)} is named like a partition directory "
                                            f"but is {e.note}"))
                continue
            try:
                listed = storage.list(e.path, skipped)
            except OSError as exc:                   # no permission, gone meanwhile
                problems.append(Problem("unreadable", storage.uri(e.path),
                                        f"{storage.uri(e.path)} cannot be listed: {exc}"))
                continue
            add(tp[0], tp[1], _segments_in(storage, e.path, tp[0], tp[1], listed), checkpoints)
    for path in dict.fromkeys(skipped):
        problems.append(Problem("name", printable(path), f"{printable(path)}: its name is not UTF-8 (no Kafka "
                                "topic, partition or segment is named so); skipped"))
    for part in found.values():
        part.segments.sort(key=lambda s: s.base_offset)
    metadata = [p for (topic, _), p in found.items() if topic == METADATA_TOPIC]
    if metadata and any(s.tiered for p in found.values() for s in p.segments):
        _finished_copies_only(found, metadata, problems)
    for part in found.values():
        part.segments = one_copy_per_tier(part.segments)
    return sorted(found.values(), key=lambda p: (p.topic, p.partition)), problems


def _finished_copies_only(found: dict[tuple[str, int], PartitionFiles], metadata: list[PartitionFiles],
                          problems: list[Problem]) -> None:
    """With the broker's `__remote_log_metadata` partitions among the paths (its log directory),
    a partition's tiered segments are those it lists as copied (COPY_SEGMENT_FINISHED): a copy
    in progress or abandoned, or a segment being deleted, is left out (noted), and a finished
    copy the store does not hold is noted.  Metadata that cannot be read is noted and the
    listing used as it is."""
    from kafkacodec._records import MemoryRecords
    from kafkacodec.errors import KafkaCodecError
    from kafkacodec.logdir.remote_log_metadata import COPY_FINISHED, remote_segments

    values: list[bytes | None] = []
    for part in metadata:
        for seg in part.segments:
            try:
                values += [r.value for r in MemoryRecords(seg.storage.read_bytes(seg.path, 1 << 30)).records()]
            except (KafkaCodecError, OSError, ValueError) as exc:
                problems.append(Problem("remote", seg.uri, f"{seg.uri}: {exc}; the remote segments are read as "
                                        "the store lists them"))
                return
    known, deleted, unreadable = remote_segments(values)
    for why in unreadable[:1]:
        problems.append(Problem("remote", metadata[0].segments[0].uri if metadata[0].segments else METADATA_TOPIC,
                                f"{METADATA_TOPIC}: {len(unreadable)} record(s) cannot be read ({why}); the "
                                "others are used"))
    for (topic, partition), part in found.items():
        recorded = known.get((topic, partition))
        if recorded is None or topic == METADATA_TOPIC:
            continue
        kept = []
        for seg in part.segments:
            if seg.segment_id is None:
                kept.append(seg)
                continue
            entry = recorded.get(seg.segment_id)
            if entry is not None and entry.state == COPY_FINISHED and (topic, partition) not in deleted:
                kept.append(seg)
                continue
            state = "not listed" if entry is None else f"listed as {entry.state_name}"
            problems.append(Problem("remote", seg.uri, f"{seg.uri} is {state} in the broker's {METADATA_TOPIC}: "
                                    "not part of the log, not read", offset=seg.base_offset))
        held = {s.segment_id for s in kept}
        for entry in recorded.values():
            if entry.state == COPY_FINISHED and entry.segment_id not in held and any(s.tiered for s in part.segments):
                problems.append(Problem("remote", f"{topic}-{partition}", f"{topic}-{partition}: the broker's "
                                        f"{METADATA_TOPIC} lists remote segment {entry.segment_id} (offsets "
                                        f"{entry.start_offset}..{entry.end_offset}) as copied, but no path given "
                                        "holds it", offset=entry.start_offset))
        part.segments = kept


def one_copy_per_tier(segments: list[Segment]) -> list[Segment]:
    """A partition's local segments and its tiered ones (remote copies, KIP-405) as one log, by
    base offset: where a rolled segment is in both tiers (Kafka keeps it locally until local
    retention deletes it), the local copy is read and the remote one left out."""
    local = {s.base_offset for s in segments if not s.tiered}
    return sorted((s for s in segments if not (s.tiered and s.base_offset in local)), key=lambda s: s.base_offset)
