#!/usr/bin/env python3
"""A standalone Spark cluster (one master, one worker) from the pyspark wheel, on loopback, for
tests and trying `kafkacodec spark convert --master spark://...` without a real cluster.

    python scripts/spark_standalone.py start DIR [--cores 1] [--memory 512m]
        starts the master and a worker on free ports of 127.0.0.1, waits until the worker has
        registered, prints {"master": "spark://127.0.0.1:PORT", "ui": ..., "pids": [...]}
        as JSON and records it in DIR/cluster.json (logs: DIR/master.log, DIR/worker.log)
    python scripts/spark_standalone.py stop DIR
        stops both (SIGTERM, then SIGKILL after 10 s)

Executors run the driver's PYSPARK_PYTHON (or spark.pyspark.python): on a real cluster that
interpreter, with kafkacodec installed, must exist on every node (see docs/spark-and-cli.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_class() -> str:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise SystemExit(f"{path} not found: is pyspark installed from its wheel?")
    return str(path)


def start(directory: Path, cores: int, memory: str, timeout: float) -> dict[str, object]:
    directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
           "SPARK_HOME": str(Path(spark_class()).parents[1])}
    port, ui, worker_port, worker_ui = (free_port() for _ in range(4))
    master_url = f"spark://127.0.0.1:{port}"
    pids = []

    def launch(name: str, *args: str) -> None:
        with open(directory / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([spark_class(), *args], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=directory,
                                    start_new_session=True)      # its own group: stop() ends all of it
        pids.append(proc.pid)
        (directory / "cluster.json").write_text(json.dumps({"pids": pids}))

    launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
           "--port", str(port), "--webui-port", str(ui))
    launch("worker", "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
           "--port", str(worker_port), "--webui-port", str(worker_ui), "--cores", str(cores),
           "--memory", memory, "--work-dir", str(directory / "work"))
    info: dict[str, object] = {"master": master_url, "ui": f"http://127.0.0.1:{ui}", "pids": pids}
    (directory / "cluster.json").write_text(json.dumps(info))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                if json.load(r).get("aliveworkers", 0) >= 1:
                    return info
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(directory)
            logs = "\n".join((directory / f"{n}.log").read_text(errors="replace")[-2000:]
                             for n in ("master", "worker"))
            raise SystemExit(f"the standalone cluster did not come up in {timeout:.0f} s:\n{logs}")
        time.sleep(0.5)


def stop(directory: Path) -> None:
    path = directory / "cluster.json"
    if not path.exists():
        return
    pids = json.loads(path.read_text()).get("pids", [])
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    path.unlink()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("dir", type=Path)
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--memory", default="512m", help="the worker's memory for executors")
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    if args.action == "start":
        print(json.dumps(start(args.dir, args.cores, args.memory, args.timeout)))
    else:
        stop(args.dir)


if __name__ == "__main__":
    main()
