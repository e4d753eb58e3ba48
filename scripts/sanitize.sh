#!/usr/bin/env bash
# Build the core with AddressSanitizer + UndefinedBehaviorSanitizer and run the test suite and
# the fuzz corpus (replay + a short campaign) under it.
#   bash scripts/sanitize.sh                  tests (not spark) + corpus replay + 60 s of fuzzing
#   bash scripts/sanitize.sh -k v2            extra arguments go to pytest
#   SANITIZE_FUZZ_SECONDS=0 bash scripts/sanitize.sh      no fuzz campaign
#   bash scripts/sanitize.sh --fuzz-only --fuzz-seconds 600   (what FUZZ_SANITIZE=1 fuzz.sh runs)
#
# How: KAFKACODEC_SANITIZE=address,undefined (read by setup.py) builds the extensions into
# build/sanitize/ (the in-place build in kafkacodec/ is left alone). CPython itself is not
# instrumented, so the ASan runtime must be loaded first: LD_PRELOAD=libasan (+ libubsan with
# gcc), found with `$CC -print-file-name`. PYTHONMALLOC=malloc routes Python's allocations
# through ASan too, so an overrun into a bytes object is caught. Leak detection is off here
# (CPython keeps memory until exit; tests/test_leaks.py covers leaks). Spark tests are skipped:
# the JVM does not run with the ASan runtime preloaded. Linux only (macOS: DYLD_INSERT_LIBRARIES
# with clang's runtime; not scripted).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FUZZ_SECONDS=${SANITIZE_FUZZ_SECONDS:-60}
FUZZ_ONLY=0
PYTEST_ARGS=()
FUZZ_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fuzz-only) FUZZ_ONLY=1 ;;
    --fuzz-seconds) FUZZ_SECONDS=$2; shift ;;
    --target) FUZZ_ARGS+=(--target "$2"); shift ;;
    *) PYTEST_ARGS+=("$1") ;;
  esac
  shift
done

if [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python; else PY=${PYTHON:-python3}; fi
export CC=${CC:-gcc}
OUT=$ROOT/build/sanitize
mkdir -p "$OUT/kafkacodec"
echo "sanitize: building the core with ASan+UBSan ($CC) into $OUT"
KAFKACODEC_SANITIZE=address,undefined "$PY" setup.py -q build_ext --build-lib "$OUT" \
  --build-temp "$ROOT/build/sanitize-tmp" > "$ROOT/build/sanitize-build.log" 2>&1 \
  || { tail -40 "$ROOT/build/sanitize-build.log"; exit 1; }
# The pure-Python parts, stubs and markers beside the instrumented extensions.
(cd kafkacodec && find . \( -name '*.py' -o -name '*.pyi' -o -name 'py.typed' \) -print0 \
  | xargs -0 -I{} cp --parents {} "$OUT/kafkacodec/")

runtime=$("$CC" -print-file-name=libasan.so)
[ -f "$runtime" ] || { echo "sanitize: $CC has no libasan.so (apt-get install libasan8 / libclang-rt-dev)"; exit 1; }
preload=$runtime
if ubsan=$("$CC" -print-file-name=libubsan.so) && [ -f "$ubsan" ] && [[ "$CC" != *clang* ]]; then
  preload="$preload:$ubsan"
fi
run() {
  env LD_PRELOAD="$preload" PYTHONMALLOC=malloc PYTHONPATH="$OUT" KAFKACODEC_SANITIZED=1 \
    ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" "$@"
}
# Check that the instrumented build is the one imported, and that ASan is live in it.
(cd "$OUT" && run "$PY" -c "import kafkacodec, sys; f = kafkacodec._crc.__file__; print('sanitize: using', f); sys.exit(0 if f.startswith('$OUT') else 1)")

status=0
if [ "$FUZZ_ONLY" = 0 ]; then
  (cd "$OUT" && run "$PY" -m pytest "$ROOT/tests" -q -p no:cacheprovider -m "not spark" \
      --rootdir "$ROOT" -c "$ROOT/pyproject.toml" "${PYTEST_ARGS[@]}") || status=$?
fi
"$PY" -c "import kafka" 2>/dev/null && run "$PY" fuzz/make_corpus.py > /dev/null
run "$PY" fuzz/fuzz_targets.py replay "${FUZZ_ARGS[@]}" || status=$?
if [ "$FUZZ_SECONDS" != 0 ]; then
  if "$PY" -c "import atheris" 2>/dev/null; then
    run "$PY" fuzz/fuzz_targets.py campaign --seconds "$FUZZ_SECONDS" "${FUZZ_ARGS[@]}" || status=$?
  else
    echo "sanitize: atheris not installed; campaign with the built-in mutator"
    run "$PY" fuzz/fuzz_targets.py campaign --seconds "$FUZZ_SECONDS" "${FUZZ_ARGS[@]}" || status=$?
  fi
fi
echo "sanitize: exit $status"
exit $status
