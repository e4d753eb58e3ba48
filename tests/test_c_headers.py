"""The C helpers in csrc/ compile warning-free and pass their own C test with every C compiler
found here: gcc and clang with -Wall -Wextra -Wpedantic -Werror, MSVC (/W3 /WX, the level extensions build with) on Windows.
They are read from the source tree (csrc/ beside tests/); the test skips when that is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parent.parent / "csrc"
C_TESTS = sorted((CSRC / "tests").glob("test_*.c")) if CSRC.is_dir() else []

# tooling: compilers run on csrc/ with their own flags (nothing of the instrumented core's)
pytestmark = [pytest.mark.skipif(not C_TESTS, reason="csrc/tests not found beside tests/"), pytest.mark.tooling]


def _unix_compilers() -> list[str]:
    names = [os.environ.get("CC", ""), "gcc", "clang", "cc"]
    found: list[str] = []
    for name in names:
        path = shutil.which(name) if name else None
        if path and os.path.realpath(path) not in {os.path.realpath(p) for p in found}:
            found.append(path)
    return found


@pytest.mark.skipif(sys.platform == "win32", reason="gcc/clang flags; MSVC is checked below")
@pytest.mark.parametrize("source", C_TESTS, ids=lambda p: p.stem)
def test_c_helpers_with_gcc_and_clang(source, tmp_path):
    compilers = _unix_compilers()
    if not compilers:
        pytest.skip("no C compiler on PATH")
    for cc in compilers:
        exe = tmp_path / f"{source.stem}-{Path(cc).name}"
        flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
        build = subprocess.run([cc, *flags, f"-I{CSRC}", str(source), "-o", str(exe)],
                               capture_output=True, text=True)
        assert build.returncode == 0, f"{cc}:\n{build.stderr}"
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"{cc}: {run.stdout}{run.stderr}"
        assert "checks passed" in run.stdout


@pytest.mark.skipif(sys.platform != "win32", reason="MSVC only on Windows")
@pytest.mark.parametrize("source", C_TESTS, ids=lambda p: p.stem)
def test_c_helpers_with_msvc(source, tmp_path):
    from setuptools._distutils.ccompiler import new_compiler  # finds MSVC like build_ext does

    compiler = new_compiler()
    compiler.add_include_dir(str(CSRC))
    try:
        objects = compiler.compile([str(source)], output_dir=str(tmp_path),
                                   extra_postargs=["/W3", "/WX"])
        compiler.link_executable(objects, source.stem, output_dir=str(tmp_path))
    except Exception as error:  # no MSVC installed: nothing to check here
        if "Microsoft Visual C++" in str(error) and "required" in str(error):
            pytest.skip(str(error))
        raise
    exe = tmp_path / (source.stem + ".exe")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "checks passed" in run.stdout
