"""Kafka log directories on disk (`<topic>-<partition>/<base offset>.log`), without Spark: the
"kafkalog" data source, the command line and plain Python use them.

- reading (`_read`): discover segments, plan splits, read a split into Arrow batches;
- writing (`_write`): rows per (topic, partition) in offset order, staged and committed at once;
  `_store`: local directories and pyarrow.fs URIs for the writer.
"""

from kafkacodec.logdir._read import (MODES, SEGMENT_RE, Options, Segment, Split, describe, discover,
                                     plan, read_split)
from kafkacodec.logdir._write import TaskWriter, commit

__all__ = ["discover", "plan", "read_split", "TaskWriter", "commit", "describe", "Options", "Segment",
           "Split", "MODES", "SEGMENT_RE"]
