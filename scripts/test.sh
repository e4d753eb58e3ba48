#!/usr/bin/env bash
# Set up ./.venv, build the wheel, install it with the test extras, and run the whole suite
# against the installed package (so a file missing from the wheel fails here).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k v2 -x`.
source "$(dirname "$0")/_venv.sh"
rm -rf dist
python -m build --wheel --no-isolation --outdir dist . > .venv/build.log 2>&1 || { tail -40 .venv/build.log; exit 1; }
wheel=$(ls dist/kafkacodec-*.whl)
python -m pip install -q --force-reinstall --no-deps "$wheel"
python -m pip install -q "$wheel[test,spark]"
export KAFKACODEC_TEST_INSTALLED=1 SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# The pytest script (not `python -m pytest`) keeps the source tree off sys.path.
exec .venv/bin/pytest "$@"
