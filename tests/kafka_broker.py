"""A real Apache Kafka broker for the tests: one KRaft node (broker + controller) on loopback,
run from Kafka's own jars on Maven Central (resolved with `mvn`, cached outside the repository in
~/.cache/kafkacodec/kafka-<version>/; nothing is committed).

    with KafkaBroker.start("4.1.1") as broker:      # or the `kafka_broker` fixture (conftest.py)
        broker.bootstrap                             # "127.0.0.1:PORT"

Versions: 4.x is what current clusters run (the mirror's target, `serve --upstream`'s upstream);
3.9.x is the last line with down-conversion (the reference for what old consumers receive).
Command line (for benchmarks and by hand): `python tests/kafka_broker.py [--version V]` starts
one, prints `bootstrap HOST:PORT`, and stops on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_VERSION = "4.1.1"
DOWNCONVERSION_VERSION = "3.9.1"      # Kafka 4.0 removed down-conversion (KIP-896)
CACHE = Path(os.environ.get("KAFKACODEC_JAR_CACHE", Path.home() / ".cache" / "kafkacodec"))

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>kafkacodec.tests</groupId><artifactId>kafka-broker</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
<version>{version}</version></dependency></dependencies></project>
"""


class BrokerUnavailable(RuntimeError):
    """Java or Maven is missing, or the jars could not be resolved."""


def classpath(version: str = DEFAULT_VERSION, *, tools: tuple[str, ...] = ("java", "mvn")) -> str:
    """The broker's classpath (kafka_2.13 and its dependencies), resolved once with Maven;
    `tools` are those the caller needs on PATH (reading the jars needs no java)."""
    folder = CACHE / f"kafka-{version}"
    cp_file = folder / "classpath.txt"
    if cp_file.exists():
        cp = cp_file.read_text().strip()
        if all(Path(p).exists() for p in cp.split(os.pathsep)):
            return cp
    for tool in tools:
        if shutil.which(tool) is None:
            raise BrokerUnavailable(f"{tool} is not on PATH (Kafka's jars are resolved with mvn "
                                    "and run with java)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pom.xml").write_text(_POM.format(version=version))
    tmp = folder / f"classpath.{os.getpid()}.tmp"
    run = subprocess.run(["mvn", "-q", "-B", "dependency:build-classpath",
                          f"-Dmdep.outputFile={tmp}"], cwd=folder, capture_output=True,
                         text=True, timeout=600)
    if run.returncode != 0 or not tmp.exists():
        raise BrokerUnavailable(f"mvn could not resolve kafka_2.13:{version}:\n"
                                f"{run.stdout[-2000:]}{run.stderr[-2000:]}")
    os.replace(tmp, cp_file)
    return cp_file.read_text().strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    # Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding; as Kafka's
    # Uuid.randomUuid(), never one starting with "-" (kafka-storage's -t would read it as an option)
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


class KafkaBroker:
    """One running broker; `stop()` (or leaving the `with` block) kills it and removes its
    data directory."""

    def __init__(self, version: str, port: int, workdir: Path, process: subprocess.Popen[bytes]):
        self.version = version
        self.port = port
        self.workdir = workdir
        self.process = process

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        """The broker's log.dirs: `<topic>-<partition>/<base offset>.log` segments."""
        return self.workdir / "data"

    @classmethod
    def start(cls, version: str = DEFAULT_VERSION, properties: dict[str, Any] | None = None,
              timeout: float = 90.0) -> KafkaBroker:
        cp = classpath(version)
        workdir = Path(tempfile.mkdtemp(prefix=f"kafka-{version}-"))
        port, controller = _free_port(), _free_port()
        props = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(workdir / "data"),
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0,
            "num.partitions": 1,
            "auto.create.topics.enable": "false",
            **(properties or {}),
        }
        config = workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        java = ["java", "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp]
        fmt = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                                     "-c", str(config)], capture_output=True, text=True,
                             timeout=120)
        if fmt.returncode != 0:
            shutil.rmtree(workdir, ignore_errors=True)
            raise BrokerUnavailable(f"kafka-storage format failed: {fmt.stdout}{fmt.stderr}")
        log = open(workdir / "broker.log", "wb")
        process = subprocess.Popen(java + ["kafka.Kafka", str(config)], stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        broker = cls(version, port, workdir, process)
        try:
            broker._wait_ready(timeout)
        except BaseException:
            broker.stop()
            raise
        return broker

    def _wait_ready(self, timeout: float) -> None:
        """Ready when a Metadata request through confluent-kafka lists this broker."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000})
        while True:
            if self.process.poll() is not None:
                raise BrokerUnavailable(f"Kafka {self.version} exited with "
                                        f"{self.process.returncode}:\n{self.log_tail()}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"Kafka {self.version} not ready after {timeout} s:\n"
                                        f"{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return (self.workdir / "broker.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                     timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                      operation_timeout=timeout)
        for future in futures.values():
            future.result(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=DEFAULT_VERSION)
    args = parser.parse_args()
    with KafkaBroker.start(args.version) as running:
        print(f"bootstrap {running.bootstrap}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            running.process.wait()
        except KeyboardInterrupt:
            pass
