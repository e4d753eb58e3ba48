"""The main job on a standalone Spark cluster (master + worker from the pyspark wheel, on
loopback): executors import kafkacodec from the interpreter they run (PYSPARK_PYTHON), as on a
real cluster with the same environment on every node; nothing of the driver's paths is handed
to them."""

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

sys.path.insert(0, os.path.dirname(__file__))
from kafka_oracle import kafka_python_rows  # noqa: E402

import kafkacodec  # noqa: E402
from kafkacodec.cli import generate  # noqa: E402
from kafkacodec.logdir import discover  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "spark_standalone.py"


@pytest.fixture(scope="module")
def node_python(tmp_path_factory):
    """An interpreter with kafkacodec and its dependencies installed, as every node of a cluster
    would have: a venv whose site-packages holds a .pth naming this environment's
    site-packages and this kafkacodec (the in-place build while developing, the wheel in CI)."""
    import site

    root = tmp_path_factory.mktemp("node-venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    paths = [str(Path(kafkacodec.__file__).resolve().parents[1]), *site.getsitepackages()]
    Path(purelib, "kafkacodec-under-test.pth").write_text("\n".join(paths) + "\n")
    return str(python)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, node_python):
    directory = tmp_path_factory.mktemp("spark-standalone")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = subprocess.run([sys.executable, str(SCRIPT), "start", str(directory)], env=env,
                             capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        yield {**json.loads(started.stdout), "dir": directory}
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "stop", str(directory)], timeout=120)
        assert not (directory / "cluster.json").exists()


def test_convert_on_a_standalone_cluster(cluster, node_python, tmp_path):
    source, pq, back = tmp_path / "log", tmp_path / "pq", tmp_path / "back"
    generate(source, topics=["orders"], partitions=2, batches_per_segment=6)
    # The driver: the node's interpreter, a clean environment (no PYTHONPATH), away from the
    # source tree; executors get nothing but the master URL and the memory setting.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON")}
    env.update(PYSPARK_PYTHON=node_python, SPARK_LOCAL_IP="127.0.0.1")
    for src, dst in ((source, pq), (pq, back)):
        result = subprocess.run(
            [node_python, "-m", "kafkacodec.cli", "spark", "convert", "--json", "--no-progress",
             "--master", cluster["master"], "--conf", "spark.executor.memory=512m",
             "--conf", "spark.driver.host=127.0.0.1", str(src), str(dst)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        summary = json.loads(result.stdout)
        assert summary["records"] > 0
    assert list((cluster["dir"] / "work").glob("app-*/*/stderr"))     # executors ran on the worker
    expected, got = {}, {}
    for root, rows in ((source, expected), (back, got)):
        for seg in discover(root):
            rows.setdefault(seg.partition, []).extend(
                (r["offset"], r["value"]) for r in kafka_python_rows(Path(seg.path).read_bytes(), "orders", seg.partition))
    committed = {p: [r for r in rows if r in got[p]] for p, rows in expected.items()}
    assert got == committed and sum(map(len, got.values())) == summary["records"]


def test_cluster_executors_get_no_driver_path():
    from kafkacodec.spark.job import session_conf

    package_root = str(Path(kafkacodec.__file__).resolve().parents[1])
    conf = session_conf("spark://10.0.0.1:7077", {"spark.executor.memory": "2g"})
    assert conf["spark.executor.memory"] == "2g"
    assert not [k for k, v in conf.items() if k.startswith("spark.executorEnv.") or package_root in v]
    assert session_conf("local[2]")["spark.executorEnv.PYTHONPATH"] == package_root
