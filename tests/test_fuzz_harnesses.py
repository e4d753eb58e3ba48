"""The harness kinds beyond one byte string per entry point (fuzz/differential.py, lifetime.py,
concurrency.py, reentrancy.py, filesystem.py) inside the test suite: every target of a kind
runs over a few seeds of the corpus, and the saved reproducers of fixed findings
(fuzz/regressions/<kind>.<case>/) replay, each kind in a subprocess of its own, since what
these kinds look for is a crash. The campaigns themselves run in CI (.ci/run) and locally
(scripts/fuzz.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
if not (FUZZ / "fuzz_targets.py").exists():
    pytest.skip("fuzz/ not found beside tests/", allow_module_level=True)

KINDS = ("differential", "lifetime", "concurrency", "reentrancy", "filesystem")
SEEDS_PER_TARGET = 3


def run_fuzz(code: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if os.environ.get("KAFKACODEC_TEST_INSTALLED") != "1":
        env.setdefault("PYTHONPATH", str(FUZZ.parent))
    prelude = f"import sys\nsys.path.insert(0, {str(FUZZ)!r})\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=tempfile.gettempdir())


@pytest.fixture(scope="session")
def seeds_dir(tmp_path_factory) -> Path:
    """A few record sets from the corpus maker (the `records` seeds every kind here reads)."""
    out = tmp_path_factory.mktemp("harness-corpus")
    proc = run_fuzz(f"import make_corpus; make_corpus.main(__import__('pathlib').Path({str(out)!r}))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "records"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="scripts/sanitize.sh replays the whole corpus and every regression right after")
def test_every_target_of_the_kind_on_seeds_and_regressions(kind, seeds_dir):
    seeds = sorted(seeds_dir.iterdir())
    picks = [str(p) for p in seeds[:: max(1, len(seeds) // SEEDS_PER_TARGET)][:SEEDS_PER_TARGET]]
    proc = run_fuzz(f"""
        import fuzz_targets as ft
        from pathlib import Path
        for name in ft.KINDS[{kind!r}]:
            why = ft.availability(name)
            assert why is None, f"{{name}}: {{why}}"
            regressions = ft.REGRESSIONS / name
            files = [Path(p) for p in {picks!r}]
            files += sorted(regressions.iterdir()) if regressions.is_dir() else []
            for path in files:
                try:
                    ft.check_one(name, path.read_bytes())
                except Exception as exc:
                    raise AssertionError(f"{{name}} on {{path}}: {{type(exc).__name__}}: {{exc}}")
            print(name, len(files))
    """)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    ran = dict(line.split() for line in proc.stdout.splitlines())
    assert len(ran) >= 2, proc.stdout          # every kind has several cases


def test_every_public_class_has_a_concurrency_scenario():
    """A new public class fails here until fuzz/concurrency.py says how it is shared."""
    proc = run_fuzz("""
        import concurrency
        missing = concurrency.uncovered()
        print(missing)
        assert not missing
        assert len(concurrency.public_classes()) > 20
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
