"""A local SparkSession (conftest.py's `spark`: one per pytest worker): Python workers run this
interpreter and import the kafkacodec this process imported (the in-place build while
developing, the installed wheel in CI), and the JVM starts outside the source tree (workers run
`python -m pyspark.daemon` in its working directory, first on their sys.path, where the unbuilt
sources would shadow the package).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import kafkacodec

PACKAGE_PARENT = str(Path(kafkacodec.__file__).resolve().parents[1])


@contextlib.contextmanager
def local_session(cwd: Path, app: str, *, partitions: int = 2,
                  executor_env: dict[str, str] | None = None) -> Iterator[Any]:
    """local[2], UTC, no UI, "kafkalog" registered; stopped at the end unless a session was
    active before (then that one is used and kept)."""
    from pyspark.sql import SparkSession

    from kafkacodec.spark import register

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    owned = SparkSession.getActiveSession() is None
    here = os.getcwd()
    os.chdir(cwd)
    try:
        builder = (SparkSession.builder.master("local[2]").appName(app)
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", str(partitions))
                   .config("spark.sql.session.timeZone", "UTC")
                   .config("spark.executorEnv.PYTHONPATH", PACKAGE_PARENT))
        for name, value in (executor_env or {}).items():
            builder = builder.config(f"spark.executorEnv.{name}", value)
        session = builder.getOrCreate()
    finally:
        os.chdir(here)
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        if owned:
            session.stop()
