"""The reader's options, in the vocabulary of Spark's Kafka source ("Structured Streaming +
Kafka Integration Guide") plus kafkacodec's own, checked once: an unknown name is refused with
a suggestion, a broker-only option with the reason, a value with what to write instead."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkacodec.logdir._options import Options
from kafkacodec.logdir.storage import S3_OPTIONS

__all__ = ["ReadOptions", "OffsetBound", "EARLIEST", "LATEST", "MODES", "READ_OPTIONS"]

EARLIEST, LATEST = -2, -1            # Spark's JSON sentinels
MODES = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")

# name -> where it applies ("both", "batch", "stream")
READ_OPTIONS = {
    # Spark's Kafka source
    "assign": "both", "subscribe": "both", "subscribePattern": "both",
    "startingOffsets": "both", "endingOffsets": "batch",
    "startingTimestamp": "both", "endingTimestamp": "batch",
    "startingOffsetsByTimestamp": "both", "endingOffsetsByTimestamp": "batch",
    "startingOffsetsByTimestampStrategy": "both",
    "failOnDataLoss": "both", "minPartitions": "both", "maxOffsetsPerTrigger": "stream",
    "includeHeaders": "both", "kafka.isolation.level": "both",
    # kafkacodec's own
    "path": "both", "paths": "both", "topics": "both", "mode": "both",
    "columnNameOfCorruptRecord": "both", "validateCrc": "both", "keepControl": "both",
    "keepAborted": "both", "maxPartitionBytes": "both", "maxRowsPerBatch": "both", "countFromHeaders": "batch",
    **{name: "both" for name in S3_OPTIONS},
}
# Spark's Kafka-source options that only make sense against a broker
BROKER_ONLY = ("kafka.bootstrap.servers", "kafka.group.id", "groupIdPrefix", "kafkaConsumer.pollTimeoutMs",
               "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "minOffsetsPerTrigger",
               "maxTriggerDelay", "maxRecordsPerPartition")
_CANONICAL = {name.lower(): name for name in (*READ_OPTIONS, *BROKER_ONLY)}


@dataclass(frozen=True)
class OffsetBound:
    """Where a read starts or ends: `kind` is "earliest", "latest", "offsets" (per partition,
    Spark's JSON with -2/-1, or one number for every partition), "timestamp" (one for every
    partition) or "timestamps" (per partition)."""
    kind: str
    value: Any = None

    def for_partition(self, topic: str, partition: int) -> tuple[str, int | None]:
        """("earliest"|"latest"|"offset"|"timestamp", number) for one partition."""
        if self.kind in ("earliest", "latest"):
            return self.kind, None
        if self.kind == "timestamp":
            return "timestamp", int(self.value)
        if isinstance(self.value, int):
            return "offset", self.value
        number = self.value[(topic, partition)]
        if self.kind == "timestamps":
            return "timestamp", number
        return ({EARLIEST: "earliest", LATEST: "latest"}.get(number, "offset"), number)

    def partitions(self) -> set[tuple[str, int]] | None:
        """The partitions a per-partition bound names (None: it applies to every one)."""
        return set(self.value) if isinstance(self.value, dict) else None


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name.lower(), list(_CANONICAL), n=1, cutoff=0.6)
    return f"; did you mean {_CANONICAL[close[0]]!r}?" if close else ""


def _partition_json(name: str, text: str, *, lists: bool = False) -> dict[tuple[str, int], int] | dict[str, set[int]]:
    try:
        spec = json.loads(text)
        if not isinstance(spec, dict):
            raise ValueError("not an object")
        if lists:
            return {str(t): {int(p) for p in parts} for t, parts in spec.items()}
        return {(str(t), int(p)): int(o) for t, parts in spec.items() for p, o in parts.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        example = '{"orders": [0, 1]}' if lists else '{"orders": {"0": 23, "1": -2}}'
        raise ValueError(f"option {name}={text!r}: use JSON like {example} ({exc})") from None


def _bound(opts: Options, prefix: str, default: str) -> OffsetBound:
    """Spark's precedence: <prefix>Timestamp, then <prefix>OffsetsByTimestamp, then <prefix>Offsets."""
    ts = opts.get(f"{prefix}Timestamp")
    if ts is not None:
        if not re.fullmatch(r"\s*-?\d+\s*", str(ts)):
            raise ValueError(f"option {prefix}Timestamp={ts!r}: use milliseconds since the epoch, e.g. 1700000000000")
        return OffsetBound("timestamp", int(ts))
    by_ts = opts.get(f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return OffsetBound("timestamps", _partition_json(f"{prefix}OffsetsByTimestamp", str(by_ts)))
    text = str(opts.get(f"{prefix}Offsets", default)).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetBound(text.lower())
    if re.fullmatch(r"-?\d+", text):                    # kafkacodec's: one offset for every partition
        number = int(text)
        return OffsetBound({EARLIEST: "earliest", LATEST: "latest"}.get(number, "offsets"),
                           None if number in (EARLIEST, LATEST) else number)
    return OffsetBound("offsets", _partition_json(f"{prefix}Offsets", text))


@dataclass
class ReadOptions:
    paths: list[str]
    topics: set[str] | None = None
    pattern: re.Pattern[str] | None = None
    assign: dict[str, set[int]] | None = None
    starting: OffsetBound = OffsetBound("earliest")
    ending: OffsetBound = OffsetBound("latest")
    starting_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    include_headers: bool | None = None          # None: not given (Spark's default, false)
    read_committed: bool = False
    validate_crc: bool = True
    keep_control: bool = False
    count_from_headers: bool = True              # read by the JVM part (kafkacodec/spark/java)
    mode: str = "FAILFAST"
    corrupt_column: str = "_corrupt_record"
    max_partition_bytes: int = 128 << 20
    max_rows: int = 65536
    storage: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Options | Mapping[str, Any] | None, *, streaming: bool = False,
              require_path: bool = True) -> ReadOptions:
        opts = Options(options)
        for key in opts.names():
            name = _CANONICAL.get(key)
            if name is None:
                if key.startswith("kafka."):
                    raise ValueError(f"option {key}: kafkalog reads log files, not a broker; of the "
                                     "kafka.* consumer settings only kafka.isolation.level applies")
                raise ValueError(f"unknown kafkalog option {key!r}{_did_you_mean(key)} "
                                 "(see docs/spark-and-cli.md for the read options)")
            if name in BROKER_ONLY:
                raise ValueError(f"option {name}: kafkalog reads log files, not a broker; remove it")
            where = READ_OPTIONS[name]
            if where == "batch" and streaming:
                raise ValueError(f"option {name} is for batch reads (spark.read); a stream has no end, "
                                 "as with Spark's Kafka source")
            if where == "stream" and not streaming:
                raise ValueError(f"option {name} applies to spark.readStream only")
        paths = _paths(opts)
        if require_path and not paths:
            raise ValueError('kafkalog needs a path: spark.read.format("kafkalog").load("/path/to/log-dir") '
                             '(or load([path1, path2]), s3://bucket/prefix, globs)')
        out = cls(paths)
        chosen = [n for n in ("assign", "subscribe", "subscribePattern", "topics") if opts.get(n) is not None]
        if len(chosen) > 1:
            raise ValueError(f"options {' and '.join(chosen)}: give only one of assign, subscribe or "
                             "subscribePattern (topics is kafkacodec's name for subscribe)")
        if chosen == ["assign"]:
            out.assign = _partition_json("assign", str(opts.get("assign")), lists=True)  # type: ignore[assignment]
        elif chosen == ["subscribePattern"]:
            try:
                out.pattern = re.compile(str(opts.get("subscribePattern")))
            except re.error as exc:
                raise ValueError(f"option subscribePattern={opts.get('subscribePattern')!r}: {exc}") from None
        elif chosen:
            out.topics = {t.strip() for t in str(opts.get(chosen[0])).split(",") if t.strip()}
            if not out.topics:
                raise ValueError(f"option {chosen[0]}: give at least one topic name")
        out.starting = _bound(opts, "starting", "latest" if streaming else "earliest")
        out.ending = OffsetBound("latest") if streaming else _bound(opts, "ending", "latest")
        if not streaming:
            _check_batch_rules(out)
        strategy = str(opts.get("startingOffsetsByTimestampStrategy", "error")).lower()
        if strategy not in ("error", "latest"):
            raise ValueError(f"option startingOffsetsByTimestampStrategy={strategy!r}: use error or latest")
        out.starting_strategy = strategy
        out.fail_on_data_loss = opts.bool("failOnDataLoss", True)
        if opts.get("minPartitions") is not None:
            out.min_partitions = opts.int("minPartitions", 1)
            if out.min_partitions < 1:
                raise ValueError(f"option minPartitions={out.min_partitions}: use a positive number")
        if opts.get("maxOffsetsPerTrigger") is not None:
            out.max_offsets_per_trigger = opts.int("maxOffsetsPerTrigger", 1)
            if out.max_offsets_per_trigger < 1:
                raise ValueError(f"option maxOffsetsPerTrigger={out.max_offsets_per_trigger}: use a positive number")
        if opts.get("includeHeaders") is not None:
            out.include_headers = opts.bool("includeHeaders", False)
        out.read_committed = _isolation(opts)
        out.validate_crc = opts.bool("validateCrc", True)
        out.keep_control = opts.bool("keepControl", False)
        out.count_from_headers = opts.bool("countFromHeaders", True)
        out.mode = str(opts.get("mode", "FAILFAST")).upper()
        if out.mode not in MODES:
            raise ValueError(f"option mode={out.mode!r}: use one of {', '.join(MODES)}")
        out.corrupt_column = str(opts.get("columnNameOfCorruptRecord", "_corrupt_record"))
        out.max_partition_bytes = opts.int("maxPartitionBytes", 128 << 20)
        out.max_rows = opts.int("maxRowsPerBatch", 65536)
        if out.max_partition_bytes < 1 or out.max_rows < 1:
            raise ValueError("options maxPartitionBytes and maxRowsPerBatch must be positive")
        out.storage = {k: str(opts.get(k)) for k in S3_OPTIONS if opts.get(k) is not None}
        return out

    def wants(self, topic: str, partition: int) -> bool:
        """Whether a topic-partition is selected by assign / subscribe / subscribePattern."""
        if self.assign is not None:
            return partition in self.assign.get(topic, ())
        if self.topics is not None:
            return topic in self.topics
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None      # Java's Matcher.matches()
        return True


