"""Shipping checks that run without a network or a CI service: the cibuildwheel matrix the
project promises, the GitHub workflows against GitHub's published workflow schema, and the
benchmark job's run-to-run comparison (bench/report.py --slim / --compare).

They read the source tree (pyproject.toml, .github/, bench/ beside tests/) and skip without it.
What only the runners themselves can show (MSVC builds, macOS and Windows test runs) is the
workflows' job; see docs/packaging.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))

pytestmark = [pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file() or not WORKFLOWS,
                                 reason="source tree (pyproject.toml, .github/) not beside tests/"),
              pytest.mark.tooling]

PYTHONS = ("cp310", "cp311", "cp312", "cp313")
MATRIX = {
    "linux": {f"{py}-{libc}_{arch}" for py in PYTHONS for libc in ("manylinux", "musllinux")
              for arch in ("x86_64", "aarch64")},
    "macos": {f"{py}-macosx_{arch}" for py in PYTHONS for arch in ("x86_64", "arm64")},
    "windows": {f"{py}-win_amd64" for py in PYTHONS},
}


@pytest.mark.parametrize("platform", list(MATRIX))
def test_cibuildwheel_builds_the_promised_matrix(platform):
    pytest.importorskip("cibuildwheel")
    run = subprocess.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers",
                          "--platform", platform], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert set(run.stdout.split()) == MATRIX[platform]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_github_schema(workflow):
    pytest.importorskip("check_jsonschema")
    run = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                          "vendor.github-workflows", str(workflow)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_workflows_cover_what_the_project_ships():
    text = {p.name: p.read_text() for p in WORKFLOWS}
    tests = text["tests.yml"]
    for os_name in ("ubuntu-latest", "macos-latest", "windows-latest"):
        assert os_name in tests
    assert "KAFKACODEC_TEST_INSTALLED" in tests             # the suite runs on the installed wheel
    assert "cibuildwheel" in text["wheels.yml"]
    bench = text["benchmark.yml"]
    assert "--benchmark-json" in bench and "report.py --compare" in bench
    assert "KAFKACODEC_SANITIZE" in text["sanitizers.yml"] or "sanitize.sh" in text["sanitizers.yml"]


def _bench_json(path: Path, medians: dict[str, float]) -> Path:
    path.write_text(json.dumps({"benchmarks": [
        {"fullname": name, "name": name, "group": "g", "extra_info": {},
         "stats": {"median": median, "min": median, "data": [median] * 50}}
        for name, median in medians.items()]}))
    return path


def test_benchmark_job_slims_and_compares_runs(tmp_path):
    old = _bench_json(tmp_path / "old.json", {"a": 1.0, "b": 2.0, "gone": 1.0})
    new = _bench_json(tmp_path / "new.json", {"a": 1.1, "b": 3.5, "added": 1.0})
    report = [sys.executable, str(ROOT / "bench" / "report.py")]
    slim = subprocess.run([*report, "--slim", str(new)], capture_output=True, text=True, timeout=120)
    assert slim.returncode == 0, slim.stderr
    assert all("data" not in b["stats"] for b in json.loads(new.read_text())["benchmarks"])
    run = subprocess.run([*report, "--compare", str(old), str(new), "--threshold", "1.5",
                          "--fail-on-regression"], capture_output=True, text=True, timeout=120)
    assert "| b |" in run.stdout and "1.75 ⚠" in run.stdout       # 3.5 / 2.0, past 1.5x
    assert "| a |" in run.stdout and "1.10 |" in run.stdout
    assert "1 benchmark(s) slower than 1.5x" in run.stdout
    assert run.returncode == 1


def test_child_interpreters_import_the_kafkacodec_under_test(tmp_path):
    """A child started by the suite (even with the checkout as its working directory, where
    `python -c` looks first) imports the same kafkacodec as the suite: the installed wheel in
    CI, never the checkout's unbuilt sources (tests build a child's environment with
    tests/isolated.py's child_env)."""
    import os

    import kafkacodec
    from isolated import child_env

    tests = Path(__file__).resolve().parent
    run = subprocess.run([sys.executable, "-c", "import kafkacodec; print(kafkacodec.__file__)"],
                         capture_output=True, text=True, timeout=120, env=child_env(),
                         cwd=tests.parent)
    assert run.returncode == 0, run.stderr
    assert os.path.samefile(run.stdout.strip(), kafkacodec.__file__), run.stdout


def test_kafka_python_is_a_test_oracle_only():
    """No extra a user installs needs kafka-python ([serve], [consumer], [mirror] included: the
    control-plane messages go through kafkacodec's own schema codec), and serve, the consumer
    core, the mirror and dump's internal-topic decoder import and frame their messages in an
    interpreter where `import kafka` fails."""
    tomllib = pytest.importorskip("tomllib")
    from isolated import run_python

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, requirements in extras.items():
        if extra not in ("test", "bench"):
            assert not any(r.startswith("kafka-python") for r in requirements), extra
    run = run_python("""
        import sys
        sys.modules["kafka"] = None                   # any `import kafka...` raises ImportError
        import kafkacodec.cli._internal_topics, kafkacodec.consumer, kafkacodec.mirror.process
        import kafkacodec.serve.server
        from kafkacodec.protocol import control, messages
        frame = control.encode_request(control.find_coordinator_request("g"), 3, 7, "c")
        answer = messages.RESPONSES[10].encode(3, {"error_code": 15, "host": "h"})
        payload = bytes(messages.frame_response(10, 3, 7, answer))[4:]
        assert control.decode_response(messages.RESPONSES[10], payload, 3).error_code == 15
        print("ok", len(frame))
    """, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stderr[-2000:]
