# Sourced by run.sh and test.sh: make ./.venv (Python >= 3.10) and the build tools in it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
export PATH="$PWD/.venv/bin:$PATH"
python -m pip install -q --upgrade pip
python -m pip install -q "setuptools>=68" wheel "Cython>=3.0.10" "numpy>=2.0" build
