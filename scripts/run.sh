#!/usr/bin/env bash
# Set up ./.venv, install kafkacodec with Spark, and run the main job on its embedded default:
# generate a sample Kafka log (mixed magics, codecs, headers, transactions) and convert it to
# Parquet on a local Spark. Extra arguments go to `kafkacodec spark convert`.
source "$(dirname "$0")/_venv.sh"
# KAFKACODEC_PREINSTALLED=1: ./.venv already holds kafkacodec[spark] (tests/test_readme.py runs
# this script in a fresh clone whose .venv is the suite's own, so nothing is rebuilt).
if [ "${KAFKACODEC_PREINSTALLED:-0}" != 1 ]; then
  echo "run.sh: building kafkacodec and installing it with pyspark, pyarrow and pandas into" \
       "$PWD/.venv (first time: several minutes; log: .venv/install.log)"
  start=$SECONDS
  python -m pip install ".[spark]" > .venv/install.log 2>&1 || { tail -40 .venv/install.log; exit 1; }
  echo "run.sh: installed in $((SECONDS - start)) s; starting the job (Spark start-up included in its time)"
fi
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/kafkacodec spark convert --sample out/sample-log out/parquet "$@"
