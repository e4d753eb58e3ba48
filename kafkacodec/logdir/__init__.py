"""Kafka log directories on disk (`<topic>-<partition>/<base offset>.log`) or in object stores,
without Spark: the "kafkalog" data source, the command line and plain Python use them.

- reading (`_read`): discover segments (`_layout`), plan splits (`_plan`, with `indexes`,
  `checkpoints`, `storage`), read a split into Arrow batches (damage and data-loss policies
  in `_problems`);
- writing (`_write`): append batches to a partition directory, rolling segments.
"""

from kafkacodec.logdir._pushdown import Predicate, Pushdown
from kafkacodec.logdir._read import (MODES, SEGMENT_RE, Options, Problem, ReadOptions, Segment, Split, describe,
                                     discover, plan, read_split)
from kafkacodec.logdir._write import write_partition

__all__ = ["discover", "plan", "read_split", "write_partition", "describe", "Options", "ReadOptions",
           "Segment", "Split", "Problem", "Pushdown", "Predicate", "MODES", "SEGMENT_RE"]
