#!/usr/bin/env bash
# Long fuzz campaign of every harness kind (fuzz/fuzz_targets.py), atheris/libFuzzer.
#   bash scripts/fuzz.sh                    10 minutes per kind (6 kinds: 1 hour), each kind's
#                                           time split evenly over its targets
#   FUZZ_SECONDS=1800 bash scripts/fuzz.sh  another budget per kind
#   bash scripts/fuzz.sh --kind concurrency --target records_deep
# Uses ./.venv when it exists (the installed wheel from scripts/test.sh), else builds in place
# into the source tree with the interpreter in $PYTHON. Seeds are regenerated from real logs
# (fuzz/make_corpus.py); findings land in fuzz/crashes/<target>/ and the run exits 1.
# With FUZZ_SANITIZE=1 the core is built with ASan+UBSan first (see scripts/sanitize.sh), so
# memory errors in the C/Cython code are caught at the faulting access, not by a later crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_BUDGET=${FUZZ_SECONDS:-600}
if [ "${FUZZ_SANITIZE:-0}" = 1 ]; then
  exec bash scripts/sanitize.sh --fuzz-only --fuzz-seconds "$SECONDS_BUDGET" "$@"
fi
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=${PYTHON:-python3}
  "$PY" setup.py -q build_ext --inplace > /dev/null
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "import atheris" 2>/dev/null || "$PY" -m pip install -q "atheris>=2.3"
"$PY" fuzz/make_corpus.py
exec "$PY" fuzz/fuzz_targets.py campaign --seconds "$SECONDS_BUDGET" "$@"
