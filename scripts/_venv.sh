# Sourced by run.sh and test.sh: make ./.venv (Python >= 3.10) and the build tools in it.
# The tools are (re)installed only when the venv is new or one is missing, so a re-run costs
# nothing here; pip's cache (~/.cache/pip) makes a fresh venv cheap too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
export PATH="$PWD/.venv/bin:$PATH"
if ! python -c "import setuptools, Cython, numpy, build, sys; from importlib.metadata import version as v; sys.exit(int(v('setuptools').split('.')[0]) < 71)" 2>/dev/null; then
  python -m pip install -q "setuptools>=70.1" wheel "Cython>=3.0.10" "numpy>=2.0" build
fi
