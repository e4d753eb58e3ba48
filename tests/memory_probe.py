"""Run Python code in a child process and measure its peak anonymous memory (Linux).

The child samples /proc/self/status RssAnon in a thread while the code runs: heap and other
private memory, not the file pages a read-only mapping brings in (RssFile), so reading a
mapped segment does not count but copying it into memory does.  An address-space limit
(RLIMIT_AS) keeps a regression from eating the machine: it then fails with MemoryError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from isolated import child_env  # noqa: F401  (re-exported for the tests that import it here)

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """\
import json, resource, sys, threading
limit = {limit}
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

def _rss_anon():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise KeyError("RssAnon")

_peak = [0]
_done = threading.Event()

def _sample():
    while not _done.is_set():
        _peak[0] = max(_peak[0], _rss_anon())
        _done.wait(0.001)

import kafkacodec, kafkacodec.cli   # imported before the baseline
_baseline = _rss_anon()
_sampler = threading.Thread(target=_sample, daemon=True)
_sampler.start()

def _report():
    _done.set()
    _sampler.join()
    _peak[0] = max(_peak[0], _rss_anon())
    sys.stderr.write("\\nMEMORY " + json.dumps({{"baseline": _baseline, "peak": _peak[0]}}) + "\\n")

import atexit
atexit.register(_report)
"""

available = sys.platform.startswith("linux") and os.path.exists("/proc/self/status")




def run_measured(code: str, *argv: str, address_limit: int = 2 << 30, timeout: float = 300,
                 cwd: str | os.PathLike[str] | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `code` (with `argv` as sys.argv[1:]) in a child; returns (the completed process,
    peak anonymous memory growth in bytes above the baseline taken after importing kafkacodec).
    The child's own exit status and output are left to the caller; -1 growth when the child
    died before reporting."""
    run = subprocess.run([sys.executable, "-c", _PRELUDE.format(limit=address_limit) + code, *argv],
                         capture_output=True, text=True, timeout=timeout, env=child_env(), cwd=cwd)
    growth = -1
    for line in run.stderr.splitlines():
        if line.startswith("MEMORY "):
            memory = json.loads(line[len("MEMORY "):])
            growth = memory["peak"] - memory["baseline"]
    return run, growth
