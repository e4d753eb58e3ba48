"""Kafka log directories on disk (`<topic>-<partition>/<base offset>.log`), without Spark: the
"kafkalog" data source, the command line and plain Python use them.

- reading (`_read`): discover segments, plan splits, read a split into Arrow batches;
- writing (`_write`): append batches to a partition directory, rolling segments.
"""

from kafkacodec.logdir._read import (MODES, SEGMENT_RE, Options, Segment, Split, describe, discover,
                                     plan, read_split)
from kafkacodec.logdir._write import write_partition

__all__ = ["discover", "plan", "read_split", "write_partition", "describe", "Options", "Segment",
           "Split", "MODES", "SEGMENT_RE"]
