"""`kafkacodec generate`: the sample log directory (kafkacodec._sample), never replacing other segments."""

from __future__ import annotations

import argparse
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._files import name_output, refuse_stream
from kafkacodec.cli._output import FORMATTER, count_arg, emit_json


# Kafka's topic names (Topic.validate): 1-249 of [a-zA-Z0-9._-], not "." or "..".
TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _same_content(path: Path, content: bytes) -> bool:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) or os.path.getsize(path) != len(content):
            return False
        return path.read_bytes() == content        # no larger than `content`
    except FileNotFoundError:
        return False


def _count(segments: list[tuple[str, bytes]]) -> dict[str, Any]:
    """describe()'s counts for the segments generate wrote, read back with the core reader
    (no pyarrow): data records per topic, control records, records of aborted transactions
    (a transactional producer's records before its ABORT marker)."""
    from kafkacodec import ControlType, MemoryRecords

    per_topic: dict[str, int] = {}
    result: dict[str, Any] = {"segments": len(segments), "bytes": 0, "records": 0,
                              "aborted_records": 0, "control_records": 0, "per_topic": per_topic}
    open_transactions: dict[tuple[str, int], int] = {}     # (partition dir, producer) -> records
    for name, content in segments:
        partition_dir = name.split("/")[0]
        topic = partition_dir.rsplit("-", 1)[0]
        per_topic.setdefault(topic, 0)
        result["bytes"] += len(content)
        for batch in MemoryRecords(content).batches():
            producer = (partition_dir, batch.producer_id)
            records = list(batch)
            if batch.is_control:
                result["control_records"] += len(records)
                for r in records:
                    if r.control_type == ControlType.ABORT:
                        result["aborted_records"] += open_transactions.pop(producer, 0)
                    elif r.control_type == ControlType.COMMIT:
                        open_transactions.pop(producer, None)
                continue
            result["records"] += len(records)
            per_topic[topic] += len(records)
            if batch.is_transactional:
                open_transactions[producer] = open_transactions.get(producer, 0) + len(records)
    return result


def generate(directory: str | Path, topics: Iterable[str] = ("orders", "clicks"), *,
             partitions: int = 2, seed: int = 0, records_per_batch: int = 20,
             batches_per_segment: int = 8, force: bool = False) -> dict[str, Any]:
    """Write the sample log (kafkacodec._sample: magics 0, 1, 2, every codec, headers, an
    idempotent producer, committed and aborted transactions) for each topic under `directory`;
    returns the counts of what it wrote (as logdir.describe() gives them).

    Never replaces an existing segment with other content unless `force` (CliError, exit 2,
    before anything is written); one with the same content (the same sample again) is left
    alone.  Each file is written atomically; on failure the files and directories this call
    created are removed again, and nothing else."""
    from kafkacodec._atomic import atomic_output
    from kafkacodec._sample import sample_segments

    refuse_stream(directory, "generate", "a directory to write the sample log into", dash="stdout")
    root = Path(directory)
    segments: list[tuple[str, bytes]] = []
    for i, topic in enumerate(topics):
        if not TOPIC_RE.match(topic) or topic in (".", ".."):
            raise CliError(f"invalid topic name {topic!r}: Kafka allows 1-249 characters of "
                           "a-z A-Z 0-9 . _ -", EXIT_USAGE)
        segments += sample_segments(topic, partitions, seed=seed + i, records_per_batch=records_per_batch,
                                    batches_per_segment=batches_per_segment)
    todo = [(root / name, content) for name, content in segments if not _same_content(root / name, content)]
    in_the_way = [path for path, _ in todo if os.path.lexists(path)]
    if in_the_way and not force:
        raise CliError(f"{in_the_way[0]} exists with other content ({len(in_the_way)} segment(s) in the "
                       "way): not replacing Kafka segments; choose an empty directory or --force",
                       EXIT_USAGE)
    created: list[Path] = []                   # files and directories, in creation order
    try:
        for path, content in todo:
            missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
            path.parent.mkdir(parents=True, exist_ok=True)
            created += reversed(missing)
            existed = os.path.lexists(path)
            with atomic_output(path, overwrite=force) as out:
                try:
                    out.write(content)
                except OSError as exc:
                    raise name_output(exc, path)
            if not existed:
                created.append(path)
    except BaseException:
        for path in reversed(created):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass
        raise
    return {"directory": str(directory), **_count(segments)}


def run(args: argparse.Namespace) -> int:
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    result = generate(args.dir, topics, partitions=args.partitions, seed=args.seed,
                      records_per_batch=args.records_per_batch,
                      batches_per_segment=args.batches_per_segment, force=args.force)
    if args.json:
        emit_json(result)
    else:
        print(f"wrote {result['segments']} segment(s), {result['records']} records "
              f"({result['aborted_records']} in aborted transactions) and {result['control_records']} "
              f"transaction markers, {result['bytes']} bytes, to {result['directory']}")
    return EXIT_OK


def add_parser(subparsers: Any) -> None:
    g = subparsers.add_parser("generate", help="write a sample log directory (mixed magics, codecs, "
                                               "headers, transactions)", formatter_class=FORMATTER,
                              description="Write the sample log into DIR (<topic>-<partition>/<base "
                                          "offset>.log). Existing segments with other content are not "
                                          "replaced (exit 2) unless --force; the same sample again is a no-op.",
                              epilog="example:\n  kafkacodec generate /tmp/sample-log\n\n" + EXIT_CODES)
    g.add_argument("dir", metavar="DIR")
    g.add_argument("--topics", default="orders,clicks", help="comma-separated topic names (default orders,clicks)")
    g.add_argument("--partitions", type=count_arg(1), default=2, help="partitions per topic (default 2)")
    g.add_argument("--records-per-batch", type=count_arg(1), default=20,
                   help="at most this many records per batch")
    g.add_argument("--batches-per-segment", type=count_arg(1), default=8,
                   help="roll a segment after this many batches")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--force", action="store_true", help="replace existing segments of other content")
    g.add_argument("--json", action="store_true")
    g.set_defaults(run=run)
