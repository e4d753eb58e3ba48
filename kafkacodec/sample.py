"""A realistic mixed sample log (magic 0, 1 and 2, every codec, transactions), deterministic
for a seed: sample_log() gives one partition's bytes, write_sample_log() a log directory as a
broker lays it out (what `kafkacodec generate` writes)."""

from kafkacodec._sample import sample_log, sample_segments, write_sample_log

__all__ = ["sample_log", "sample_segments", "write_sample_log"]
