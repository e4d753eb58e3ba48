#!/usr/bin/env bash
# Build the core with AddressSanitizer + UndefinedBehaviorSanitizer and run the test suite and
# the fuzz corpus (replay + a short campaign) under it.
#   bash scripts/sanitize.sh                  tests (not spark) + corpus replay + 60 s of fuzzing
#                                             per harness kind (fuzz/fuzz_targets.py: 6 kinds)
#   bash scripts/sanitize.sh -k v2            extra arguments go to pytest (SANITIZE_WORKERS=N:
#                                             pytest-xdist workers, default one per core)
#   SANITIZE_FUZZ_SECONDS=0 bash scripts/sanitize.sh      no fuzz campaign
#   bash scripts/sanitize.sh --fuzz-only --fuzz-seconds 600   (what FUZZ_SANITIZE=1 fuzz.sh runs)
#   bash scripts/sanitize.sh --build-only     the instrumented build alone (.ci/run starts it early)
#
# How: KAFKACODEC_SANITIZE=address,undefined (read by setup.py) builds the extensions into
# build/sanitize-<cc>/ (the in-place build in kafkacodec/ is left alone). CPython itself is not
# instrumented, so the ASan runtime must be loaded first: LD_PRELOAD=libasan + libubsan (gcc,
# found with `gcc -print-file-name`) or atheris' asan_with_fuzzer.so (clang). PYTHONMALLOC=malloc routes Python's allocations
# through ASan too, so an overrun into a bytes object is caught. Leak detection is off here
# (CPython keeps memory until exit; tests/test_leaks.py covers leaks). Spark tests are skipped:
# the JVM does not run with the ASan runtime preloaded; so are the `tooling` tests (mypy, stubtest,
# pdoc), the `broker` tests (a real Kafka broker, Kafka's Java tools and clients) and the `service`
# tests (servers over sockets: deadlines, TLS, SASL, groups): minutes under ASan, for code paths
# the rest of the suite drives there too; the installed run has them. Linux only (macOS: DYLD_INSERT_LIBRARIES
# with clang's runtime; not scripted).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FUZZ_SECONDS=${SANITIZE_FUZZ_SECONDS:-60}
FUZZ_ONLY=0
BUILD_ONLY=0
PYTEST_ARGS=()
FUZZ_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fuzz-only) FUZZ_ONLY=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --fuzz-seconds) FUZZ_SECONDS=$2; shift ;;
    --target) FUZZ_ARGS+=(--target "$2"); shift ;;
    --kind) FUZZ_ARGS+=(--kind "$2"); shift ;;
    *) PYTEST_ARGS+=("$1") ;;
  esac
  shift
done

if [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python; else PY=${PYTHON:-python3}; fi
# Toolchain: clang + atheris when both are here (the build is also coverage-instrumented with
# -fsanitize=fuzzer-no-link, so the fuzz campaign is guided by coverage of the compiled core,
# and the runtime preloaded is atheris' asan_with_fuzzer.so); else gcc (ASan+UBSan only, and the
# campaign uses the built-in mutator). SANITIZE_CC=gcc|clang forces one.
ATHERIS_DIR=$("$PY" -c "import atheris; print(atheris.path())" 2>/dev/null || true)
if [ -z "${SANITIZE_CC:-}" ]; then
  if command -v clang > /dev/null && [ -n "$ATHERIS_DIR" ]; then SANITIZE_CC=clang; else SANITIZE_CC=gcc; fi
fi
OUT=$ROOT/build/sanitize-$SANITIZE_CC
mkdir -p "$OUT/kafkacodec"
if [ "$SANITIZE_CC" = clang ]; then
  FLAGS=address,undefined,fuzzer-no-link
  export CC=clang LDSHARED="clang -shared"
  preload=$ATHERIS_DIR/asan_with_fuzzer.so
  [ -f "$preload" ] || preload=$(clang -print-file-name=libclang_rt.asan-$(uname -m).so)
  export KC_FUZZ_NATIVE=1
else
  FLAGS=address,undefined
  export CC=gcc
  preload=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)
fi
echo "sanitize: building the core with -fsanitize=$FLAGS ($CC) into $OUT"
# From a copy of the tracked sources (mtimes kept, so a second run finds it up to date): Cython
# writes its .c files beside the .pyx, and a wheel build may be writing those in the tree meanwhile.
SRC=$OUT-src
mkdir -p "$SRC"
if git -C "$ROOT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  git -C "$ROOT" ls-files -z -- setup.py pyproject.toml README.md MANIFEST.in kafkacodec csrc pyspark_kafkalog \
    | xargs -0 cp -p --parents -t "$SRC"
else
  cp -rp setup.py pyproject.toml README.md MANIFEST.in kafkacodec csrc pyspark_kafkalog "$SRC"
fi
(cd "$SRC" && KAFKACODEC_SANITIZE=$FLAGS "$PY" setup.py -q build_ext --build-lib "$OUT" \
  --build-temp "$OUT-tmp") > "$OUT-build.log" 2>&1 || { tail -40 "$OUT-build.log"; exit 1; }
[ "$BUILD_ONLY" = 1 ] && { echo "sanitize: built"; exit 0; }
# The pure-Python parts, stubs and markers beside the instrumented extensions.
(cd kafkacodec && find . \( -name '*.py' -o -name '*.pyi' -o -name 'py.typed' \) -print0 \
  | xargs -0 -I{} cp --parents {} "$OUT/kafkacodec/")
for lib in ${preload//:/ }; do
  [ -f "$lib" ] || { echo "sanitize: sanitizer runtime $lib not found (gcc: libasan8/libubsan1; clang: libclang-rt-dev)"; exit 1; }
done
run() {
  env LD_PRELOAD="$preload" PYTHONMALLOC=malloc PYTHONPATH="$OUT" KAFKACODEC_SANITIZED=1 \
    ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" "$@"
}
# Check that the instrumented build is the one imported, and that ASan is live in it.
(cd "$OUT" && run "$PY" -c "import kafkacodec, sys; f = kafkacodec._crc.__file__; print('sanitize: using', f); sys.exit(0 if f.startswith('$OUT') else 1)")

status=0
if [ "$FUZZ_ONLY" = 0 ]; then
  # one pytest worker per core (pytest-xdist, a test extra): the instrumented suite is CPU-bound
  WORKERS=()
  "$PY" -c "import xdist" 2>/dev/null && WORKERS=(-n "${SANITIZE_WORKERS:-auto}")
  (cd "$OUT" && run "$PY" -m pytest "$ROOT/tests" -q -p no:cacheprovider -m "not spark and not tooling and not broker and not soak and not service" \
      --rootdir "$ROOT" -c "$ROOT/pyproject.toml" "${WORKERS[@]}" "${PYTEST_ARGS[@]}") || status=$?
fi
"$PY" -c "import kafka" 2>/dev/null && run "$PY" fuzz/make_corpus.py > /dev/null
run "$PY" fuzz/fuzz_targets.py replay "${FUZZ_ARGS[@]}" || status=$?
if [ "$FUZZ_SECONDS" != 0 ]; then
  run "$PY" fuzz/fuzz_targets.py campaign --seconds "$FUZZ_SECONDS" "${FUZZ_ARGS[@]}" || status=$?
fi
echo "sanitize: exit $status"
exit $status
