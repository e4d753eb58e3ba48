#!/usr/bin/env bash
# Set up ./.venv, build the wheel, install it with the test extras, and run the whole suite
# against the installed package (so a file missing from the wheel fails here).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k v2 -x`.
# KAFKACODEC_EXTRAS (default "test,spark") chooses the extras installed with the wheel.
source "$(dirname "$0")/_venv.sh"
EXTRAS=${KAFKACODEC_EXTRAS:-test,spark}
t0=$SECONDS
stamp() { echo "[test.sh] $1 ($((SECONDS - t0)) s)"; }
rm -rf dist
# The extras' dependencies install while the wheel compiles (pip is mostly I/O, the build CPU).
python - "$EXTRAS" > .venv/requirements-extras.txt 2>/dev/null <<'PY' || true
import sys, tomllib  # Python >= 3.11; on 3.10 the dependencies install after the build
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project.get("optional-dependencies", {})
wanted = [r for e in sys.argv[1].split(",") if e for r in extras.get(e, [])]
print("\n".join(project["dependencies"] + wanted))
PY
if [ -s .venv/requirements-extras.txt ]; then
  python -m pip install -q -r .venv/requirements-extras.txt > .venv/install.log 2>&1 &
else
  true &
fi
deps_pid=$!
if ! python -m build --wheel --no-isolation --outdir dist . > .venv/build.log 2>&1; then
  tail -40 .venv/build.log; wait "$deps_pid" || true; exit 1
fi
stamp "wheel built"
wait "$deps_pid" || { tail -40 .venv/install.log; exit 1; }
stamp "dependencies installed"
wheel=$(ls dist/kafkacodec-*.whl)
python -m pip uninstall -q -y kafkacodec > /dev/null 2>&1 || true
python -m pip install -q "$wheel[$EXTRAS]"  # resolves what is still missing (nothing, usually)
stamp "installed $(basename "$wheel")"
export KAFKACODEC_TEST_INSTALLED=1 SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# Three workers (pytest-xdist; KAFKACODEC_TEST_WORKERS=0 runs one process): the suite mostly waits
# on brokers, JVMs and sockets (about one core busy on two).  tests/conftest.py keeps the tests
# of the Kafka brokers on one worker and the Spark tests on one, so each JVM kind starts once;
# the third takes the rest, which is as long as either group.
WORKERS=${KAFKACODEC_TEST_WORKERS:-3}
XDIST=()
[ "$WORKERS" != 0 ] && [ "$WORKERS" != 1 ] && XDIST=(-n "$WORKERS" --dist loadgroup)
# The pytest script (not `python -m pytest`) keeps the source tree off sys.path.
exec .venv/bin/pytest "${XDIST[@]}" "$@"
