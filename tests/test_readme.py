"""Every command the README shows, run as it shows them, in a fresh clone of the repository
after its setup command (issue 19: the benchmark commands imported the unbuilt source tree).

The README's setup (`bash scripts/test.sh`) builds the wheel and installs it into ./.venv; this
test runs inside that suite, so the clone's `.venv` is that venv (a symlink: nothing is rebuilt)
and its `dist/` that wheel.  `bash scripts/run.sh` runs with KAFKACODEC_PREINSTALLED=1 (its pip
install would rebuild the wheel), and the benchmark commands in their quick mode (tiny data,
one round).  Outside the installed suite set KAFKACODEC_README_VENV to a venv holding the wheel
(and KAFKACODEC_README_DIST to its directory), else the test is skipped.

Examples that need a Kafka cluster (mirror, serve --upstream) are fenced ```sh, not ```bash:
tests/test_docs_blocks_services.py runs them as written against librdkafka's mock cluster.  Slow (three Spark sessions): marked `slow`, run once by .ci/run through scripts/test.sh.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# The benchmark commands in their quick mode (the README runs them in full).
# (report.py leaves out its Spark run: the same block runs bench_spark.py right after it; the Java
# benchmark runs each case once over a few batches, in one run.)
QUICK = [
    (re.compile(r"(bench/report\.py)(?=\s|$)"), r"\1 --quick --no-spark"),
    (re.compile(r"(\S*python\S* bench/bench_java\.py)"),
     r"KC_BENCH_JAVA_BATCHES=16 KC_BENCH_JAVA_ROUNDS=1 KC_BENCH_JAVA_WARM_MS=0 \1"),
    (re.compile(r"(bench/bench_java\.py.*?)--runs \d+"), r"\1--runs 1"),
    (re.compile(r"(bench/bench_arrow\.py)(?=\s|$)"), r"\1 20000"),
    (re.compile(r"(bench/bench_spark\.py) \d+"), r"\1 40000 --rounds 1"),
]

pytestmark = pytest.mark.slow


def bash_blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def prepared_venv():
    """A venv holding the installed kafkacodec wheel (not a source tree), or None."""
    given = os.environ.get("KAFKACODEC_README_VENV")
    if given:
        return Path(given)
    if os.environ.get("KAFKACODEC_TEST_INSTALLED") == "1" and sys.prefix != sys.base_prefix:
        return Path(sys.prefix)
    return None


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    venv = prepared_venv()
    if venv is None:
        pytest.skip("needs the venv with the installed wheel: run under scripts/test.sh, or set "
                    "KAFKACODEC_README_VENV (and KAFKACODEC_README_DIST)")
    if shutil.which("git") is None:
        pytest.skip("needs git")
    where = tmp_path_factory.mktemp("readme") / "kafkacodec"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where)], check=True, timeout=300)
    (where / ".venv").symlink_to(venv, target_is_directory=True)
    dist = Path(os.environ.get("KAFKACODEC_README_DIST", ROOT / "dist"))
    if dist.is_dir():
        (where / "dist").symlink_to(dist, target_is_directory=True)
    return where


def run_block(clone, script, env=None):
    for pattern, replacement in QUICK:
        script = pattern.sub(replacement, script)
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    environment.update({"SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})
    run = subprocess.run(["bash", "-e", "-c", script], cwd=clone, env=environment, capture_output=True,
                         text=True, timeout=1800)
    assert run.returncode == 0, f"{script}\nexit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return run


BLOCKS = bash_blocks(README.read_text())


def _label(block: str) -> str:
    if "bash scripts/run.sh" in block:
        return "setup"
    if re.search(r"^pip install", block, flags=re.M):
        return "pip"
    return re.sub(r"\W+", "-", block.strip().splitlines()[0].split("#")[0].strip())[:40].strip("-")


def test_the_readme_shows_setup_cli_and_benchmark_blocks():
    labels = [_label(block) for block in BLOCKS]
    assert labels.count("setup") == 1 and "pip" in labels and len(BLOCKS) >= 4
    assert any("kafkacodec read" in b for b in BLOCKS) and any("bench/report.py" in b for b in BLOCKS)


# One test a block (each in the worker's own clone), so pytest-xdist shares them out.
@pytest.mark.parametrize("number", range(len(BLOCKS)), ids=[f"{n + 1}-{_label(b)}" for n, b in enumerate(BLOCKS)])
def test_a_readme_block_runs_as_shown_in_a_fresh_clone(clone, number):
    block = BLOCKS[number]
    if _label(block) == "setup":
        assert "bash scripts/test.sh" in block               # (that one is what runs this test)
        run_block(clone, "bash scripts/run.sh", {"KAFKACODEC_PREINSTALLED": "1"})
        assert list((clone / "out" / "parquet").glob("*.parquet"))
        return
    if _label(block) == "pip":                               # from PyPI: the extras it names exist
        tomllib = pytest.importorskip("tomllib")              # Python 3.11+
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for extra in re.findall(r'kafkacodec\[(\w+)\]', block):
            assert extra in extras, extra
        return
    result = run_block(clone, block)
    if "kafkacodec read" in block:
        assert '"topic": ' in result.stdout and "orders [0] " in result.stdout
        assert (clone / "out" / "v1.log").exists() and list((clone / "out" / "log").glob("*-*/*.log"))
        assert list((clone / "out" / "log-parquet").glob("*.parquet"))
    if "bench/report.py" in block:                           # the report and its chart, in the clone
        assert (clone / "docs" / "results.md").read_text().startswith("# Benchmark results")
        assert (clone / "docs" / "results.png").stat().st_size > 10_000
