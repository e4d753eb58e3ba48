"""Progress bars (kafkacodec._progress, tqdm): drawn on a terminal as wide as it is, each redraw
over the last one (a carriage return, never a scrolled line), nothing when stderr is not a
terminal."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

from kafkacodec.cli import EXIT_OK, generate

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_in_terminal(argv, columns, env=None):
    """argv with stdin, stdout and stderr on a pseudo-terminal of `columns` columns; what the
    terminal received, decoded, and the exit status."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    child = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, close_fds=True,
                             env={**os.environ, **(env or {})})
    os.close(follower)
    received = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            child.kill()
            raise AssertionError(f"no output for 60 s; so far: {received[-2000:]!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:                      # EIO: the child closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(leader)
    return child.wait(timeout=60), received.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress") / "log"
    generate(root, ("a", "b", "c"), partitions=3, batches_per_segment=4)
    return root


def test_verify_bar_redraws_in_place_at_80_columns(log_dir):
    """The old bar padded every redraw to 120 columns: on an 80-column terminal each one
    wrapped onto new lines (235 lines for one job)."""
    code, screen = run_in_terminal([sys.executable, "-m", "kafkacodec.cli", "verify", str(log_dir)], 80,
                                   env={"TQDM_MININTERVAL": "0"})          # draw at every update
    assert code == EXIT_OK, screen
    text = ANSI.sub("", screen).replace("\r\n", "\n")                     # the terminal's newline
    draws = [d for line in text.split("\n") for d in line.split("\r") if d.strip()]
    bars = [d for d in draws if d.startswith("verify:")]
    assert len(bars) >= 9, draws                      # one per split of the 9 partitions, and more
    assert text.count("\r") >= 9
    redraws = [d for d in draws if not d.startswith("verified ")]       # (the summary is on stdout)
    assert max(len(d) for d in redraws) <= 80, [d for d in redraws if len(d) > 80]
    assert not any(d.endswith(" " * 20) for d in redraws)                # no padding to a fixed width
    assert "100%" in bars[-1] and "B/s" in bars[-1]
    summary = [line for line in text.split("\n") if line.startswith("verified ")]
    assert len(summary) == 1 and len(text.split("\n")) <= 4, text        # the bar did not scroll


def test_bar_follows_the_terminal_width(log_dir):
    code, screen = run_in_terminal([sys.executable, "-m", "kafkacodec.cli", "verify", str(log_dir)], 50,
                                   env={"TQDM_MININTERVAL": "0"})
    assert code == EXIT_OK
    draws = [d for line in ANSI.sub("", screen).replace("\r\n", "\n").split("\n") for d in line.split("\r")]
    assert max(len(d) for d in draws if d.startswith("verify:")) <= 50
    assert max(len(d) for d in draws if d.startswith("verify:")) > 40      # it uses the width it has


def test_no_bar_when_stderr_is_not_a_terminal(log_dir):
    run = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "verify", str(log_dir)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "TQDM_MININTERVAL": "0"})
    assert run.returncode == EXIT_OK and run.stderr == ""
    assert run.stdout.startswith("verified ")


def test_progress_counts_without_a_terminal():
    """Progress keeps its count whether or not it draws (the commands read `done`)."""
    import io

    from kafkacodec._progress import Progress

    stream = io.StringIO()
    with Progress(100, "x", unit="B", stream=stream) as bar:
        bar.update(30)
        bar.set(70, 200, note="n")
    assert bar.done == 70 and stream.getvalue() == ""
    with Progress(None, "y", stream=stream, enabled=True) as bar:
        bar.update(3)
        bar.set(5, 10)
    assert "5/10" in stream.getvalue() and bar.done == 5
