"""Options shared by the "kafkalog" reader and writer."""

from __future__ import annotations

from kafkacodec.logdir import Options

__all__ = ["path_option"]


def path_option(options: Options) -> str:
    path = options.get("path")
    if not path:
        raise ValueError('kafkalog needs a path: spark.read.format("kafkalog").load("/path/to/log-dir")')
    return str(path)
