"""The gateway (`kafkacodec serve --upstream`) against the same clients on the clusters directly,
in one run (issue 31's performance goals).  Real brokers from Maven Central (tests/kafka_broker.py):
Kafka 4.1 upstream, and Kafka 3.9 (the last broker that takes Produce v0-2) as the old producer's
reference.

    python bench/bench_gateway.py [--size-mb 256] [--rounds 3] [--only current,old,produce]

current  segment bytes/s a confluent-kafka consumer (bench_serve.py's CONSUMER settings) reads a
         partition of 1 KiB records from Kafka 4.1 through the gateway, against the same consumer
         reading the broker directly; rounds alternate.  Goal: >= 90%.  Also the CPU the whole
         machine spent per round each way (/proc/stat): where the cores are the limit, the
         ratio of the two is the ceiling of the rates' ratio.
old      kafka-python at Fetch v3 (api_version (0, 10, 1)) through the gateway: the partition's
         bytes per CPU second of the gateway process (fetching upstream, copying out of the ring,
         down-converting to magic 1).  kafka-python decodes every record in Python and sets the
         wall-clock rate.  Goal: >= 1 GB/s of input per core.
produce  an old producer's Produce v2 requests (magic-1 message sets of 64 records of 1 KiB, as
         built by MemoryRecordsBuilder; none and lz4), acks=1, 8 in flight on one connection:
         message-set bytes/s through the gateway to Kafka 4.1 (up-converted to v2 batches there)
         against the same requests sent to Kafka 3.9 directly (which up-converts them itself).
         Goal: >= 80%.

The gateway runs as `kafkacodec serve --upstream` in its own process; the clients in this one,
the brokers in their JVMs: all on this machine's cores.  Linux only (/proc).  Not part of the
test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_serve import CONSUMER, ServeProcess, confluent_rate, kafka_python_v3  # noqa: E402

from kafkacodec import MemoryRecordsBuilder  # noqa: E402
from kafkacodec.protocol import control  # noqa: E402
from kafkacodec.protocol import messages as m  # noqa: E402
from kafkacodec.protocol.api import Error  # noqa: E402

PRODUCE_VERSION = 2                  # magic 1: the newest an old producer sends (Kafka 0.10.x)
IN_FLIGHT = 8
WARMUP_ROUNDS = 4                    # untimed Produce rounds on each side, of 600 requests each


def fill(broker, topic: str, size: int) -> int:
    """`topic` (one partition) filled with about `size` bytes of 1 KiB records; its segment bytes."""
    from confluent_kafka import Producer

    broker.create_topic(topic, 1, config={"segment.bytes": str(1 << 30)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "none", "queue.buffering.max.kbytes": 256 << 10})
    value = os.urandom(1024)
    for i in range(size // 1100):
        while True:
            try:
                producer.produce(topic, key=b"%012d" % i, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the producer did not deliver everything")
    return sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def machine_cpu() -> float:
    """CPU seconds every process of the machine spent so far (/proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def middle(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def current_clients(gateway: ServeProcess, broker, topic: str, size: int, rounds: int) -> None:
    """Besides the rates: the CPU the whole machine spent per round (broker, client, gateway).
    Where the cores are the limit, a gateway round cannot be faster than its share of them: the
    CPU-bound ceiling of the ratio is direct CPU / gateway CPU per round (medians)."""
    rates: dict[str, list[float]] = {"direct": [], "gateway": []}
    cpu: dict[str, list[float]] = {"direct": [], "gateway": [], "gateway process": []}
    for r in range(rounds):
        order = ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct")
        for where in order:
            bootstrap = broker.bootstrap if where == "direct" else gateway.bootstrap
            machine, own = machine_cpu(), gateway.cpu_seconds()
            rates[where].append(confluent_rate(bootstrap, topic, size, CONSUMER)[0])
            cpu[where].append(machine_cpu() - machine)
            if where == "gateway":
                cpu["gateway process"].append(gateway.cpu_seconds() - own)
    best = {where: max(values) for where, values in rates.items()}
    median = {where: middle(values) for where, values in cpu.items()}
    print(f"current clients: confluent-kafka, {size >> 20} MiB: directly {best['direct'] / 1e6:.0f} MB/s, "
          f"through the gateway {best['gateway'] / 1e6:.0f} MB/s: {best['gateway'] / best['direct']:.2f}x "
          f"(goal >= 0.90; medians {middle(rates['gateway']) / middle(rates['direct']):.2f}x; every round: "
          f"direct {[round(x / 1e6) for x in rates['direct']]}, "
          f"gateway {[round(x / 1e6) for x in rates['gateway']]} MB/s)")
    print(f"  machine CPU per round (median): direct {median['direct'] * 1e3:.0f} ms, through the gateway "
          f"{median['gateway'] * 1e3:.0f} ms (the gateway process {median['gateway process'] * 1e3:.0f} ms): "
          f"CPU-bound ceiling {median['direct'] / median['gateway']:.2f}x on {os.cpu_count()} cores")


def old_clients(gateway: ServeProcess, topic: str, size: int, rounds: int) -> None:
    """The gateway's CPU over all rounds together: /proc counts it in ticks of 10 ms, a round
    of 64 MiB takes 5-8 of them, so one round's rate is too coarse to take the best of."""
    best_wall = total_cpu = 0.0
    records = 0
    for _ in range(rounds):
        cpu, started = gateway.cpu_seconds(), time.perf_counter()
        records = kafka_python_v3(gateway.bootstrap, topic)
        wall, cpu = time.perf_counter() - started, gateway.cpu_seconds() - cpu
        total_cpu += cpu
        best_wall = max(best_wall, size / wall)
    print(f"old clients: kafka-python at Fetch v3 through the gateway, {records} records of 1 KiB, {rounds} "
          f"rounds: gateway {size * rounds / max(total_cpu, 1e-9) / 1e9:.2f} GB/s of input per CPU second "
          f"({total_cpu:.2f} s for {size * rounds >> 20} MiB; goal >= 1 GB/s); best wall {best_wall / 1e6:.0f} MB/s "
          "(kafka-python's own speed)")


def message_sets(codec: str, count: int) -> list[bytes]:
    value = os.urandom(512).hex().encode()            # 1 KiB, compressible as text is
    out = []
    for n in range(count):
        builder = MemoryRecordsBuilder(magic=1, compression=codec)
        for i in range(64):
            builder.append(1_700_000_000_000 + i, b"%08d-%02d" % (n, i), value)
        out.append(bytes(builder.build()))
    return out


def produce_rate(port: int, topic: str, sets: list[bytes]) -> float:
    """Message-set bytes/s of Produce v2 requests (acks=1), IN_FLIGHT at a time on one connection;
    every answer checked."""
    def frame(correlation_id: int, records: bytes) -> bytes:
        return control.encode_request(control.Outgoing(m.PRODUCE_REQUEST, {
            "transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}),
            PRODUCE_VERSION, correlation_id)

    def answer(sock: socket.socket) -> None:
        head = sock.recv(4, socket.MSG_WAITALL)
        size = struct.unpack(">i", head)[0]
        body = sock.recv(size, socket.MSG_WAITALL)
        got = control.decode_response(m.PRODUCE_RESPONSE, body, PRODUCE_VERSION)   # (correlation id first)
        code = got.responses[0].partition_responses[0].error_code
        if code != Error.NONE:
            raise RuntimeError(f"Produce answered {Error.name_of(code)}")

    frames = [frame(i + 1, records) for i, records in enumerate(sets)]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(frames[0])                        # (the gateway learns the topic's type first)
        answer(sock)
        started = time.perf_counter()
        sent = received = 1
        while received < len(frames):
            while sent < len(frames) and sent - received < IN_FLIGHT:
                sock.sendall(frames[sent])
                sent += 1
            answer(sock)
            received += 1
        elapsed = time.perf_counter() - started
    return sum(map(len, sets[1:])) / elapsed


def old_producers(gateway: ServeProcess, broker_39, topic: str, rounds: int) -> None:
    port_39 = int(broker_39.bootstrap.rsplit(":", 1)[1])
    for codec in ("none", "lz4"):
        sets = message_sets(codec, 600)
        rates: dict[str, list[float]] = {"kafka 3.9": [], "gateway": []}
        machine_used: dict[str, list[float]] = {"kafka 3.9": [], "gateway": []}
        # Untimed rounds on each side first: the brokers' JIT (both brokers' produce paths speed
        # up for ~3,000 requests: with one such round the timed rounds still climbed 63 -> 121
        # MB/s), Kafka 3.9's log, the gateway's topic cache and upstream connection.
        for _ in range(WARMUP_ROUNDS):
            for port in (port_39, gateway.port):
                produce_rate(port, topic, sets)
        gateway_cpu = 0.0
        for r in range(rounds):
            order = ("kafka 3.9", "gateway") if r % 2 == 0 else ("gateway", "kafka 3.9")
            for where in order:
                cpu, machine = gateway.cpu_seconds(), machine_cpu()
                rates[where].append(produce_rate(port_39 if where == "kafka 3.9" else gateway.port, topic, sets))
                machine_used[where].append(machine_cpu() - machine)
                if where == "gateway":
                    gateway_cpu += gateway.cpu_seconds() - cpu
        best = {where: max(values) for where, values in rates.items()}
        median = {where: middle(values) for where, values in machine_used.items()}
        # what the gateway alone could take with a core of its own: the sets it converted and
        # forwarded per second of its CPU (here it shares 2 cores with Kafka 4.1 and the client)
        per_cpu = rounds * sum(map(len, sets[1:])) / max(gateway_cpu, 1e-9)
        print(f"old producers: Produce v2, magic 1 {codec}, {sum(map(len, sets)) >> 20} MiB a round: Kafka 3.9 "
              f"directly {best['kafka 3.9'] / 1e6:.0f} MB/s, through the gateway to Kafka 4.1 "
              f"{best['gateway'] / 1e6:.0f} MB/s: {best['gateway'] / best['kafka 3.9']:.2f}x (goal >= 0.80; medians "
              f"{middle(rates['gateway']) / middle(rates['kafka 3.9']):.2f}x); the gateway "
              f"{per_cpu / 1e6:.0f} MB ({per_cpu * len(sets) / sum(map(len, sets)):.0f} requests) per second of "
              "its CPU; rounds: "
              + "; ".join(f"{where} " + ", ".join(f"{v / 1e6:.0f}" for v in values) for where, values in rates.items()))
        print(f"  machine CPU per round (median): Kafka 3.9 {median['kafka 3.9'] * 1e3:.0f} ms, through the "
              f"gateway {median['gateway'] * 1e3:.0f} ms: CPU-bound ceiling "
              f"{median['kafka 3.9'] / median['gateway']:.2f}x on {os.cpu_count()} cores")


def main() -> None:
    from kafka_broker import DEFAULT_VERSION, DOWNCONVERSION_VERSION, KafkaBroker

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="current,old,produce")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    print(f"# {platform.platform()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, Kafka {DEFAULT_VERSION} upstream")
    broker = KafkaBroker.start(DEFAULT_VERSION)
    broker_39 = KafkaBroker.start(DOWNCONVERSION_VERSION) if "produce" in parts else None
    gateway = None
    try:
        size = fill(broker, "bench", args.size_mb << 20) if parts & {"current", "old"} else 0
        if broker_39 is not None:
            for b in (broker, broker_39):
                b.create_topic("produced", 1)
        gateway = ServeProcess(None, "--upstream", broker.bootstrap, "--produce")
        if "current" in parts:
            current_clients(gateway, broker, "bench", size, args.rounds)
        if "old" in parts:
            old_clients(gateway, "bench", size, args.rounds)
        if "produce" in parts:
            old_producers(gateway, broker_39, "produced", args.rounds)
    finally:
        if gateway is not None:
            gateway.stop()
        broker.stop()
        if broker_39 is not None:
            broker_39.stop()


if __name__ == "__main__":
    main()