def _paths(opts: Options) -> list[str]:
    paths: list[str] = []
    if opts.get("paths"):                  # DataFrameReader.load([p1, p2]) passes them as JSON
        value = opts.get("paths")
        try:
            paths = [str(p) for p in (json.loads(value) if isinstance(value, str) else value)]
        except ValueError:
            raise ValueError(f"option paths={value!r}: use a JSON list of paths") from None
    if opts.get("path"):
        paths.insert(0, str(opts.get("path")))
    return paths


def _check_batch_rules(out: ReadOptions) -> None:
    """Spark's Kafka source: a batch cannot start at latest nor end at earliest."""
    start, end = out.starting, out.ending
    if start.kind == "latest" or (start.kind == "offsets" and isinstance(start.value, dict)
                                  and LATEST in start.value.values()):
        raise ValueError("option startingOffsets: latest (or -1 in the JSON) is not allowed for batch "
                         "reads, as with Spark's Kafka source; use earliest, offsets or a timestamp")
    if end.kind == "earliest" or (end.kind == "offsets" and isinstance(end.value, dict)
                                  and EARLIEST in end.value.values()):
        raise ValueError("option endingOffsets: earliest (or -2 in the JSON) is not allowed for batch "
                         "reads, as with Spark's Kafka source; use latest, offsets or a timestamp")


def _isolation(opts: Options) -> bool:
    level = opts.get("kafka.isolation.level")
    keep_aborted = opts.get("keepAborted")
    if level is not None:
        text = str(level).strip().lower()
        if text not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"option kafka.isolation.level={level!r}: use read_uncommitted (the default, "
                             "as Kafka's consumer and Spark's source) or read_committed")
        committed = text == "read_committed"
        if keep_aborted is not None and opts.bool("keepAborted", False) == committed:
            raise ValueError("options keepAborted and kafka.isolation.level disagree; keepAborted is "
                             "deprecated: use kafka.isolation.level alone")
        return committed
    if keep_aborted is not None:            # deprecated: keepAborted=false meant read_committed
        return not opts.bool("keepAborted", False)
    return False

