"""The JVM part of "kafkalog": column pruning, which PySpark's data source API cannot express.

`kafkacodec/spark/java/KafkaLogSource.java` is a Spark DataSource V2 registered as "kafkalog".
It is Spark's own runner of Python data sources (PythonDataSourceV2) with the columns a query
needs handed to the Python reader, so `select("offset")` decodes offsets only and `count()`
decodes nothing but offsets, never a Python object per record.  Rows, options, filters, writes
and streams are the Python source's (kafkacodec.spark.datasource), unchanged.

The classes it extends are Spark's internal API, so the jar is built for the Spark that runs it:
`jar()` compiles the source with the JDK's `javac` against the installed pyspark's jars on first
use and caches the jar per pyspark version and source (under $XDG_CACHE_HOME or ~/.cache).
Put it on the driver's classpath before the session starts::

    spark = (SparkSession.builder.config("spark.jars", kafkacodec.spark.jvm.jar())
             .getOrCreate())

Without it (or without a JDK: `jar()` is then None) "kafkalog" is the Python source alone: the
same rows, every column decoded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

SOURCE = Path(__file__).with_name("java")
CLASS_NAME = "kafkacodec.spark.KafkaLogSource"


class JarBuildError(RuntimeError):
    """javac refused the source against this pyspark's jars (its message says why)."""


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkacodec" / "spark-jvm"


def jar(*, cache: str | os.PathLike[str] | None = None) -> str | None:
    """The jar's path, compiled and cached if needed; None without a JDK (no `javac`).

    Raises JarBuildError when javac refuses the source against this pyspark (a Spark whose
    internal classes changed): kafkalog then works without the jar, as the Python source."""
    import pyspark

    javac = _javac()
    if javac is None:
        return None
    sources = sorted(SOURCE.rglob("*.java"))
    services = sorted((SOURCE / "META-INF").rglob("*"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in sources + [p for p in services if p.is_file()]:
        digest.update(path.relative_to(SOURCE).as_posix().encode() + b"\0" + path.read_bytes())
    folder = Path(cache) if cache is not None else _cache_dir()
    target = folder / f"kafkalog-spark{pyspark.__version__}-{digest.hexdigest()[:16]}.jar"
    if target.is_file():
        return str(target)
    folder.mkdir(parents=True, exist_ok=True)
    jars = Path(pyspark.__file__).parent / "jars"
    with tempfile.TemporaryDirectory(prefix="kafkalog-jvm-") as work:
        classes = Path(work) / "classes"
        run = subprocess.run([javac, "--release", "17", "-nowarn", "-Xlint:-path", "-d", str(classes),
                              "-cp", str(jars / "*"), *map(str, sources)],
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise JarBuildError(f"javac could not build {SOURCE.name} against pyspark "
                                f"{pyspark.__version__}:\n{run.stdout}{run.stderr}")
        # written beside the target and renamed: a reader never sees half a jar
        fd, partial = tempfile.mkstemp(prefix=".kafkalog-", suffix=".jar", dir=folder)
        os.close(fd)
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
                out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
                for path in sorted(classes.rglob("*.class")):
                    out.write(path, path.relative_to(classes).as_posix())
                for path in services:
                    if path.is_file():
                        out.write(path, path.relative_to(SOURCE).as_posix())
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    return str(target)


def loaded(spark: object) -> bool:
    """Whether the session's driver has the jar's "kafkalog" on its classpath."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    try:
        jvm.java.lang.Class.forName(CLASS_NAME, False, loader)
    except Exception:
        return False
    return True
