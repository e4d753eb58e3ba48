"""Kafka log directories on disk (`<topic>-<partition>/<base offset>.log`) or in object stores,
without Spark: the "kafkalog" data source, the command line and plain Python use them.

- one partition's log (`partition_log`: segments, offset and time lookups, transactions; the
  engine of the reader and of `kafkacodec serve`);
- reading (`_read`): discover segments (`_layout`), plan splits (`_plan`, on `partition_log`,
  `checkpoints`, `storage`), read a split into Arrow batches (damage and data-loss policies
  in `_problems`);
- writing (`_write`): rows per (topic, partition) in offset order, staged and committed at once;
  `_store`: local directories and pyarrow.fs URIs for the writer.
"""

from kafkacodec.logdir._pushdown import Predicate, Pushdown
from kafkacodec.logdir._read import (MODES, SEGMENT_RE, Options, Problem, ReadOptions, Segment, Split, count_split,
                                     describe, discover, plan, read_split)
from kafkacodec.logdir._write import TaskWriter, commit

__all__ = ["discover", "plan", "read_split", "count_split", "TaskWriter", "commit", "describe", "Options", "ReadOptions",
           "Segment", "Split", "Problem", "Pushdown", "Predicate", "MODES", "SEGMENT_RE"]
