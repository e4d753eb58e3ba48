"""Run a snippet in a fresh interpreter: for tests whose failure mode is a crash (SIGSEGV, an
abort in the allocator), so the test runner survives it and reports the exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `code` with this interpreter and this checkout's kafkacodec (or the installed one, or
    the instrumented build under scripts/sanitize.sh, which sets PYTHONPATH itself)."""
    env = dict(os.environ)
    if os.environ.get("KAFKACODEC_TEST_INSTALLED") != "1":
        env.setdefault("PYTHONPATH", ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env,
                          cwd=tempfile.gettempdir())   # not the checkout: `-c` puts cwd first on sys.path
