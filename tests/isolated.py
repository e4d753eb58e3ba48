"""Run a snippet in a fresh interpreter: for tests whose failure mode is a crash (SIGSEGV, an
abort in the allocator), so the test runner survives it and reports the exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import kafkacodec

# The folder holding the kafkacodec this suite imported: the checkout built in place, the
# installed wheel's site-packages, or the instrumented build of scripts/sanitize.sh.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(kafkacodec.__file__)))


def child_env(*extra_paths: str) -> dict[str, str]:
    """The environment for a child interpreter that must import the same kafkacodec as this one
    (never the checkout's unbuilt sources when the suite tests the installed wheel)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_PARENT, *extra_paths, env.get("PYTHONPATH", "")])
    return env


def run_python(code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `code` with this interpreter and the kafkacodec this suite imported."""
    env = child_env()
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env,
                          cwd=tempfile.gettempdir())   # not the checkout: `-c` puts cwd first on sys.path
