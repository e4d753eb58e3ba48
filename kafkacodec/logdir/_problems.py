"""What can be wrong with a log directory, and the policy for each kind.

- damage (`mode`): corrupt entries, a partial entry at a segment's end (a cut file or a
  corrupt size field), an entry named like a segment that cannot be read.  FAILFAST raises;
  DROPMALFORMED skips and warns; PERMISSIVE also yields one `_corrupt_record` row per problem.
- data loss (`failOnDataLoss`, as Spark's Kafka source): segments that overlap (duplicate
  offsets), offsets missing between segments, a requested offset outside the log.  true
  raises LogLayoutError; false warns, reads each offset once and goes on.
- notes: an invalid index or checkpoint file is ignored with a warning (the log is read
  without it); an entry whose name is not UTF-8 is skipped with a warning; a remote segment
  the broker's remote log metadata does not list as copied is left out with a warning.

Warnings go to stderr (the executor's log under Spark) unless a callback collects them
(`kafkacodec verify`).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from kafkacodec._format import HEADER_SIZE_UP_TO_MAGIC, V0_RECORD_OVERHEAD
from kafkacodec.errors import CorruptRecordError, KafkaCodecError, LogLayoutError

__all__ = ["Problem", "Reporter", "warn", "not_a_segment", "DAMAGE", "DATA_LOSS", "NOTE"]

DAMAGE = ("corrupt", "partial", "unreadable")
DATA_LOSS = ("overlap", "gap", "range")
NOTE = ("index", "checkpoint", "name", "remote")

SKIP_HINT = ("To skip corrupt data read with option mode=DROPMALFORMED (or PERMISSIVE for one row "
             "per problem); `kafkacodec verify DIR` lists every problem")
LOSS_HINT = ("Set failOnDataLoss=false to read every offset once and go on (as Spark's Kafka source); "
             "`kafkacodec verify DIR` lists every problem")


@dataclass(frozen=True)
class Problem:
    kind: str                    # one of DAMAGE, DATA_LOSS, NOTE
    path: str                    # the file (or directory) concerned
    message: str                 # complete, names the file
    position: int | None = None  # byte position in `path`
    offset: int | None = None    # the Kafka offset involved
    error: KafkaCodecError | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "file": self.path, "position": self.position, "offset": self.offset,
                "error": self.message}


def not_a_segment(head: bytes, size: int) -> str | None:
    """Why a file of `size` bytes starting with `head` (17 bytes or more) cannot be a Kafka
    segment, or None.  An entry starts with int64 offset, int32 size (at least 14: a v0
    message's smallest), and has its magic (0, 1 or 2) at byte 16."""
    if size < HEADER_SIZE_UP_TO_MAGIC or len(head) < HEADER_SIZE_UP_TO_MAGIC:
        return None                       # too short to tell: a partial entry at most
    _, length, _, magic = struct.unpack_from(">qiib", head)
    if magic not in (0, 1, 2):
        return f"byte 16 would be the magic (0, 1 or 2) of its first entry and is {magic}"
    if length < V0_RECORD_OVERHEAD:
        return f"its first entry would declare {length} bytes, below the minimum of {V0_RECORD_OVERHEAD}"
    return None


def warn(problem: Problem) -> None:
    """The default report: one line on stderr (an executor's log under Spark)."""
    verb = {"index": "ignoring", "checkpoint": "ignoring", "remote": "leaving out"}.get(problem.kind, "skipping")
    print(f"kafkalog: {verb}: {problem.message}", file=sys.stderr)


@dataclass
class Reporter:
    mode: str = "FAILFAST"
    fail_on_data_loss: bool = True
    on_problem: Callable[[Problem], None] | None = None

    def _tell(self, problem: Problem) -> None:
        (self.on_problem or warn)(problem)

    def damage(self, problem: Problem) -> None:
        """FAILFAST raises (the problem's error, or one made from it) with the hint."""
        if self.mode == "FAILFAST":
            exc = problem.error if problem.error is not None else _error(
                LogLayoutError if problem.kind == "unreadable" else CorruptRecordError, problem)
            raise exc.with_context(hint=SKIP_HINT)
        self._tell(problem)

    def data_loss(self, problem: Problem) -> None:
        if self.fail_on_data_loss:
            raise _error(LogLayoutError, problem, LOSS_HINT)
        self._tell(problem)

    def note(self, problem: Problem) -> None:
        self._tell(problem)


def _error(cls: type[KafkaCodecError], problem: Problem, hint: str = "") -> KafkaCodecError:
    """The problem as an exception: its message as is (it names the place), position and
    offset as attributes, `hint` in its field and after the message."""
    exc = cls(problem.message).with_context(hint=hint)
    exc.position, exc.offset = problem.position, problem.offset
    return exc
